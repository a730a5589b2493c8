//! The VISReg loss (documented on `VisRegLoss`).

use burn::prelude::*;

use super::lejepa::{invariance_to_global_mean, unit_directions};
use super::shape_checks::assert_same_shape;
use crate::base::error::{in_range, non_negative, positive, ConfigError};

/// Configuration of [`VisRegLoss`].
#[derive(Config, Debug)]
pub struct VisRegLossConfig {
    /// `λ`, the weight of the regularisation; the invariance gets `1 − λ` (lightly's and the
    /// authors' ImageNet setting, 0.9; the paper recommends 0.6 for small datasets).
    #[config(default = 0.9)]
    pub lambda: f64,
    /// `K`, the random directions of the shape term drawn per step (lightly's and the authors'
    /// 4096).
    #[config(default = 4096)]
    pub num_slices: usize,
    /// The weight of the scale term inside the regularisation (1).
    #[config(default = 1.0)]
    pub lambda_scale: f64,
    /// The weight of the shape term inside the regularisation (1; the paper raises it for
    /// long-tailed or low-rank data).
    #[config(default = 1.0)]
    pub lambda_shape: f64,
    /// The weight of the centre term inside the regularisation (1).
    #[config(default = 1.0)]
    pub lambda_center: f64,
    /// `ε`, added to the (stop-gradient) standard deviation before the shape term divides by
    /// it (lightly's 1e-4).
    #[config(default = 1e-4)]
    pub eps: f64,
}

impl VisRegLossConfig {
    /// Validates the hyperparameters and builds the loss.
    ///
    /// # Errors
    /// `λ` outside `[0, 1]`, no slice, a negative (or not finite) term weight, an `ε` that is
    /// not a finite number > 0: each named.
    pub fn init(&self) -> Result<VisRegLoss, ConfigError> {
        in_range("lambda", self.lambda, 0.0, 1.0, false)?;
        if self.num_slices == 0 {
            return Err(ConfigError::new("num_slices", "must be at least 1, got 0"));
        }
        non_negative("lambda_scale", self.lambda_scale)?;
        non_negative("lambda_shape", self.lambda_shape)?;
        non_negative("lambda_center", self.lambda_center)?;
        positive("eps", self.eps)?;
        Ok(VisRegLoss {
            lambda: self.lambda,
            num_slices: self.num_slices,
            lambda_scale: self.lambda_scale,
            lambda_shape: self.lambda_shape,
            lambda_center: self.lambda_center,
            eps: self.eps,
        })
    }
}

/// The VISReg loss. Build it with [`VisRegLossConfig::init`].
///
/// VISReg (Wu, Balestriero & Levine 2026, "VISReg: Variance-Invariance-Sketching Regularization
/// for JEPA training", <https://arxiv.org/abs/2606.02572>): LeJEPA's multi-view invariance with
/// SIGReg replaced by three decoupled terms on every view's projections — the batch mean towards
/// zero (centre), every feature's standard deviation towards one (scale) and, once the scale is
/// divided out behind a stop-gradient, the shape towards the standard normal's: the embeddings
/// are projected on `K` random unit directions `a_k` and each slice's sorted values are compared
/// with the standard normal quantiles (the closed-form 1-D 2-Wasserstein distance, a sliced
/// Wasserstein sketch). For views `Z_v` (`[N, D]`, `V_g` global then `V_l` local), `μ_v` and
/// `σ_v` each view's per-feature batch mean and (biased) standard deviation:
///
/// ```text
/// center = mean_{v,d} μ_vd²
/// scale  = mean_{v,d} (1 − σ_vd)²
/// ẑ_vn   = (z_vn − μ_v) / (sg(σ_v) + ε)                       sg: stop-gradient
/// shape  = mean_{v,n,k} (sort_n ⟨ẑ_vn, a_k⟩ − Φ⁻¹(n / (N + 1)))²     n = 1 … N
/// inv    = mean_{v,n,d} (mean_g z_g − z_v)²_{nd}                   every view, global and local
/// loss   = (1 − λ) · inv + λ · (λ_scale · scale + λ_shape · shape + λ_center · center)
/// ```
///
/// Defaults are lightly's `VISRegLoss` (and the authors' ImageNet configuration): `λ = 0.9`,
/// `K = 4096`, unit weights, `ε = 1e-4`. The directions are drawn afresh for every step (lightly:
/// `torch.randn` per call); here from a seed the caller gives ([`VisRegLoss::slices`], LeJEPA's
/// draw), so a step's directions are the same on every replica and in a rerun. The quantiles are
/// computed in f64 (lightly and the authors compute them in f32) and converted to the backend's
/// precision. See `docs/methods.md#visreg`.
#[derive(Debug, Clone)]
pub struct VisRegLoss {
    lambda: f64,
    num_slices: usize,
    lambda_scale: f64,
    lambda_shape: f64,
    lambda_center: f64,
    eps: f64,
}

/// The VISReg loss and its four terms, each `[1]` (the terms unweighted and detached).
#[derive(Debug, Clone)]
pub struct VisRegTerms<B: Backend> {
    /// `(1 − λ) · invariance + λ · (λ_scale · scale + λ_shape · shape + λ_center · center)`.
    pub loss: Tensor<B, 1>,
    /// The mean squared distance of every view to the global views' mean.
    pub invariance: Tensor<B, 1>,
    /// The mean squared distance of every feature's standard deviation from one.
    pub scale: Tensor<B, 1>,
    /// The sliced 2-Wasserstein distance of the standardised views to the standard normal.
    pub shape: Tensor<B, 1>,
    /// The mean squared batch mean.
    pub center: Tensor<B, 1>,
}

/// The views stacked as `[V, N, D]`, each view's per-feature mean `[V, 1, D]`, the views
/// centred, and each view's per-feature (biased) standard deviation `[V, 1, D]`.
struct Moments<B: Backend> {
    mean: Tensor<B, 3>,
    centred: Tensor<B, 3>,
    std: Tensor<B, 3>,
}

impl<B: Backend> Moments<B> {
    fn of(views: &[Tensor<B, 2>]) -> Self {
        let z = stack(views);
        let mean = z.clone().mean_dim(1);
        let centred = z - mean.clone();
        let std = centred.clone().powi_scalar(2).mean_dim(1).sqrt();
        Self { mean, centred, std }
    }
}

/// The views as one `[V, N, D]` tensor, after checking that they share one shape of at least
/// two rows (a standard deviation and a quantile grid need two).
fn stack<B: Backend>(views: &[Tensor<B, 2>]) -> Tensor<B, 3> {
    assert!(!views.is_empty(), "VISReg: no view");
    let first = views[0].dims();
    for (v, view) in views.iter().enumerate().skip(1) {
        assert_same_shape(
            "VISReg",
            ("views[0]", first),
            (&format!("views[{v}]"), view.dims()),
        );
    }
    assert!(
        first[0] >= 2,
        "VISReg: views of shape {first:?}; at least 2 rows are needed"
    );
    Tensor::stack(views.to_vec(), 0)
}

impl VisRegLoss {
    /// `λ`.
    pub fn lambda(&self) -> f64 {
        self.lambda
    }

    /// `K`.
    pub fn num_slices(&self) -> usize {
        self.num_slices
    }

    /// `K` unit directions in `dim` dimensions, drawn from `seed` (standard normal columns,
    /// each divided by its norm: uniform on the sphere; LeJEPA's draw), on `device`.
    ///
    /// # Shapes
    /// - output: `[dim, K]`
    pub fn slices<B: Backend>(&self, dim: usize, seed: u64, device: &B::Device) -> Tensor<B, 2> {
        unit_directions(dim, self.num_slices, seed, device)
    }

    /// The centre term: the mean over views and features of the squared batch mean.
    ///
    /// # Shapes
    /// - `views`: `V ≥ 1` tensors `[N ≥ 2, D]` → `[1]`
    pub fn center<B: Backend>(&self, views: &[Tensor<B, 2>]) -> Tensor<B, 1> {
        center_of(&Moments::of(views))
    }

    /// The scale term: the mean over views and features of `(1 − σ)²`, `σ` the feature's
    /// standard deviation over the batch (biased, as lightly's `std(unbiased=False)`).
    ///
    /// # Shapes
    /// - `views`: `V ≥ 1` tensors `[N ≥ 2, D]` → `[1]`
    pub fn scale<B: Backend>(&self, views: &[Tensor<B, 2>]) -> Tensor<B, 1> {
        scale_of(&Moments::of(views))
    }

    /// The shape term along `slices`: every view centred, divided by its standard deviation
    /// (stop-gradient) plus `ε`, then [`VisRegLoss::sliced_wasserstein`].
    ///
    /// # Shapes
    /// - `views`: `V ≥ 1` tensors `[N ≥ 2, D]`; `slices`: `[D, K]` (unit columns) → `[1]`
    pub fn shape<B: Backend>(&self, views: &[Tensor<B, 2>], slices: Tensor<B, 2>) -> Tensor<B, 1> {
        self.shape_of(&Moments::of(views), slices)
    }

    /// The sliced 2-Wasserstein distance of standardised views to the standard normal: every
    /// view's rows projected on each direction, sorted, and compared with the quantiles
    /// `Φ⁻¹(n / (N + 1))`, `n = 1 … N`; the mean squared difference over views, rows and
    /// directions. The shape term is this of the views standardised with a stop-gradient on
    /// their standard deviation.
    ///
    /// # Shapes
    /// - `standardised`: `V ≥ 1` tensors `[N ≥ 2, D]`; `slices`: `[D, K]` → `[1]`
    pub fn sliced_wasserstein<B: Backend>(
        &self,
        standardised: &[Tensor<B, 2>],
        slices: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        sliced_wasserstein(stack(standardised), slices)
    }

    /// The invariance: the mean over every view, image and feature of the squared distance to
    /// the global views' mean (LeJEPA's).
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
    /// shape `[N, D]`), the regularisation over all of them, the shape term along `slices`.
    ///
    /// # Shapes
    /// - `global`: `V_g ≥ 1` tensors `[N ≥ 2, D]`; `local`: `V_l ≥ 0` tensors `[N, D]`;
    ///   `slices`: `[D, K]`
    pub fn terms<B: Backend>(
        &self,
        global: &[Tensor<B, 2>],
        local: &[Tensor<B, 2>],
        slices: Tensor<B, 2>,
    ) -> VisRegTerms<B> {
        let all: Vec<Tensor<B, 2>> = global.iter().chain(local).cloned().collect();
        let moments = Moments::of(&all);
        let center = center_of(&moments);
        let scale = scale_of(&moments);
        let shape = self.shape_of(&moments, slices);
        let invariance = self.invariance(global, local);
        let regularisation = scale.clone().mul_scalar(self.lambda_scale)
            + shape.clone().mul_scalar(self.lambda_shape)
            + center.clone().mul_scalar(self.lambda_center);
        VisRegTerms {
            loss: invariance.clone().mul_scalar(1.0 - self.lambda)
                + regularisation.mul_scalar(self.lambda),
            invariance: invariance.detach(),
            scale: scale.detach(),
            shape: shape.detach(),
            center: center.detach(),
        }
    }

    /// [`VisRegLoss::terms`]' loss.
    pub fn forward<B: Backend>(
        &self,
        global: &[Tensor<B, 2>],
        local: &[Tensor<B, 2>],
        slices: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        self.terms(global, local, slices).loss
    }

    fn shape_of<B: Backend>(&self, moments: &Moments<B>, slices: Tensor<B, 2>) -> Tensor<B, 1> {
        let scale = moments.std.clone().detach().add_scalar(self.eps);
        sliced_wasserstein(moments.centred.clone() / scale, slices)
    }
}

fn center_of<B: Backend>(moments: &Moments<B>) -> Tensor<B, 1> {
    moments.mean.clone().powi_scalar(2).mean()
}

fn scale_of<B: Backend>(moments: &Moments<B>) -> Tensor<B, 1> {
    moments
        .std
        .clone()
        .neg()
        .add_scalar(1.0)
        .powi_scalar(2)
        .mean()
}

/// See [`VisRegLoss::sliced_wasserstein`].
fn sliced_wasserstein<B: Backend>(z: Tensor<B, 3>, slices: Tensor<B, 2>) -> Tensor<B, 1> {
    let [v, n, d] = z.dims();
    let [rows, k] = slices.dims();
    assert!(
        rows == d,
        "VISReg: views of {d} features but directions of {rows} ([D, K] = [{rows}, {k}])"
    );
    let projections = z.reshape([v * n, d]).matmul(slices).reshape([v, n, k]);
    let quantiles = Tensor::<B, 1>::from_data(
        TensorData::new(standard_normal_quantiles(n), [n]),
        &projections.device(),
    )
    .reshape([1, n, 1]);
    (projections.sort(1) - quantiles).powi_scalar(2).mean()
}

/// `Φ⁻¹(n / (N + 1))` for `n = 1 … N`, in f64: the lower half evaluated, the upper half its
/// mirror image (so the grid is exactly antisymmetric, its middle exactly 0).
fn standard_normal_quantiles(count: usize) -> Vec<f64> {
    let denominator = (count + 1) as f64;
    (1..=count)
        .map(|n| {
            let mirror = count + 1 - n;
            if 2 * n < count + 1 {
                standard_normal_quantile(n as f64 / denominator)
            } else if 2 * n > count + 1 {
                -standard_normal_quantile(mirror as f64 / denominator)
            } else {
                0.0
            }
        })
        .collect()
}

/// The standard normal quantile function `Φ⁻¹(p)` for `0 < p < 1`: Wichura's algorithm AS 241
/// (PPND16; Applied Statistics 37(3), 1988, 477–484), rational approximations with a relative
/// error of about 1e-16.
// The coefficients as Wichura published them, digit for digit (more than an f64 holds).
#[allow(clippy::excessive_precision)]
fn standard_normal_quantile(p: f64) -> f64 {
    // Evaluates a polynomial given by its coefficients, lowest degree first (Horner).
    fn poly(c: &[f64], x: f64) -> f64 {
        c.iter().rev().fold(0.0, |acc, &c| acc * x + c)
    }
    const A: [f64; 8] = [
        3.387_132_872_796_366_608,
        1.331_416_678_917_843_774_5e2,
        1.971_590_950_306_551_442_7e3,
        1.373_169_376_550_946_112_5e4,
        4.592_195_393_154_987_145_7e4,
        6.726_577_092_700_870_085_3e4,
        3.343_057_558_358_812_810_5e4,
        2.509_080_928_730_122_672_7e3,
    ];
    const B: [f64; 8] = [
        1.0,
        4.231_333_070_160_091_125_2e1,
        6.871_870_074_920_579_083e2,
        5.394_196_021_424_751_107_7e3,
        2.121_379_430_158_659_586_7e4,
        3.930_789_580_009_271_061e4,
        2.872_908_573_572_194_267_4e4,
        5.226_495_278_852_854_561e3,
    ];
    const C: [f64; 8] = [
        1.423_437_110_749_683_577_34,
        4.630_337_846_156_545_295_9,
        5.769_497_221_460_691_405_5,
        3.647_848_324_763_204_605_04,
        1.270_458_252_452_368_382_58,
        2.417_807_251_774_506_117_7e-1,
        2.272_384_498_926_918_458_33e-2,
        7.745_450_142_783_414_076_4e-4,
    ];
    const D: [f64; 8] = [
        1.0,
        2.053_191_626_637_758_821_87,
        1.676_384_830_183_803_849_4,
        6.897_673_349_851_000_045_5e-1,
        1.481_039_764_274_800_745_9e-1,
        1.519_866_656_361_645_719_66e-2,
        5.475_938_084_995_344_946e-4,
        1.050_750_071_644_416_843_24e-9,
    ];
    const E: [f64; 8] = [
        6.657_904_643_501_103_777_2,
        5.463_784_911_164_114_369_9,
        1.784_826_539_917_291_335_8,
        2.965_605_718_285_048_912_3e-1,
        2.653_218_952_657_612_309_3e-2,
        1.242_660_947_388_078_438_6e-3,
        2.711_555_568_743_487_578_15e-5,
        2.010_334_399_292_288_132_65e-7,
    ];
    const F: [f64; 8] = [
        1.0,
        5.998_322_065_558_879_376_9e-1,
        1.369_298_809_227_358_053_1e-1,
        1.487_536_129_085_061_485_25e-2,
        7.868_691_311_456_132_591e-4,
        1.846_318_317_510_054_681_8e-5,
        1.421_511_758_316_445_888_7e-7,
        2.044_263_103_389_939_785_64e-15,
    ];
    debug_assert!(p > 0.0 && p < 1.0, "Φ⁻¹ of {p}");
    let q = p - 0.5;
    if q.abs() <= 0.425 {
        let r = 0.180_625 - q * q;
        return q * poly(&A, r) / poly(&B, r);
    }
    let tail = if q < 0.0 { p } else { 1.0 - p };
    let r = (-tail.ln()).sqrt();
    let value = if r <= 5.0 {
        let r = r - 1.6;
        poly(&C, r) / poly(&D, r)
    } else {
        let r = r - 5.0;
        poly(&E, r) / poly(&F, r)
    };
    if q < 0.0 {
        -value
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    /// `Φ⁻¹` against mpmath's `sqrt(2)·erfinv(2p − 1)` at 50 digits (`tests/pytorch/visreg.py`
    /// prints them), in the central region, both tails and far out: 2e-15 relative.
    #[test]
    fn the_quantile_function_equals_mpmath() {
        let cases = [
            (1e-300, -37.047_096_299_361_2),
            (1e-20, -9.262_340_089_798_407),
            (1e-10, -6.361_340_902_404_057),
            (1e-5, -4.264_890_793_922_825),
            (0.02, -2.053_748_910_631_823),
            (0.1, -1.281_551_565_544_600_4),
            (1.0 / 3.0, -0.430_727_299_295_457_56),
            (0.5, 0.0),
            (0.7, 0.524_400_512_708_040_7),
            (0.975, 1.959_963_984_540_053_8),
            (0.999, 3.090_232_306_167_813),
        ];
        for (p, want) in cases {
            let got = standard_normal_quantile(p);
            assert!(
                (got - want).abs() <= 2e-15 * want.abs().max(1e-300),
                "Φ⁻¹({p}) = {got}, mpmath {want}"
            );
        }
        let grid = standard_normal_quantiles(5);
        assert_eq!(grid[2], 0.0);
        assert_eq!(grid[0], -grid[4]);
        assert_eq!(grid[1], -grid[3]);
    }

    /// Two points `±1` in one feature along the one direction `a = [1]`: the mean is 0 and the
    /// standard deviation 1, so centre and scale are 0 and the shape term is
    /// `(1/(1 + ε) − Φ⁻¹(2/3))²` (both sorted projections equally far from their quantiles
    /// `∓Φ⁻¹(2/3)`). Two points 3 and 1: centre `2² = 4`, scale `(1 − 1)² = 0`.
    #[test]
    fn the_terms_of_two_points_by_hand() {
        let device = Default::default();
        let loss = VisRegLossConfig::new().with_num_slices(1).init().unwrap();
        let t = |a: f64, b: f64| Tensor::<B, 2>::from_data([[a], [b]], &device);
        let a = Tensor::<B, 2>::from_data([[1.0]], &device);
        let q = 0.430_727_299_295_457_5; // Φ⁻¹(2/3), mpmath
        let shape = loss.shape(&[t(1.0, -1.0)], a.clone()).into_scalar();
        let want = (1.0 / (1.0 + 1e-4) - q) * (1.0 / (1.0 + 1e-4) - q);
        assert!((shape - want).abs() < 1e-15, "{shape} vs {want}");
        assert!(loss.center(&[t(1.0, -1.0)]).into_scalar().abs() < 1e-15);
        assert!(loss.scale(&[t(1.0, -1.0)]).into_scalar().abs() < 1e-15);
        assert!((loss.center(&[t(3.0, 1.0)]).into_scalar() - 4.0).abs() < 1e-15);
        assert!(loss.scale(&[t(3.0, 1.0)]).into_scalar().abs() < 1e-15);
        // Scale of a standard deviation 2 (points 5 and 1): (1 − 2)² = 1.
        assert!((loss.scale(&[t(5.0, 1.0)]).into_scalar() - 1.0).abs() < 1e-15);
    }

    /// The loss is `(1 − λ) · invariance + λ · Σ weights · terms`, and the terms it reports are
    /// the ones computed alone.
    #[test]
    fn the_loss_weighs_the_terms() {
        let device = Default::default();
        let loss = VisRegLossConfig::new()
            .with_lambda(0.6)
            .with_lambda_scale(2.0)
            .with_lambda_shape(0.5)
            .with_lambda_center(3.0)
            .with_num_slices(3)
            .init()
            .unwrap();
        let view = |shift: f64| {
            let values: Vec<f64> = (0..12)
                .map(|i| (0.7 * i as f64 + shift).sin() + 0.1 * shift)
                .collect();
            Tensor::<B, 2>::from_data(TensorData::new(values, [4, 3]), &device)
        };
        let (g1, g2, l1) = (view(0.0), view(1.0), view(2.0));
        let slices = loss.slices::<B>(3, 11, &device);
        let terms = loss.terms(
            &[g1.clone(), g2.clone()],
            std::slice::from_ref(&l1),
            slices.clone(),
        );
        let all = [g1.clone(), g2.clone(), l1.clone()];
        let inv = loss.invariance(&[g1, g2], &[l1]).into_scalar();
        let scale = loss.scale(&all).into_scalar();
        let shape = loss.shape(&all, slices).into_scalar();
        let center = loss.center(&all).into_scalar();
        let want = 0.4 * inv + 0.6 * (2.0 * scale + 0.5 * shape + 3.0 * center);
        assert!((terms.loss.into_scalar() - want).abs() < 1e-12);
        for (got, want) in [
            (terms.invariance, inv),
            (terms.scale, scale),
            (terms.shape, shape),
            (terms.center, center),
        ] {
            assert!((got.into_scalar() - want).abs() < 1e-14);
        }
    }

    #[test]
    fn rejects_bad_hyperparameters_by_name() {
        let bad = [
            (VisRegLossConfig::new().with_lambda(1.5), "lambda"),
            (VisRegLossConfig::new().with_num_slices(0), "num_slices"),
            (
                VisRegLossConfig::new().with_lambda_scale(-1.0),
                "lambda_scale",
            ),
            (
                VisRegLossConfig::new().with_lambda_shape(f64::NAN),
                "lambda_shape",
            ),
            (
                VisRegLossConfig::new().with_lambda_center(-0.5),
                "lambda_center",
            ),
            (VisRegLossConfig::new().with_eps(0.0), "eps"),
        ];
        for (config, field) in bad {
            assert_eq!(config.init().unwrap_err().field, field);
        }
    }
}
