//! Special cases that must reduce to another loss exactly (f64):
//! HCL with β = 0, τ⁺ = 0 is NT-Xent; SoftNCE with α = 1 is InfoNCE; curricular weighting with
//! no hard negative is NT-Xent; the chunked top-K of SoftNCE equals a full sort; DCLW with σ → ∞
//! is DCL, and DCL is NT-Xent without the positive in the denominator.

use crate::common::{random_values, tensor, unit_rows, value, Exact};
use burn::prelude::*;
use curriculum_ssl::loss::*;

const BATCH: usize = 8;
const DIM: usize = 16;

#[test]
fn hcl_with_beta_0_and_tau_plus_0_is_nt_xent() {
    for (seed, tau) in [(1u64, 0.5), (2, 0.2), (3, 0.1)] {
        let z1 = random_values(BATCH, DIM, seed);
        let z2 = random_values(BATCH, DIM, seed + 100);
        let hcl = HclLossConfig::new()
            .with_temperature(tau)
            .with_tau_plus(0.0)
            .with_beta(0.0)
            .init()
            .unwrap();
        let nt_xent = NtXentLossConfig::new()
            .with_temperature(tau)
            .init()
            .unwrap();
        let a = value(hcl.forward::<Exact>(tensor(&z1, BATCH, DIM), tensor(&z2, BATCH, DIM)));
        let b = value(nt_xent.forward::<Exact>(tensor(&z1, BATCH, DIM), tensor(&z2, BATCH, DIM)));
        assert!((a - b).abs() < 1e-12, "tau {tau}: HCL {a} vs NT-Xent {b}");
    }
}

#[test]
fn soft_nce_with_alpha_1_is_info_nce() {
    let q = random_values(BATCH, DIM, 4);
    let k = random_values(BATCH, DIM, 5);
    let queue = unit_rows(&random_values(64, DIM, 6), DIM);
    for weights in [SoftNceWeights::LinearDecay, SoftNceWeights::Average] {
        let soft = SoftNceLossConfig::new()
            .with_alpha(1.0)
            .with_weights(weights)
            .init()
            .unwrap();
        let info = InfoNceLossConfig::new()
            .with_temperature(0.1)
            .init()
            .unwrap();
        let a = value(soft.forward::<Exact>(
            tensor(&q, BATCH, DIM),
            tensor(&k, BATCH, DIM),
            tensor(&queue, 64, DIM),
            curriculum_ssl::method::Progress {
                step: 3,
                total_steps: 10,
                epoch: 0,
                total_epochs: 1,
            },
        ));
        let b = value(info.forward::<Exact>(
            tensor(&q, BATCH, DIM),
            tensor(&k, BATCH, DIM),
            tensor(&queue, 64, DIM),
        ));
        assert!(
            (a - b).abs() < 1e-12,
            "{weights:?}: SoftNCE {a} vs InfoNCE {b}"
        );
    }
}

#[test]
fn curricular_without_hard_negatives_is_nt_xent() {
    // Second view = first view + small noise: every positive is more similar than any negative.
    let z1 = random_values(BATCH, DIM, 7);
    let noise = random_values(BATCH, DIM, 8);
    let z2: Vec<f64> = z1.iter().zip(&noise).map(|(a, n)| a + 0.05 * n).collect();
    let (u1, u2) = (unit_rows(&z1, DIM), unit_rows(&z2, DIM));
    let all: Vec<&[f64]> = u1.chunks(DIM).chain(u2.chunks(DIM)).collect();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    for i in 0..2 * BATCH {
        let p = dot(all[i], all[(i + BATCH) % (2 * BATCH)]);
        for j in 0..2 * BATCH {
            if j != i && j != (i + BATCH) % (2 * BATCH) {
                assert!(dot(all[i], all[j]) < p, "test input has a hard negative");
            }
        }
    }
    for t_prev in [0.0, 0.5, 0.99] {
        let mut curricular = CurricularLossConfig::new()
            .with_initial_t(t_prev)
            .with_temperature(0.2)
            .init::<Exact>(&Default::default())
            .unwrap();
        let nt_xent = NtXentLossConfig::new()
            .with_temperature(0.2)
            .init()
            .unwrap();
        let out = curricular.forward(tensor(&z1, BATCH, DIM), tensor(&z2, BATCH, DIM));
        let a = value(out.loss);
        let b = value(nt_xent.forward::<Exact>(tensor(&z1, BATCH, DIM), tensor(&z2, BATCH, DIM)));
        assert!(
            (a - b).abs() < 1e-12,
            "t_prev {t_prev}: curricular {a} vs NT-Xent {b}"
        );
        assert_eq!(value(out.regulariser), 0.0);
    }
}

#[test]
fn chunked_top_k_equals_a_full_sort() {
    // Above the 512-column threshold: 10,000 is not a multiple of the chunk (padding), 4,096
    // is Light-MoCo's CPU queue, 8,000 with k = 200 the kNN monitor on the embedded subset.
    for (rows, n, k, seed) in [
        (8usize, 10_000usize, 20usize, 9u64),
        (4, 65_536, 20, 10),
        (3, 5_000, 1, 11),
        (6, 4_096, 20, 12),
        (3, 8_000, 200, 13),
    ] {
        let values = random_values(rows, n, seed);
        let indices = top_k_indices::<Exact>(tensor(&values, rows, n), k);
        let indices: Vec<i64> = indices.into_data().convert::<i64>().to_vec().unwrap();
        for r in 0..rows {
            let mut row: Vec<(f64, usize)> = values[r * n..(r + 1) * n]
                .iter()
                .copied()
                .zip(0..)
                .collect();
            row.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap());
            let expected: Vec<i64> = row[..k].iter().map(|&(_, i)| i as i64).collect();
            assert_eq!(
                &indices[r * k..(r + 1) * k],
                &expected[..],
                "row {r} of {rows}x{n}, k={k}"
            );
        }
    }
}

#[test]
fn negative_cosine_forms_differ_by_the_affine_map() {
    let p = random_values(BATCH, DIM, 12);
    let z = random_values(BATCH, DIM, 13);
    let neg = NegativeCosineLossConfig::new().init().unwrap();
    let mse = NegativeCosineLossConfig::new()
        .with_form(curriculum_ssl::loss::NegativeCosineForm::TwoMinusTwoCosine)
        .init()
        .unwrap();
    let a = value(neg.forward::<Exact>(tensor(&p, BATCH, DIM), tensor(&z, BATCH, DIM)));
    let b = value(mse.forward::<Exact>(tensor(&p, BATCH, DIM), tensor(&z, BATCH, DIM)));
    // Normalised MSE: mean ‖p̂ − ẑ‖² = 2 − 2 cos, computed here on the host.
    let (up, uz) = (unit_rows(&p, DIM), unit_rows(&z, DIM));
    let direct = up
        .chunks(DIM)
        .zip(uz.chunks(DIM))
        .map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum::<f64>())
        .sum::<f64>()
        / BATCH as f64;
    assert!((b - (2.0 + 2.0 * a)).abs() < 1e-12);
    assert!((b - direct).abs() < 1e-12, "{b} vs host {direct}");
}

#[test]
fn info_nce_matches_host_cross_entropy() {
    // InfoNCE recomputed on the host from the definition: logits [q·k, q·queue]/τ, target 0.
    let q = random_values(BATCH, DIM, 14);
    let k = random_values(BATCH, DIM, 15);
    let queue = unit_rows(&random_values(32, DIM, 16), DIM);
    let tau = 0.07;
    let loss = InfoNceLossConfig::new().init().unwrap();
    let got = value(loss.forward::<Exact>(
        tensor(&q, BATCH, DIM),
        tensor(&k, BATCH, DIM),
        tensor(&queue, 32, DIM),
    ));
    let (uq, uk) = (unit_rows(&q, DIM), unit_rows(&k, DIM));
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let mut total = 0.0;
    for i in 0..BATCH {
        let qi = &uq[i * DIM..(i + 1) * DIM];
        let mut logits = vec![dot(qi, &uk[i * DIM..(i + 1) * DIM]) / tau];
        logits.extend(queue.chunks(DIM).map(|key| dot(qi, key) / tau));
        let m = logits.iter().cloned().fold(f64::MIN, f64::max);
        let lse = m + logits.iter().map(|l| (l - m).exp()).sum::<f64>().ln();
        total += lse - logits[0];
    }
    let expected = total / BATCH as f64;
    assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
}

#[test]
fn key_queue_is_fifo_and_keeps_its_size() {
    use curriculum_ssl::method::KeyQueueConfig;
    let device = Default::default();
    let mut queue =
        crate::common::seeded::<Exact, _>(|| KeyQueueConfig::new(6, 2).init::<Exact>(2, &device))
            .unwrap();
    let before: Vec<f64> = queue.keys().into_data().to_vec().unwrap();
    for step in 0..4 {
        let keys = Tensor::<Exact, 2>::from_data([[step as f64, 0.5], [step as f64, 1.5]], &device);
        queue.enqueue(keys);
        assert_eq!(queue.len(), 6);
        assert_eq!(queue.pointer(), ((step + 1) * 2) % 6);
    }
    let after: Vec<f64> = queue.keys().into_data().to_vec().unwrap();
    // Steps 0,1,2 filled slots 0-1, 2-3, 4-5; step 3 overwrote the oldest, slots 0-1.
    assert_eq!(
        after,
        vec![3.0, 0.5, 3.0, 1.5, 1.0, 0.5, 1.0, 1.5, 2.0, 0.5, 2.0, 1.5]
    );
    // The initial keys were random unit vectors.
    for row in before.chunks(2) {
        assert!((row[0] * row[0] + row[1] * row[1] - 1.0).abs() < 1e-12);
    }
}

#[test]
fn dclw_with_a_huge_sigma_is_dcl_and_dcl_is_nt_xent_without_the_positive_below() {
    for (seed, tau) in [(5u64, 0.5), (6, 0.1)] {
        let z1 = random_values(BATCH, DIM, seed);
        let z2 = random_values(BATCH, DIM, seed + 100);
        let input = || {
            (
                tensor::<Exact>(&z1, BATCH, DIM),
                tensor::<Exact>(&z2, BATCH, DIM),
            )
        };
        let dcl = DclLossConfig::new().with_temperature(tau).init().unwrap();
        let dclw = DclLossConfig::weighted(1e12)
            .with_temperature(tau)
            .init()
            .unwrap();
        let (a, b) = input();
        let (c, d) = input();
        let (dcl_value, dclw_value) = (value(dcl.forward(a, b)), value(dclw.forward(c, d)));
        assert!(
            (dcl_value - dclw_value).abs() < 1e-10,
            "{dcl_value} {dclw_value}"
        );
        // NT-Xent_i = −s⁺/τ + log(e^{s⁺/τ} + Σ_neg e^{s/τ}); DCL_i = −s⁺/τ + log Σ_neg e^{s/τ}.
        let (u1, u2) = (unit_rows(&z1, DIM), unit_rows(&z2, DIM));
        let cos = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let rows: Vec<&[f64]> = u1.chunks(DIM).chain(u2.chunks(DIM)).collect();
        let n = rows.len();
        let (mut nt, mut dc) = (0.0, 0.0);
        for i in 0..n {
            let p = (i + BATCH) % n;
            let pos = cos(rows[i], rows[p]) / tau;
            let neg: f64 = (0..n)
                .filter(|&k| k != i && k != p)
                .map(|k| (cos(rows[i], rows[k]) / tau).exp())
                .sum();
            nt += -pos + (pos.exp() + neg).ln();
            dc += -pos + neg.ln();
        }
        let (a, b) = input();
        let nt_xent = value(
            NtXentLossConfig::new()
                .with_temperature(tau)
                .init()
                .unwrap()
                .forward(a, b),
        );
        assert!((nt_xent - nt / n as f64).abs() < 1e-10);
        assert!((dcl_value - dc / n as f64).abs() < 1e-10);
    }
}
