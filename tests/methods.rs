//! The SSL methods on a tiny user-defined backbone (which also shows that a user's own network
//! plugs in through the `Backbone` trait): exact momentum update after one step, queue order
//! and timing, stop-gradient of key / target networks and of SimSiam's projections.

use crate::common::{values, ExactAd};
use burn::module::{ModuleVisitor, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use curriculum_ssl::loss::{l2_normalize, InfoNceLossConfig, SoftNceLossConfig};
use curriculum_ssl::method::fresh_leaves;
use curriculum_ssl::method::*;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl_models::Backbone;

/// A user's own backbone: flatten, linear, ReLU.
#[derive(Module, Debug)]
struct Tiny<B: Backend> {
    linear: Linear<B>,
}

impl<B: Backend> Tiny<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            linear: LinearConfig::new(4, 8).init(device),
        }
    }
}

impl<B: Backend> Backbone<B> for Tiny<B> {
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let [n, ..] = images.dims();
        burn::tensor::activation::relu(self.linear.forward(images.reshape([n, 4])))
    }

    fn feature_dim(&self) -> usize {
        8
    }
}

fn views(seed: f64) -> (Tensor<ExactAd, 4>, Tensor<ExactAd, 4>) {
    let device = Default::default();
    let make = |s: f64| {
        let data: Vec<f64> = (0..16).map(|i| ((i as f64 + s) * 0.71).sin()).collect();
        Tensor::<ExactAd, 4>::from_data(TensorData::new(data, [4, 1, 2, 2]), &device)
    };
    (make(seed), make(seed + 0.5))
}

/// One optimiser step of `method` (SGD, lr 0.1); returns the loss.
fn train_step<M: SslMethod<ExactAd>>(method: &mut M, progress: Progress) -> f64 {
    let (v1, v2) = views(progress.step as f64);
    let out = method.forward(v1, v2, progress);
    let loss = out.loss.clone().into_scalar();
    let grads = method.gradients(&out.loss);
    let mut optim = SgdConfig::new().init::<ExactAd, M::Online>().unwrap();
    method.set_online(optim.step(0.1, method.online().clone(), grads));
    method.after_step(progress);
    loss
}

fn moco_config(symmetric: bool) -> MocoConfig {
    MocoConfig::moco_v2()
        .with_hidden_dim(Some(16))
        .with_output_dim(4)
        .with_queue_size(16)
        .with_momentum(0.99)
        .with_symmetric(symmetric)
}

fn moco(symmetric: bool) -> Moco<ExactAd, Tiny<ExactAd>> {
    init_method::<ExactAd, _, _>(&Default::default(), 0, |d| {
        moco_config(symmetric).init(Tiny::new, 4, d)
    })
    .unwrap()
}

#[test]
fn moco_key_encoder_after_one_step_is_m_key_plus_one_minus_m_query() {
    let mut moco = moco(false);
    let key_before = values(moco.key_encoder().network());
    assert_eq!(
        key_before,
        values(moco.online()),
        "the key encoder starts as a copy"
    );
    let progress = of_ten(0);
    train_step(&mut moco, progress);
    let query_after = values(moco.online());
    let key_after = values(moco.key_encoder().network());
    assert_ne!(
        query_after, key_before,
        "the step changed the query encoder"
    );
    for ((k1, k0), q) in key_after.iter().zip(&key_before).zip(&query_after) {
        for ((k1, k0), q) in k1.iter().zip(k0).zip(q) {
            assert_eq!(*k1, 0.99 * k0 + (1.0 - 0.99) * q);
        }
    }
}

#[test]
fn moco_loss_uses_the_old_queue_and_enqueues_the_keys_after_the_step() {
    let mut moco = moco(false);
    let queue_before = moco.queue().keys();
    let (v1, v2) = views(0.0);
    // The loss of the step, recomputed from its definition with the queue as it was.
    let q = moco.online().forward(v1.clone());
    let k = l2_normalize(moco.key_encoder().network().forward(v2.clone()));
    let expected = InfoNceLossConfig::new()
        .with_temperature(0.2)
        .init()
        .unwrap()
        .forward(q, k.clone(), queue_before.clone())
        .into_scalar();
    let progress = of_ten(0);
    let out = moco.forward(v1, v2, progress);
    assert!((out.loss.clone().into_scalar() - expected).abs() < 1e-12);
    assert_eq!(
        moco.queue().pointer(),
        0,
        "nothing is enqueued before the step ends"
    );
    moco.after_step(progress);
    assert_eq!(moco.queue().pointer(), 4);
    let after: Vec<f64> = moco.queue().keys().into_data().to_vec().unwrap();
    let keys: Vec<f64> = k.into_data().to_vec().unwrap();
    let old: Vec<f64> = queue_before.into_data().to_vec().unwrap();
    assert_eq!(
        &after[..16],
        &keys[..],
        "the batch keys replace the oldest slots"
    );
    assert_eq!(
        &after[16..],
        &old[16..],
        "the rest of the queue is unchanged"
    );
    assert_eq!(after.len(), 16 * 4, "the queue keeps its size");
}

#[test]
fn symmetric_moco_enqueues_both_key_sets() {
    let mut moco = moco(true);
    train_step(&mut moco, of_ten(0));
    assert_eq!(moco.queue().pointer(), 8);
}

#[test]
fn symmetric_moco_loss_is_the_sum_of_both_orderings() {
    // MoCo computes both orderings in one call over the 2B rows; the loss must still be
    // `L(q1, k2) + L(q2, k1)`, recomputed here from the definition, for InfoNCE and SoftNCE.
    let soft = SoftNceLossConfig::new().with_top_k(3);
    for soft_nce in [None, Some(soft.clone())] {
        let mut moco = init_method::<ExactAd, _, _>(&Default::default(), 0, |d| {
            moco_config(true)
                .with_soft_nce(soft_nce.clone())
                .init(Tiny::new, 4, d)
        })
        .unwrap();
        let progress = of_ten(3);
        let (v1, v2) = views(2.0);
        let queue = moco.queue().keys();
        let q = |v: &Tensor<ExactAd, 4>| moco.online().forward(v.clone());
        let k =
            |v: &Tensor<ExactAd, 4>| l2_normalize(moco.key_encoder().network().forward(v.clone()));
        let one = |q, k| match &soft_nce {
            Some(config) => config
                .init()
                .unwrap()
                .forward(q, k, queue.clone(), progress)
                .into_scalar(),
            None => InfoNceLossConfig::new()
                .with_temperature(0.2)
                .init()
                .unwrap()
                .forward(q, k, queue.clone())
                .into_scalar(),
        };
        let expected = one(q(&v1), k(&v2)) + one(q(&v2), k(&v1));
        let loss = moco.forward(v1, v2, progress).loss.into_scalar();
        assert!(
            (loss - expected).abs() < 1e-12,
            "soft_nce {}: {loss} vs {expected}",
            soft_nce.is_some()
        );
    }
}

/// Every trainable parameter's gradient (empty when it has none), in the module's order.
struct GradientValues<'a>(&'a GradientsParams, Vec<Vec<f64>>);

impl<B: Backend> ModuleVisitor<B> for GradientValues<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if !param.val().is_require_grad() {
            return; // BatchNorm's running statistics
        }
        let grad = self
            .0
            .get::<<ExactAd as burn::tensor::backend::AutodiffBackend>::InnerBackend, D>(param.id);
        self.1.push(grad.map_or(Vec::new(), |g| {
            g.into_data().convert::<f64>().to_vec().unwrap()
        }));
    }
}

/// Each step's gradients, then the online networks' values (weights and running statistics)
/// and `other`'s (key / target networks, loss states) after two SGD steps of `method` on
/// 8×8 RGB images, with view threads `on`.
type TwoSteps = (Vec<Vec<Vec<f64>>>, Vec<Vec<f64>>, Vec<Vec<f64>>);

fn two_steps<S: SslMethod<ExactAd>>(
    mut method: S,
    passes: ViewPasses,
    other: impl Fn(&S) -> Vec<Vec<f64>>,
) -> TwoSteps {
    let device = Default::default();
    let image = |s: f64| {
        let data: Vec<f64> = (0..4 * 3 * 8 * 8)
            .map(|i| ((i as f64 + s) * 0.37).sin())
            .collect();
        Tensor::<ExactAd, 4>::from_data(TensorData::new(data, [4, 3, 8, 8]), &device)
    };
    method.set_view_passes(passes);
    let mut grads = Vec::new();
    for step in 0..2 {
        let progress = of_ten(step);
        let out = method.forward(image(step as f64), image(step as f64 + 0.5), progress);
        let g = method.gradients(&out.loss);
        let mut visitor = GradientValues(&g, Vec::new());
        method.online().visit(&mut visitor);
        grads.push(visitor.1);
        let mut optim = SgdConfig::new().init::<ExactAd, S::Online>().unwrap();
        method.set_online(optim.step(0.1, method.online().clone(), g));
        method.after_step(progress);
    }
    let online = values(method.online());
    (grads, online, other(&method))
}

/// Runs two methods made by `build`, the second loaded with the first's weights and state
/// (other tests draw from the backend's generator meanwhile), the first with its views one
/// after the other and the second with `passes`, and asserts the same gradients, weights,
/// running statistics and `other`: to the last bit (`tolerance` `None`), or within `tolerance`
/// relative to each value's magnitude (at least 1).
fn assert_view_passes_agree<S: SslMethod<ExactAd>>(
    label: &str,
    passes: ViewPasses,
    tolerance: Option<f64>,
    build: impl Fn() -> S,
    other: impl Fn(&S) -> Vec<Vec<f64>>,
) {
    let first = build();
    let mut second = build();
    // Loading shares `first`'s parameter tensors, which `first`'s backward passes consume
    // first: `second` goes through new leaves over them (`fresh_leaves` says why).
    second.set_online(fresh_leaves(
        &second
            .online()
            .clone()
            .load_record(first.online().clone().into_record()),
    ));
    second.load_state(first.state()).unwrap();
    assert_eq!(
        values(first.online()),
        values(second.online()),
        "{label}: same start"
    );
    let separate = two_steps(first, ViewPasses::Separate, &other);
    let other_way = two_steps(second, passes, &other);
    assert!(
        separate.0[0].iter().all(|g| !g.is_empty()),
        "{label}: every parameter has a gradient"
    );
    let agree = |what: &str, a: &Vec<Vec<f64>>, b: &Vec<Vec<f64>>| match tolerance {
        None => assert_eq!(a, b, "{label}, {passes:?}: {what}"),
        Some(tolerance) => {
            assert_eq!(a.len(), b.len(), "{label}: {what}");
            for (x, y) in a.iter().zip(b) {
                assert_eq!(x.len(), y.len(), "{label}: {what}");
                for (p, q) in x.iter().zip(y) {
                    assert!(
                        (p - q).abs() <= tolerance * p.abs().max(q.abs()).max(1.0),
                        "{label}, {passes:?}: {what}: {p} against {q}"
                    );
                }
            }
        }
    };
    for step in 0..2 {
        agree("gradients", &separate.0[step], &other_way.0[step]);
    }
    agree(
        "online weights and running statistics",
        &separate.1,
        &other_way.1,
    );
    agree(
        "key / target networks, loss state",
        &separate.2,
        &other_way.2,
    );
}

/// Both other ways of passing the views against one after the other
/// ([`assert_view_passes_agree`]): two threads to the last bit; one joint batch within 1e-10
/// relative. Why that bound: the joint pass is the same arithmetic in another order (a
/// convolution's weight gradient summed over both views' rows at once instead of per view
/// then added), so in f64 the two differ by sums of rounding errors of 1.1e-16 relative per
/// operation over at most a few hundred terms per value and two SGD steps (about 1e-13);
/// a batch norm taking both views' moments as one set would be off by O(1).
fn assert_view_passes<S: SslMethod<ExactAd>>(
    label: &str,
    build: impl Fn() -> S,
    other: impl Fn(&S) -> Vec<Vec<f64>>,
) {
    assert_view_passes_agree(label, ViewPasses::Threads, None, &build, &other);
    assert_view_passes_agree(label, ViewPasses::Joint, Some(1e-10), &build, &other);
}

#[test]
fn view_passes_change_no_gradient_and_no_running_statistic() {
    // Every two-view method with its views' passes back-propagated on two threads must give the
    // gradients of one backward pass through both, to the last bit, and leave the same
    // BatchNorm running statistics (a ResNet, so there are some) and other states; with both
    // views as one batch (the ResNet's batch norms taking each view's moments), the same
    // numbers up to rounding.
    use curriculum_ssl::loss::{CurricularLossConfig, NtXentLossConfig};
    use curriculum_ssl_models::{BlockKind, ResNet, ResNetConfig, Stem};
    type Device = <ExactAd as burn::tensor::backend::BackendTypes>::Device;
    let resnet = |d: &Device| -> ResNet<ExactAd> {
        ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
            .with_base_width(2)
            .with_in_channels(3)
            .with_stem(Stem::Cifar)
            .init(d)
    };
    fn seeded<S: SslMethod<ExactAd>>(
        build: impl FnOnce(&Device) -> Result<S, curriculum_ssl::ConfigError>,
    ) -> S {
        init_method::<ExactAd, _, _>(&Default::default(), 5, build).unwrap()
    }
    for soft_nce in [None, Some(SoftNceLossConfig::new().with_top_k(3))] {
        let config = moco_config(true).with_soft_nce(soft_nce.clone());
        let label = if soft_nce.is_some() {
            "Light-MoCo, SoftNCE"
        } else {
            "Light-MoCo, InfoNCE"
        };
        assert_view_passes(
            label,
            || seeded(|d| config.init(resnet, 4, d)),
            |m: &Moco<ExactAd, ResNet<ExactAd>>| values(m.key_encoder().network()),
        );
    }
    for (label, loss) in [
        (
            "SimCLR, NT-Xent",
            PairLossConfig::NtXent(NtXentLossConfig::new()),
        ),
        (
            "SimCLR, curricular weighting",
            PairLossConfig::Curricular(CurricularLossConfig::new()),
        ),
    ] {
        let config = SimClrConfig::new()
            .with_hidden_dim(16)
            .with_output_dim(4)
            .with_loss(loss);
        assert_view_passes(
            label,
            || seeded(|d| config.init(|d| resnet(d), d)),
            |m: &SimClr<ExactAd, ResNet<ExactAd>>| vec![m.curricular_t().into_iter().collect()],
        );
    }
    let byol = ByolConfig::new().with_hidden_dim(16).with_output_dim(4);
    assert_view_passes(
        "BYOL",
        || seeded(|d| byol.init(resnet, d)),
        |m: &Byol<ExactAd, ResNet<ExactAd>>| values(m.target().network()),
    );
    let v3 = MocoV3Config::new()
        .with_hidden_dim(16)
        .with_output_dim(4)
        .with_projector_layers(2);
    assert_view_passes(
        "MoCo v3",
        || seeded(|d| v3.init(resnet, d)),
        |m: &MocoV3<ExactAd, ResNet<ExactAd>>| values(m.momentum_encoder().network()),
    );
    let simsiam = SimSiamConfig::new().with_dim(8).with_predictor_dim(4);
    assert_view_passes(
        "SimSiam",
        || seeded(|d| simsiam.init(|d| resnet(d), d)),
        |_: &SimSiam<ExactAd, ResNet<ExactAd>>| Vec::new(),
    );
}

#[test]
fn key_and_target_networks_get_no_gradient() {
    let (v1, v2) = views(1.0);
    let progress = of_ten(0);
    let mut moco = moco(true);
    let out = moco.forward(v1.clone(), v2.clone(), progress);
    let grads = out.loss.backward();
    assert!(GradientsParams::from_grads(grads, moco.key_encoder().network()).is_empty());

    let mut byol = init_method::<ExactAd, _, _>(&Default::default(), 0, |d| {
        ByolConfig::new()
            .with_hidden_dim(16)
            .with_output_dim(4)
            .init(Tiny::new, d)
    })
    .unwrap();
    let out = byol.forward(v1, v2, progress);
    let grads = out.loss.backward();
    assert!(GradientsParams::from_grads(grads, byol.target().network()).is_empty());
}

/// Whether each float tensor of a module asks for a gradient, in visiting order (as
/// `values` lists them).
fn trainable_flags<M: burn::module::Module<ExactAd>>(module: &M) -> Vec<bool> {
    struct Flags(Vec<bool>);
    impl ModuleVisitor<ExactAd> for Flags {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<ExactAd, D>>) {
            self.0.push(param.is_require_grad());
        }
    }
    let mut flags = Flags(Vec::new());
    module.visit(&mut flags);
    flags.0
}

/// `SslMethod::take_online` hands over the online networks as they were (every float tensor,
/// the running statistics of BYOL's heads' batch norms included) and leaves one-entry stand-ins
/// for the trainable parameters only: the running statistics, which the copy left behind shares
/// with what was handed over, keep their values. Stepped through it, a method's two optimiser
/// steps give the losses, networks and target of the same method stepped through a clone
/// (`train_step`), exactly: the same operations in the same order.
#[test]
fn take_online_hands_the_networks_over_and_steps_as_a_clone_does() {
    let byol = || {
        init_method::<ExactAd, _, _>(&Default::default(), 0, |d| {
            ByolConfig::new()
                .with_hidden_dim(16)
                .with_output_dim(4)
                .init(Tiny::new, d)
        })
        .unwrap()
    };
    let (mut handed, mut cloned) = (byol(), byol());
    for step in 0..2 {
        let progress = of_ten(step);
        let expected = train_step(&mut cloned, progress);
        let (v1, v2) = views(step as f64);
        let out = handed.forward(v1, v2, progress);
        let loss = out.loss.clone().into_scalar();
        let grads = handed.gradients(&out.loss);
        let (before, trainable) = (values(handed.online()), trainable_flags(handed.online()));
        assert!(trainable.contains(&false) && trainable.contains(&true));
        let online = handed.take_online();
        assert_eq!(values(&online), before, "handed over as it was");
        let left = values(handed.online());
        assert_eq!(left.len(), before.len());
        for ((left, was), trainable) in left.iter().zip(&before).zip(&trainable) {
            if *trainable {
                assert_eq!(left.len(), 1, "a stand-in");
            } else {
                assert_eq!(left, was, "a running statistic kept");
            }
        }
        let mut optim = SgdConfig::new().init::<ExactAd, _>().unwrap();
        handed.set_online(optim.step(0.1, online, grads));
        handed.after_step(progress);
        assert_eq!(loss, expected);
        assert_eq!(values(handed.online()), values(cloned.online()));
        assert_eq!(
            values(handed.target().network()),
            values(cloned.target().network())
        );
    }
}

#[test]
fn byol_target_after_one_step_follows_the_cosine_momentum() {
    let mut byol = init_method::<ExactAd, _, _>(&Default::default(), 0, |d| {
        ByolConfig::new()
            .with_hidden_dim(16)
            .with_output_dim(4)
            .init(Tiny::new, d)
    })
    .unwrap();
    let progress = of_ten(5);
    let m = byol.target().momentum_at(progress);
    assert!(
        (m - 0.995).abs() < 1e-15,
        "half-way along the cosine from 0.99 to 1: {m}"
    );
    let target_before = values(&byol.target().network().backbone);
    train_step(&mut byol, progress);
    let online_after = values(&byol.online().backbone);
    let target_after = values(&byol.target().network().backbone);
    for ((t1, t0), o) in target_after.iter().zip(&target_before).zip(&online_after) {
        for ((t1, t0), o) in t1.iter().zip(t0).zip(o) {
            assert_eq!(*t1, m * t0 + (1.0 - m) * o);
        }
    }
}

/// Rows of a `[B, D]` tensor as f64 vectors.
fn rows(t: Tensor<ExactAd, 2>) -> Vec<Vec<f64>> {
    let [_, d] = t.dims();
    let v: Vec<f64> = t.into_data().convert::<f64>().to_vec().unwrap();
    v.chunks(d).map(<[f64]>::to_vec).collect()
}

/// `mean_i (2 − 2 cos(p_i, z_i))`, written out on the host in f64.
fn two_minus_two_cos(p: &[Vec<f64>], z: &[Vec<f64>]) -> f64 {
    let norm = |x: &[f64]| x.iter().map(|v| v * v).sum::<f64>().sqrt();
    let sum: f64 = p
        .iter()
        .zip(z)
        .map(|(p, z)| {
            let dot: f64 = p.iter().zip(z).map(|(a, b)| a * b).sum();
            2.0 - 2.0 * dot / (norm(p) * norm(z))
        })
        .sum();
    sum / p.len() as f64
}

/// BYOL §3.1 (`L^BYOL = L + L̃`): the symmetrised loss is the SUM of the two orderings' normalised MSE
/// (`2 − 2cos`), not their mean (which halves the gradient).
#[test]
fn byol_loss_is_the_sum_of_the_two_orderings() {
    let mut byol = init_method::<ExactAd, _, _>(&Default::default(), 0, |d| {
        ByolConfig::new()
            .with_hidden_dim(16)
            .with_output_dim(4)
            .init(Tiny::new, d)
    })
    .unwrap();
    let (v1, v2) = views(4.0);
    let online = byol.online();
    let target = byol.target().network();
    let predict = |x: Tensor<ExactAd, 4>| {
        rows(
            online.predictor.forward(
                online
                    .projector
                    .forward(online.backbone.forward_features(x)),
            ),
        )
    };
    let project = |x: Tensor<ExactAd, 4>| {
        rows(
            target
                .projector
                .forward(target.backbone.forward_features(x)),
        )
    };
    let (p1, p2) = (predict(v1.clone()), predict(v2.clone()));
    let (z1, z2) = (project(v1.clone()), project(v2.clone()));
    let (a, b) = (two_minus_two_cos(&p1, &z2), two_minus_two_cos(&p2, &z1));
    let got = byol
        .forward(
            v1,
            v2,
            Progress {
                step: 0,
                total_steps: 1,
                epoch: 0,
                total_epochs: 1,
            },
        )
        .loss
        .into_scalar();
    assert!(
        (got - (a + b)).abs() < 1e-12,
        "BYOL loss {got} vs the sum of the two orderings {a} + {b}"
    );
    assert!(
        (got - (a + b) / 2.0).abs() > 1e-3,
        "not their mean: {got} vs {}",
        (a + b) / 2.0
    );
}

/// SimSiam eq. 2: `L = D(p1, z2)/2 + D(p2, z1)/2` — the mean of the two orderings.
#[test]
fn simsiam_loss_is_the_mean_of_the_two_orderings() {
    let mut simsiam = init_method::<ExactAd, _, _>(&Default::default(), 0, |d| {
        SimSiamConfig::new()
            .with_dim(8)
            .with_predictor_dim(4)
            .init(Tiny::new, d)
    })
    .unwrap();
    let (v1, v2) = views(5.0);
    let net = simsiam.online();
    let z = |x: Tensor<ExactAd, 4>| net.projector.forward(net.backbone.forward_features(x));
    let (z1, z2) = (z(v1.clone()), z(v2.clone()));
    let (p1, p2) = (
        rows(net.predictor.forward(z1.clone())),
        rows(net.predictor.forward(z2.clone())),
    );
    let (z1, z2) = (rows(z1), rows(z2));
    // −cos = (2 − 2cos)/2 − 1.
    let d = |p: &[Vec<f64>], z: &[Vec<f64>]| two_minus_two_cos(p, z) / 2.0 - 1.0;
    let expected = (d(&p1, &z2) + d(&p2, &z1)) / 2.0;
    let got = simsiam
        .forward(
            v1,
            v2,
            Progress {
                step: 0,
                total_steps: 1,
                epoch: 0,
                total_epochs: 1,
            },
        )
        .loss
        .into_scalar();
    assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
}

/// MoCo v2's projector is `Linear(d, d) → ReLU → Linear(d, 128)` with `d` the backbone's feature
/// width; Light-MoCo's is the wider `[2048, 128]`; neither has BatchNorm; v1's is linear. An
/// explicit `hidden_dim` wins.
#[test]
fn moco_projector_widths_follow_the_papers() {
    let device = Default::default();
    let projector = |config: MocoConfig| {
        let moco = init_method::<ExactAd, _, _>(&device, 0, |d| {
            config.with_queue_size(32).init(Tiny::<ExactAd>::new, 4, d)
        })
        .unwrap();
        let head = &moco.online().projector;
        (
            head.hidden_dims(),
            head.has_hidden_batch_norm(),
            head.output_dim(),
        )
    };
    let feature_dim = Tiny::<ExactAd>::new(&device).feature_dim();
    assert_eq!(
        projector(MocoConfig::moco_v2()),
        (vec![feature_dim], false, 128)
    );
    assert_eq!(
        projector(MocoConfig::light_moco().with_soft_nce(Some(
            curriculum_ssl::loss::SoftNceLossConfig::new().with_top_k(4)
        ))),
        (vec![2048], false, 128)
    );
    assert_eq!(projector(MocoConfig::moco_v1()), (vec![], false, 128));
    assert_eq!(
        projector(MocoConfig::moco_v2().with_hidden_dim(Some(16))),
        (vec![16], false, 128)
    );
    assert_eq!(
        projector(
            MocoConfig::light_moco()
                .with_soft_nce(None)
                .with_head_batch_norm(true)
        ),
        (vec![2048], true, 128)
    );
}

#[test]
fn simsiam_gradient_flows_only_through_the_predictions() {
    let mut simsiam = init_method::<ExactAd, _, _>(&Default::default(), 0, |d| {
        SimSiamConfig::new()
            .with_dim(8)
            .with_predictor_dim(4)
            .init(Tiny::new, d)
    })
    .unwrap();
    let (v1, v2) = views(2.0);
    let progress = Progress {
        step: 0,
        total_steps: 1,
        epoch: 0,
        total_epochs: 1,
    };
    let out = simsiam.forward(v1.clone(), v2.clone(), progress);
    let method_grads = GradientsParams::from_grads(out.loss.backward(), simsiam.online());

    // The same loss written out by hand, with and without the stop-gradient.
    let net = simsiam.online();
    let cos = |p: Tensor<ExactAd, 2>, z: Tensor<ExactAd, 2>| {
        (l2_normalize(p) * l2_normalize(z)).sum_dim(1).mean().neg()
    };
    let by_hand = |detach: bool| {
        // Leaves no backward pass has consumed yet (`fresh_leaves` says why); same ids.
        let net = &fresh_leaves(net);
        let z1 = net
            .projector
            .forward(net.backbone.forward_features(v1.clone()));
        let z2 = net
            .projector
            .forward(net.backbone.forward_features(v2.clone()));
        let p1 = net.predictor.forward(z1.clone());
        let p2 = net.predictor.forward(z2.clone());
        let (t1, t2) = if detach {
            (z1.detach(), z2.detach())
        } else {
            (z1, z2)
        };
        let loss = (cos(p1, t2) + cos(p2, t1)) / 2.0;
        GradientsParams::from_grads(loss.backward(), net)
    };
    let detached = by_hand(true);
    let attached = by_hand(false);
    let weight = net.backbone.linear.weight.id;
    let grad = |g: &GradientsParams| -> Vec<f64> {
        g.get::<<ExactAd as burn::tensor::backend::AutodiffBackend>::InnerBackend, 2>(weight)
            .unwrap()
            .into_data()
            .to_vec()
            .unwrap()
    };
    let (m, d, a) = (grad(&method_grads), grad(&detached), grad(&attached));
    let max_diff = |x: &[f64], y: &[f64]| {
        x.iter()
            .zip(y)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max)
    };
    assert!(
        max_diff(&m, &d) < 1e-12,
        "method vs stop-gradient by hand: {}",
        max_diff(&m, &d)
    );
    assert!(
        max_diff(&m, &a) > 1e-6,
        "the stop-gradient changes the gradient"
    );
}

#[test]
fn simclr_loss_is_nt_xent_of_the_projections() {
    let mut simclr = init_method::<ExactAd, _, _>(&Default::default(), 0, |d| {
        SimClrConfig::new()
            .with_hidden_dim(16)
            .with_output_dim(4)
            .init(Tiny::new, d)
    })
    .unwrap();
    let (v1, v2) = views(3.0);
    let z1 = simclr.online().forward(v1.clone());
    let z2 = simclr.online().forward(v2.clone());
    let expected = curriculum_ssl::loss::NtXentLossConfig::new()
        .init()
        .unwrap()
        .forward(z1, z2)
        .into_scalar();
    let got = simclr
        .forward(
            v1,
            v2,
            Progress {
                step: 0,
                total_steps: 1,
                epoch: 0,
                total_epochs: 1,
            },
        )
        .loss
        .into_scalar();
    assert!((got - expected).abs() < 1e-12);
}

#[test]
fn bad_queue_size_and_k_are_errors() {
    let err = init_method::<ExactAd, _, _>(&Default::default(), 0, |d| {
        MocoConfig::moco_v2()
            .with_queue_size(10)
            .init(Tiny::<ExactAd>::new, 4, d)
    })
    .err()
    .unwrap();
    assert_eq!(err.field, "size");
    let err = init_method::<ExactAd, _, _>(&Default::default(), 0, |d| {
        MocoConfig::light_moco()
            .with_queue_size(16)
            .init(Tiny::<ExactAd>::new, 4, d)
    })
    .err()
    .unwrap();
    assert_eq!(err.field, "top_k", "K = 20 > queue of 16");
}

/// The records of every method's networks keep their layout now that the methods share two
/// network shapes (`Projected`, `Predicted`) and one momentum copy (`MomentumEncoder`):
/// records written when each method had a struct of its own (`MoCoNetwork`, `ByolNetwork`,
/// `ByolTarget`, `TiCoNetwork`, `MocoV3Network`, `MocoV3Encoder`, `NnClrNetwork`,
/// `SimSiamNetwork`, `SimClrNetwork`, `ProjectedNetwork`; DINO's teacher) load into today's
/// methods and are written back byte for byte, so an old run still resumes. The fixtures were
/// written by the code before the change (`tests/fixtures/layout_before_encoder/README.md`).
#[test]
fn records_of_the_per_method_networks_load_into_the_shared_shapes() {
    use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
    type Bytes = NamedMpkBytesRecorder<FullPrecisionSettings>;
    let device = Default::default();
    let fixture = |name: &str| -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/layout_before_encoder")
            .join(format!("{name}.mpk"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    fn bytes<R: burn::record::Record<ExactAd>>(record: R) -> Vec<u8> {
        Recorder::<ExactAd>::record(&Bytes::default(), record, ()).unwrap()
    }
    /// Loads the fixture `name_online` (and `name_state`) into `method` and writes them back.
    fn round_trip<S: SslMethod<ExactAd>>(
        mut method: S,
        online: Vec<u8>,
        state: Option<Vec<u8>>,
        label: &str,
    ) {
        let device = Default::default();
        let record: <S::Online as burn::module::Module<ExactAd>>::Record =
            Recorder::<ExactAd>::load(&Bytes::default(), online.clone(), &device)
                .unwrap_or_else(|e| panic!("{label}: online record: {e:?}"));
        method.set_online(method.online().clone().load_record(record));
        assert_eq!(
            bytes(method.online().clone().into_record()),
            online,
            "{label}: online"
        );
        if let Some(state) = state {
            let record: S::State =
                Recorder::<ExactAd>::load(&Bytes::default(), state.clone(), &device)
                    .unwrap_or_else(|e| panic!("{label}: state record: {e:?}"));
            method.load_state(record).unwrap();
            assert_eq!(bytes(method.state()), state, "{label}: state");
        }
    }
    let moco = init_method::<ExactAd, _, _>(&device, 0, |d| {
        MocoConfig::moco_v2()
            .with_hidden_dim(Some(8))
            .with_output_dim(4)
            .with_queue_size(8)
            .init(Tiny::new, 4, d)
    })
    .unwrap();
    round_trip(
        moco,
        fixture("moco_online"),
        Some(fixture("moco_state")),
        "MoCo",
    );
    let byol = init_method::<ExactAd, _, _>(&device, 0, |d| {
        ByolConfig::new()
            .with_hidden_dim(8)
            .with_output_dim(4)
            .init(Tiny::new, d)
    })
    .unwrap();
    round_trip(
        byol,
        fixture("byol_online"),
        Some(fixture("byol_state")),
        "BYOL",
    );
    let tico = init_method::<ExactAd, _, _>(&device, 0, |d| {
        TicoConfig::new()
            .with_hidden_dim(8)
            .with_output_dim(4)
            .init(Tiny::new, d)
    })
    .unwrap();
    round_trip(
        tico,
        fixture("tico_online"),
        Some(fixture("tico_state")),
        "TiCo",
    );
    let v3 = init_method::<ExactAd, _, _>(&device, 0, |d| {
        MocoV3Config::new()
            .with_hidden_dim(8)
            .with_output_dim(4)
            .with_projector_layers(2)
            .init(Tiny::new, d)
    })
    .unwrap();
    round_trip(
        v3,
        fixture("moco_v3_online"),
        Some(fixture("moco_v3_state")),
        "MoCo v3",
    );
    let nnclr = init_method::<ExactAd, _, _>(&device, 0, |d| {
        NnClrConfig::new()
            .with_hidden_dim(8)
            .with_output_dim(4)
            .with_predictor_hidden_dim(8)
            .with_support_set_size(8)
            .init(Tiny::new, 4, d)
    })
    .unwrap();
    round_trip(nnclr, fixture("nnclr_online"), None, "NNCLR");
    let simsiam = init_method::<ExactAd, _, _>(&device, 0, |d| {
        SimSiamConfig::new()
            .with_dim(8)
            .with_predictor_dim(4)
            .init(Tiny::new, d)
    })
    .unwrap();
    round_trip(simsiam, fixture("simsiam_online"), None, "SimSiam");
    let simclr = init_method::<ExactAd, _, _>(&device, 0, |d| {
        SimClrConfig::new()
            .with_hidden_dim(8)
            .with_output_dim(4)
            .init(Tiny::new, d)
    })
    .unwrap();
    round_trip(simclr, fixture("simclr_online"), None, "SimCLR");
    let barlow = init_method::<ExactAd, _, _>(&device, 0, |d| {
        BarlowTwinsConfig::new()
            .with_hidden_dim(8)
            .with_output_dim(4)
            .init(Tiny::new, d)
    })
    .unwrap();
    round_trip(barlow, fixture("barlow_twins_online"), None, "Barlow Twins");
    let dino = init_method::<ExactAd, _, _>(&device, 0, |d| {
        DinoConfig::new()
            .with_hidden_dim(8)
            .with_bottleneck_dim(4)
            .with_output_dim(16)
            .init(Tiny::new, d)
    })
    .unwrap();
    let online = bytes(dino.online().clone().into_record());
    round_trip(dino, online, Some(fixture("dino_state")), "DINO");
}

/// The fixtures of tests/pytorch/: `tests/fixtures/NAME`.
fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A fixture's JSON.
fn fixture_json(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
}

/// A JSON array of numbers.
fn numbers(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// Every value of `got` within `tol` of `want`'s.
fn close(got: Vec<f64>, want: Vec<f64>, tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= tol, "{what}[{i}]: {g} vs {w}");
    }
}

/// The ViT of the lightly fixtures (tests/pytorch/mae.py, simmim.py): 8 × 8 one-channel images in
/// 4-pixel patches, width 8, one block of 2 heads.
fn lightly_vit(
    d: &<ExactAd as burn::tensor::backend::BackendTypes>::Device,
) -> curriculum_ssl_models::Vit<ExactAd> {
    curriculum_ssl_models::VitConfig::new(8)
        .with_patch_size(4)
        .with_in_channels(1)
        .with_embed_dim(8)
        .with_depth(1)
        .with_num_heads(2)
        .init::<ExactAd>(d)
}

/// The fixtures' input: x[n, 0, r, c] = sin(0.37 · (64n + 8r + c) + 0.1 · n), two images.
fn lightly_images(
    device: &<ExactAd as burn::tensor::backend::BackendTypes>::Device,
) -> Tensor<ExactAd, 4> {
    Tensor::from_data(
        TensorData::new(
            (0..128)
                .map(|i| (0.37 * i as f64 + 0.1 * (i / 64) as f64).sin())
                .collect::<Vec<f64>>(),
            [2, 1, 8, 8],
        ),
        device,
    )
}

/// lightly's MAE (its example's `MaskedVisionTransformerTIMM` + `MAEDecoderTIMM` on a timm ViT)
/// wrapped for the importer: `backbone.*` are timm's keys, `decoder.*` lightly's decoder's.
#[derive(Module, Debug)]
struct LightlyMae<B: Backend> {
    net: MaeNetwork<B, curriculum_ssl_models::Vit<B>>,
}

impl<B: Backend> curriculum_ssl_models::import::TorchvisionImport<B> for LightlyMae<B> {
    fn torchvision_key(&self, key: &str) -> Option<String> {
        if let Some(rest) = key.strip_prefix("backbone.") {
            return curriculum_ssl_models::import::vit_key(rest)
                .map(|k| format!("net.backbone.{k}"));
        }
        let rest = key.strip_prefix("decoder.")?;
        let ours = match rest.split_once('.') {
            Some(("decoder_embed", tail)) => format!("embed.{tail}"),
            Some(("decoder_blocks", tail)) => format!("blocks.{tail}"),
            Some(("decoder_norm", tail)) => format!("norm.{tail}"),
            Some(("decoder_pred", tail)) => format!("pred.{tail}"),
            None if rest == "mask_token" => rest.to_string(),
            _ => return None, // the fixed positions: compared separately
        };
        Some(format!("net.decoder.{ours}"))
    }
}

/// MAE's loss and gradients equal lightly's in float64 (`tests/pytorch/mae.py` wrote
/// `tests/fixtures/mae_lightly.*`: lightly 1.6's MAE on a timm ViT with every parameter drawn at
/// random, masks given), with and without per-patch normalised targets, to 1e-12 (every
/// operation in float64; the differences are summation order); the decoder's sine-cosine
/// positions equal the authors' table to 1e-15.
#[test]
fn mae_matches_lightly_in_f64() {
    use curriculum_ssl::method::sine_cosine_2d;
    let expected = fixture_json("mae_lightly.json");
    let device = Default::default();
    let positions = sine_cosine_2d::<ExactAd>((2, 2), 8, &device);
    close(
        positions.into_data().to_vec::<f64>().unwrap(),
        numbers(&expected["decoder_pos_embed"]),
        1e-15,
        "positions",
    );
    for (case, normalize) in [("plain", false), ("normalized", true)] {
        // Built under the seed lock (loading a record draws the lazy values it replaces).
        let mut mae = init_method::<ExactAd, _, _>(&device, 0, |d| {
            MaeConfig::new()
                .with_decoder_dim(8)
                .with_decoder_depth(1)
                .with_decoder_heads(2)
                .with_normalize_targets(normalize)
                .init(lightly_vit, d)
        })
        .unwrap();
        let mut wrapper = LightlyMae {
            net: mae.online().clone(),
        };
        let path = fixture("mae_lightly.safetensors");
        curriculum_ssl_models::import::load_torchvision(&mut wrapper, None, &path).unwrap();
        mae.set_online(wrapper.net);
        let images = lightly_images(&device);
        let mask = PatchMask::from_visible(4, vec![vec![1, 3], vec![0, 2]]).unwrap();
        let loss = mae.loss(images, &mask);
        let want = &expected[case];
        let value = loss.clone().into_data().to_vec::<f64>().unwrap()[0];
        assert!(
            (value - want["loss"].as_f64().unwrap()).abs() < 1e-12,
            "{case}: {value}"
        );
        let grads = loss.backward();
        let online = mae.online();
        let grad = |t: Tensor<ExactAd, 2>| t.grad(&grads).unwrap().into_data().to_vec::<f64>();
        // burn's linear weight is [in, out], PyTorch's [out, in].
        let pred = grad(online.decoder.pred.weight.val()).unwrap();
        let pred_t: Vec<f64> = (0..16)
            .flat_map(|o| (0..8).map(move |i| (o, i)))
            .map(|(o, i)| pred[i * 16 + o])
            .collect();
        close(
            pred_t,
            numbers(&want["grad_decoder_pred_weight"]),
            1e-6,
            case,
        );
        let token = online.decoder.mask_token.val().grad(&grads).unwrap();
        close(
            token.into_data().to_vec::<f64>().unwrap(),
            numbers(&want["grad_mask_token"]),
            1e-12,
            case,
        );
        let conv = online
            .backbone
            .patch_embed
            .weight
            .val()
            .grad(&grads)
            .unwrap();
        close(
            conv.into_data().to_vec::<f64>().unwrap(),
            numbers(&want["grad_patch_embed_weight"]),
            1e-12,
            case,
        );
    }
}

/// lightly's AIM (its example's `MaskedCausalVisionTransformer` and `AIMPredictionHead`)
/// wrapped for the importer: `backbone.*` are timm's keys, `head.*` our head's (the script
/// renames lightly's `Sequential` indices).
#[derive(Module, Debug)]
struct LightlyAim<B: Backend> {
    net: AimNetwork<B, curriculum_ssl_models::Vit<B>>,
}

impl<B: Backend> curriculum_ssl_models::import::TorchvisionImport<B> for LightlyAim<B> {
    fn torchvision_key(&self, key: &str) -> Option<String> {
        if let Some(rest) = key.strip_prefix("backbone.") {
            return curriculum_ssl_models::import::vit_key(rest)
                .map(|k| format!("net.backbone.{k}"));
        }
        key.strip_prefix("head.")
            .map(|rest| format!("net.head.{rest}"))
    }
}

/// The largest difference between `got` and `want` relative to `want`'s largest magnitude.
fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    let diff = got
        .iter()
        .zip(want)
        .fold(0.0f64, |m, (g, w)| m.max((g - w).abs()));
    diff / scale
}

/// A linear weight's values in PyTorch's `[out, in]` order (burn's is `[in, out]`).
fn transposed(weight: Vec<f64>, inputs: usize, outputs: usize) -> Vec<f64> {
    (0..outputs)
        .flat_map(|o| (0..inputs).map(move |i| (o, i)))
        .map(|(o, i)| weight[i * outputs + o])
        .collect()
}

/// AIM's loss and gradients equal lightly's in float64 (`tests/pytorch/aim.py` wrote
/// `tests/fixtures/aim_lightly.*`: lightly 1.6's `MaskedCausalVisionTransformer` (16-pixel
/// images of three channels in 4-pixel patches, width 16, two blocks of two heads, with its
/// final norm) and `AIMPredictionHead` (width 32, two blocks) with every parameter drawn at
/// random, prefixes given): lightly's example's loss (each position's own patch, prefixes 0, 6
/// and 14: a fully causal image among them) and the paper's (the next patch on the non-prefix
/// patches, prefixes 1, 6 and 15). The loss and the gradients of the input, the patch
/// embedding, the positions, the first block's qkv weight and the head's first and last layers
/// within 1e-12 of the largest value, relative: every operation in float64 on both sides, the
/// differences are summation order (measured about 1e-15).
#[test]
fn aim_matches_lightly_in_f64() {
    use curriculum_ssl::loss::AimTarget;
    let expected = fixture_json("aim_lightly.json");
    let device = Default::default();
    for (case, target) in [
        ("lightly", AimTarget::SamePatch),
        ("paper", AimTarget::NextPatch),
    ] {
        let want = &expected[case];
        // Built under the seed lock (loading a record draws the lazy values it replaces).
        let mut aim = init_method::<ExactAd, _, _>(&device, 0, |d| {
            AimConfig::new()
                .with_target(target)
                .with_head_dim(32)
                .with_head_blocks(2)
                .init(
                    |d| {
                        curriculum_ssl_models::VitConfig::new(16)
                            .with_patch_size(4)
                            .with_embed_dim(16)
                            .with_depth(2)
                            .with_num_heads(2)
                            .init::<ExactAd>(d)
                    },
                    d,
                )
        })
        .unwrap();
        let mut wrapper = LightlyAim {
            net: aim.online().clone(),
        };
        let path = fixture("aim_lightly.safetensors");
        curriculum_ssl_models::import::load_torchvision(&mut wrapper, None, &path).unwrap();
        aim.set_online(wrapper.net);
        let pixels: Vec<f64> = (0..2304)
            .map(|i| (0.37 * i as f64 + 0.1 * (i / 768) as f64).sin())
            .collect();
        let images =
            Tensor::<ExactAd, 4>::from_data(TensorData::new(pixels, [3, 3, 16, 16]), &device)
                .require_grad();
        let prefixes: Vec<usize> = numbers(&want["prefixes"])
            .iter()
            .map(|&s| s as usize)
            .collect();
        let loss = aim.loss(images.clone(), &prefixes);
        let value = loss.clone().into_data().to_vec::<f64>().unwrap()[0];
        let error = relative_error(&[value], &[want["loss"].as_f64().unwrap()]);
        println!("AIM {case}: loss {value}, relative error {error:e}");
        assert!(
            error < 1e-12,
            "{case}: loss {value}, relative error {error:e}"
        );
        let grads = loss.backward();
        let grad = |t: Tensor<ExactAd, 2>| -> Vec<f64> {
            t.grad(&grads).unwrap().into_data().to_vec().unwrap()
        };
        let online = aim.online();
        let vit = &online.backbone;
        let positions: Vec<f64> = vit
            .pos_embed
            .val()
            .grad(&grads)
            .unwrap()
            .into_data()
            .to_vec()
            .unwrap();
        let conv = vit.patch_embed.weight.val().grad(&grads).unwrap();
        let input = images.grad(&grads).unwrap();
        for (name, got, key) in [
            (
                "input",
                input.into_data().to_vec::<f64>().unwrap(),
                "grad_input",
            ),
            (
                "patch embedding",
                conv.into_data().to_vec::<f64>().unwrap(),
                "grad_patch_embed_weight",
            ),
            ("positions", positions[16..].to_vec(), "grad_pos_embed"),
            (
                "qkv",
                transposed(grad(vit.blocks[0].attn.qkv.weight.val()), 16, 48),
                "grad_qkv_weight_0",
            ),
            (
                "head embed",
                transposed(grad(online.head.embed.weight.val()), 16, 32),
                "grad_head_embed_weight",
            ),
            (
                "head pred",
                transposed(grad(online.head.pred.weight.val()), 32, 48),
                "grad_head_pred_weight",
            ),
        ] {
            let error = relative_error(&got, &numbers(&want[key]));
            println!("AIM {case}: {name} gradient, relative error {error:e}");
            assert!(
                error < 1e-12,
                "{case}: {name} gradient, relative error {error:e}"
            );
        }
    }
}

/// lightly's SimMIM (its example's `MaskedVisionTransformerTIMM` on a timm ViT and a linear
/// decoder) wrapped for the importer: `backbone.*` are timm's keys.
#[derive(Module, Debug)]
struct LightlySimMim<B: Backend> {
    net: SimMimNetwork<B, curriculum_ssl_models::Vit<B>>,
}

impl<B: Backend> curriculum_ssl_models::import::TorchvisionImport<B> for LightlySimMim<B> {
    fn torchvision_key(&self, key: &str) -> Option<String> {
        if let Some(rest) = key.strip_prefix("backbone.") {
            return curriculum_ssl_models::import::vit_key(rest)
                .map(|k| format!("net.backbone.{k}"));
        }
        match key {
            "mask_token" => Some("net.mask_token".into()),
            "decoder.weight" | "decoder.bias" => Some(key.replace("decoder.", "net.head.")),
            _ => None,
        }
    }
}

/// SimMIM's loss and gradients equal lightly's in float64 (`tests/pytorch/simmim.py` wrote
/// `tests/fixtures/simmim_lightly.*`: lightly 1.6's SimMIM example on a timm ViT with every
/// parameter drawn at random, masks given) to 1e-12 (every operation in float64; the
/// differences are summation order).
#[test]
fn simmim_matches_lightly_in_f64() {
    let want = fixture_json("simmim_lightly.json");
    let device = Default::default();
    // Built under the seed lock (loading a record draws the lazy values it replaces).
    let mut simmim = init_method::<ExactAd, _, _>(&device, 0, |d| {
        SimMimConfig::new().with_mask_unit(1).init(lightly_vit, d)
    })
    .unwrap();
    let mut wrapper = LightlySimMim {
        net: simmim.online().clone(),
    };
    let path = fixture("simmim_lightly.safetensors");
    curriculum_ssl_models::import::load_torchvision(&mut wrapper, None, &path).unwrap();
    simmim.set_online(wrapper.net);
    let images = lightly_images(&device);
    // lightly's idx_mask [[1, 3], [2, 4]] counts the class token as token 0.
    let mask = UnitMask::from_hidden(4, &[vec![0, 2], vec![1, 3]]).unwrap();
    let loss = simmim.loss(images, &mask);
    let value = loss.clone().into_data().to_vec::<f64>().unwrap()[0];
    assert!(
        (value - want["loss"].as_f64().unwrap()).abs() < 1e-12,
        "{value}"
    );
    let grads = loss.backward();
    let online = simmim.online();
    // burn's linear weight is [in, out], PyTorch's [out, in].
    let head = online
        .head
        .weight
        .val()
        .grad(&grads)
        .unwrap()
        .into_data()
        .to_vec::<f64>()
        .unwrap();
    let head_t: Vec<f64> = (0..16)
        .flat_map(|o| (0..8).map(move |i| (o, i)))
        .map(|(o, i)| head[i * 16 + o])
        .collect();
    close(head_t, numbers(&want["grad_decoder_weight"]), 1e-12, "head");
    let token = online.mask_token.val().grad(&grads).unwrap();
    close(
        token.into_data().to_vec::<f64>().unwrap(),
        numbers(&want["grad_mask_token"]),
        1e-12,
        "mask token",
    );
    let conv = online
        .backbone
        .patch_embed
        .weight
        .val()
        .grad(&grads)
        .unwrap();
    close(
        conv.into_data().to_vec::<f64>().unwrap(),
        numbers(&want["grad_patch_embed_weight"]),
        1e-12,
        "patch embedding",
    );
}

/// lightly's I-JEPA (its `MaskedVisionTransformerTIMM` on a timm ViT and `IJEPAPredictorTIMM`)
/// wrapped for the importer: `backbone.*` are timm's keys, `predictor.*` lightly's predictor's.
#[derive(Module, Debug)]
struct LightlyIjepa<B: Backend> {
    net: IjepaNetwork<B, curriculum_ssl_models::Vit<B>>,
}

impl<B: Backend> curriculum_ssl_models::import::TorchvisionImport<B> for LightlyIjepa<B> {
    fn torchvision_key(&self, key: &str) -> Option<String> {
        if let Some(rest) = key.strip_prefix("backbone.") {
            return curriculum_ssl_models::import::vit_key(rest)
                .map(|k| format!("net.backbone.{k}"));
        }
        let rest = key.strip_prefix("predictor.")?;
        let ours = match rest.split_once('.') {
            Some(("predictor_embed", tail)) => format!("embed.{tail}"),
            Some(("predictor_proj", tail)) => format!("proj.{tail}"),
            Some(("decoder", "mask_token")) => "mask_token".to_string(),
            Some(("decoder", tail)) if tail.starts_with("blocks.") || tail.starts_with("norm.") => {
                tail.to_string()
            }
            _ => return None, // the fixed positions: compared separately
        };
        Some(format!("net.predictor.{ours}"))
    }
}

/// I-JEPA's loss and gradients equal lightly's in float64 (`tests/pytorch/ijepa.py` wrote
/// `tests/fixtures/ijepa_lightly.*`: lightly 1.6's context encoder and `IJEPAPredictorTIMM` on a
/// timm ViT with every parameter drawn at random, the target encoder the same weights, the blocks
/// given) to 1e-12 (every operation in float64; the differences are summation order); the
/// predictor's sine-cosine positions equal the authors' table to 1e-15.
#[test]
fn ijepa_matches_lightly_in_f64() {
    use curriculum_ssl::method::sine_cosine_2d;
    let expected = fixture_json("ijepa_lightly.json");
    let device = Default::default();
    let positions = sine_cosine_2d::<ExactAd>((3, 3), 8, &device).slice([0..1, 1..10, 0..8]);
    close(
        positions.into_data().to_vec::<f64>().unwrap(),
        numbers(&expected["predictor_pos_embed"]),
        1e-15,
        "positions",
    );
    let vit = |d: &<ExactAd as burn::tensor::backend::BackendTypes>::Device| {
        curriculum_ssl_models::VitConfig::new(12)
            .with_patch_size(4)
            .with_in_channels(1)
            .with_embed_dim(8)
            .with_depth(1)
            .with_num_heads(2)
            .init::<ExactAd>(d)
    };
    let mut ijepa = init_method::<ExactAd, _, _>(&device, 0, |d| {
        IjepaConfig::new()
            .with_predictor_dim(8)
            .with_predictor_depth(1)
            .with_predictor_heads(2)
            .init(vit, d)
    })
    .unwrap();
    let mut wrapper = LightlyIjepa {
        net: ijepa.online().clone(),
    };
    let path = fixture("ijepa_lightly.safetensors");
    curriculum_ssl_models::import::load_torchvision(&mut wrapper, None, &path).unwrap();
    // The target encoder starts as the encoder, as an EMA copy does.
    ijepa
        .load_state(wrapper.net.backbone.clone().into_record())
        .unwrap();
    ijepa.set_online(wrapper.net);
    let images: Tensor<ExactAd, 4> = Tensor::from_data(
        TensorData::new(
            (0..288)
                .map(|i| (0.37 * i as f64 + 0.1 * (i / 144) as f64).sin())
                .collect::<Vec<f64>>(),
            [2, 1, 12, 12],
        ),
        &device,
    );
    let mask = |lists: [Vec<usize>; 2]| PatchMask::from_visible(9, lists.to_vec()).unwrap();
    let masks = IjepaMasks {
        context: mask([vec![0, 1, 2, 5], vec![3, 4, 6, 8]]),
        targets: vec![
            mask([vec![7, 8], vec![0, 1]]),
            mask([vec![3, 6], vec![2, 5]]),
        ],
    };
    let loss = ijepa.loss(images, &masks);
    let value = loss.clone().into_data().to_vec::<f64>().unwrap()[0];
    assert!(
        (value - expected["loss"].as_f64().unwrap()).abs() < 1e-12,
        "loss {value}"
    );
    let grads = loss.backward();
    let online = ijepa.online();
    let grad_of =
        |t: Tensor<ExactAd, 3>| t.grad(&grads).unwrap().into_data().to_vec::<f64>().unwrap();
    close(
        grad_of(online.predictor.mask_token.val()),
        numbers(&expected["grad_mask_token"]),
        1e-12,
        "mask token",
    );
    close(
        grad_of(online.backbone.cls_token.val()),
        numbers(&expected["grad_cls_token"]),
        1e-12,
        "class token",
    );
    // burn's linear weight is [in, out], PyTorch's [out, in].
    let embed = online
        .predictor
        .embed
        .weight
        .val()
        .grad(&grads)
        .unwrap()
        .into_data()
        .to_vec::<f64>()
        .unwrap();
    let embed_t: Vec<f64> = (0..8)
        .flat_map(|o| (0..8).map(move |i| (o, i)))
        .map(|(o, i)| embed[i * 8 + o])
        .collect();
    close(
        embed_t,
        numbers(&expected["grad_predictor_embed_weight"]),
        1e-12,
        "predictor embed",
    );
    let conv = online
        .backbone
        .patch_embed
        .weight
        .val()
        .grad(&grads)
        .unwrap();
    close(
        conv.into_data().to_vec::<f64>().unwrap(),
        numbers(&expected["grad_patch_embed_weight"]),
        1e-12,
        "patch embedding",
    );
}

/// lightly's CAPI networks (its example's `MaskedVisionTransformerTIMM`, `CAPIPredictorTIMM` and
/// two `CAPIProjectionHead`s on a timm ViT) wrapped for the importer: `backbone.*` are timm's
/// keys, `predictor.*` lightly's predictor's (its MLP a `Sequential`: `mlp.0` / `mlp.2`), the
/// student head's direction `weight_v` its weight (its scale `weight_g` is 1, checked by the
/// script), the teacher head's `weight` / `bias`.
#[derive(Module, Debug)]
struct LightlyCapi<B: Backend> {
    net: CapiNetwork<B, curriculum_ssl_models::Vit<B>>,
}

impl<B: Backend> curriculum_ssl_models::import::TorchvisionImport<B> for LightlyCapi<B> {
    fn torchvision_key(&self, key: &str) -> Option<String> {
        if let Some(rest) = key.strip_prefix("backbone.") {
            return curriculum_ssl_models::import::vit_key(rest)
                .map(|k| format!("net.backbone.{k}"));
        }
        if let Some(rest) = key.strip_prefix("predictor.") {
            let rest = rest
                .replace(".mlp.0.", ".mlp.fc1.")
                .replace(".mlp.2.", ".mlp.fc2.");
            return Some(format!("net.predictor.{rest}"));
        }
        match key {
            "student_head.layer.weight_v" => Some("net.student_head.layer.weight".into()),
            "teacher_head.layer.weight" | "teacher_head.layer.bias" => Some(format!("net.{key}")),
            _ => None,
        }
    }
}

/// lightly's `sinkhorn_knopp` (tests/pytorch/capi.py, a seeded `[3, 4, 5]` tensor / 0.06):
/// [`positionwise_sinkhorn`](curriculum_ssl::loss::positionwise_sinkhorn) within 1e-14 of its
/// values; and the predictor's rotary table within 1e-15 of timm's formula written in float64.
#[test]
fn capi_sinkhorn_and_rotary_table_match_lightly() {
    let expected = fixture_json("capi_lightly.json");
    close(
        rope_table((3, 3), 8),
        numbers(&expected["rope"]),
        1e-15,
        "rotary table",
    );
    let input: Tensor<ExactAd, 3> = Tensor::from_data(
        TensorData::new(numbers(&expected["sinkhorn_input"]), [3, 4, 5]),
        &Default::default(),
    );
    let got = curriculum_ssl::loss::positionwise_sinkhorn(input.div_scalar(0.06), 3, 1e-8, None);
    close(
        got.into_data().to_vec::<f64>().unwrap(),
        numbers(&expected["sinkhorn"]),
        1e-14,
        "sinkhorn",
    );
}

/// CAPI's losses and gradients equal lightly's in float64 (`tests/pytorch/capi.py` wrote
/// `tests/fixtures/capi_lightly.*`: lightly 1.6's CAPI networks on a timm ViT (12-pixel
/// one-channel images in 4-pixel patches, width 16) with every parameter drawn at random, the
/// teacher encoder the same weights, the masks given), in both of the script's cases (2 of the
/// 5 hidden patches predicted, in a random order; every hidden patch): the teacher's logits and
/// Sinkhorn assignments, the student and clustering terms and their sum, and the gradients of
/// the predictor's mask token, its first block's query weight and second block's key-value
/// weight, both heads and the encoder's patch embedding and class token, each within 1e-12 of
/// its largest value, relative (every operation in float64 on both sides; the differences are
/// summation order).
#[test]
fn capi_matches_lightly_in_f64() {
    let expected = fixture_json("capi_lightly.json");
    let device = Default::default();
    let vit = |d: &<ExactAd as burn::tensor::backend::BackendTypes>::Device| {
        curriculum_ssl_models::VitConfig::new(12)
            .with_patch_size(4)
            .with_in_channels(1)
            .with_embed_dim(16)
            .with_depth(1)
            .with_num_heads(2)
            .init::<ExactAd>(d)
    };
    let mut capi = init_method::<ExactAd, _, _>(&device, 0, |d| {
        CapiConfig::new()
            .with_num_clusters(6)
            .with_predictor_depth(2)
            .with_predictor_heads(2)
            .init(vit, d)
    })
    .unwrap();
    let mut wrapper = LightlyCapi {
        net: capi.online().clone(),
    };
    let path = fixture("capi_lightly.safetensors");
    curriculum_ssl_models::import::load_torchvision(&mut wrapper, None, &path).unwrap();
    // The teacher starts as the student's encoder, as an EMA copy does.
    capi.load_state(wrapper.net.backbone.clone().into_record())
        .unwrap();
    capi.set_online(wrapper.net);
    let images: Tensor<ExactAd, 4> = Tensor::from_data(
        TensorData::new(
            (0..288)
                .map(|i| (0.37 * i as f64 + 0.1 * (i / 144) as f64).sin())
                .collect::<Vec<f64>>(),
            [2, 1, 12, 12],
        ),
        &device,
    );
    let mask = |lists: Vec<Vec<usize>>| PatchMask::from_visible(9, lists).unwrap();
    let context = mask(vec![vec![0, 1, 3, 4], vec![0, 2, 6, 8]]);
    let check = |got: Vec<f64>, want: &serde_json::Value, what: &str| {
        let want = numbers(want);
        let e = relative_error(&got, &want);
        assert!(e < 1e-12, "{what}: {e:e}");
    };
    for case in ["subsampled", "all_masked"] {
        let want = &expected[case];
        let predict: Vec<Vec<usize>> = want["predict"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                row.as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_u64().unwrap() as usize)
                    .collect()
            })
            .collect();
        let predict = mask(predict);
        let online = capi.online();
        let features = capi.teacher().network().forward_tokens(images.clone());
        let teacher_logits = online
            .teacher_head
            .forward(features.slice([0..2, 1..10, 0..16]));
        check(
            teacher_logits.clone().into_data().to_vec().unwrap(),
            &want["teacher_logits"],
            "teacher logits",
        );
        let assignments = curriculum_ssl::loss::CapiLossConfig::new()
            .init()
            .unwrap()
            .assignments(teacher_logits, None);
        check(
            assignments.into_data().to_vec().unwrap(),
            &want["assignments"],
            "assignments",
        );
        let terms = capi.terms(images.clone(), &context, &predict);
        let value = |t: &Tensor<ExactAd, 1>| t.clone().into_data().to_vec::<f64>().unwrap()[0];
        for (got, key) in [
            (value(&terms.student), "student_loss"),
            (value(&terms.clustering), "clustering_loss"),
        ] {
            let w = want[key].as_f64().unwrap();
            assert!(
                (got - w).abs() < 1e-12 * w.abs(),
                "{case} {key}: {got} vs {w}"
            );
        }
        let loss = terms.student + terms.clustering;
        let w = want["loss"].as_f64().unwrap();
        assert!((value(&loss) - w).abs() < 1e-12 * w, "{case} loss");
        let grads = loss.backward();
        let grad =
            |t: Tensor<ExactAd, 1>| t.grad(&grads).unwrap().into_data().to_vec::<f64>().unwrap();
        let grad2 =
            |t: Tensor<ExactAd, 2>| t.grad(&grads).unwrap().into_data().to_vec::<f64>().unwrap();
        let grad3 =
            |t: Tensor<ExactAd, 3>| t.grad(&grads).unwrap().into_data().to_vec::<f64>().unwrap();
        let p = &online.predictor;
        check(
            grad3(p.mask_token.val()),
            &want["grad_mask_token"],
            "mask token",
        );
        check(
            transposed(grad2(p.blocks[0].to_query.weight.val()), 16, 16),
            &want["grad_block0_to_query_weight"],
            "block 0 query weight",
        );
        check(
            transposed(grad2(p.blocks[1].to_key_value.weight.val()), 16, 32),
            &want["grad_block1_to_key_value_weight"],
            "block 1 key-value weight",
        );
        check(
            transposed(grad2(online.student_head.layer.weight.val()), 16, 6),
            &want["grad_student_head_weight_v"],
            "student head",
        );
        check(
            transposed(grad2(online.teacher_head.layer.weight.val()), 16, 6),
            &want["grad_teacher_head_weight"],
            "teacher head weight",
        );
        check(
            grad(online.teacher_head.layer.bias.as_ref().unwrap().val()),
            &want["grad_teacher_head_bias"],
            "teacher head bias",
        );
        let conv = online
            .backbone
            .patch_embed
            .weight
            .val()
            .grad(&grads)
            .unwrap();
        check(
            conv.into_data().to_vec().unwrap(),
            &want["grad_patch_embed_weight"],
            "patch embedding",
        );
        check(
            grad3(online.backbone.cls_token.val()),
            &want["grad_cls_token"],
            "class token",
        );
        assert!(capi
            .teacher()
            .network()
            .patch_embed
            .weight
            .val()
            .grad(&grads)
            .is_none());
    }
}

/// Step `step` of a run of 10 steps in one epoch.
fn of_ten(step: usize) -> Progress {
    Progress {
        step,
        total_steps: 10,
        epoch: 0,
        total_epochs: 1,
    }
}
