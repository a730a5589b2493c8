//! The Fréchet distance (FRD) of two views' projections, B = 256, D = 128 and D = 2048, on the
//! CPU backend (burn's `Flex`, f32): the host path (read back, `f64`, symmetric
//! eigendecomposition) against the on-device Newton–Schulz path.
//!
//! Run: `cargo bench --bench frd`. At D = 128 (N > D) both work on `D × D` matrices (two
//! eigendecompositions or square roots); at D = 2048 (N ≤ D) both work on the `N × N` form, so
//! the cost grows with D only through the `N × D` products. Before timing, the bench prints both
//! values for each size, to show how far the f32 device path is from the f64 reference.

use burn::backend::Flex;
use burn::prelude::*;
use burn::tensor::Distribution;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use curriculum_ssl::curation::{frechet_distance_readback, NewtonSchulz};

type B = Flex;

const BATCH: usize = 256;

/// Two "views" of a batch: `z` and `z + 0.5·noise`, standard normal entries (seeded, so every
/// run times the same numbers).
fn views(dim: usize) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let device = Default::default();
    B::seed(&device, dim as u64);
    let z = Tensor::<B, 2>::random([BATCH, dim], Distribution::Normal(0.0, 1.0), &device);
    let noise = Tensor::<B, 2>::random([BATCH, dim], Distribution::Normal(0.0, 1.0), &device);
    (z.clone(), z + noise.mul_scalar(0.5))
}

fn frd(c: &mut Criterion) {
    let mut group = c.benchmark_group("frd");
    group.sample_size(10);
    let newton_schulz = NewtonSchulz::default();
    for dim in [128, 2048] {
        let (z1, z2) = views(dim);
        let host = frechet_distance_readback(z1.clone(), z2.clone()).expect("finite batches");
        let device = newton_schulz
            .frechet_distance(z1.clone(), z2.clone())
            .expect("finite batches");
        eprintln!(
            "B = {BATCH}, D = {dim}: host (f64) {host:.6}, Newton-Schulz (f32) {device:.6}, \
             relative difference {:.2e}",
            (host - device).abs() / host
        );
        group.bench_with_input(BenchmarkId::new("host_f64", dim), &dim, |b, _| {
            b.iter(|| frechet_distance_readback(z1.clone(), z2.clone()).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("newton_schulz", dim), &dim, |b, _| {
            b.iter(|| {
                newton_schulz
                    .frechet_distance(z1.clone(), z2.clone())
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, frd);
criterion_main!(benches);
