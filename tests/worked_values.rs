//! Every worked value of SPEC §1 reproduced to 1e-5 in f64 (the expected numbers are SPEC.md's,
//! recomputed independently by shared/reference/reference_values.py with numpy).

mod common;

use common::Exact;
use curriculum_ssl::loss::worked_examples::spec_worked_values;

#[test]
fn every_spec_worked_value_within_1e_5() {
    let values = spec_worked_values::<Exact>(&Default::default());
    // 6 SoftNCE/InfoNCE, 5 HCL/NT-Xent, 9 curricular/NT-Xent, 1 MixCo, 5 magnet.
    assert_eq!(
        values.len(),
        26,
        "the list of worked values changed: {values:#?}"
    );
    let failures: Vec<_> = values
        .iter()
        .filter(|v| v.error().is_nan() || v.error() > 1e-5)
        .collect();
    assert!(
        failures.is_empty(),
        "worked values off by more than 1e-5: {failures:#?}"
    );
}

#[test]
fn soft_nce_weights_sum_to_one_minus_alpha() {
    use curriculum_ssl::loss::{SoftNceLossConfig, SoftNceWeights};
    for weights in [SoftNceWeights::Average, SoftNceWeights::LinearDecay] {
        for k in [2usize, 3, 20] {
            let loss = SoftNceLossConfig::new()
                .with_top_k(k)
                .with_weights(weights)
                .init()
                .unwrap();
            let sum: f64 = loss.negative_weights(0.8).iter().sum();
            assert!((sum - 0.2).abs() < 1e-12, "{weights:?} K={k}: sum {sum}");
        }
    }
}

#[test]
fn soft_nce_incremental_alpha_follows_a_cosine_from_one() {
    use curriculum_ssl::curriculum::{Pace, SchedulerConfig};
    use curriculum_ssl::loss::{AlphaSchedule, SoftNceLossConfig};
    use curriculum_ssl::method::Progress;
    let loss = SoftNceLossConfig::new()
        .with_alpha_schedule(AlphaSchedule::Incremental)
        .init()
        .unwrap();
    let at = |step: usize| Progress {
        step,
        total_steps: 100,
        epoch: step / 10,
        total_epochs: 10,
    };
    // alpha(p) = 0.8 + 0.2 (1 + cos(pi p)) / 2 with p = step / total_steps: 1 at p = 0, 0.9 at
    // p = 0.5, 0.8 at p = 1, 0.8 + 0.1 (1 + cos(pi / 4)) at p = 0.25.
    assert!((loss.alpha_at(at(0)) - 1.0).abs() < 1e-12);
    assert!((loss.alpha_at(at(50)) - 0.9).abs() < 1e-12);
    assert!((loss.alpha_at(at(100)) - 0.8).abs() < 1e-12);
    let quarter = 0.8 + 0.1 * (1.0 + std::f64::consts::FRAC_1_SQRT_2);
    assert!((loss.alpha_at(at(25)) - quarter).abs() < 1e-12);
    assert!(
        (loss.alpha_at(at(200)) - 0.8).abs() < 1e-12,
        "progress is clamped to [0, 1]"
    );
    // The same curve as the generic scheduler Cosine 1 -> alpha per step, at every step.
    let cosine = SoftNceLossConfig::new()
        .with_alpha_schedule(AlphaSchedule::Scheduled(SchedulerConfig::Cosine {
            start: 1.0,
            end: 0.8,
            pace: Pace::Step,
        }))
        .init()
        .unwrap();
    for step in 0..=100 {
        assert_eq!(
            loss.alpha_at(at(step)),
            cosine.alpha_at(at(step)),
            "step {step}"
        );
    }
    // A scheduled alpha outside [0, 1] is refused, naming the field.
    let err = SoftNceLossConfig::new()
        .with_alpha_schedule(AlphaSchedule::Scheduled(SchedulerConfig::Constant {
            value: 1.5,
        }))
        .init()
        .unwrap_err();
    assert!(err.to_string().contains("alpha_schedule"), "{err}");
}
