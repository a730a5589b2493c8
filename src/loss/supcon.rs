//! The supervised contrastive loss of SupCon (documented on `SupConLoss`).

use burn::prelude::*;

use super::similarity::{l2_normalize, MASKED_LOGIT};
use crate::base::error::{positive, ConfigError};

/// Configuration of [`SupConLoss`].
#[derive(Config, Debug)]
pub struct SupConLossConfig {
    /// Temperature `τ` dividing the cosine similarities (solo-learn's CIFAR and ImageNet-100
    /// settings: 0.2; the paper's: 0.1).
    #[config(default = 0.2)]
    pub temperature: f64,
}

impl SupConLossConfig {
    /// Validates the temperature and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not positive.
    pub fn init(&self) -> Result<SupConLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        Ok(SupConLoss {
            temperature: self.temperature,
        })
    }
}

/// The supervised contrastive loss. Build it with [`SupConLossConfig::init`].
///
/// SupCon (Khosla et al., "Supervised Contrastive Learning", NeurIPS 2020,
/// <https://arxiv.org/abs/2004.11362>; see `docs/methods.md#supcon-loss`), in the form
/// solo-learn trains it with (`simclr_loss_func(z, indexes=targets)` of `solo/losses/simclr.py`):
/// the rows `z` are every view's projections of a batch, each with its image's label, all
/// L2-normalised; anchor `i`'s positives `P(i)` are the other rows of its label (its own
/// image's other views among them), its candidates every row but itself:
///
/// ```text
/// s_ij = ⟨z_i, z_j⟩ / τ
/// L = −(1/M) Σ_i log [ Σ_{p ∈ P(i)} exp(s_ip) / Σ_{j ≠ i} exp(s_ij) ]
/// ```
///
/// over the `M` anchors. This is the paper's `L_in` (eq. 3) without its `1/|P(i)|` inside the
/// logarithm (a constant `log |P(i)|` per anchor: the same gradient); the paper's preferred
/// `L_out` (eq. 2) averages the logarithms over the positives instead. With every label
/// distinct and two views it is NT-Xent ([`NtXentLoss`](super::NtXentLoss)).
///
/// Every anchor needs a positive: with two or more views of each image it always has one (its
/// image's other views). Where one has none (one view, a label seen once) its term is about
/// `10⁹` rather than solo-learn's infinity, with no gradient from the missing positives.
///
/// On several replicas solo-learn gathers the rows and the labels: each replica's anchors are
/// its own rows, its candidates every replica's ([`SupConLoss::forward_against`]).
#[derive(Debug, Clone)]
pub struct SupConLoss {
    temperature: f64,
}

impl SupConLoss {
    /// The temperature `τ`.
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// The loss of the rows `z` (every view's projections) with their labels, on one device:
    /// each row an anchor against every other.
    ///
    /// # Shapes
    /// - `z`: `[M, D]`, `labels`: `[M]` (any integers; equal means the same class) → `[1]`
    ///
    /// # Panics
    /// If `labels` does not have one entry per row, or `z` has no row.
    pub fn forward<B: Backend>(&self, z: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let z = l2_normalize(z);
        self.loss(z.clone(), labels.clone(), z, labels, 0)
    }

    /// The loss of the anchors `z` (with their `labels`) against the `candidates` (with theirs),
    /// among which the anchors are rows `offset .. offset + M`: each anchor against every
    /// candidate but itself. On a replica: its own rows against the gathered rows of every
    /// replica, `offset` its first row among them. With `candidates = z` and `offset = 0` this
    /// is [`SupConLoss::forward`].
    ///
    /// # Shapes
    /// - `z`: `[M, D]`, `labels`: `[M]`, `candidates`: `[T, D]`, `candidate_labels`: `[T]`,
    ///   `offset + M ≤ T` → `[1]`
    ///
    /// # Panics
    /// If the widths differ, a label list's length is not its rows', `z` has no row or the
    /// anchors fall outside the candidates.
    pub fn forward_against<B: Backend>(
        &self,
        z: Tensor<B, 2>,
        labels: Tensor<B, 1, Int>,
        candidates: Tensor<B, 2>,
        candidate_labels: Tensor<B, 1, Int>,
        offset: usize,
    ) -> Tensor<B, 1> {
        self.loss(
            l2_normalize(z),
            labels,
            l2_normalize(candidates),
            candidate_labels,
            offset,
        )
    }

    /// The loss of normalised anchors against normalised candidates.
    fn loss<B: Backend>(
        &self,
        z: Tensor<B, 2>,
        labels: Tensor<B, 1, Int>,
        candidates: Tensor<B, 2>,
        candidate_labels: Tensor<B, 1, Int>,
        offset: usize,
    ) -> Tensor<B, 1> {
        let ([m, d], [t, dc]) = (z.dims(), candidates.dims());
        let ([ml], [tl]) = (labels.dims(), candidate_labels.dims());
        assert!(
            m >= 1 && d == dc && ml == m && tl == t && offset + m <= t,
            "SupConLoss: anchors {:?} with {ml} labels against candidates {:?} with {tl} \
             labels at offset {offset}",
            [m, d],
            [t, dc]
        );
        let device = z.device();
        let logits = z
            .matmul(candidates.transpose())
            .mul_scalar(1.0 / self.temperature);
        // Anchor i is candidate offset + i.
        let rows = Tensor::<B, 1, Int>::arange(offset as i64..(offset + m) as i64, &device)
            .reshape([m, 1])
            .expand([m, t]);
        let columns = Tensor::<B, 1, Int>::arange(0..t as i64, &device)
            .reshape([1, t])
            .expand([m, t]);
        let itself = rows.equal(columns);
        let same_label = labels
            .reshape([m, 1])
            .expand([m, t])
            .equal(candidate_labels.reshape([1, t]).expand([m, t]));
        let not_positive = same_label.bool_and(itself.clone().bool_not()).bool_not();
        let others = logits.mask_fill(itself, MASKED_LOGIT);
        let positives = others.clone().mask_fill(not_positive, MASKED_LOGIT);
        (log_sum_exp(others) - log_sum_exp(positives)).mean()
    }
}

/// `log Σ_j exp(x_ij)` of each row, `[n, 1]`, shifted by the row's maximum.
fn log_sum_exp<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    let max = x.clone().max_dim(1).detach();
    (x - max.clone()).exp().sum_dim(1).log() + max
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::testing::{assert_matches_finite_differences, host, matrix, rows, Ad, B};
    use crate::loss::NtXentLossConfig;

    fn labels<Bk: Backend>(values: &[i64]) -> Tensor<Bk, 1, Int> {
        Tensor::from_data(
            TensorData::new(values.to_vec(), [values.len()]),
            &Default::default(),
        )
    }

    /// Two views of six images, labels with a class of three, one of two and one of one.
    const LABELS: [i64; 6] = [0, 1, 0, 2, 1, 0];

    /// The labels of `views` views of the images of [`LABELS`], view after view.
    fn repeated(views: usize) -> Vec<i64> {
        LABELS.repeat(views)
    }

    /// By hand, τ = 1: rows 0 and 1 at right angles with one label, rows 2 and 3 along a third
    /// axis (equal once normalised) with another. Rows 0 and 1 each have one positive (`e⁰`)
    /// among three candidates at `e⁰`; rows 2 and 3 have theirs at `e¹` among `e¹ + 2e⁰`.
    #[test]
    fn four_rows_by_hand() {
        let z = matrix::<B>(
            &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 3.0],
            [4, 3],
        );
        let loss = SupConLossConfig::new()
            .with_temperature(1.0)
            .init()
            .unwrap();
        let value = host(loss.forward(z, labels::<B>(&[5, 5, 7, 7])))[0];
        let e = std::f64::consts::E;
        let expected = (2.0 * 3f64.ln() + 2.0 * ((e + 2.0) / e).ln()) / 4.0;
        assert!((value - expected).abs() < 1e-14, "{value} vs {expected}");
    }

    /// With every label distinct and two views, each anchor's one positive is its image's other
    /// view: SupCon is NT-Xent, whose code shares nothing with it (its positives are the
    /// column `i ± B`, its self-similarities masked on the diagonal). Values and gradients in
    /// f64, at two temperatures.
    #[test]
    fn with_distinct_labels_and_two_views_it_is_nt_xent() {
        let (n, d) = (6, 4);
        let (a, b) = (rows(n, d, 0.3), rows(n, d, 1.7));
        let distinct: Vec<i64> = (0..n as i64).map(|i| 3 * i + 1).collect();
        let mut worst = 0.0f64;
        for tau in [0.2, 0.5] {
            let supcon = SupConLossConfig::new()
                .with_temperature(tau)
                .init()
                .unwrap();
            let nt_xent = NtXentLossConfig::new()
                .with_temperature(tau)
                .init()
                .unwrap();
            let (z1, z2) = (
                matrix::<Ad>(&a, [n, d]).require_grad(),
                matrix::<Ad>(&b, [n, d]).require_grad(),
            );
            let ours = supcon.forward(
                Tensor::cat(vec![z1.clone(), z2.clone()], 0),
                labels::<Ad>(&distinct.repeat(2)),
            );
            let grads = ours.backward();
            let (g1, g2) = (
                host(z1.grad(&grads).unwrap()),
                host(z2.grad(&grads).unwrap()),
            );
            let (x1, x2) = (
                matrix::<Ad>(&a, [n, d]).require_grad(),
                matrix::<Ad>(&b, [n, d]).require_grad(),
            );
            let theirs = nt_xent.forward(x1.clone(), x2.clone());
            let grads = theirs.backward();
            let (h1, h2) = (
                host(x1.grad(&grads).unwrap()),
                host(x2.grad(&grads).unwrap()),
            );
            let (ours, theirs) = (host(ours.inner())[0], host(theirs.inner())[0]);
            worst = worst.max((ours - theirs).abs());
            for (g, h) in g1.iter().chain(&g2).zip(h1.iter().chain(&h2)) {
                worst = worst.max((g - h).abs());
            }
        }
        // Shown with --nocapture.
        println!("SupCon with distinct labels against NT-Xent: within {worst:.1e}");
        assert!(worst < 1e-14, "{worst:e}");
    }

    /// The gradient with respect to the rows, against central finite differences in f64: two
    /// views and three views, labels with repeated classes and a class of one image.
    #[test]
    fn gradients_match_finite_differences() {
        let d = 4;
        let mut worst = 0.0f64;
        for (views, tau) in [(2, 0.2), (3, 0.1)] {
            let m = views * LABELS.len();
            let loss = SupConLossConfig::new()
                .with_temperature(tau)
                .init()
                .unwrap();
            let x = rows(m, d, 0.9);
            let z = matrix::<Ad>(&x, [m, d]).require_grad();
            let grads = loss.forward(z.clone(), labels(&repeated(views))).backward();
            let analytic = host(z.grad(&grads).unwrap());
            let f =
                |x: &[f64]| host(loss.forward(matrix::<B>(x, [m, d]), labels(&repeated(views))))[0];
            let what = format!("{views} views, tau {tau}");
            assert_matches_finite_differences(f, &x, &analytic, 1e-2, &what);
            let h = 1e-6;
            for k in 0..x.len() {
                let (mut up, mut down) = (x.clone(), x.clone());
                up[k] += h;
                down[k] -= h;
                let numeric = (f(&up) - f(&down)) / (2.0 * h);
                worst = worst.max((analytic[k] - numeric).abs() / numeric.abs().max(1e-2));
            }
        }
        // Shown with --nocapture.
        println!("SupCon against finite differences: within {worst:.1e} (relative)");
    }

    /// Two replicas' halves of the anchors against all the rows (each replica's
    /// `forward_against` with its offset) average to the one-device loss, and their gradients
    /// add up to its.
    #[test]
    fn the_halves_against_every_row_average_to_the_whole() {
        let (m, d) = (12, 4);
        let loss = SupConLossConfig::new().init().unwrap();
        let x = rows(m, d, 0.4);
        let all = repeated(2);
        let z = matrix::<Ad>(&x, [m, d]).require_grad();
        let whole = loss.forward(z.clone(), labels(&all));
        let grads = whole.backward();
        let expected = host(z.grad(&grads).unwrap());
        let z = matrix::<Ad>(&x, [m, d]).require_grad();
        let half = |r: usize| {
            let rows = r * m / 2..(r + 1) * m / 2;
            loss.forward_against(
                z.clone().slice(rows.clone()),
                labels(&all[rows.clone()]),
                z.clone(),
                labels(&all),
                rows.start,
            )
        };
        let mean = (half(0) + half(1)).mul_scalar(0.5);
        let grads = mean.backward();
        let got = host(z.grad(&grads).unwrap());
        assert!((host(mean.inner())[0] - host(whole.inner())[0]).abs() < 1e-14);
        for (g, e) in got.iter().zip(&expected) {
            assert!((g - e).abs() < 1e-14, "{g} vs {e}");
        }
    }

    #[test]
    fn a_temperature_that_is_not_positive_is_named() {
        for tau in [0.0, -0.1, f64::NAN] {
            let err = SupConLossConfig::new()
                .with_temperature(tau)
                .init()
                .unwrap_err();
            assert_eq!(err.field, "temperature");
        }
    }
}
