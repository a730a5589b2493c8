//! Every loss on the GPU path: its worked values (what `recipe worked_values` prints) against
//! the float64 references and against the CPU, and its gradients with respect to its inputs
//! against the CPU's on the inputs of `tests/gradients.rs` (B = 8, D = 16, queue = 64).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl::loss::*;
use curriculum_ssl::method::Progress;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::harness::*;

const B: usize = 8;
const D: usize = 16;
const QUEUE: usize = 64;

/// Every worked value within 1e-4 of its float64 reference (f32 keeps about 7 digits of values
/// of order 1 to 10) and within [`TOLERANCE`] of the CPU's.
#[test]
fn worked_values_match_the_references_and_the_cpu() {
    let Some(device) = gpu() else { return };
    let gpu_values = worked_values::<Gpu>(&device);
    let cpu_values = worked_values::<Cpu>(&CpuDevice::default());
    assert_eq!(gpu_values.len(), 26, "{gpu_values:#?}");
    let mut seen = Comparisons::default();
    for (g, c) in gpu_values.iter().zip(&cpu_values) {
        assert_eq!(g.name, c.name);
        assert!(
            g.error() <= 1e-4,
            "{}: {} on wgpu, {} expected",
            g.name,
            g.computed,
            g.expected
        );
        seen.scalar(g.name, c.computed, g.computed);
    }
    seen.report("worked values");
}

/// `rows × cols` values uniform in [-1, 1).
fn random(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..rows * cols)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect()
}

fn unit_rows(v: Vec<f32>, cols: usize) -> Vec<f32> {
    v.chunks(cols)
        .flat_map(|r| {
            let n = r.iter().map(|x| x * x).sum::<f32>().sqrt();
            r.iter().map(move |x| x / n).collect::<Vec<_>>()
        })
        .collect()
}

/// A pair of views: the second is the first plus noise.
fn pair(seed: u64) -> [Vec<f32>; 2] {
    let a = random(B, D, seed);
    let noise = random(B, D, seed + 1);
    let b = a.iter().zip(&noise).map(|(x, n)| x + 0.6 * n).collect();
    [a, b]
}

/// One loss on its inputs: each input's rows, and whether it takes a gradient.
struct Case {
    name: &'static str,
    inputs: Vec<(Vec<f32>, usize)>,
}

fn cases() -> Vec<Case> {
    let [z1, z2] = pair(1);
    let [p1, p2] = pair(3);
    let queue = unit_rows(random(QUEUE, D, 5), D);
    let views = |a: &Vec<f32>, b: &Vec<f32>| vec![(a.clone(), B), (b.clone(), B)];
    let mut magnet = random(32, D, 16);
    for (i, x) in magnet.iter_mut().enumerate() {
        let cluster = (i / D) / 4;
        if i % D == cluster % D {
            *x += 1.5;
        }
    }
    vec![
        Case {
            name: "NT-Xent",
            inputs: views(&z1, &z2),
        },
        Case {
            name: "InfoNCE",
            inputs: vec![(z1.clone(), B), (z2.clone(), B), (queue.clone(), QUEUE)],
        },
        Case {
            name: "InfoNCE symmetric",
            inputs: vec![
                (z1.clone(), B),
                (p1.clone(), B),
                (p2.clone(), B),
                (z2.clone(), B),
                (queue.clone(), QUEUE),
            ],
        },
        Case {
            name: "SoftNCE linear decay",
            inputs: vec![(z1.clone(), B), (z2.clone(), B), (queue.clone(), QUEUE)],
        },
        Case {
            name: "SoftNCE average",
            inputs: vec![(z1.clone(), B), (z2.clone(), B), (queue.clone(), QUEUE)],
        },
        Case {
            name: "SoftNCE symmetric",
            inputs: vec![
                (z1.clone(), B),
                (p1.clone(), B),
                (p2.clone(), B),
                (z2.clone(), B),
                (queue.clone(), QUEUE),
            ],
        },
        Case {
            name: "negative cosine symmetric",
            inputs: vec![
                (z1.clone(), B),
                (p1.clone(), B),
                (p2.clone(), B),
                (z2.clone(), B),
            ],
        },
        Case {
            name: "HCL beta 1",
            inputs: views(&z1, &z2),
        },
        Case {
            name: "HCL beta 0",
            inputs: views(&z1, &z2),
        },
        Case {
            name: "HCL hard positives",
            inputs: views(&z1, &z2),
        },
        Case {
            name: "curricular",
            inputs: views(&random(B, D, 12), &random(B, D, 112)),
        },
        Case {
            name: "Huber NT-Xent",
            inputs: views(&z1, &z2),
        },
        Case {
            name: "MACL",
            inputs: views(&z1, &z2),
        },
        Case {
            name: "FroSSL",
            inputs: views(&z1, &z2),
        },
        Case {
            name: "DirectCLR",
            inputs: views(&z1, &z2),
        },
        Case {
            name: "LeJEPA",
            inputs: views(&z1, &z2),
        },
        Case {
            name: "soft-target CE",
            inputs: vec![(z1.clone(), B), (random(B + QUEUE, D, 15), B + QUEUE)],
        },
        Case {
            name: "magnet",
            inputs: vec![(magnet, 32)],
        },
        // Two anchor views of each image, the targets (no gradient), 16 prototypes.
        Case {
            name: "MSN",
            inputs: vec![
                (random(2 * B, D, 17), 2 * B),
                (random(B, D, 18), B),
                (random(16, D, 19), 16),
            ],
        },
        Case {
            name: "PMSN",
            inputs: vec![
                (random(2 * B, D, 17), 2 * B),
                (random(B, D, 18), B),
                (random(16, D, 19), 16),
            ],
        },
    ]
}

/// The loss of `name` on `x` (every input tracked, so that a loss that must detach an input is
/// checked to give it no gradient on both backends).
fn loss<Bk: AutodiffBackend>(
    name: &str,
    x: &[Tensor<Bk, 2>],
    device: &Bk::Device,
) -> Tensor<Bk, 1> {
    let x = |i: usize| x[i].clone();
    let soft = |w| SoftNceLossConfig::new().with_weights(w).init().unwrap();
    match name {
        "NT-Xent" => NtXentLossConfig::new()
            .with_temperature(0.2)
            .init()
            .unwrap()
            .forward(x(0), x(1)),
        "InfoNCE" => InfoNceLossConfig::new()
            .with_temperature(0.2)
            .init()
            .unwrap()
            .forward(x(0), x(1), x(2)),
        "InfoNCE symmetric" => InfoNceLossConfig::new()
            .with_temperature(0.2)
            .init()
            .unwrap()
            .forward_symmetric(x(0), x(1), x(2), x(3), x(4)),
        "SoftNCE linear decay" => {
            soft(SoftNceWeights::LinearDecay).forward(x(0), x(1), x(2), Progress::default())
        }
        "SoftNCE average" => {
            soft(SoftNceWeights::Average).forward(x(0), x(1), x(2), Progress::default())
        }
        "SoftNCE symmetric" => soft(SoftNceWeights::LinearDecay).forward_symmetric(
            x(0),
            x(1),
            x(2),
            x(3),
            x(4),
            Progress::default(),
        ),
        "negative cosine symmetric" => NegativeCosineLossConfig::new()
            .init()
            .unwrap()
            .forward_symmetric(x(0), x(1), x(2), x(3)),
        "HCL beta 1" => HclLossConfig::new().init().unwrap().forward(x(0), x(1)),
        "HCL beta 0" => HclLossConfig::new()
            .with_beta(0.0)
            .init()
            .unwrap()
            .forward(x(0), x(1)),
        "HCL hard positives" => HclLossConfig::new()
            .with_hard_positive_k(Some(2.0))
            .init()
            .unwrap()
            .forward(x(0), x(1)),
        "curricular" => {
            let t = Tensor::<Bk, 1>::from_data([0.9], device);
            CurricularLossConfig::new()
                .with_lambda(0.05)
                .init::<Bk>(device)
                .unwrap()
                .forward_with_t(x(0), x(1), t)
                .loss
        }
        "Huber NT-Xent" => HuberNtXentLossConfig::new()
            .with_delta(0.2)
            .with_lambda(0.5)
            .init()
            .unwrap()
            .forward(x(0), x(1)),
        "FroSSL" => FroSslLossConfig::new().init().unwrap().forward(x(0), x(1)),
        "DirectCLR" => DirectClrLossConfig::new()
            .with_loss_dim(D / 2)
            .init()
            .unwrap()
            .forward(x(0), x(1)),
        "LeJEPA" => {
            // Two global views and a local one made of them; 64 directions drawn on the host.
            let l = LeJepaLossConfig::new()
                .with_lambda(0.3)
                .with_num_slices(64)
                .init()
                .unwrap();
            let local = x(0).mul_scalar(0.5) + x(1).mul_scalar(0.3);
            l.forward(&[x(0), x(1)], &[local], l.slices(D, 3, device))
        }
        "MACL" => MaclLossConfig::new()
            .with_temperature(0.2)
            .init()
            .unwrap()
            .forward(x(0), x(1)),
        "soft-target CE" => {
            let partner: Vec<usize> = (0..B).map(|i| (i + 3) % B).collect();
            let targets = mixup_targets::<Bk>(0.7, &partner, QUEUE, device).unwrap();
            SoftTargetCrossEntropyConfig::new()
                .init()
                .unwrap()
                .forward(x(0), x(1), targets)
        }
        "magnet" => {
            let clusters: Vec<usize> = (0..32).map(|i| i / 4).collect();
            let classes: Vec<usize> = (0..8).map(|c| c % 4).collect();
            MagnetLossConfig::new()
                .init()
                .unwrap()
                .forward(x(0), &clusters, &classes)
        }
        "MSN" => {
            MsnLossConfig::new()
                .init()
                .unwrap()
                .forward(x(0), x(1), x(2))
                .loss
        }
        "PMSN" => {
            MsnLossConfig::new()
                .with_power_law_exponent(Some(0.25))
                .init()
                .unwrap()
                .forward(x(0), x(1), x(2))
                .loss
        }
        other => unreachable!("no loss case {other}"),
    }
}

/// The loss and the gradient of each input (`None`: no gradient reached it).
fn value_and_gradients<Bk: AutodiffBackend>(
    case: &Case,
    device: &Bk::Device,
) -> (f64, Vec<Option<Vec<f32>>>) {
    let inputs: Vec<Tensor<Bk, 2>> = case
        .inputs
        .iter()
        .map(|(v, rows)| matrix::<Bk>(v, *rows, D, device).require_grad())
        .collect();
    let l = loss(case.name, &inputs, device);
    let value = l.clone().into_scalar().elem::<f64>();
    let grads = l.backward();
    let g = inputs
        .iter()
        .map(|x| {
            x.grad(&grads).map(|g| {
                assert_eq!(&g.device(), device, "{}: a gradient's device", case.name);
                host(g)
            })
        })
        .collect();
    (value, g)
}

#[test]
fn every_loss_and_its_input_gradients_match_the_cpu() {
    let Some(device) = gpu() else { return };
    let mut seen = Comparisons::default();
    for case in cases() {
        let (cv, cg) = value_and_gradients::<CpuAd>(&case, &CpuDevice::default());
        let (gv, gg) = value_and_gradients::<GpuAd>(&case, &device);
        seen.scalar(&format!("{} loss", case.name), cv, gv);
        let mut compared = 0;
        for (i, (c, g)) in cg.iter().zip(&gg).enumerate() {
            let zero =
                |v: &Option<Vec<f32>>| v.as_ref().is_none_or(|v| v.iter().all(|x| *x == 0.0));
            match (c, g) {
                (Some(c), Some(g)) if !zero(&Some(c.clone())) => {
                    seen.close(&format!("{} input {i} gradient", case.name), c, g);
                    compared += 1;
                }
                _ => assert!(
                    zero(c) && zero(g),
                    "{} input {i}: a gradient on one backend only",
                    case.name
                ),
            }
        }
        assert!(compared > 0, "{}: no gradient compared", case.name);
    }
    seen.report("losses");
}

/// The log-softmax along the last axis on the GPU path is the models crate's `#[cube]` kernel
/// pair (`kernels::log_softmax` on `Autodiff<Wgpu>`: `log_softmax_cube.rs`, one kernel each
/// way) and equals the CPU's row kernels: values and input gradients, under a loss weighting
/// each output differently (so the gradient's row sum is not zero). Rows shorter than a cube of
/// 256 units (`[3, 4, 5]`: units past the row idle) and longer (`[2, 700]`: units take several
/// entries), logits spread over ±8 (the row maximum's shift matters in f32).
#[test]
fn log_softmax_kernels_and_gradient_as_on_the_cpu() {
    let Some(device) = gpu() else { return };
    fn run<B: AutodiffBackend, const D: usize>(
        xs: &[f32],
        ws: &[f32],
        shape: [usize; D],
        device: &B::Device,
    ) -> [Vec<f32>; 2] {
        let t = |v: &[f32]| Tensor::<B, 1>::from_floats(v, device).reshape(shape);
        let x = t(xs).require_grad();
        let y = curriculum_ssl_models::kernels::log_softmax(x.clone(), D - 1);
        let grads = (y.clone() * t(ws)).sum().backward();
        let len = xs.len();
        [
            host(y.reshape([len])),
            host(x.grad(&grads).unwrap().reshape([len])),
        ]
    }
    let mut seen = Comparisons::default();
    let mut compare = |what: &str, cpu: [Vec<f32>; 2], on_gpu: [Vec<f32>; 2]| {
        for ((name, a), b) in ["log-softmax", "∂x"].iter().zip(&cpu).zip(&on_gpu) {
            seen.close(&format!("{name} of {what}"), a, b);
        }
    };
    let (xs, ws) = (
        random(12, 5, 3).iter().map(|v| v * 8.0).collect::<Vec<_>>(),
        random(12, 5, 4),
    );
    let shape = [3, 4, 5];
    compare(
        "[3, 4, 5]",
        run::<CpuAd, 3>(&xs, &ws, shape, &CpuDevice::default()),
        run::<GpuAd, 3>(&xs, &ws, shape, &device),
    );
    let (xs, ws) = (
        random(2, 700, 5)
            .iter()
            .map(|v| v * 8.0)
            .collect::<Vec<_>>(),
        random(2, 700, 6),
    );
    compare(
        "[2, 700]",
        run::<CpuAd, 2>(&xs, &ws, [2, 700], &CpuDevice::default()),
        run::<GpuAd, 2>(&xs, &ws, [2, 700], &device),
    );
    seen.report("log_softmax_kernels_and_gradient_as_on_the_cpu");
}

/// The negative cosine loss's mean cosine on the GPU path is one operation
/// (`kernels::mean_cosine` takes `Autodiff<Wgpu>`: `cosine_op.rs`, its gradient written out),
/// while the CPU keeps the composed form (`Err`, whose numbers the loss tests fix against
/// lightly's); their values and gradients agree in
/// `every_loss_and_its_input_gradients_match_the_cpu` (the "negative cosine symmetric" case:
/// BYOL's and SimSiam's loss), and the operation equals the composed form in f64 in the models
/// crate (`models/tests/cosine.rs`).
#[test]
fn mean_cosine_is_one_operation_on_the_gpu_path() {
    use curriculum_ssl_models::kernels::mean_cosine;
    let Some(device) = gpu() else { return };
    let (ps, zs) = (random(4, D, 7), random(4, D, 8));
    let on_gpu = mean_cosine(
        matrix::<GpuAd>(&ps, 4, D, &device).require_grad(),
        matrix::<GpuAd>(&zs, 4, D, &device),
        1e-12,
    );
    assert!(on_gpu.is_ok(), "mean_cosine fell back to the composed form");
    let cpu = CpuDevice::default();
    let on_cpu = mean_cosine(
        matrix::<CpuAd>(&ps, 4, D, &cpu).require_grad(),
        matrix::<CpuAd>(&zs, 4, D, &cpu),
        1e-12,
    );
    assert!(on_cpu.is_err(), "the CPU took the operation");
}

/// SimCLR's NT-Xent and MoCo's InfoNCE on the GPU path are one operation each
/// (`kernels::nt_xent` and `kernels::info_nce` take `Autodiff<Wgpu>`: `contrastive_op.rs`, the
/// gradients written out), while the CPU keeps the composed forms (`Err`); their values and
/// gradients agree in `every_loss_and_its_input_gradients_match_the_cpu` (the "NT-Xent",
/// "InfoNCE" and "InfoNCE symmetric" cases), and the operations equal the composed forms and
/// central differences in f64 in the models crate (`models/tests/contrastive.rs`).
#[test]
fn nt_xent_and_info_nce_are_one_operation_on_the_gpu_path() {
    use curriculum_ssl_models::kernels::{info_nce, nt_xent};
    let Some(device) = gpu() else { return };
    let cpu = CpuDevice::default();
    let (zs, ks, queue) = (
        random(2 * B, D, 9),
        unit_rows(random(B, D, 10), D),
        unit_rows(random(QUEUE, D, 11), D),
    );
    assert!(
        nt_xent(
            matrix::<GpuAd>(&zs, 2 * B, D, &device).require_grad(),
            0.2,
            1e-12
        )
        .is_ok(),
        "nt_xent fell back to the composed form"
    );
    assert!(
        nt_xent(
            matrix::<CpuAd>(&zs, 2 * B, D, &cpu).require_grad(),
            0.2,
            1e-12
        )
        .is_err(),
        "the CPU took the NT-Xent operation"
    );
    let queue_loss = |on_gpu: bool| {
        if on_gpu {
            info_nce(
                matrix::<GpuAd>(&zs[..B * D], B, D, &device).require_grad(),
                matrix::<GpuAd>(&ks, B, D, &device),
                matrix::<GpuAd>(&queue, QUEUE, D, &device),
                0.2,
                1e-12,
            )
            .is_ok()
        } else {
            info_nce(
                matrix::<CpuAd>(&zs[..B * D], B, D, &cpu).require_grad(),
                matrix::<CpuAd>(&ks, B, D, &cpu),
                matrix::<CpuAd>(&queue, QUEUE, D, &cpu),
                0.2,
                1e-12,
            )
            .is_ok()
        }
    };
    assert!(queue_loss(true), "info_nce fell back to the composed form");
    assert!(!queue_loss(false), "the CPU took the InfoNCE operation");
}

/// The global average pooling of a backbone's last map on the GPU path is one operation
/// (`kernels::global_avg_pool` takes `Autodiff<Wgpu>`: `pool_op.rs`), while the CPU keeps two
/// means (`Err`); through `layers::global_avg_pool` the values and the map's gradient (under a
/// loss weighting every output differently) agree with the CPU's to f32's rounding of a mean
/// of 20 values, and the operation equals the composed form in f64 in the models crate
/// (`models/tests/pool.rs`).
#[test]
fn global_avg_pool_is_one_operation_on_the_gpu_path() {
    use curriculum_ssl_models::kernels::global_avg_pool;
    use curriculum_ssl_models::layers::global_avg_pool as pool;
    let Some(device) = gpu() else { return };
    let cpu = CpuDevice::default();
    let (xs, ws) = (random(2 * 3, 4 * 5, 12), random(2, 3, 13));
    let taken_on_gpu = global_avg_pool(
        matrix::<GpuAd>(&xs, 6, 20, &device)
            .reshape([2, 3, 4, 5])
            .require_grad(),
    )
    .is_ok();
    assert!(
        taken_on_gpu,
        "global_avg_pool fell back to the composed form"
    );
    let taken_on_cpu = global_avg_pool(
        matrix::<CpuAd>(&xs, 6, 20, &cpu)
            .reshape([2, 3, 4, 5])
            .require_grad(),
    )
    .is_ok();
    assert!(!taken_on_cpu, "the CPU took the pooling operation");
    fn layer<B: AutodiffBackend>(xs: &[f32], ws: &[f32], device: &B::Device) -> [Vec<f32>; 2] {
        let x = matrix::<B>(xs, 6, 20, device)
            .reshape([2, 3, 4, 5])
            .require_grad();
        let y = pool(x.clone());
        let grads = (y.clone() * matrix::<B>(ws, 2, 3, device)).sum().backward();
        [host(y), host(x.grad(&grads).unwrap().reshape([6, 20]))]
    }
    let on_cpu = layer::<CpuAd>(&xs, &ws, &cpu);
    let on_gpu = layer::<GpuAd>(&xs, &ws, &device);
    let mut seen = Comparisons::default();
    seen.close("pooled", &on_cpu[0], &on_gpu[0]);
    seen.close("∂x", &on_cpu[1], &on_gpu[1]);
    seen.report("global_avg_pool_is_one_operation_on_the_gpu_path");
}
