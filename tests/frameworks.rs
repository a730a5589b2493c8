//! The SSL methods on a tiny user-defined backbone (which also shows that a user's own network
//! plugs in through the `Backbone` trait): exact momentum update after one step, queue order
//! and timing, stop-gradient of key / target networks and of SimSiam's projections.

mod common;

use burn::module::{ModuleVisitor, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use common::ExactAd;
use curriculum_ssl::loss::{l2_normalize, InfoNceLossConfig};
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

#[derive(Default)]
struct Values(Vec<Vec<f64>>);

impl<B: Backend> ModuleVisitor<B> for Values {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0
            .push(param.val().into_data().convert::<f64>().to_vec().unwrap());
    }
}

fn values<M: Module<ExactAd>>(module: &M) -> Vec<Vec<f64>> {
    let _ = module.clone().into_record();
    let mut v = Values::default();
    module.visit(&mut v);
    v.0
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
    let grads = GradientsParams::from_grads(out.loss.backward(), method.online());
    let mut optim = SgdConfig::new().init::<ExactAd, M::Online>().unwrap();
    method.set_online(optim.step(0.1, method.online().clone(), grads));
    method.after_step(progress);
    loss
}

fn moco(symmetric: bool) -> MoCo<ExactAd, Tiny<ExactAd>> {
    MoCoConfig::moco_v2()
        .with_hidden_dim(Some(16))
        .with_output_dim(4)
        .with_queue_size(16)
        .with_momentum(0.99)
        .with_symmetric(symmetric)
        .init(Tiny::new, 4, &Default::default())
        .unwrap()
}

#[test]
fn moco_key_encoder_after_one_step_is_m_key_plus_one_minus_m_query() {
    let mut moco = moco(false);
    let key_before = values(moco.key_encoder());
    assert_eq!(
        key_before,
        values(moco.online()),
        "the key encoder starts as a copy"
    );
    let progress = Progress {
        step: 0,
        total_steps: 10,
        epoch: 0,
        total_epochs: 1,
    };
    train_step(&mut moco, progress);
    let query_after = values(moco.online());
    let key_after = values(moco.key_encoder());
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
    let q = moco.online().project(v1.clone());
    let k = l2_normalize(moco.key_encoder().project(v2.clone()));
    let expected = InfoNceLossConfig::new()
        .with_temperature(0.2)
        .init()
        .unwrap()
        .forward(q, k.clone(), queue_before.clone())
        .into_scalar();
    let progress = Progress {
        step: 0,
        total_steps: 10,
        epoch: 0,
        total_epochs: 1,
    };
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
    train_step(
        &mut moco,
        Progress {
            step: 0,
            total_steps: 10,
            epoch: 0,
            total_epochs: 1,
        },
    );
    assert_eq!(moco.queue().pointer(), 8);
}

#[test]
fn key_and_target_networks_get_no_gradient() {
    let (v1, v2) = views(1.0);
    let progress = Progress {
        step: 0,
        total_steps: 10,
        epoch: 0,
        total_epochs: 1,
    };
    let mut moco = moco(true);
    let out = moco.forward(v1.clone(), v2.clone(), progress);
    let grads = out.loss.backward();
    assert!(GradientsParams::from_grads(grads, moco.key_encoder()).is_empty());

    let mut byol = ByolConfig::new()
        .with_hidden_dim(16)
        .with_output_dim(4)
        .init(Tiny::new, &Default::default())
        .unwrap();
    let out = byol.forward(v1, v2, progress);
    let grads = out.loss.backward();
    assert!(GradientsParams::from_grads(grads, byol.target()).is_empty());
}

#[test]
fn byol_target_after_one_step_follows_the_cosine_momentum() {
    let mut byol = ByolConfig::new()
        .with_hidden_dim(16)
        .with_output_dim(4)
        .init(Tiny::new, &Default::default())
        .unwrap();
    let progress = Progress {
        step: 5,
        total_steps: 10,
        epoch: 0,
        total_epochs: 1,
    };
    let m = byol.momentum_at(progress);
    assert!(
        (m - 0.995).abs() < 1e-15,
        "half-way along the cosine from 0.99 to 1: {m}"
    );
    let target_before = values(&byol.target().backbone);
    train_step(&mut byol, progress);
    let online_after = values(&byol.online().backbone);
    let target_after = values(&byol.target().backbone);
    for ((t1, t0), o) in target_after.iter().zip(&target_before).zip(&online_after) {
        for ((t1, t0), o) in t1.iter().zip(t0).zip(o) {
            assert_eq!(*t1, m * t0 + (1.0 - m) * o);
        }
    }
}

#[test]
fn simsiam_gradient_flows_only_through_the_predictions() {
    let mut simsiam = SimSiamConfig::new()
        .with_dim(8)
        .with_predictor_dim(4)
        .init(Tiny::new(&Default::default()), &Default::default())
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
    let mut simclr = SimClrConfig::new()
        .with_hidden_dim(16)
        .with_output_dim(4)
        .init(Tiny::new(&Default::default()), &Default::default())
        .unwrap();
    let (v1, v2) = views(3.0);
    let z1 = simclr.online().project(v1.clone());
    let z2 = simclr.online().project(v2.clone());
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
    let err = MoCoConfig::moco_v2()
        .with_queue_size(10)
        .init(Tiny::<ExactAd>::new, 4, &Default::default())
        .unwrap_err();
    assert_eq!(err.field, "size");
    let err = MoCoConfig::light_moco()
        .with_queue_size(16)
        .init(Tiny::<ExactAd>::new, 4, &Default::default())
        .unwrap_err();
    assert_eq!(err.field, "top_k", "K = 20 > queue of 16");
}
