//! Impossible hyperparameters are errors naming the field; impossible shapes panic with a
//! message naming the shapes.

use crate::common::Exact;
use burn::prelude::*;
use curriculum_ssl::loss::*;
use curriculum_ssl::method::KeyQueueConfig;

fn zeros(rows: usize, cols: usize) -> Tensor<Exact, 2> {
    Tensor::zeros([rows, cols], &Default::default())
}

#[test]
fn non_positive_temperatures_are_rejected_everywhere() {
    for tau in [0.0, -0.1, f64::NAN, f64::INFINITY] {
        let errors = [
            NtXentLossConfig::new()
                .with_temperature(tau)
                .init()
                .unwrap_err(),
            InfoNceLossConfig::new()
                .with_temperature(tau)
                .init()
                .unwrap_err(),
            SoftNceLossConfig::new()
                .with_temperature(tau)
                .init()
                .unwrap_err(),
            HclLossConfig::new()
                .with_temperature(tau)
                .init()
                .unwrap_err(),
            CurricularLossConfig::new()
                .with_temperature(tau)
                .init::<Exact>(&Default::default())
                .unwrap_err(),
            HuberNtXentLossConfig::new()
                .with_temperature(tau)
                .init()
                .unwrap_err(),
            SoftTargetCrossEntropyConfig::new()
                .with_temperature(tau)
                .init()
                .unwrap_err(),
        ];
        for err in errors {
            assert_eq!(err.field, "temperature");
            assert!(err.to_string().contains("temperature"), "{err}");
        }
    }
}

#[test]
fn soft_nce_alpha_outside_0_1_is_rejected() {
    for alpha in [0.0, -0.5, 1.5, f64::NAN] {
        let err = SoftNceLossConfig::new()
            .with_alpha(alpha)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "alpha", "alpha = {alpha}");
        assert!(err.to_string().contains("(0, 1]"), "{err}");
    }
    assert!(SoftNceLossConfig::new().with_alpha(1.0).init().is_ok());
}

#[test]
fn soft_nce_k_larger_than_the_queue_is_rejected() {
    let config = SoftNceLossConfig::new().with_top_k(20);
    let err = config.validate_queue(16).unwrap_err();
    assert_eq!(err.field, "top_k");
    assert!(err.to_string().contains("16"), "{err}");
    assert!(config.validate_queue(20).is_ok());
    assert_eq!(
        SoftNceLossConfig::new()
            .with_top_k(0)
            .init()
            .unwrap_err()
            .field,
        "top_k"
    );
    assert_eq!(
        SoftNceLossConfig::new()
            .with_top_k(1)
            .init()
            .unwrap_err()
            .field,
        "top_k"
    );
}

#[test]
#[should_panic(expected = "SoftNCE: top_k = 20 nearest negatives but `queue` has shape [16, 4]")]
fn soft_nce_forward_with_a_short_queue_names_the_shapes() {
    let loss = SoftNceLossConfig::new().init().unwrap();
    loss.forward(zeros(2, 4), zeros(2, 4), zeros(16, 4), Default::default());
}

#[test]
fn queue_size_not_divided_by_the_batch_is_rejected() {
    let err = crate::common::seeded::<Exact, _>(|| {
        KeyQueueConfig::new(100, 8).init::<Exact>(24, &Default::default())
    })
    .unwrap_err();
    assert_eq!(err.field, "size");
    assert!(
        err.to_string().contains("100") && err.to_string().contains("24"),
        "{err}"
    );
    assert!(crate::common::seeded::<Exact, _>(
        || KeyQueueConfig::new(96, 8).init::<Exact>(24, &Default::default())
    )
    .is_ok());
    assert_eq!(
        crate::common::seeded::<Exact, _>(
            || KeyQueueConfig::new(0, 8).init::<Exact>(1, &Default::default())
        )
        .unwrap_err()
        .field,
        "size"
    );
}

#[test]
fn other_impossible_hyperparameters_are_rejected() {
    assert_eq!(
        HclLossConfig::new()
            .with_tau_plus(1.0)
            .init()
            .unwrap_err()
            .field,
        "tau_plus"
    );
    assert_eq!(
        HclLossConfig::new()
            .with_tau_plus(-0.1)
            .init()
            .unwrap_err()
            .field,
        "tau_plus"
    );
    assert_eq!(
        HclLossConfig::new()
            .with_beta(-1.0)
            .init()
            .unwrap_err()
            .field,
        "beta"
    );
    let device = Default::default();
    let curricular = |c: CurricularLossConfig| c.init::<Exact>(&device).unwrap_err().field;
    assert_eq!(
        curricular(CurricularLossConfig::new().with_momentum(1.5)),
        "momentum"
    );
    assert_eq!(
        curricular(CurricularLossConfig::new().with_lambda(-1.0)),
        "lambda"
    );
    assert_eq!(
        curricular(CurricularLossConfig::new().with_initial_t(2.0)),
        "initial_t"
    );
    assert_eq!(
        HuberNtXentLossConfig::new()
            .with_delta(0.0)
            .init()
            .unwrap_err()
            .field,
        "delta"
    );
    assert_eq!(
        HuberNtXentLossConfig::new()
            .with_lambda(-0.1)
            .init()
            .unwrap_err()
            .field,
        "lambda"
    );
    assert_eq!(
        MagnetLossConfig::new()
            .with_alpha(-1.0)
            .init()
            .unwrap_err()
            .field,
        "alpha"
    );
    let err = curriculum_ssl::loss::mixup_targets::<Exact>(1.2, &[0, 1], 0, &device).unwrap_err();
    assert_eq!(err.field, "lambda");
    let err = curriculum_ssl::loss::mixup_targets::<Exact>(0.5, &[0, 2], 0, &device).unwrap_err();
    assert_eq!(err.field, "partner");
}

#[test]
#[should_panic(expected = "NT-Xent: `z1` has shape [8, 16] but `z2` has shape [8, 15]")]
fn nt_xent_mismatched_views_name_the_shapes() {
    NtXentLossConfig::new()
        .init()
        .unwrap()
        .forward(zeros(8, 16), zeros(8, 15));
}

#[test]
#[should_panic(expected = "InfoNCE: `queue` has shape [64, 8] but the queries have shape [4, 16]")]
fn info_nce_queue_of_another_width_names_the_shapes() {
    InfoNceLossConfig::new()
        .init()
        .unwrap()
        .forward(zeros(4, 16), zeros(4, 16), zeros(64, 8));
}

#[test]
#[should_panic(expected = "HCL: `z1` has shape [1, 16]; at least 2 rows are needed")]
fn hcl_needs_two_images() {
    HclLossConfig::new()
        .init()
        .unwrap()
        .forward(zeros(1, 16), zeros(1, 16));
}

#[test]
#[should_panic(expected = "negative cosine: `p` has shape [4, 16] but `z` has shape [5, 16]")]
fn negative_cosine_mismatch_names_the_shapes() {
    NegativeCosineLossConfig::new()
        .init()
        .unwrap()
        .forward(zeros(4, 16), zeros(5, 16));
}

#[test]
#[should_panic(
    expected = "soft-target CE: `queries` [2, 4], `keys` [3, 4] and `targets` [2, 2] do not fit"
)]
fn soft_target_mismatch_names_the_shapes() {
    SoftTargetCrossEntropyConfig::new().init().unwrap().forward(
        zeros(2, 4),
        zeros(3, 4),
        zeros(2, 2),
    );
}

#[test]
#[should_panic(
    expected = "magnet loss: `embeddings` has shape [4, 2] but `clusters` has 3 entries"
)]
fn magnet_mismatch_names_the_shapes() {
    MagnetLossConfig::new()
        .init()
        .unwrap()
        .forward(zeros(4, 2), &[0, 0, 1], &[0, 1]);
}

#[test]
#[should_panic(expected = "has no cluster of another class")]
fn magnet_needs_two_classes() {
    MagnetLossConfig::new()
        .init()
        .unwrap()
        .forward(zeros(4, 2), &[0, 0, 1, 1], &[3, 3]);
}

#[test]
#[should_panic(expected = "KeyQueue::enqueue: got keys of shape [3, 8], expected [4, 8]")]
fn enqueue_of_the_wrong_batch_names_the_shapes() {
    let mut queue = crate::common::seeded::<Exact, _>(|| {
        KeyQueueConfig::new(16, 8).init::<Exact>(4, &Default::default())
    })
    .unwrap();
    queue.enqueue(zeros(3, 8));
}
