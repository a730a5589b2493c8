//! The worked values of the losses (documented on `worked_values`).

use burn::prelude::*;

use super::*;
use crate::base::Progress;

/// One worked value: what `docs/methods.md` expects and what this crate computes.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkedValue {
    /// Which loss and setting, e.g. `"HCL beta=1 tau+=0.1"`.
    pub name: &'static str,
    /// The value quoted by `docs/methods.md`.
    pub expected: f64,
    /// The value computed by this crate.
    pub computed: f64,
}

impl WorkedValue {
    /// `|computed − expected|`.
    pub fn error(&self) -> f64 {
        (self.computed - self.expected).abs()
    }
}

/// Unit vector at `degrees` in the plane.
fn unit(degrees: f64) -> [f64; 2] {
    let a = degrees.to_radians();
    [a.cos(), a.sin()]
}

/// The unit vectors at `degrees` in the plane, one a row: `[degrees.len(), 2]`.
pub(crate) fn rows<B: Backend>(degrees: &[f64], device: &B::Device) -> Tensor<B, 2> {
    let data: Vec<f64> = degrees.iter().flat_map(|&d| unit(d)).collect();
    Tensor::from_data(TensorData::new(data, [degrees.len(), 2]), device)
}

/// The two views of the two-image example of `docs/methods.md#curricular-weighting`, which the
/// contrastive losses' tests work by hand too: `z1 = [u0°, u90°]`, `z2 = [u50°, u125°]`.
pub(crate) fn curricular_views<B: Backend>(device: &B::Device) -> [Tensor<B, 2>; 2] {
    [rows(&[0.0, 90.0], device), rows(&[50.0, 125.0], device)]
}

fn scalar<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_scalar().elem::<f64>()
}

/// SoftNCE's example (`docs/methods.md#softnce`): unit vectors in 7-D with `q·k+ = 0.6` and
/// `q·queue = [0.5, −0.2, 0.7, 0.1, 0.0]`.
fn soft_nce_inputs<B: Backend>(device: &B::Device) -> [Tensor<B, 2>; 3] {
    let dim = 7;
    let mut q = vec![0.0; dim];
    q[0] = 1.0;
    let mut k = vec![0.0; dim];
    k[0] = 0.6;
    k[1] = 0.8;
    let negatives = [0.5f64, -0.2, 0.7, 0.1, 0.0];
    let mut queue = vec![0.0; negatives.len() * dim];
    for (j, &s) in negatives.iter().enumerate() {
        queue[j * dim] = s;
        queue[j * dim + 2 + j] = (1.0 - s * s).sqrt();
    }
    [
        Tensor::from_data(TensorData::new(q, [1, dim]), device),
        Tensor::from_data(TensorData::new(k, [1, dim]), device),
        Tensor::from_data(TensorData::new(queue, [negatives.len(), dim]), device),
    ]
}

/// Every worked value of the losses (`docs/methods.md#worked-values`), computed on `device` by
/// this crate's losses (any backend).
///
/// The expected numbers are the ones `docs/methods.md` quotes (recomputed independently in
/// float64 with numpy/scipy); the inputs are built here exactly as that page describes them.
/// The test suite asserts every value to 1e-5 on `NdArray<f64>`; the `worked_values` recipe
/// prints the same table on any backend, as a self-check of a GPU backend.
pub fn worked_values<B: Backend>(device: &B::Device) -> Vec<WorkedValue> {
    let mut out = Vec::new();
    let mut push = |name, expected, computed| {
        out.push(WorkedValue {
            name,
            expected,
            computed,
        })
    };

    // docs/methods.md#softnce: SoftNCE and plain InfoNCE on the same logits.
    let [q, k, queue] = soft_nce_inputs::<B>(device);
    let soft = SoftNceLossConfig::new()
        .with_top_k(3)
        .init()
        .expect("valid SoftNCE config");
    push(
        "SoftNCE K=3 alpha=0.8 linear decay",
        1.343274,
        scalar(soft.forward(q.clone(), k.clone(), queue.clone(), Progress::default())),
    );
    let info = InfoNceLossConfig::new()
        .with_temperature(0.1)
        .init()
        .expect("valid InfoNCE config");
    push(
        "InfoNCE tau=0.1",
        1.409941,
        scalar(info.forward(q, k, queue)),
    );
    let weights = SoftNceLossConfig::new()
        .init()
        .expect("valid SoftNCE config")
        .negative_weights(0.8);
    push("SoftNCE K=20 beta_1", 0.02, weights[0]);
    push("SoftNCE K=20 beta_2", 0.018947, weights[1]);
    push("SoftNCE K=20 beta_19", 0.001053, weights[18]);
    push("SoftNCE K=20 beta_20", 0.0, weights[19]);

    // docs/methods.md#hcl: z1 = [u0, u90, u200], z2 = [u30, u100, u180], tau = 0.5.
    let h1 = rows::<B>(&[0.0, 90.0, 200.0], device);
    let h2 = rows::<B>(&[30.0, 100.0, 180.0], device);
    let hcl = |tau_plus: f64, beta: f64| {
        HclLossConfig::new()
            .with_tau_plus(tau_plus)
            .with_beta(beta)
            .init()
            .expect("valid HCL config")
            .forward(h1.clone(), h2.clone())
    };
    let nt_xent = NtXentLossConfig::new()
        .init()
        .expect("valid NT-Xent config");
    push(
        "NT-Xent (HCL example, plain)",
        0.425520,
        scalar(nt_xent.forward(h1.clone(), h2.clone())),
    );
    push("HCL beta=0 tau+=0 (plain)", 0.425520, scalar(hcl(0.0, 0.0)));
    push(
        "HCL beta=0 tau+=0.1 (debiased)",
        0.209625,
        scalar(hcl(0.1, 0.0)),
    );
    push("HCL beta=1 tau+=0.1", 0.375811, scalar(hcl(0.1, 1.0)));
    push("HCL beta=1 tau+=0", 0.582076, scalar(hcl(0.0, 1.0)));

    // docs/methods.md#curricular-weighting: z1 = [u0, u90], z2 = [u50, u125], tau = 0.5.
    let [c1, c2] = curricular_views::<B>(device);
    for (t_prev, t, ce, reg, loss) in [
        (0.0, 0.000731, 0.558864, 0.0, 0.558864),
        (0.8, 0.799931, 0.720836, 0.00122614, 0.722062),
    ] {
        let mut curricular = CurricularLossConfig::new()
            .with_initial_t(t_prev)
            .init::<B>(device)
            .expect("valid curricular config");
        let output = curricular.forward(c1.clone(), c2.clone());
        let (t_name, ce_name, reg_name, loss_name) = if t_prev == 0.0 {
            (
                "curricular t (t_prev=0)",
                "curricular CE (t_prev=0)",
                "curricular R (t_prev=0)",
                "curricular loss (t_prev=0)",
            )
        } else {
            (
                "curricular t (t_prev=0.8)",
                "curricular CE (t_prev=0.8)",
                "curricular R (t_prev=0.8)",
                "curricular loss (t_prev=0.8)",
            )
        };
        push(t_name, t, curricular.t());
        push(ce_name, ce, scalar(output.cross_entropy));
        push(reg_name, reg, scalar(output.regulariser));
        push(loss_name, loss, scalar(output.loss));
    }
    push(
        "NT-Xent (curricular example)",
        0.596607,
        scalar(nt_xent.forward(c1, c2)),
    );

    // docs/methods.md#soft-target-cross-entropy: MixCo soft-target CE, query u20, keys u0 and
    // u90, queue [u200, u45], lambda = 0.7.
    let soft_ce = SoftTargetCrossEntropyConfig::new()
        .init()
        .expect("valid soft-target config");
    let targets = Tensor::from_data(TensorData::new(vec![0.7, 0.3, 0.0, 0.0], [1, 4]), device);
    push(
        "MixCo soft-target CE tau=0.05",
        4.000060,
        scalar(soft_ce.forward(
            rows::<B>(&[20.0], device),
            rows::<B>(&[0.0, 90.0, 200.0, 45.0], device),
            targets,
        )),
    );

    // docs/methods.md#magnet-loss: A (class 0) = {(0,0),(2,0)}, B (class 1) = {(1,0),(3,0)},
    // alpha = 1.
    let r = Tensor::from_data(
        TensorData::new(vec![0.0, 0.0, 2.0, 0.0, 1.0, 0.0, 3.0, 0.0], [4, 2]),
        device,
    );
    let magnet = MagnetLossConfig::new().init().expect("valid magnet config");
    let per_example: Vec<f64> = magnet
        .forward_per_example::<B>(r, &[0, 0, 1, 1], &[0, 1])
        .into_data()
        .convert::<f64>()
        .to_vec()
        .expect("f64 data");
    for (name, expected, computed) in [
        ("magnet example 1", 0.0, per_example[0]),
        ("magnet example 2", 1.375, per_example[1]),
        ("magnet example 3", 1.375, per_example[2]),
        ("magnet example 4", 0.0, per_example[3]),
    ] {
        push(name, expected, computed);
    }
    push("magnet mean", 0.6875, per_example.iter().sum::<f64>() / 4.0);
    out
}
