//! AIM's autoregressive pixel loss (documented on `AimLoss`).

use std::ops::RangeInclusive;

use burn::prelude::*;

/// Which patch the prediction at each position is compared with, which positions count, and
/// where the prefix lengths are drawn from.
#[derive(Config, Debug, PartialEq, Copy)]
pub enum AimTarget {
    /// The paper's (§3): the prediction at position `k` against patch `k + 1` (the next patch in
    /// raster order), on the non-prefix patches only (`k + 1 ≥ S`); prefix lengths
    /// `S ~ U{1, …, K − 1}`.
    NextPatch,
    /// lightly 1.6's example
    /// (<https://github.com/lightly-ai/lightly/blob/master/examples/pytorch/aim.py>): the
    /// prediction at position `k` against patch `k` itself, every position counted
    /// (`nn.MSELoss` over all of them); prefix lengths `S ~ U{0, …, K − 2}`
    /// (`random_prefix_mask(max_prefix_length = K − 1)`'s `randint`). A token attends to
    /// itself, so this target is the token's own patch.
    SamePatch,
}

impl AimTarget {
    /// The prefix lengths drawn for sequences of `patches` patches (at least 2).
    pub fn prefix_range(self, patches: usize) -> RangeInclusive<usize> {
        match self {
            AimTarget::NextPatch => 1..=patches.saturating_sub(1),
            AimTarget::SamePatch => 0..=patches.saturating_sub(2),
        }
    }
}

/// Configuration of [`AimLoss`].
#[derive(Config, Debug)]
pub struct AimLossConfig {
    /// The paper's next patch on the non-prefix patches, or lightly's example's same patch at
    /// every position.
    #[config(default = "AimTarget::NextPatch")]
    pub target: AimTarget,
}

impl AimLossConfig {
    /// Builds the loss (every setting is valid).
    pub fn init(&self) -> AimLoss {
        AimLoss {
            target: self.target,
        }
    }
}

/// AIM's loss. Build it with [`AimLossConfig::init`].
///
/// The autoregressive pixel loss of AIM (El-Nouby et al. 2024, "Scalable Pre-training of Large
/// Autoregressive Image Models", <https://arxiv.org/abs/2401.08541>, §3; see
/// `docs/methods.md#aim`). An image is `K` patches in raster order, of which the first `S` (the
/// prefix) attend to each other bidirectionally and the rest causally; `x̂_k` is the head's
/// output at position `k`, `x_k` the pixels of patch `k` (normalised per patch by the caller);
/// `P` pixels per patch. With [`AimTarget::NextPatch`] (the paper's), per image
///
/// ```text
/// ℓ = 1 / ((K − S)·P) · Σ_{k = S}^{K−1} ‖x̂_{k−1} − x_k‖²       (patches 0-indexed, S ≥ 1)
/// ```
///
/// — each non-prefix patch predicted from the tokens before it —, and with
/// [`AimTarget::SamePatch`] (lightly's example) `ℓ = 1/(K·P) Σ_{k=0}^{K−1} ‖x̂_k − x_k‖²`. The
/// loss is the mean of `ℓ` over the images; the targets carry no gradient.
#[derive(Debug, Clone)]
pub struct AimLoss {
    target: AimTarget,
}

impl AimLoss {
    /// Which patch each prediction is compared with.
    pub fn target(&self) -> AimTarget {
        self.target
    }

    /// The loss of `predictions` against `targets` for images whose prefixes are `prefixes`
    /// patches long (the mean over the images).
    ///
    /// # Shapes
    /// - `predictions`, `targets`: `[N, K, P]`, `prefixes`: `N` lengths → `[1]`
    ///
    /// # Panics
    /// On shapes that differ, `prefixes` of another length than `N`, or a prefix outside
    /// `1..=K − 1` ([`AimTarget::NextPatch`]) or `0..=K` ([`AimTarget::SamePatch`]).
    pub fn forward<B: Backend>(
        &self,
        predictions: Tensor<B, 3>,
        targets: Tensor<B, 3>,
        prefixes: &[usize],
    ) -> Tensor<B, 1> {
        let [n, k, p] = predictions.dims();
        assert_eq!(
            targets.dims(),
            [n, k, p],
            "AimLoss: predictions {:?} and targets {:?} differ",
            [n, k, p],
            targets.dims()
        );
        assert_eq!(
            prefixes.len(),
            n,
            "AimLoss: {n} images, {prefixes:?} prefixes"
        );
        let targets = targets.detach();
        let (predictions, targets, positions) = match self.target {
            AimTarget::NextPatch => (
                predictions.slice([0..n, 0..k - 1, 0..p]),
                targets.slice([0..n, 1..k, 0..p]),
                k - 1,
            ),
            AimTarget::SamePatch => (predictions, targets, k),
        };
        // weights[i, j]: the prediction at position j, counted with weight 1 / (N·counted·P).
        let weights: Vec<f64> = prefixes
            .iter()
            .flat_map(|&s| {
                let (first, counted) = match self.target {
                    AimTarget::NextPatch => {
                        assert!(
                            (1..k).contains(&s),
                            "AimLoss: a prefix of {s} of {k} patches leaves no next patch \
                             to predict from it (1..={})",
                            k - 1
                        );
                        (s - 1, k - s)
                    }
                    AimTarget::SamePatch => {
                        assert!(s <= k, "AimLoss: a prefix of {s} of {k} patches");
                        (0, k)
                    }
                };
                let w = 1.0 / (n * counted * p) as f64;
                (0..positions).map(move |j| if j >= first { w } else { 0.0 })
            })
            .collect();
        let weights = Tensor::<B, 2>::from_data(
            TensorData::new(weights, [n, positions]),
            &predictions.device(),
        );
        let errors = (predictions - targets)
            .powi_scalar(2)
            .sum_dim(2)
            .reshape([n, positions]);
        (errors * weights).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    fn tensor(values: &[f64], shape: [usize; 3]) -> Tensor<B, 3> {
        Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
    }

    /// Two images of three one-pixel patches, worked by hand. Predictions `[1, 2, 3]`,
    /// `[0, 0, 0]`; targets `[1, 1, 1]`, `[2, 2, 2]`.
    /// - Next patch, prefixes 1 and 2: image 0 counts patches 1 and 2, predicted by positions
    ///   0 and 1: `((1 − 1)² + (2 − 1)²) / 2 = 0.5`; image 1 counts patch 2 predicted by
    ///   position 1: `(0 − 2)² = 4`; the mean `2.25`.
    /// - Same patch: image 0 `(0 + 1 + 4) / 3 = 5/3`, image 1 `4`; the mean `17/6`.
    #[test]
    fn worked_values_of_both_targets() {
        let predictions = tensor(&[1.0, 2.0, 3.0, 0.0, 0.0, 0.0], [2, 3, 1]);
        let targets = tensor(&[1.0, 1.0, 1.0, 2.0, 2.0, 2.0], [2, 3, 1]);
        let value = |target: AimTarget, prefixes: &[usize]| -> f64 {
            let loss = AimLossConfig::new().with_target(target).init();
            loss.forward(predictions.clone(), targets.clone(), prefixes)
                .into_scalar()
        };
        assert!((value(AimTarget::NextPatch, &[1, 2]) - 2.25).abs() < 1e-15);
        assert!((value(AimTarget::SamePatch, &[0, 2]) - 17.0 / 6.0).abs() < 1e-15);
        assert_eq!(AimTarget::NextPatch.prefix_range(16), 1..=15);
        assert_eq!(AimTarget::SamePatch.prefix_range(16), 0..=14);
    }

    #[test]
    #[should_panic(expected = "leaves no next patch")]
    fn a_prefix_of_every_patch_has_nothing_to_predict() {
        let x = tensor(&[0.0; 6], [2, 3, 1]);
        AimLossConfig::new().init().forward(x.clone(), x, &[1, 3]);
    }
}
