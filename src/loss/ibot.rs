//! iBOT's masked patch-token loss (documented on `IbotPatchLoss`).

use burn::prelude::*;

use super::similarity::stop_gradient;
use crate::base::error::{in_range, positive, ConfigError};

/// Configuration of [`IbotPatchLoss`].
#[derive(Config, Debug)]
pub struct IbotPatchLossConfig {
    /// The teacher's temperature (DINOv2's 0.04 after its warm-up, iBOT's 0.04 → 0.07).
    #[config(default = 0.04)]
    pub teacher_temp: f64,
    /// The student's temperature (0.1).
    #[config(default = 0.1)]
    pub student_temp: f64,
    /// Momentum `m` of the patch centre (0.9).
    #[config(default = 0.9)]
    pub center_momentum: f64,
}

impl IbotPatchLossConfig {
    /// Validates the hyperparameters and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not positive, or a centre momentum outside `[0, 1]`.
    pub fn init(&self) -> Result<IbotPatchLoss, ConfigError> {
        positive("teacher_temp", self.teacher_temp)?;
        positive("student_temp", self.student_temp)?;
        in_range("center_momentum", self.center_momentum, 0.0, 1.0, false)?;
        Ok(IbotPatchLoss {
            config: self.clone(),
        })
    }
}

/// iBOT's masked patch-token loss. Build it with [`IbotPatchLossConfig::init`]. The centre is
/// the caller's state, as with [`crate::loss::DinoLoss`].
///
/// iBOT's masked patch-token loss (Zhou et al., "iBOT: Image BERT Pre-Training with Online
/// Tokenizer", ICLR 2022, <https://arxiv.org/abs/2111.07832>; the form DINOv2 uses, Oquab et al.
/// 2023, <https://arxiv.org/abs/2304.07193>; see `docs/methods.md#ibot-patch-loss`): the student
/// sees an image with some patch tokens hidden behind a mask token, the teacher sees it whole,
/// and each hidden token's student output learns the teacher's centred, sharpened output for
/// that token.
///
/// With the `M` hidden tokens' outputs `t_r` (teacher) and `s_r` (student), `[M, K]`, token `r`
/// belonging to image `b(r)` that hides `n_b` tokens, `B` images in the batch (those hiding none
/// included):
///
/// ```text
/// P_t(r) = softmax((t_r − c) / τ_t)         (no gradient)
/// L = (1 / B) Σ_r −⟨P_t(r), log softmax(s_r / τ_s)⟩ / n_{b(r)}
/// c ← m·c + (1 − m)·mean_r t_r
/// ```
///
/// as lightly's `IBOTPatchLoss` and the DINOv2 authors' `iBOTPatchLoss.forward_masked`: every
/// image weighs the same whatever number of tokens it hides. The centre is the patch tokens'
/// own (not DINO's \[CLS\] centre).
#[derive(Debug, Clone)]
pub struct IbotPatchLoss {
    config: IbotPatchLossConfig,
}

impl IbotPatchLoss {
    /// The settings.
    pub fn config(&self) -> &IbotPatchLossConfig {
        &self.config
    }

    /// The loss of the hidden tokens' outputs, `teacher` and `student` (`[M, K]`, rows grouped
    /// by image in image order), where image `b` of the batch hides `hidden_per_image[b]`
    /// tokens (`Σ = M`; the slice's length is the batch's `B`), with the centre `center` and
    /// the teacher temperature `teacher_temp`. A batch that hides no token has a loss of 0 (with
    /// a gradient of 0). No gradient flows into the teacher's outputs or the centre.
    ///
    /// # Shapes
    /// - `teacher`, `student`: `[M, K]`; `center`: `[1, K]` → `[1]`
    ///
    /// # Panics
    /// If the shapes differ, or the counts do not add up to `M`.
    pub fn forward<B: Backend>(
        &self,
        teacher: Tensor<B, 2>,
        student: Tensor<B, 2>,
        hidden_per_image: &[usize],
        center: Tensor<B, 2>,
        teacher_temp: f64,
    ) -> Tensor<B, 1> {
        // No hidden token: nothing to soften (the loss below is 0).
        let target = if teacher.dims()[0] == 0 {
            teacher
        } else {
            curriculum_ssl_models::kernels::softmax(
                (stop_gradient(teacher) - stop_gradient(center)).mul_scalar(1.0 / teacher_temp),
                1,
            )
        };
        self.forward_targets(target, student, hidden_per_image)
    }

    /// The loss of given targets for the hidden tokens (probabilities: the centred softmax of
    /// [`IbotPatchLoss::forward`], or DINOv2's Sinkhorn–Knopp assignments) against the
    /// student's outputs, each image weighing the same. No gradient flows into the targets.
    ///
    /// # Shapes
    /// - `targets`, `student`: `[M, K]` → `[1]`
    ///
    /// # Panics
    /// If the shapes differ, or the counts do not add up to `M`.
    pub fn forward_targets<B: Backend>(
        &self,
        targets: Tensor<B, 2>,
        student: Tensor<B, 2>,
        hidden_per_image: &[usize],
    ) -> Tensor<B, 1> {
        assert_eq!(
            targets.dims(),
            student.dims(),
            "IbotPatchLoss: targets {:?}, student outputs {:?}",
            targets.dims(),
            student.dims()
        );
        let [m, _] = student.dims();
        assert_eq!(
            hidden_per_image.iter().sum::<usize>(),
            m,
            "IbotPatchLoss: {m} hidden tokens' outputs, but the images hide {hidden_per_image:?}"
        );
        if m == 0 {
            return student.sum().mul_scalar(0.0);
        }
        let device = student.device();
        let target = stop_gradient(targets);
        let log_p = curriculum_ssl_models::kernels::log_softmax(
            student.mul_scalar(1.0 / self.config.student_temp),
            1,
        );
        // Each row's weight 1 / n_b, then the batch's 1 / B.
        let weights: Vec<f64> = hidden_per_image
            .iter()
            .flat_map(|&n| std::iter::repeat_n(1.0 / n as f64, n))
            .collect();
        let weights =
            Tensor::<B, 1>::from_data(TensorData::new(weights, [m]), &device).reshape([m, 1]);
        (target * log_p * weights)
            .sum()
            .neg()
            .mul_scalar(1.0 / hidden_per_image.len() as f64)
    }

    /// The centre after a step whose hidden tokens' teacher outputs were `teacher`:
    /// `m·c + (1 − m)·mean_r t_r`; unchanged when no token was hidden.
    ///
    /// # Shapes
    /// - `center`: `[1, K]`; `teacher`: `[M, K]` → `[1, K]`
    pub fn updated_center<B: Backend>(
        &self,
        center: Tensor<B, 2>,
        teacher: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        let rows = teacher.dims()[0];
        if rows == 0 {
            return stop_gradient(center);
        }
        self.moved_center(center, stop_gradient(teacher).sum_dim(0), rows)
    }

    /// The centre moved by a mean given as the sum `sum` of `count` rows' teacher outputs (on
    /// replicas: every replica's rows, the sums all-reduced): `m·c + (1 − m)·sum / count`;
    /// unchanged when `count` is 0.
    ///
    /// # Shapes
    /// - `center`, `sum`: `[1, K]` → `[1, K]`
    pub fn moved_center<B: Backend>(
        &self,
        center: Tensor<B, 2>,
        sum: Tensor<B, 2>,
        count: usize,
    ) -> Tensor<B, 2> {
        let center = stop_gradient(center);
        if count == 0 {
            return center;
        }
        let m = self.config.center_momentum;
        center.mul_scalar(m) + stop_gradient(sum).mul_scalar((1.0 - m) / count as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};

    type Ad = Autodiff<NdArray<f64>>;

    fn rows(values: &[f64], k: usize) -> Tensor<Ad, 2> {
        Tensor::from_data(
            TensorData::new(values.to_vec(), [values.len() / k, k]),
            &Default::default(),
        )
    }

    /// The loss against a host computation with the weights written out: image 0 hides two
    /// tokens (each weighs ½), image 1 one, image 2 none (it still counts in B = 3).
    #[test]
    fn each_image_weighs_the_same_whatever_it_hides() {
        let (k, tt, ts) = (3, 0.5, 0.25);
        let t: Vec<f64> = (0..9).map(|e| (0.7 * e as f64).sin()).collect();
        let s: Vec<f64> = (0..9).map(|e| (0.3 * e as f64).cos()).collect();
        let c = [0.1, -0.2, 0.05];
        let loss = IbotPatchLossConfig::new()
            .with_student_temp(ts)
            .init()
            .unwrap();
        let value: f64 = loss
            .forward(rows(&t, k), rows(&s, k), &[2, 1, 0], rows(&c, k), tt)
            .into_scalar();
        let ce = |r: usize| {
            let p: Vec<f64> = (0..k).map(|j| ((t[r * k + j] - c[j]) / tt).exp()).collect();
            let z: f64 = p.iter().sum();
            let q: Vec<f64> = (0..k).map(|j| s[r * k + j] / ts).collect();
            let lse = q.iter().map(|x| x.exp()).sum::<f64>().ln();
            -(0..k).map(|j| p[j] / z * (q[j] - lse)).sum::<f64>()
        };
        let expected = (ce(0) / 2.0 + ce(1) / 2.0 + ce(2)) / 3.0;
        assert!((value - expected).abs() < 1e-12, "{value} vs {expected}");
    }

    /// No hidden token: a loss of 0 with a zero gradient, and the centre stays.
    #[test]
    fn a_batch_hiding_nothing_leaves_the_loss_and_the_centre_at_rest() {
        let loss = IbotPatchLossConfig::new().init().unwrap();
        let student = Tensor::<Ad, 2>::zeros([0, 3], &Default::default()).require_grad();
        let teacher = Tensor::<Ad, 2>::zeros([0, 3], &Default::default());
        let c = rows(&[0.1, 0.2, 0.3], 3);
        let value = loss.forward(teacher.clone(), student, &[0, 0], c.clone(), 0.04);
        assert_eq!(value.into_scalar(), 0.0);
        let next = loss.updated_center(c.clone(), teacher);
        assert_eq!(
            next.into_data().to_vec::<f64>().unwrap(),
            vec![0.1, 0.2, 0.3]
        );
    }

    #[test]
    fn impossible_settings_are_named() {
        let e = IbotPatchLossConfig::new()
            .with_teacher_temp(0.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "teacher_temp");
        let e = IbotPatchLossConfig::new()
            .with_center_momentum(-0.1)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "center_momentum");
    }
}
