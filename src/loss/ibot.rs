//! iBOT's masked patch-token loss (documented on `IbotPatchLoss`).

use burn::prelude::*;

use super::similarity::stop_gradient;
use crate::base::error::{in_range, non_negative, positive, ConfigError};

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
    /// iBOT++'s weight `w` of the visible tokens' term (TIPSv2; lightly's
    /// `IBOTPlusPlusPatchLoss`'s `visible_loss_weight`, whose default there is 1): 0, the
    /// default here, is iBOT's loss of the hidden tokens alone; above 0 the visible tokens'
    /// outputs learn the teacher's as well (see [`IbotPatchLoss::forward_with_visible`]).
    #[config(default = 0.0)]
    pub visible_loss_weight: f64,
}

impl IbotPatchLossConfig {
    /// Validates the hyperparameters and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not positive, a centre momentum outside `[0, 1]`, or a visible
    /// tokens' weight that is negative or not finite.
    pub fn init(&self) -> Result<IbotPatchLoss, ConfigError> {
        positive("teacher_temp", self.teacher_temp)?;
        positive("student_temp", self.student_temp)?;
        in_range("center_momentum", self.center_momentum, 0.0, 1.0, false)?;
        non_negative("visible_loss_weight", self.visible_loss_weight)?;
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
///
/// iBOT++ (TIPSv2, 2026, <https://arxiv.org/abs/2604.12012>; lightly's `IBOTPlusPlusPatchLoss`,
/// [`IbotPatchLoss::forward_with_visible`]) adds the same cross-entropy over the `V` visible
/// tokens — the student's outputs at the patches it sees, against the teacher's for the same
/// patches — each image's mean over its `v_b` visible tokens, weighted by
/// `w = visible_loss_weight`, and moves the centre by the mean over all `M + V` tokens:
///
/// ```text
/// CE(r) = −⟨softmax((t_r − c) / τ_t), log softmax(s_r / τ_s)⟩
/// L = (1 / B) Σ_b [ Σ_{r hidden in b} CE(r) / n_b + w · Σ_{r visible in b} CE(r) / v_b ]
/// c ← m·c + (1 − m)·mean_{r hidden or visible} t_r
/// ```
///
/// An image hiding nothing has a hidden term of 0, one hiding everything a visible term of 0.
/// At `w = 0` the loss is iBOT's; so is the centre's update here, from the hidden tokens alone
/// (lightly's `IBOTPlusPlusPatchLoss` at `w = 0` still moves its centre by every token).
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

    /// iBOT++'s loss (see the type's docs): [`IbotPatchLoss::forward`]'s loss of the hidden
    /// tokens plus `visible_loss_weight` × the same loss of the visible tokens. `teacher`,
    /// `student` and `per_image` are `[hidden, visible]` pairs: the `M` hidden tokens' outputs
    /// and the `V` visible tokens' (rows grouped by image in image order), and each image's
    /// number of hidden and of visible tokens (two slices of the batch's length `B`). At a weight
    /// of 0 this is [`IbotPatchLoss::forward`] of the hidden tokens, bit for bit (the visible
    /// tokens' outputs are not used). No gradient flows into the teacher's outputs or the centre.
    ///
    /// The centre of iBOT++ moves by every token's teacher output:
    /// [`IbotPatchLoss::updated_center`] of the hidden and visible rows together.
    ///
    /// # Shapes
    /// - `teacher[i]`, `student[i]`: `[M, K]` (hidden), `[V, K]` (visible); `center`: `[1, K]`
    ///   → `[1]`
    ///
    /// # Panics
    /// If the shapes differ, the counts do not add up to `M` and `V`, or the two slices have
    /// different lengths.
    pub fn forward_with_visible<B: Backend>(
        &self,
        [teacher_hidden, teacher_visible]: [Tensor<B, 2>; 2],
        [student_hidden, student_visible]: [Tensor<B, 2>; 2],
        [hidden_per_image, visible_per_image]: [&[usize]; 2],
        center: Tensor<B, 2>,
        teacher_temp: f64,
    ) -> Tensor<B, 1> {
        assert_eq!(
            hidden_per_image.len(),
            visible_per_image.len(),
            "IbotPatchLoss: {} images' hidden counts, {} images' visible counts",
            hidden_per_image.len(),
            visible_per_image.len()
        );
        let hidden = self.forward(
            teacher_hidden,
            student_hidden,
            hidden_per_image,
            center.clone(),
            teacher_temp,
        );
        let w = self.config.visible_loss_weight;
        if w == 0.0 {
            return hidden;
        }
        let visible = self.forward(
            teacher_visible,
            student_visible,
            visible_per_image,
            center,
            teacher_temp,
        );
        hidden + visible.mul_scalar(w)
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

    fn host<B: Backend, const D: usize>(x: Tensor<B, D>) -> Vec<f64> {
        x.into_data().convert::<f64>().to_vec().unwrap()
    }

    /// Token `r`'s cross-entropy on the host: the teacher's `t` centred by `c` in a softmax at
    /// `tt` against the student's `s` in a log-softmax at `ts`, over `k` prototypes.
    fn host_cross_entropy(
        (t, s, c): (&[f64], &[f64], &[f64]),
        (k, tt, ts): (usize, f64, f64),
        r: usize,
    ) -> f64 {
        let p: Vec<f64> = (0..k).map(|j| ((t[r * k + j] - c[j]) / tt).exp()).collect();
        let z: f64 = p.iter().sum();
        let q: Vec<f64> = (0..k).map(|j| s[r * k + j] / ts).collect();
        let lse = q.iter().map(|x| x.exp()).sum::<f64>().ln();
        -(0..k).map(|j| p[j] / z * (q[j] - lse)).sum::<f64>()
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
        let ce = |r: usize| host_cross_entropy((&t, &s, &c), (k, tt, ts), r);
        let expected = (ce(0) / 2.0 + ce(1) / 2.0 + ce(2)) / 3.0;
        assert!((value - expected).abs() < 1e-12, "{value} vs {expected}");
    }

    /// iBOT++ against a host computation: each image's mean cross-entropy over its hidden
    /// tokens plus `w` × its mean over its visible tokens, averaged over the images. Image 0 hides
    /// tokens 0 and 2 of its three, image 1 none (a hidden term of 0), image 2 all three (a
    /// visible term of 0).
    #[test]
    fn ibot_plus_plus_adds_each_images_mean_over_its_visible_tokens() {
        let (k, tt, ts, w) = (3, 0.5, 0.25, 0.7);
        let t: Vec<f64> = (0..27).map(|e| (0.7 * e as f64).sin()).collect();
        let s: Vec<f64> = (0..27).map(|e| (0.3 * e as f64).cos()).collect();
        let c = [0.1, -0.2, 0.05];
        let ce = |r: usize| host_cross_entropy((&t, &s, &c), (k, tt, ts), r);
        // Tokens r = 3·image + patch.
        let (hidden, visible) = ([0, 2, 6, 7, 8], [1, 3, 4, 5]);
        let pick = |values: &[f64], which: &[usize]| -> Tensor<Ad, 2> {
            let v: Vec<f64> = which
                .iter()
                .flat_map(|&r| values[r * k..(r + 1) * k].to_vec())
                .collect();
            rows(&v, k)
        };
        let loss = IbotPatchLossConfig::new()
            .with_student_temp(ts)
            .with_visible_loss_weight(w)
            .init()
            .unwrap();
        let value: f64 = loss
            .forward_with_visible(
                [pick(&t, &hidden), pick(&t, &visible)],
                [pick(&s, &hidden), pick(&s, &visible)],
                [&[2, 0, 3], &[1, 3, 0]],
                rows(&c, k),
                tt,
            )
            .into_scalar();
        let images = [
            (ce(0) + ce(2)) / 2.0 + w * ce(1),
            w * (ce(3) + ce(4) + ce(5)) / 3.0,
            (ce(6) + ce(7) + ce(8)) / 3.0,
        ];
        let expected = images.iter().sum::<f64>() / 3.0;
        assert!((value - expected).abs() < 1e-12, "{value} vs {expected}");
        // The centre moves by the mean over every token, hidden and visible.
        let all: Vec<usize> = hidden.iter().chain(&visible).copied().collect();
        let next = host(loss.updated_center(rows(&c, k), pick(&t, &all)));
        for (j, (ours, cj)) in next.iter().zip(c).enumerate() {
            let mean = (0..9).map(|r| t[r * k + j]).sum::<f64>() / 9.0;
            let theirs = 0.9 * cj + 0.1 * mean;
            assert!(
                (ours - theirs).abs() < 1e-12,
                "centre[{j}]: {ours} vs {theirs}"
            );
        }
    }

    /// A visible tokens' weight of 0 (the default) is iBOT's loss bit for bit, whatever the
    /// visible tokens' outputs (NaN here: they are not read), and so is its gradient.
    #[test]
    fn a_visible_weight_of_0_is_ibots_loss_exactly() {
        let k = 4;
        let t: Vec<f64> = (0..12).map(|e| 2.0 * (0.9 * e as f64).cos()).collect();
        let s: Vec<f64> = (0..12).map(|e| (0.45 * e as f64 + 0.2).sin()).collect();
        let c = rows(&[0.05, 0.0, -0.1, 0.2], k);
        let loss = IbotPatchLossConfig::new().init().unwrap();
        assert_eq!(loss.config().visible_loss_weight, 0.0);
        let student = rows(&s, k).require_grad();
        let plain = loss.forward(rows(&t, k), student.clone(), &[2, 1], c.clone(), 0.04);
        let nan = rows(&[f64::NAN; 8], k);
        let with = loss.forward_with_visible(
            [rows(&t, k), nan.clone()],
            [student.clone(), nan],
            [&[2, 1], &[1, 1]],
            c,
            0.04,
        );
        let g_plain = host(student.grad(&plain.clone().backward()).unwrap());
        let g_with = host(student.grad(&with.clone().backward()).unwrap());
        assert_eq!(plain.into_scalar().to_bits(), with.into_scalar().to_bits());
        assert_eq!(g_plain, g_with);
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
        let e = IbotPatchLossConfig::new()
            .with_visible_loss_weight(-0.5)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "visible_loss_weight");
    }
}
