//! The LeJEPA loss (documented on `LeJepaLoss`).

use burn::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

use crate::base::error::{in_range, positive, ConfigError};

/// Configuration of [`LeJepaLoss`].
#[derive(Config, Debug)]
pub struct LeJepaLossConfig {
    /// `λ`, the weight of SIGReg; the invariance term gets `1 − λ` (the paper: 0.05, and 0.01
    /// to 0.1 explored).
    #[config(default = 0.05)]
    pub lambda: f64,
    /// `T`, the knots of the integration grid on `[0, t_max]` (17).
    #[config(default = 17)]
    pub knots: usize,
    /// `t_max`, the largest frequency of the grid (3).
    #[config(default = 3.0)]
    pub t_max: f64,
    /// `K`, the random directions drawn per step (1024).
    #[config(default = 1024)]
    pub num_slices: usize,
}

impl LeJepaLossConfig {
    /// Validates the hyperparameters and builds the loss.
    ///
    /// # Errors
    /// `λ` outside `[0, 1]`, fewer than two knots, a `t_max` that is not a finite number > 0,
    /// no slice: each named.
    pub fn init(&self) -> Result<LeJepaLoss, ConfigError> {
        in_range("lambda", self.lambda, 0.0, 1.0, false)?;
        if self.knots < 2 {
            return Err(ConfigError::new(
                "knots",
                format!("must be at least 2, got {}", self.knots),
            ));
        }
        positive("t_max", self.t_max)?;
        // The grid's knots, their weights and the characteristic function's values are held
        // on the host (2³² knots filled the machine's memory).
        crate::base::seed::check_count((self.knots as u64).saturating_mul(3), "the knots' grid")?;
        if self.num_slices == 0 {
            return Err(ConfigError::new("num_slices", "must be at least 1, got 0"));
        }
        let dt = self.t_max / (self.knots - 1) as f64;
        let t: Vec<f64> = (0..self.knots).map(|j| j as f64 * dt).collect();
        let phi: Vec<f64> = t.iter().map(|t| (-t * t / 2.0).exp()).collect();
        let weights = phi
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let end = j == 0 || j + 1 == self.knots;
                p * if end { dt } else { 2.0 * dt }
            })
            .collect();
        Ok(LeJepaLoss {
            lambda: self.lambda,
            num_slices: self.num_slices,
            t,
            phi,
            weights,
        })
    }
}

/// The LeJEPA loss. Build it with [`LeJepaLossConfig::init`].
///
/// The LeJEPA loss (Balestriero & LeCun 2025, "LeJEPA: Provable and Scalable Self-Supervised
/// Learning Without the Heuristics", <https://arxiv.org/abs/2511.08544>): SIGReg, the sketched
/// isotropic Gaussian regulariser, on every view's projections, plus the views' distance to the
/// mean of the global views. No negatives, no predictor, no teacher, no stop-gradient.
///
/// SIGReg projects the `[N, D]` embeddings of a view on `K` random unit directions `a_k` and
/// compares each slice's empirical characteristic function with the standard Gaussian's
/// `φ(t) = exp(−t²/2)` by the Epps–Pulley statistic, integrated by the trapezoidal rule on `T`
/// knots of `[0, t_max]` (the integrand is even, so twice that half):
///
/// ```text
/// x_nk = ⟨z_n, a_k⟩,   c_k(t) = mean_n cos(t·x_nk),   s_k(t) = mean_n sin(t·x_nk)
/// EP_k = N · Σ_j w_j φ(t_j) · ((c_k(t_j) − φ(t_j))² + s_k(t_j)²)
/// SIGReg = mean over views and directions of EP_k
/// invariance = mean over all views, images and features of (z̄_global − z_v)²
/// loss = λ · SIGReg + (1 − λ) · invariance
/// ```
///
/// with `w = [dt, 2dt, …, 2dt, dt]`, `dt = t_max / (T − 1)`. Defaults are the paper's and
/// lightly's `LeJEPALoss`: `λ = 0.05`, `T = 17`, `t_max = 3`, `K = 1024`. The directions are
/// drawn afresh for every step (lightly: `torch.randn` per call); here from a seed the caller
/// gives ([`LeJepaLoss::slices`]), so a step's directions are the same on every replica and in a
/// rerun. See `docs/methods.md#lejepa`.
#[derive(Debug, Clone)]
pub struct LeJepaLoss {
    lambda: f64,
    num_slices: usize,
    /// The knots `t_j`.
    t: Vec<f64>,
    /// `φ(t_j)`.
    phi: Vec<f64>,
    /// The trapezoidal weights times `φ(t_j)`.
    weights: Vec<f64>,
}

/// The LeJEPA loss and its two terms, each `[1]`.
#[derive(Debug, Clone)]
pub struct LeJepaTerms<B: Backend> {
    /// `λ · SIGReg + (1 − λ) · invariance`.
    pub loss: Tensor<B, 1>,
    /// SIGReg, the mean Epps–Pulley statistic.
    pub sigreg: Tensor<B, 1>,
    /// The mean squared distance of every view to the global views' mean.
    pub invariance: Tensor<B, 1>,
}

impl LeJepaLoss {
    /// `λ`.
    pub fn lambda(&self) -> f64 {
        self.lambda
    }

    /// `K` unit directions in `dim` dimensions, drawn from `seed` (standard normal columns,
    /// each divided by its norm: uniform on the sphere), on `device`.
    ///
    /// # Shapes
    /// - output: `[dim, K]`
    pub fn slices<B: Backend>(&self, dim: usize, seed: u64, device: &B::Device) -> Tensor<B, 2> {
        unit_directions(dim, self.num_slices, seed, device)
    }

    /// SIGReg of the views' embeddings along `slices`: the Epps–Pulley statistic of every
    /// view's projections on every direction, averaged.
    ///
    /// # Shapes
    /// - `views`: `V` tensors `[N, D]`; `slices`: `[D, K]` (unit columns) → `[1]`
    pub fn sigreg<B: Backend>(&self, views: &[Tensor<B, 2>], slices: Tensor<B, 2>) -> Tensor<B, 1> {
        let [n, _] = views[0].dims();
        let [_, k] = slices.dims();
        let knots = self.t.len();
        let device = slices.device();
        let grid = |values: &[f64]| {
            Tensor::<B, 1>::from_data(TensorData::new(values.to_vec(), [knots]), &device)
                .reshape([1, 1, 1, knots])
        };
        let v = views.len();
        let x = Tensor::cat(views.to_vec(), 0)
            .matmul(slices)
            .reshape([v, n, k, 1]);
        let xt = x * grid(&self.t);
        let cos = xt.clone().cos().mean_dim(1);
        let sin = xt.sin().mean_dim(1);
        let error = (cos - grid(&self.phi)).powi_scalar(2) + sin.powi_scalar(2);
        (error * grid(&self.weights))
            .sum_dim(3)
            .mul_scalar(n as f64)
            .mean()
    }

    /// The mean over every view, image and feature of the squared distance to the global views'
    /// mean.
    ///
    /// # Shapes
    /// - `global`: `V_g ≥ 1` tensors `[N, D]`; `local`: `V_l ≥ 0` tensors `[N, D]` → `[1]`
    pub fn invariance<B: Backend>(
        &self,
        global: &[Tensor<B, 2>],
        local: &[Tensor<B, 2>],
    ) -> Tensor<B, 1> {
        invariance_to_global_mean(global, local)
    }

    /// The loss and its terms for the global and local views' projections (every view of one
    /// shape `[N, D]`), SIGReg along `slices` over all of them.
    ///
    /// # Shapes
    /// - `global`: `V_g ≥ 1` tensors `[N, D]`; `local`: `V_l ≥ 0` tensors `[N, D]`;
    ///   `slices`: `[D, K]`
    pub fn terms<B: Backend>(
        &self,
        global: &[Tensor<B, 2>],
        local: &[Tensor<B, 2>],
        slices: Tensor<B, 2>,
    ) -> LeJepaTerms<B> {
        let all: Vec<Tensor<B, 2>> = global.iter().chain(local).cloned().collect();
        let sigreg = self.sigreg(&all, slices);
        let invariance = self.invariance(global, local);
        LeJepaTerms {
            loss: sigreg.clone().mul_scalar(self.lambda)
                + invariance.clone().mul_scalar(1.0 - self.lambda),
            sigreg: sigreg.detach(),
            invariance: invariance.detach(),
        }
    }

    /// [`LeJepaLoss::terms`]' loss.
    pub fn forward<B: Backend>(
        &self,
        global: &[Tensor<B, 2>],
        local: &[Tensor<B, 2>],
        slices: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        self.terms(global, local, slices).loss
    }
}

/// `k` unit directions in `dim` dimensions drawn from `seed`: standard normal columns, each
/// divided by its norm (uniform on the sphere). Shared by LeJEPA's SIGReg
/// ([`LeJepaLoss::slices`]) and VISReg's shape term (`VisRegLoss::slices`).
///
/// # Shapes
/// - output: `[dim, k]`
pub(crate) fn unit_directions<B: Backend>(
    dim: usize,
    k: usize,
    seed: u64,
    device: &B::Device,
) -> Tensor<B, 2> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut values: Vec<f64> = (0..dim * k)
        .map(|_| StandardNormal.sample(&mut rng))
        .collect();
    for column in 0..k {
        let norm = (0..dim)
            .map(|row| values[row * k + column].powi(2))
            .sum::<f64>()
            .sqrt();
        for row in 0..dim {
            values[row * k + column] /= norm;
        }
    }
    Tensor::from_data(TensorData::new(values, [dim, k]), device)
}

/// The mean over every view, image and feature of the squared distance to the global views'
/// mean: LeJEPA's invariance ([`LeJepaLoss::invariance`]), which VISReg shares
/// (`VisRegLoss::invariance`).
///
/// # Shapes
/// - `global`: `V_g ≥ 1` tensors `[N, D]`; `local`: `V_l ≥ 0` tensors `[N, D]` → `[1]`
pub(crate) fn invariance_to_global_mean<B: Backend>(
    global: &[Tensor<B, 2>],
    local: &[Tensor<B, 2>],
) -> Tensor<B, 1> {
    let center = Tensor::stack::<3>(global.to_vec(), 0).mean_dim(0);
    let all: Vec<Tensor<B, 3>> = global
        .iter()
        .chain(local)
        .map(|z| z.clone().unsqueeze_dim(0))
        .collect();
    (Tensor::cat(all, 0) - center).powi_scalar(2).mean()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    /// SIGReg by hand: one view of two points `±1` on one direction (D = 1, K = 1), two knots
    /// `t ∈ {0, 1}`: `c(0) = 1 = φ(0)`, `s = 0`, `c(1) = cos 1`, so
    /// `EP = 2 · [w₀·0 + w₁·(cos 1 − e^{−1/2})²]` with `w₁ = dt·φ(1) = e^{−1/2}`.
    #[test]
    fn sigreg_of_two_points_by_hand() {
        let device = Default::default();
        let loss = LeJepaLossConfig::new()
            .with_knots(2)
            .with_t_max(1.0)
            .with_num_slices(1)
            .init()
            .unwrap();
        let z = Tensor::<B, 2>::from_data([[1.0], [-1.0]], &device);
        let a = Tensor::<B, 2>::from_data([[1.0]], &device);
        let got = loss.sigreg(&[z], a).into_scalar();
        let half = (-0.5f64).exp();
        let want = 2.0 * half * (1f64.cos() - half).powi(2);
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }

    /// The invariance of two global views `a`, `b` and one local `c`: the mean of
    /// `(m − a)², (m − b)², (m − c)²` with `m = (a + b)/2`.
    #[test]
    fn invariance_by_hand() {
        let device = Default::default();
        let loss = LeJepaLossConfig::new().init().unwrap();
        let t = |v: [f64; 2]| Tensor::<B, 2>::from_data([v], &device);
        let got = loss
            .invariance(&[t([1.0, 2.0]), t([3.0, 0.0])], &[t([0.0, 5.0])])
            .into_scalar();
        // m = (2, 1): (1 + 1 + 1 + 1 + 4 + 16) / 6.
        assert!((got - 24.0 / 6.0).abs() < 1e-12);
    }

    /// The directions are unit columns, the same for one seed and different for another.
    #[test]
    fn slices_are_unit_and_seeded() {
        let device = Default::default();
        let loss = LeJepaLossConfig::new().with_num_slices(5).init().unwrap();
        let a: Vec<f64> = loss
            .slices::<B>(3, 7, &device)
            .into_data()
            .to_vec()
            .unwrap();
        for column in 0..5 {
            let norm: f64 = (0..3).map(|r| a[r * 5 + column].powi(2)).sum();
            assert!((norm - 1.0).abs() < 1e-12);
        }
        let again: Vec<f64> = loss
            .slices::<B>(3, 7, &device)
            .into_data()
            .to_vec()
            .unwrap();
        let other: Vec<f64> = loss
            .slices::<B>(3, 8, &device)
            .into_data()
            .to_vec()
            .unwrap();
        assert_eq!(a, again);
        assert_ne!(a, other);
    }

    #[test]
    fn rejects_bad_hyperparameters_by_name() {
        let bad = [
            (LeJepaLossConfig::new().with_lambda(1.5), "lambda"),
            (LeJepaLossConfig::new().with_knots(1), "knots"),
            (LeJepaLossConfig::new().with_t_max(0.0), "t_max"),
            (LeJepaLossConfig::new().with_num_slices(0), "num_slices"),
        ];
        for (config, field) in bad {
            assert_eq!(config.init().unwrap_err().field, field);
        }
    }
}
