//! Forward + backward of every loss at B = 256, D = 128 (queue 65,536 for the queue losses) on
//! the CPU training backend (`Autodiff<Flex>`, f32).
//!
//! Run: `cargo bench --bench losses` (a group's name as a filter: `cargo bench --bench losses
//! log_softmax`). SoftNCE's top-K over the queue must cost at most 10 % more
//! than plain InfoNCE on the same queue; the `top_k` group shows why it does not sort the queue.

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use burn::tensor::Distribution;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use curriculum_ssl::loss::*;
use curriculum_ssl::method::Progress;
use std::time::{Duration, Instant};

type B = Autodiff<Flex>;

const BATCH: usize = 256;
const DIM: usize = 128;
const QUEUE: usize = 65_536;

fn random(rows: usize, cols: usize) -> Tensor<B, 2> {
    Tensor::random(
        [rows, cols],
        Distribution::Normal(0.0, 1.0),
        &Default::default(),
    )
}

/// Runs forward + backward of `loss` on fresh leaf tensors and waits for the gradients.
fn step(inputs: &[Tensor<B, 2>], loss: impl Fn(Vec<Tensor<B, 2>>) -> Tensor<B, 1>) {
    let leaves: Vec<_> = inputs.iter().map(|t| t.clone().require_grad()).collect();
    let value = loss(leaves.clone());
    let grads = value.backward();
    let g = leaves[0].grad(&grads).expect("gradient of the first input");
    criterion::black_box(g.into_data());
}

fn losses(c: &mut Criterion) {
    let mut group = c.benchmark_group("loss_forward_backward");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    let device = Default::default();
    let (z1, z2) = (random(BATCH, DIM), random(BATCH, DIM));
    let queue = curriculum_ssl::loss::l2_normalize(random(QUEUE, DIM));
    let views = vec![z1.clone(), z2.clone()];

    let nt_xent = NtXentLossConfig::new().init().unwrap();
    group.bench_function("nt_xent", |b| {
        b.iter(|| step(&views, |x| nt_xent.forward(x[0].clone(), x[1].clone())))
    });
    let hcl = HclLossConfig::new().init().unwrap();
    group.bench_function("hcl", |b| {
        b.iter(|| step(&views, |x| hcl.forward(x[0].clone(), x[1].clone())))
    });
    let curricular = CurricularLossConfig::new().init::<B>(&device).unwrap();
    group.bench_function("curricular", |b| {
        b.iter(|| {
            step(&views, |x| {
                let mut loss = curricular.clone();
                loss.forward(x[0].clone(), x[1].clone()).loss
            })
        })
    });
    let huber = HuberNtXentLossConfig::new().init().unwrap();
    group.bench_function("huber_nt_xent", |b| {
        b.iter(|| step(&views, |x| huber.forward(x[0].clone(), x[1].clone())))
    });
    let negative_cosine = NegativeCosineLossConfig::new().init().unwrap();
    let four = vec![z1.clone(), z2.clone(), z2.clone(), z1.clone()];
    group.bench_function("negative_cosine_symmetric", |b| {
        b.iter(|| {
            step(&four, |x| {
                negative_cosine.forward_symmetric(
                    x[0].clone(),
                    x[1].clone(),
                    x[2].clone(),
                    x[3].clone(),
                )
            })
        })
    });
    let magnet = MagnetLossConfig::new().init().unwrap();
    let clusters: Vec<usize> = (0..BATCH).map(|i| i / 8).collect();
    let classes: Vec<usize> = (0..BATCH / 8).map(|c| c % 10).collect();
    group.bench_function("magnet_32x8", |b| {
        b.iter(|| {
            step(&views, |x| {
                magnet.forward(x[0].clone(), &clusters, &classes)
            })
        })
    });

    let with_queue = vec![z1.clone(), z2.clone(), queue.clone()];
    let info_nce = InfoNceLossConfig::new().init().unwrap();
    group.bench_function(BenchmarkId::new("info_nce_queue", QUEUE), |b| {
        b.iter(|| {
            step(&with_queue, |x| {
                info_nce.forward(x[0].clone(), x[1].clone(), x[2].clone())
            })
        })
    });
    let soft_nce = SoftNceLossConfig::new().init().unwrap();
    group.bench_function(BenchmarkId::new("soft_nce_queue", QUEUE), |b| {
        b.iter(|| {
            step(&with_queue, |x| {
                soft_nce.forward(
                    x[0].clone(),
                    x[1].clone(),
                    x[2].clone(),
                    Progress::default(),
                )
            })
        })
    });
    let soft_target = SoftTargetCrossEntropyConfig::new().init().unwrap();
    let partner: Vec<usize> = (0..BATCH).rev().collect();
    let keys = Tensor::cat(vec![z2.clone(), queue.clone()], 0);
    let targets = mixup_targets::<B>(0.7, &partner, QUEUE, &device).unwrap();
    let mixed = vec![z1.clone(), keys];
    group.bench_function(BenchmarkId::new("soft_target_queue", QUEUE), |b| {
        b.iter(|| {
            step(&mixed, |x| {
                soft_target.forward(x[0].clone(), x[1].clone(), targets.clone())
            })
        })
    });
    group.finish();

    // The log-softmax every cross-entropy loss takes, over a MoCo queue's logits `[256, 1 + K]`:
    // burn's composed form (six operations, each with its own backward rule) against the row
    // kernel with its own backward pass (`kernels::log_softmax`), forward + backward of
    // `Σ r ⊙ log_softmax(x)`.
    let mut group = c.benchmark_group("log_softmax_256x65537");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    let logits = vec![random(BATCH, QUEUE + 1), random(BATCH, QUEUE + 1)];
    // The same step without the log-softmax: what the product, the sum, the gradient's
    // transfer and the buffers cost around it.
    group.bench_function("none", |b| {
        b.iter(|| step(&logits, |x| (x[0].clone() * x[1].clone().detach()).sum()))
    });
    group.bench_function("burn_composed", |b| {
        b.iter(|| {
            step(&logits, |x| {
                (burn::tensor::activation::log_softmax(x[0].clone(), 1) * x[1].clone().detach())
                    .sum()
            })
        })
    });
    group.bench_function("kernel", |b| {
        b.iter(|| {
            step(&logits, |x| {
                (curriculum_ssl_models::kernels::log_softmax(x[0].clone(), 1)
                    * x[1].clone().detach())
                .sum()
            })
        })
    });
    group.finish();

    // Selecting the 20 nearest negatives among 65,536 for 256 queries.
    let mut group = c.benchmark_group("top_k_256x65536");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    let sims: Tensor<Flex, 2> = Tensor::random(
        [BATCH, QUEUE],
        Distribution::Uniform(-1.0, 1.0),
        &Default::default(),
    );
    group.bench_function("chunked_top_k_indices", |b| {
        b.iter(|| criterion::black_box(top_k_indices(sims.clone(), 20).into_data()))
    });
    let tracked: Tensor<B, 2> = Tensor::from_inner(sims.clone()).require_grad();
    group.bench_function("chunked_top_k_indices_autodiff_detached", |b| {
        b.iter(|| criterion::black_box(top_k_indices(tracked.clone().detach(), 20).into_data()))
    });
    group.bench_function("full_sort", |b| {
        b.iter(|| {
            criterion::black_box(
                sims.clone()
                    .sort_descending_with_indices(1)
                    .1
                    .narrow(1, 0, 20)
                    .into_data(),
            )
        })
    });
    group.finish();
}

/// SoftNCE against InfoNCE on the same queue, timed alternately (9 rounds, medians) so that
/// both see the same machine load; criterion's groups run one after the other, which on a shared
/// 2-core machine can skew the comparison by more than the 10 % being checked.
fn soft_nce_overhead(_: &mut Criterion) {
    let (q, k) = (random(BATCH, DIM), random(BATCH, DIM));
    let queue = curriculum_ssl::loss::l2_normalize(random(QUEUE, DIM));
    let info = InfoNceLossConfig::new().init().unwrap();
    let soft = SoftNceLossConfig::new().init().unwrap();
    let time = |f: &dyn Fn(Tensor<B, 2>) -> Tensor<B, 1>| {
        let start = Instant::now();
        let leaf = q.clone().require_grad();
        let grads = f(leaf.clone()).backward();
        criterion::black_box(leaf.grad(&grads).expect("gradient").into_data());
        start.elapsed().as_secs_f64()
    };
    let (mut t_info, mut t_soft) = (Vec::new(), Vec::new());
    for _ in 0..9 {
        t_info.push(time(&|x| info.forward(x, k.clone(), queue.clone())));
        t_soft.push(time(&|x| {
            soft.forward(x, k.clone(), queue.clone(), Progress::default())
        }));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (info, soft) = (median(&mut t_info), median(&mut t_soft));
    println!(
        "soft_nce_overhead: InfoNCE {:.1} ms, SoftNCE {:.1} ms (forward + backward, B = {BATCH}, \
         D = {DIM}, queue {QUEUE}, medians of 9 alternating runs): SoftNCE / InfoNCE = {:.3}",
        info * 1e3,
        soft * 1e3,
        soft / info
    );
}

criterion_group!(benches, soft_nce_overhead, losses);
criterion_main!(benches);
