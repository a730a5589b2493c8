//! The DINO loss (documented on `DinoLoss`).

use burn::prelude::*;

use super::similarity::stop_gradient;
use crate::base::error::{in_range, positive, ConfigError};

/// Configuration of [`DinoLoss`].
#[derive(Config, Debug)]
pub struct DinoLossConfig {
    /// The teacher's temperature after the warm-up (the paper's 0.04; 0.07 for longer runs).
    #[config(default = 0.04)]
    pub teacher_temp: f64,
    /// The teacher's temperature at the first epoch (the paper's 0.04).
    #[config(default = 0.04)]
    pub warmup_teacher_temp: f64,
    /// Epochs over which the teacher's temperature rises (the paper's 30; 0 for none).
    #[config(default = 30)]
    pub warmup_teacher_temp_epochs: usize,
    /// The student's temperature (the paper's 0.1).
    #[config(default = 0.1)]
    pub student_temp: f64,
    /// Momentum `m` of the centre (the paper's 0.9).
    #[config(default = 0.9)]
    pub center_momentum: f64,
}

impl DinoLossConfig {
    /// Validates the hyperparameters and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not positive, or a centre momentum outside `[0, 1]`.
    pub fn init(&self) -> Result<DinoLoss, ConfigError> {
        positive("teacher_temp", self.teacher_temp)?;
        positive("warmup_teacher_temp", self.warmup_teacher_temp)?;
        positive("student_temp", self.student_temp)?;
        in_range("center_momentum", self.center_momentum, 0.0, 1.0, false)?;
        Ok(DinoLoss {
            config: self.clone(),
        })
    }
}

/// The DINO loss. Build it with [`DinoLossConfig::init`]. The centre is the caller's state
/// (the method keeps and checkpoints it): [`DinoLoss::forward`] reads it and
/// [`DinoLoss::updated_center`] computes the next one.
///
/// The DINO loss (Caron et al., "Emerging Properties in Self-Supervised Vision Transformers",
/// ICCV 2021, <https://arxiv.org/abs/2104.14294>; see `docs/methods.md#dino-loss`): self-distillation
/// of a momentum teacher's centred, sharpened output into the student.
///
/// The teacher sees the global views `g ∈ G`, the student every view `s` (global views first,
/// then the local crops). With the teacher's outputs `t_g` and the student's `s_v` (`[N, K]`):
///
/// ```text
/// P_t(g) = softmax((t_g − c) / τ_t)          (no gradient)
/// log P_s(v) = log softmax(s_v / τ_s)
/// L = (1 / (N · #pairs)) Σ_{g ∈ G} Σ_{v ≠ g} Σ_n −⟨P_t(g)_n, log P_s(v)_n⟩
/// c ← m·c + (1 − m)·mean over g and n of t_g
/// ```
///
/// as the paper's Algorithm 1 and lightly's `DINOLoss` (pairs of the same view excluded). The
/// teacher temperature rises linearly from `warmup_teacher_temp` to `teacher_temp` over the first
/// `warmup_teacher_temp_epochs` epochs, one value per epoch (the authors' `np.linspace`).
#[derive(Debug, Clone)]
pub struct DinoLoss {
    config: DinoLossConfig,
}

impl DinoLoss {
    /// The settings.
    pub fn config(&self) -> &DinoLossConfig {
        &self.config
    }

    /// The teacher temperature at epoch `epoch` (0-based): `linspace(warmup_teacher_temp,
    /// teacher_temp, warmup_teacher_temp_epochs)[epoch]`, then `teacher_temp`.
    pub fn teacher_temp_at(&self, epoch: usize) -> f64 {
        let c = &self.config;
        let n = c.warmup_teacher_temp_epochs;
        if epoch >= n {
            c.teacher_temp
        } else if n == 1 {
            c.warmup_teacher_temp
        } else {
            c.warmup_teacher_temp
                + (c.teacher_temp - c.warmup_teacher_temp) * epoch as f64 / (n - 1) as f64
        }
    }

    /// The loss of the teacher's outputs on the global views `teacher` and the student's on
    /// every view `student` (global views first, in the teacher's order), with the centre
    /// `center` and the teacher temperature `teacher_temp`. Pairs of the same global view are
    /// left out. No gradient flows into the teacher's outputs or the centre.
    ///
    /// # Shapes
    /// - `teacher[g]`, `student[v]`: `[N, K]`; `center`: `[1, K]` → `[1]`
    ///
    /// # Panics
    /// If no pair of different views is left, or shapes differ.
    pub fn forward<B: Backend>(
        &self,
        teacher: &[Tensor<B, 2>],
        student: &[Tensor<B, 2>],
        center: Tensor<B, 2>,
        teacher_temp: f64,
    ) -> Tensor<B, 1> {
        self.forward_targets(&self.targets(teacher, center, teacher_temp), student)
    }

    /// The teacher's targets on each global view: `softmax((t − c) / τ_t)`, without gradient.
    ///
    /// # Shapes
    /// - `teacher[g]`: `[N, K]`; `center`: `[1, K]` → `[N, K]` each
    pub fn targets<B: Backend>(
        &self,
        teacher: &[Tensor<B, 2>],
        center: Tensor<B, 2>,
        teacher_temp: f64,
    ) -> Vec<Tensor<B, 2>> {
        let center = stop_gradient(center);
        teacher
            .iter()
            .map(|t| {
                let t = stop_gradient(t.clone()) - center.clone();
                curriculum_ssl_models::kernels::softmax(t.mul_scalar(1.0 / teacher_temp), 1)
            })
            .collect()
    }

    /// The loss of given targets on the global views (probabilities: the centred softmax of
    /// [`DinoLoss::targets`], or DINOv2's Sinkhorn–Knopp assignments) against the student's
    /// outputs on every view, pairs of the same global view left out.
    ///
    /// # Shapes
    /// - `targets[g]`, `student[v]`: `[N, K]` → `[1]`
    ///
    /// # Panics
    /// If no pair of different views is left, or shapes differ.
    pub fn forward_targets<B: Backend>(
        &self,
        targets: &[Tensor<B, 2>],
        student: &[Tensor<B, 2>],
    ) -> Tensor<B, 1> {
        let pairs = targets.len() * student.len() - targets.len().min(student.len());
        assert!(
            pairs > 0,
            "DinoLoss: {} teacher and {} student views leave no pair of different views",
            targets.len(),
            student.len()
        );
        let shape = targets[0].dims();
        for x in targets.iter().chain(student) {
            assert_eq!(
                x.dims(),
                shape,
                "DinoLoss: outputs of shape {:?} and {:?}",
                x.dims(),
                shape
            );
        }
        let targets: Vec<Tensor<B, 2>> = targets.iter().map(|t| stop_gradient(t.clone())).collect();
        // Σ_v Σ_{g ≠ v} (p_g · log p_v) regrouped by student view: each view's log-softmax
        // meets the sum of the other teacher views' targets once (every local crop meets all
        // of them), one product per view instead of one per pair.
        let others = |skip: Option<usize>| -> Option<Tensor<B, 2>> {
            targets
                .iter()
                .enumerate()
                .filter(|(g, _)| Some(*g) != skip)
                .map(|(_, p)| p.clone())
                .reduce(|a, b| a + b)
        };
        let all_targets = others(None);
        let mut total: Option<Tensor<B, 1>> = None;
        for (v, s) in student.iter().enumerate() {
            let sum = if v < targets.len() {
                others(Some(v))
            } else {
                all_targets.clone()
            };
            let Some(sum) = sum else { continue };
            let log_p = curriculum_ssl_models::kernels::log_softmax(
                s.clone().mul_scalar(1.0 / self.config.student_temp),
                1,
            );
            let term = (sum * log_p).sum();
            total = Some(match total {
                Some(acc) => acc + term,
                None => term,
            });
        }
        total
            .expect("at least one pair")
            .neg()
            .mul_scalar(1.0 / ((pairs * shape[0]) as f64))
    }

    /// The centre after a step whose teacher outputs were `teacher`:
    /// `m·c + (1 − m)·mean(t)`, the mean over every global view and image.
    ///
    /// # Shapes
    /// - `center`: `[1, K]`; `teacher[g]`: `[N, K]` → `[1, K]`
    pub fn updated_center<B: Backend>(
        &self,
        center: Tensor<B, 2>,
        teacher: &[Tensor<B, 2>],
    ) -> Tensor<B, 2> {
        let all = stop_gradient(Tensor::cat(teacher.to_vec(), 0));
        let batch_center = all.mean_dim(0);
        let m = self.config.center_momentum;
        stop_gradient(center).mul_scalar(m) + batch_center.mul_scalar(1.0 - m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn teacher_temperature_rises_per_epoch_then_stays() {
        let loss = DinoLossConfig::new()
            .with_warmup_teacher_temp(0.04)
            .with_teacher_temp(0.07)
            .with_warmup_teacher_temp_epochs(4)
            .init()
            .unwrap();
        let temps: Vec<f64> = (0..6).map(|e| loss.teacher_temp_at(e)).collect();
        let expected = [0.04, 0.05, 0.06, 0.07, 0.07, 0.07];
        for (t, e) in temps.iter().zip(expected) {
            assert!((t - e).abs() < 1e-15, "{temps:?}");
        }
    }

    #[test]
    fn impossible_settings_are_named() {
        let e = DinoLossConfig::new()
            .with_student_temp(0.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "student_temp");
        let e = DinoLossConfig::new()
            .with_center_momentum(1.5)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "center_momentum");
    }
}
