//! The DetCon losses, DetConS's and DetConB's (documented on `DetConBLoss`).

use burn::prelude::*;
use burn::tensor::activation::log_softmax;

use super::similarity::MASKED_LOGIT;
use crate::base::error::{positive, ConfigError};

/// Configuration of [`DetConBLoss`] (lightly's `DetConBLoss` defaults).
#[derive(Config, Debug)]
pub struct DetConBLossConfig {
    /// Temperature `τ` of the contrastive loss (the paper's and lightly's 0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
}

impl DetConBLossConfig {
    /// Validates the temperature and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not a positive finite number, named `temperature`.
    pub fn init(&self) -> Result<DetConBLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        Ok(DetConBLoss {
            temperature: self.temperature,
        })
    }
}

/// Configuration of [`DetConSLoss`] (lightly's `DetConSLoss` defaults).
#[derive(Config, Debug)]
pub struct DetConSLossConfig {
    /// Temperature `τ` of the contrastive loss (the paper's and lightly's 0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
}

impl DetConSLossConfig {
    /// Validates the temperature and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not a positive finite number, named `temperature`.
    pub fn init(&self) -> Result<DetConSLoss, ConfigError> {
        let inner = DetConBLossConfig::new()
            .with_temperature(self.temperature)
            .init()?;
        Ok(DetConSLoss { inner })
    }
}

/// The DetConB loss. Build it with [`DetConBLossConfig::init`].
///
/// DetCon's contrastive detection loss (Hénaff et al., "Efficient Visual Pretraining with
/// Contrastive Detection", ICCV 2021, <https://arxiv.org/abs/2103.10957>; see
/// `docs/methods.md#detcon`), as lightly 1.6's `DetConBLoss` computes it: each image comes with
/// `M` mask-pooled vectors per view (`v` from the online predictor, `v'` from the target), each
/// tagged with the id of the region it was pooled over. A region's vector of one view is pulled
/// towards the target's vectors of the *same region of the same image* in the other view, and
/// pushed from every other region of every image of the batch in both views:
///
/// ```text
/// L = ℓ(p₁, t₂, t₁, m₁, m₂) + ℓ(p₂, t₁, t₂, m₂, m₁)
/// ℓ(p, t', t, m, m') = −1/(B·M) Σ_{i,a} w_ia Σ_{j,b} y_ia,jb · log softmax_{(j,b) ∈ t' ∪ t}(s_ia,·)
/// s_ia,jb = cos(p_ia, t'_jb)/τ  (the other view's targets),
///           cos(p_ia, t_jb)/τ − 10⁹·[j = i ∧ m_ia = m_ib]  (the same view's: its own region
///                                                           left out)
/// y_ia,jb = [j = i ∧ m_ia = m'_ib] / max(1, P_ia),  P_ia = Σ_b [m_ia = m'_ib]
///           (positives: the other view's slots of the same region, in equal shares)
/// w_ia    = [P_ia > 0] / A_ia,  A_ia = Σ_b [m_ia = m_ib]
///           (a region absent from the other view weighs nothing; a region held by A slots
///            of its view weighs 1/A in each, so every region counts once)
/// ```
///
/// The targets carry whatever gradient the caller gives them: DetConB's are the momentum
/// target's (detached), DetConS's ([`DetConSLoss`]) the online projections themselves.
/// On replicas ([`DetConBLoss::forward_gathered`]) each replica's rows are compared with every
/// replica's targets (lightly's `gather_distributed`).
#[derive(Debug, Clone)]
pub struct DetConBLoss {
    temperature: f64,
}

/// The DetConS loss. Build it with [`DetConSLossConfig::init`].
///
/// DetConS (Hénaff et al., ICCV 2021, <https://arxiv.org/abs/2103.10957>; see
/// `docs/methods.md#detcon`), as lightly 1.6's `DetConSLoss`: the [`DetConBLoss`] with the
/// SimCLR-style network's projections as both the predictions and the targets, so that the
/// gradient flows through both sides of every similarity.
#[derive(Debug, Clone)]
pub struct DetConSLoss {
    inner: DetConBLoss,
}

impl DetConSLoss {
    /// The loss of the two views' mask-pooled projections `view1`, `view2` and their region
    /// ids `masks[v]` (`B·M` of them, image `i`'s slot `a` at `i·M + a`).
    ///
    /// # Shapes
    /// - `view1`, `view2`: `[B, M, D]` → `[1]`
    ///
    /// # Panics
    /// Views of different shapes, or mask ids of another count than `B·M`.
    pub fn forward<B: Backend>(
        &self,
        view1: Tensor<B, 3>,
        view2: Tensor<B, 3>,
        masks: [&[usize]; 2],
    ) -> Tensor<B, 1> {
        self.forward_gathered([view1.clone(), view2.clone()], [view1, view2], masks, 0)
    }

    /// The loss of this replica's rows against every replica's: `targets[v]` are the two views'
    /// projections gathered from every replica (`[W·B, M, D]`, rank order), `views[v]` this
    /// replica's (rows `offset .. offset + B` of the gathered ones). The mean over this replica's
    /// `B·M` rows; the replicas' mean is the one-device loss.
    ///
    /// # Shapes
    /// - `views[v]`: `[B, M, D]`, `targets[v]`: `[W·B, M, D]` → `[1]`
    ///
    /// # Panics
    /// As [`DetConBLoss::forward_gathered`].
    pub fn forward_gathered<B: Backend>(
        &self,
        views: [Tensor<B, 3>; 2],
        targets: [Tensor<B, 3>; 2],
        masks: [&[usize]; 2],
        offset: usize,
    ) -> Tensor<B, 1> {
        self.inner.forward_gathered(views, targets, masks, offset)
    }
}

impl DetConBLoss {
    /// The loss of the online predictions `predictions[v]`, the target's projections
    /// `targets[v]` and the region ids `masks[v]` of the two views (`B·M` ids each, image `i`'s
    /// slot `a` at `i·M + a`).
    ///
    /// # Shapes
    /// - `predictions[v]`, `targets[v]`: `[B, M, D]` → `[1]`
    ///
    /// # Panics
    /// As [`DetConBLoss::forward_gathered`].
    pub fn forward<B: Backend>(
        &self,
        predictions: [Tensor<B, 3>; 2],
        targets: [Tensor<B, 3>; 2],
        masks: [&[usize]; 2],
    ) -> Tensor<B, 1> {
        self.forward_gathered(predictions, targets, masks, 0)
    }

    /// The loss of this replica's predictions against every replica's targets (lightly's
    /// `gather_distributed`): `targets[v]` gathered in rank order, this replica's images at rows
    /// `offset .. offset + B`. The mean over this replica's `B·M` rows.
    ///
    /// # Shapes
    /// - `predictions[v]`: `[B, M, D]`, `targets[v]`: `[W·B, M, D]` → `[1]`
    ///
    /// # Panics
    /// Predictions of different shapes, targets of another `M` or `D` or too few rows for
    /// `offset`, or mask ids of another count than `B·M`.
    pub fn forward_gathered<B: Backend>(
        &self,
        predictions: [Tensor<B, 3>; 2],
        targets: [Tensor<B, 3>; 2],
        masks: [&[usize]; 2],
        offset: usize,
    ) -> Tensor<B, 1> {
        let [p1, p2] = predictions;
        let [t1, t2] = targets;
        let [b, m, d] = p1.dims();
        assert_eq!(
            p2.dims(),
            [b, m, d],
            "DetConBLoss: the views' predictions are {:?} and {:?}",
            [b, m, d],
            p2.dims()
        );
        let [total, tm, td] = t1.dims();
        assert_eq!(
            t2.dims(),
            [total, tm, td],
            "DetConBLoss: the views' targets are {:?} and {:?}",
            t1.dims(),
            t2.dims()
        );
        assert!(
            tm == m && td == d && offset + b <= total,
            "DetConBLoss: predictions {:?} against targets {:?} at row {offset}",
            [b, m, d],
            [total, tm, td]
        );
        for (v, ids) in masks.iter().enumerate() {
            assert_eq!(
                ids.len(),
                b * m,
                "DetConBLoss: view {} has {} mask ids for {b} images of {m} regions",
                v + 1,
                ids.len()
            );
        }
        let first = self.direction(
            p1.clone(),
            [t2.clone(), t1.clone()],
            [masks[0], masks[1]],
            offset,
            total,
        );
        let second = self.direction(p2, [t1, t2], [masks[1], masks[0]], offset, total);
        first + second
    }

    /// One direction: `prediction`'s rows against `[other, own]` targets (the other view's,
    /// then the same view's), with `[own, other]` mask ids.
    fn direction<B: Backend>(
        &self,
        prediction: Tensor<B, 3>,
        targets: [Tensor<B, 3>; 2],
        masks: [&[usize]; 2],
        offset: usize,
        total: usize,
    ) -> Tensor<B, 1> {
        let [b, m, d] = prediction.dims();
        let device = prediction.device();
        let [other, own] = targets;
        let unit = |x: Tensor<B, 3>, rows: usize| super::l2_normalize(x.reshape([rows * m, d]));
        let p = unit(prediction, b);
        let other = unit(other, total);
        let own = unit(own, total);
        let scale = 1.0 / self.temperature;
        // [B·M, W·B·M] each: every row's similarity with every region of every image.
        let logits_other = p.clone().matmul(other.transpose()).mul_scalar(scale);
        let logits_own = p.matmul(own.transpose()).mul_scalar(scale);
        // The image's own block: [B, 1, W·B, 1], 1 where the column image is the row image.
        let mut block = vec![0.0f64; b * total];
        for i in 0..b {
            block[i * total + offset + i] = 1.0;
        }
        let block = Tensor::<B, 1>::from_data(TensorData::new(block, [b * total]), &device)
            .reshape([b, 1, total, 1]);
        // Per image: which slots share the region ([B, M, 1, M]), positives weighted, and the
        // rows' weights.
        let (own_ids, other_ids) = (masks[0], masks[1]);
        let mut same_own = vec![0.0f64; b * m * m];
        let mut positives = vec![0.0f64; b * m * m];
        let mut weights = vec![0.0f64; b * m];
        for i in 0..b {
            for a in 0..m {
                let id = own_ids[i * m + a];
                let row = (i * m + a) * m;
                let mut count = 0usize;
                let mut area = 0usize;
                for c in 0..m {
                    if own_ids[i * m + c] == id {
                        same_own[row + c] = 1.0;
                        area += 1;
                    }
                    if other_ids[i * m + c] == id {
                        positives[row + c] = 1.0;
                        count += 1;
                    }
                }
                if count > 0 {
                    for c in 0..m {
                        positives[row + c] /= count as f64;
                    }
                    weights[i * m + a] = 1.0 / area as f64;
                }
            }
        }
        let per_image = |values: Vec<f64>| {
            Tensor::<B, 1>::from_data(TensorData::new(values, [b * m * m]), &device)
                .reshape([b, m, 1, m])
        };
        let spread = |x: Tensor<B, 4>| (block.clone() * x).reshape([b * m, total * m]);
        let excluded = spread(per_image(same_own));
        let targets = spread(per_image(positives));
        let logits_own = logits_own - excluded.mul_scalar(-MASKED_LOGIT);
        let log_p = log_softmax(Tensor::cat(vec![logits_other, logits_own], 1), 1)
            .slice([0..b * m, 0..total * m]);
        let weights = Tensor::<B, 1>::from_data(TensorData::new(weights, [b * m]), &device)
            .reshape([b * m, 1]);
        (targets * log_p * weights)
            .sum()
            .mul_scalar(-1.0 / (b * m) as f64)
            .reshape([1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::testing::{assert_matches_finite_differences, host, Ad, B as Cpu};

    fn tensor(values: &[f64], shape: [usize; 3]) -> Tensor<Cpu, 3> {
        Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
    }

    /// Deterministic values in [-1, 1].
    fn values(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|k| ((k as f64 + 1.0) * (seed as f64 * 0.37 + 1.3)).sin())
            .collect()
    }

    /// The loss recomputed on the host, straight from the formula of [`DetConBLoss`], one row at
    /// a time.
    #[allow(clippy::too_many_arguments)]
    fn brute(
        p: [&[f64]; 2],
        t: [&[f64]; 2],
        masks: [&[usize]; 2],
        b: usize,
        m: usize,
        d: usize,
        tau: f64,
    ) -> f64 {
        let unit = |x: &[f64], r: usize| -> Vec<f64> {
            let row = &x[r * d..(r + 1) * d];
            let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
            row.iter().map(|v| v / norm).collect()
        };
        let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f64>();
        let mut total = 0.0;
        for (v, w) in [(0, 1), (1, 0)] {
            for i in 0..b {
                for a in 0..m {
                    let id = masks[v][i * m + a];
                    let pa = unit(p[v], i * m + a);
                    let mut logits = Vec::new();
                    let mut positive = Vec::new();
                    for j in 0..b {
                        for c in 0..m {
                            logits.push(dot(&pa, &unit(t[w], j * m + c)) / tau);
                            positive.push(j == i && masks[w][j * m + c] == id);
                        }
                    }
                    for j in 0..b {
                        for c in 0..m {
                            if j == i && masks[v][j * m + c] == id {
                                continue;
                            }
                            logits.push(dot(&pa, &unit(t[v], j * m + c)) / tau);
                        }
                    }
                    let count = positive.iter().filter(|&&x| x).count();
                    if count == 0 {
                        continue;
                    }
                    let area = (0..m).filter(|&c| masks[v][i * m + c] == id).count();
                    let max = logits.iter().cloned().fold(f64::MIN, f64::max);
                    let lse = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
                    let mean: f64 = positive
                        .iter()
                        .zip(&logits)
                        .filter(|(p, _)| **p)
                        .map(|(_, l)| l - lse)
                        .sum::<f64>()
                        / count as f64;
                    total -= mean / area as f64;
                }
            }
        }
        total / (b * m) as f64
    }

    /// The loss equals the formula recomputed row by row, with regions repeated in a view,
    /// regions absent from the other view, and different ids in the two views.
    #[test]
    fn the_loss_is_the_formula() {
        let (b, m, d) = (3, 4, 5);
        let p = [values(b * m * d, 1), values(b * m * d, 2)];
        let t = [values(b * m * d, 3), values(b * m * d, 4)];
        let masks = [
            vec![0, 1, 2, 3, 0, 0, 1, 2, 5, 6, 7, 8],
            vec![0, 1, 2, 3, 2, 1, 1, 0, 8, 8, 9, 9],
        ];
        let loss = DetConBLossConfig::new()
            .with_temperature(0.3)
            .init()
            .unwrap();
        let got = loss.forward(
            [tensor(&p[0], [b, m, d]), tensor(&p[1], [b, m, d])],
            [tensor(&t[0], [b, m, d]), tensor(&t[1], [b, m, d])],
            [&masks[0], &masks[1]],
        );
        let expected = brute(
            [&p[0], &p[1]],
            [&t[0], &t[1]],
            [&masks[0], &masks[1]],
            b,
            m,
            d,
            0.3,
        );
        let got = host(got)[0];
        assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
    }

    /// DetConS is DetConB with the projections as predictions and targets.
    #[test]
    fn detcon_s_is_detcon_b_on_the_projections() {
        let (b, m, d) = (2, 3, 4);
        let z = [values(b * m * d, 5), values(b * m * d, 6)];
        let masks = [vec![0, 1, 2, 0, 1, 1], vec![2, 1, 0, 3, 1, 0]];
        let ids = [masks[0].as_slice(), masks[1].as_slice()];
        let s = DetConSLossConfig::new().init().unwrap().forward(
            tensor(&z[0], [b, m, d]),
            tensor(&z[1], [b, m, d]),
            ids,
        );
        let expected = brute([&z[0], &z[1]], [&z[0], &z[1]], ids, b, m, d, 0.1);
        assert!((host(s)[0] - expected).abs() < 1e-12);
    }

    /// A replica's rows against the gathered targets: the mean of the replicas' losses is the
    /// loss of the whole batch.
    #[test]
    fn the_replicas_mean_is_the_whole_batchs_loss() {
        let (b, m, d) = (4, 3, 2);
        let p = [values(b * m * d, 7), values(b * m * d, 8)];
        let t = [values(b * m * d, 9), values(b * m * d, 10)];
        let masks = [
            vec![0, 1, 2, 1, 1, 0, 2, 2, 2, 0, 1, 2],
            vec![0, 1, 2, 0, 1, 3, 2, 0, 1, 4, 5, 6],
        ];
        let loss = DetConBLossConfig::new().init().unwrap();
        let whole = loss.forward(
            [tensor(&p[0], [b, m, d]), tensor(&p[1], [b, m, d])],
            [tensor(&t[0], [b, m, d]), tensor(&t[1], [b, m, d])],
            [&masks[0], &masks[1]],
        );
        let half = b / 2 * m;
        let mean = (0..2)
            .map(|r| {
                let rows = |x: &[f64]| tensor(&x[r * half * d..(r + 1) * half * d], [b / 2, m, d]);
                let part = loss.forward_gathered(
                    [rows(&p[0]), rows(&p[1])],
                    [tensor(&t[0], [b, m, d]), tensor(&t[1], [b, m, d])],
                    [
                        &masks[0][r * half..(r + 1) * half],
                        &masks[1][r * half..(r + 1) * half],
                    ],
                    r * b / 2,
                );
                host(part)[0]
            })
            .sum::<f64>()
            / 2.0;
        assert!((mean - host(whole)[0]).abs() < 1e-12);
    }

    /// The gradients of DetConS (through both sides of every similarity) and of DetConB (with
    /// respect to the predictions and the targets) match central finite differences.
    #[test]
    fn the_gradients_match_finite_differences() {
        let (b, m, d) = (2, 3, 3);
        let n = b * m * d;
        let masks = [vec![0, 1, 1, 2, 0, 1], vec![1, 0, 3, 2, 2, 0]];
        let ids = [masks[0].as_slice(), masks[1].as_slice()];
        let b_loss = DetConBLossConfig::new()
            .with_temperature(0.5)
            .init()
            .unwrap();
        let s_loss = DetConSLossConfig::new()
            .with_temperature(0.5)
            .init()
            .unwrap();
        // x: the four inputs of DetConB laid end to end (DetConS reads the first two).
        let x: Vec<f64> = (0..4).flat_map(|k| values(n, 20 + k)).collect();
        let run = |x: &[f64], s: bool| -> (f64, Vec<f64>) {
            let t = |k: usize| {
                Tensor::<Ad, 3>::from_data(
                    TensorData::new(x[k * n..(k + 1) * n].to_vec(), [b, m, d]),
                    &Default::default(),
                )
                .require_grad()
            };
            let inputs = [t(0), t(1), t(2), t(3)];
            let loss = if s {
                s_loss.forward(inputs[0].clone(), inputs[1].clone(), ids)
            } else {
                b_loss.forward(
                    [inputs[0].clone(), inputs[1].clone()],
                    [inputs[2].clone(), inputs[3].clone()],
                    ids,
                )
            };
            let value = host(loss.clone())[0];
            let grads = loss.backward();
            let g = inputs
                .iter()
                .flat_map(|i| i.grad(&grads).map(host).unwrap_or_else(|| vec![0.0; n]))
                .collect();
            (value, g)
        };
        for s in [false, true] {
            let (_, analytic) = run(&x, s);
            assert!(analytic.iter().any(|g| *g != 0.0));
            assert_matches_finite_differences(
                |x| run(x, s).0,
                &x,
                &analytic,
                1e-3,
                if s { "DetConS" } else { "DetConB" },
            );
        }
    }

    #[test]
    fn a_zero_temperature_is_named() {
        let e = DetConBLossConfig::new()
            .with_temperature(0.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "temperature");
        let e = DetConSLossConfig::new()
            .with_temperature(f64::NAN)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "temperature");
    }
}
