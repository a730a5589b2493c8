//! State of the SSL methods: the EMA helper (exact momentum update, stop-gradient, running
//! statistics of its own) and the LARS / SGD optimisers inside burn's optimiser machinery.

use crate::common::{values, ExactAd};
use burn::module::Param;
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use curriculum_ssl::head::{MlpHead, MlpHeadConfig};
use curriculum_ssl::method::{cosine_momentum, detached_copy, ema_update};
use curriculum_ssl::optim::SgdConfig;

fn head() -> (MlpHeadConfig, MlpHead<ExactAd>) {
    let config = MlpHeadConfig::simclr(4, 8, 3);
    let head = curriculum_ssl::seed::init_module::<ExactAd, _>(&Default::default(), 0, |d| {
        config.init::<ExactAd>(d).unwrap()
    });
    (config, head)
}

fn input(seed: f64) -> Tensor<ExactAd, 2> {
    let data: Vec<f64> = (0..24).map(|i| ((i as f64 + seed) * 0.37).sin()).collect();
    Tensor::from_data(TensorData::new(data, [6, 4]), &Default::default())
}

/// One SGD step on the online head (lr 0.1) so that it differs from the target.
fn train_step(online: MlpHead<ExactAd>) -> MlpHead<ExactAd> {
    let mut optim = SgdConfig::new()
        .init::<ExactAd, MlpHead<ExactAd>>()
        .unwrap();
    let loss = online.forward(input(1.0)).powi_scalar(2).mean();
    let grads = GradientsParams::from_grads(loss.backward(), &online);
    optim.step(0.1, online, grads)
}

#[test]
fn ema_update_is_exactly_m_target_plus_one_minus_m_online_for_parameters() {
    let (config, online) = head();
    // Under the seed lock: loading a record into a fresh module reads its optional
    // parameters, which draws their lazy initial values.
    let target = crate::common::seeded::<ExactAd, _>(|| {
        detached_copy(&online, config.init(&Default::default()).unwrap())
    });
    assert_eq!(values(&target), values(&online), "the copy starts equal");
    let online = train_step(online);
    let before = values(&target);
    let online_values = values(&online);
    let target = ema_update(target, &online, 0.99);
    let after = values(&target);
    // Visiting order of MlpHead: linear weight, BN gamma, beta, running mean, running var,
    // output weight, output bias. Running statistics (indices 3 and 4) are not averaged.
    for (index, ((a, b), o)) in after.iter().zip(&before).zip(&online_values).enumerate() {
        for ((a, b), o) in a.iter().zip(b).zip(o) {
            let expected = if index == 3 || index == 4 {
                *b
            } else {
                0.99 * b + (1.0 - 0.99) * o
            };
            assert_eq!(*a, expected, "tensor {index}");
        }
    }
    assert_ne!(
        before[0], online_values[0],
        "the SGD step changed the online weights"
    );
}

/// A parameter met at two places of the target (a module holding one head twice: the same
/// parameter ids) is averaged once and the average put in at both, as a one-place target is.
#[test]
fn a_parameter_at_two_places_is_averaged_at_both() {
    #[derive(Module, Debug)]
    struct Twice<B: Backend> {
        first: MlpHead<B>,
        second: MlpHead<B>,
    }
    let (config, online) = head();
    let target = crate::common::seeded::<ExactAd, _>(|| {
        detached_copy(&online, config.init(&Default::default()).unwrap())
    });
    let online = train_step(online);
    let before = values(&target);
    let expected = values(&ema_update(target.clone(), &online, 0.9));
    let twice = Twice {
        first: target.clone(),
        second: target,
    };
    let averaged = ema_update(twice, &online, 0.9);
    assert_eq!(values(&averaged.first), expected);
    assert_eq!(values(&averaged.second), expected);
    assert_ne!(expected, before, "the average moved the target");
}

#[test]
fn target_running_statistics_are_not_shared_with_the_online_network() {
    let (config, online) = head();
    // Under the seed lock: loading a record into a fresh module reads its optional
    // parameters, which draws their lazy initial values.
    let target = crate::common::seeded::<ExactAd, _>(|| {
        detached_copy(&online, config.init(&Default::default()).unwrap())
    });
    let cloned = online.clone();
    let before = values(&target);
    // A train-mode forward (autodiff backend) updates the online BatchNorm statistics ...
    let _ = online.forward(input(2.0));
    let online_after = values(&online);
    assert_ne!(online_after[3], before[3], "running mean moved");
    // ... which a plain clone shares (`RunningStat`, as burn's `RunningState`), but the detached copy does not.
    assert_eq!(values(&cloned)[3], online_after[3]);
    assert_eq!(values(&target)[3], before[3]);
    assert_eq!(values(&target)[4], before[4]);
}

#[test]
fn the_target_receives_no_gradient() {
    let (config, online) = head();
    // Under the seed lock: loading a record into a fresh module reads its optional
    // parameters, which draws their lazy initial values.
    let target = crate::common::seeded::<ExactAd, _>(|| {
        detached_copy(&online, config.init(&Default::default()).unwrap())
    });
    let loss = (online.forward(input(3.0)) + target.forward(input(3.0))).sum();
    let grads = GradientsParams::from_grads(loss.backward(), &target);
    assert!(grads.is_empty(), "the target network got gradients");
}

#[test]
fn cosine_momentum_rises_from_base_to_one() {
    assert!((cosine_momentum(0.99, 0.0) - 0.99).abs() < 1e-15);
    assert!((cosine_momentum(0.99, 0.5) - 0.995).abs() < 1e-15);
    assert!((cosine_momentum(0.99, 1.0) - 1.0).abs() < 1e-15);
}

#[test]
fn sgd_matches_pytorch_semantics_over_two_steps() {
    // A single weight w = 2 with loss w²/2 (gradient w), momentum 0.9, weight decay 0.1, lr 0.1,
    // dampening 0 as in torch.optim.SGD:
    //   g0 = 2 + 0.2 = 2.2, v0 = 2.2, w1 = 2 − 0.22 = 1.78
    //   g1 = 1.78 + 0.178 = 1.958, v1 = 0.9·2.2 + 1.958 = 3.938, w2 = 1.78 − 0.3938 = 1.3862
    // (burn's default dampening 0.1 would give v1 = 1.98 + 1.7622 and w2 = 1.40578.)
    #[derive(Module, Debug)]
    struct Scalar<B: Backend> {
        w: Param<Tensor<B, 1>>,
    }
    let device = Default::default();
    let mut model = Scalar::<ExactAd> {
        w: Param::from_tensor(Tensor::from_data([2.0], &device)),
    };
    let mut optim = SgdConfig::new()
        .with_weight_decay(0.1)
        .init::<ExactAd, Scalar<ExactAd>>()
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let loss = model.w.val().powi_scalar(2).sum() / 2.0;
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(0.1, model, grads);
        seen.push(model.w.val().into_scalar());
    }
    assert!((seen[0] - 1.78).abs() < 1e-12, "{seen:?}");
    assert!((seen[1] - 1.3862).abs() < 1e-12, "{seen:?}");
}

/// LARS against solo-learn's (`tests/pytorch/lars.py`, written from solo-learn's
/// `solo/utils/lars.py` at 9187ea3, wrote `tests/fixtures/lars.json`): four steps of a matrix, a
/// bias and a matrix whose gradient is zero at the second step, at learning rates 0.5, 0.05, 0
/// and 0.3, with `clip_lr` on (the clipped ratio below 1 at some steps, clipped at others) and
/// off, and with Nesterov. Every step's parameters agree to 1e-12 in float64: the same
/// operations, in a different order where the ratio is formed (η·‖θ‖ / den against
/// ‖θ‖ / den · η), a few ulps apart.
#[test]
fn lars_equals_solo_learn_with_and_without_clip_lr() {
    use burn::optim::SimpleOptimizer;
    use curriculum_ssl::optim::{Lars, LarsConfig, LarsState};
    use serde_json::Value;

    type E = crate::common::Exact;
    let fixture: Value = serde_json::from_str(include_str!("fixtures/lars.json")).unwrap();
    let device = Default::default();
    let floats = |v: &Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let matrix = |v: &Value, rows: usize, cols: usize| {
        Tensor::<E, 2>::from_data(TensorData::new(floats(v), [rows, cols]), &device)
    };
    let vector = |v: &Value| Tensor::<E, 1>::from_data(TensorData::new(floats(v), [4]), &device);
    let lrs = floats(&fixture["lrs"]);
    let mut worst = 0.0f64;
    for case in fixture["cases"].as_array().unwrap() {
        let lars: Lars = LarsConfig::new()
            .with_momentum(fixture["momentum"].as_f64().unwrap())
            .with_weight_decay(fixture["weight_decay"].as_f64().unwrap())
            .with_eta(fixture["eta"].as_f64().unwrap())
            .with_epsilon(fixture["eps"].as_f64().unwrap())
            .with_nesterov(case["nesterov"].as_bool().unwrap())
            .with_clip_lr(case["clip_lr"].as_bool().unwrap())
            .build()
            .unwrap();
        let init = &fixture["initial"];
        let (mut w, mut b, mut z) = (
            matrix(&init["w"], 3, 4),
            vector(&init["b"]),
            matrix(&init["z"], 2, 3),
        );
        let (mut sw, mut sb, mut sz) = (
            None::<LarsState<E, 2>>,
            None::<LarsState<E, 1>>,
            None::<LarsState<E, 2>>,
        );
        for (t, &lr) in lrs.iter().enumerate() {
            let g = &fixture["grads"][t];
            (w, sw) = SimpleOptimizer::<E>::step(&lars, lr, w, matrix(&g["w"], 3, 4), sw);
            (b, sb) = SimpleOptimizer::<E>::step(&lars, lr, b, vector(&g["b"]), sb);
            (z, sz) = SimpleOptimizer::<E>::step(&lars, lr, z, matrix(&g["z"], 2, 3), sz);
            let expected = &case["steps"][t];
            let pairs = [
                (
                    w.clone().into_data().to_vec::<f64>().unwrap(),
                    floats(&expected["w"]),
                ),
                (
                    b.clone().into_data().to_vec::<f64>().unwrap(),
                    floats(&expected["b"]),
                ),
                (
                    z.clone().into_data().to_vec::<f64>().unwrap(),
                    floats(&expected["z"]),
                ),
            ];
            for (ours, theirs) in pairs {
                for (a, e) in ours.iter().zip(&theirs) {
                    let gap = (a - e).abs();
                    worst = worst.max(gap);
                    assert!(gap < 1e-12, "{case}: step {t}: {a} against {e}");
                }
            }
        }
    }
    eprintln!("LARS against solo-learn: every parameter within {worst:.1e}");
}

/// A zero gradient leaves a LARS parameter without weight decay (lightly's and solo-learn's
/// rule): by hand, θ = [[3, 4]], g = 0, wd = 0.1, lr = 0.5, no momentum yet: θ unchanged (the old
/// rule decayed it to [[2.85, 3.8]]).
#[test]
fn lars_leaves_a_parameter_with_a_zero_gradient_undecayed() {
    use burn::optim::SimpleOptimizer;
    use curriculum_ssl::optim::LarsConfig;
    type E = crate::common::Exact;
    let lars = LarsConfig::new().with_weight_decay(0.1).build().unwrap();
    let device = Default::default();
    let theta = Tensor::<E, 2>::from_data([[3.0, 4.0]], &device);
    let (after, _) =
        SimpleOptimizer::<E>::step(&lars, 0.5, theta, Tensor::zeros([1, 2], &device), None);
    assert_eq!(after.into_data().to_vec::<f64>().unwrap(), vec![3.0, 4.0]);
}
