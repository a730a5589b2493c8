//! Data-parallel training (`curriculum_ssl::data_parallel`) against one device: two replicas,
//! each with half of a global batch, must end where one device with the whole batch ends —
//! parameters, batch-norm running statistics, key / target networks and the MoCo queue — for
//! SimCLR (gathered negatives, synchronised batch norm), MoCo v2 (every replica's keys
//! enqueued) and BYOL (averaged gradients only). The replicas are threads of this process on
//! one device, as burn-collective's own tests run them.
//!
//! Tolerances. The two runs differ only in the order of floating-point sums (a batch norm's
//! mean is the mean of two shard means; a parameter's gradient is the mean of two shard
//! gradients). Measured after two SGD steps, as the largest |a − b| / max(|a|, |b|) over every
//! value: in `NdArray<f64>` at most 4e-13 (SimCLR), bounded by 1e-11; on `Flex` (f32) at most
//! 7e-6 (SimCLR, MoCo v2) and 7e-5 (BYOL, whose normalised-prediction loss amplifies the
//! reassociation), bounded by 2e-4. Each comparison also proves it can fail: the one-device run
//! on half the batch ends more than 1,000 tolerances away (7,400 on Flex, 1.6e11 in f64).

use burn::backend::{Autodiff, Flex, NdArray};
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::Optimizer;
use burn::prelude::*;
use curriculum_ssl::data_parallel::{replicas, CollectiveBackend, DataParallelConfig, Replica};
use curriculum_ssl::method::*;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::ConfigError;
use curriculum_ssl_models::{BlockKind, ResNet, ResNetConfig, Stem};

type Exact = Autodiff<NdArray<f64>>;
type Fast = Autodiff<Flex>;

/// Images per global batch, replicas, steps.
const GLOBAL: usize = 8;
const REPLICAS: usize = 2;
const STEPS: usize = 2;
const SIDE: usize = 8;

/// A ResNet with a batch norm in every block, small enough for a test.
fn resnet<B: Backend>(device: &B::Device) -> ResNet<B> {
    ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
        .with_base_width(2)
        .with_in_channels(3)
        .with_stem(Stem::Cifar)
        .init(device)
}

/// The two views of step `step`'s global batch, `[GLOBAL, 3, SIDE, SIDE]` each, as host values.
fn views(step: usize) -> [Vec<f32>; 2] {
    let len = GLOBAL * 3 * SIDE * SIDE;
    let view = |v: usize| {
        (0..len)
            .map(|i| ((i as f64 * 0.37 + (step * 2 + v) as f64 * 1.91).sin() * 1.3) as f32)
            .collect()
    };
    [view(0), view(1)]
}

/// Rows `start .. start + n` of a view, on `device`.
fn shard<B: Backend>(view: &[f32], start: usize, n: usize, device: &B::Device) -> Tensor<B, 4> {
    let per = 3 * SIDE * SIDE;
    let data = view[start * per..(start + n) * per].to_vec();
    Tensor::from_data(TensorData::new(data, [n, 3, SIDE, SIDE]), device)
}

#[derive(Default)]
struct Values(Vec<f64>);

impl<B: Backend> ModuleVisitor<B> for Values {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.extend(
            param
                .val()
                .into_data()
                .convert::<f64>()
                .to_vec::<f64>()
                .unwrap(),
        );
    }
}

/// Every float of `module`: parameters and batch-norm running statistics.
fn values<B: Backend, M: Module<B>>(module: &M) -> Vec<f64> {
    let _ = module.clone().into_record(); // brings the running statistics up to date
    let mut v = Values::default();
    module.visit(&mut v);
    v.0
}

/// What a run ends with: the losses of its steps and every value it holds.
#[derive(Debug, Clone)]
struct Outcome {
    losses: Vec<f64>,
    values: Vec<f64>,
}

/// `STEPS` SGD steps of `method` on images `start .. start + n` of every global batch; with a
/// replica, the gradients are averaged over the replicas before each step.
fn train<B, S>(
    mut method: S,
    extra: &dyn Fn(&S) -> Vec<f64>,
    replica: Option<&Replica<B>>,
    start: usize,
    n: usize,
    device: &B::Device,
) -> Result<Outcome, String>
where
    B: CollectiveBackend,
    S: SslMethod<B>,
{
    let mut optim = SgdConfig::new().init::<B, S::Online>().unwrap();
    let mut losses = Vec::new();
    for step in 0..STEPS {
        let progress = Progress {
            step,
            total_steps: 10,
            epoch: 0,
            total_epochs: 1,
        };
        let [v1, v2] = views(step);
        let out = method.forward(
            shard(&v1, start, n, device),
            shard(&v2, start, n, device),
            progress,
        );
        let loss = out
            .loss
            .clone()
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .unwrap()[0];
        let mut grads = method.gradients(&out.loss);
        if let Some(replica) = replica {
            grads = replica.average(grads, method.online())?;
        }
        method.set_online(optim.step(0.1, method.online().clone(), grads));
        method.after_step(progress);
        losses.push(loss);
    }
    let mut values = values(method.online());
    values.extend(extra(&method));
    Ok(Outcome { losses, values })
}

/// The one-device run on the whole batch, the one on its first half, and replica 0 and 1 of
/// the two-replica run.
fn runs<B, S>(
    build: &(dyn Fn(&B::Device, usize) -> Result<S, ConfigError> + Sync),
    extra: &(dyn Fn(&S) -> Vec<f64> + Sync),
) -> (Outcome, Outcome, Vec<Outcome>)
where
    B: CollectiveBackend,
    S: SslMethod<B>,
{
    let device = B::Device::default();
    // Built for `batch` images per step (MoCo sizes its queue's steps with it).
    let seeded =
        |d: &B::Device, batch: usize| init_method::<B, S, _>(d, 7, |d| build(d, batch)).unwrap();
    let whole = train(seeded(&device, GLOBAL), extra, None, 0, GLOBAL, &device).unwrap();
    let half = train(
        seeded(&device, GLOBAL / 2),
        extra,
        None,
        0,
        GLOBAL / 2,
        &device,
    )
    .unwrap();
    let shard_size = GLOBAL / REPLICAS;
    let replicas = replicas::run::<B, _, String, _>(
        &DataParallelConfig::local(REPLICAS),
        &vec![device.clone(); REPLICAS],
        |replica, d| {
            let mut method = seeded(d, GLOBAL);
            method
                .set_replica(replica.clone())
                .map_err(|e| e.to_string())?;
            let start = replica.rank() * shard_size;
            train(method, extra, Some(&replica), start, shard_size, d)
        },
    )
    .unwrap();
    (whole, half, replicas)
}

/// Asserts that both replicas end where the whole-batch run ends, within `rel` (relative, plus
/// `rel / 10` absolute), and that the half-batch run does not.
fn assert_same(label: &str, runs: (Outcome, Outcome, Vec<Outcome>), rel: f64) {
    let (whole, half, replicas) = runs;
    let within = |a: &[f64], b: &[f64]| -> f64 {
        assert_eq!(a.len(), b.len(), "{label}: as many values");
        a.iter()
            .zip(b)
            .map(|(a, b)| (a - b).abs() / (rel * a.abs().max(b.abs()) + rel / 10.0))
            .fold(0.0, f64::max)
    };
    for (rank, replica) in replicas.iter().enumerate() {
        let values = within(&whole.values, &replica.values);
        assert!(
            values <= 1.0,
            "{label}, replica {rank}: off by {values:.3} tolerances"
        );
    }
    // Each replica's loss is its shard's (the whole batch's for a gathered loss): their mean
    // is the one-device loss.
    let mean: Vec<f64> = (0..STEPS)
        .map(|s| replicas.iter().map(|r| r.losses[s]).sum::<f64>() / replicas.len() as f64)
        .collect();
    let losses = within(&whole.losses, &mean);
    assert!(
        losses <= 1.0,
        "{label}: mean loss {mean:?} against {:?}",
        whole.losses
    );
    let control = within(&whole.values, &half.values);
    assert!(
        control > 1000.0,
        "{label}: the half batch ends only {control:.1} tolerances away: the test cannot tell"
    );
}

fn simclr<B: Backend>(d: &B::Device, _: usize) -> Result<SimClr<B, ResNet<B>>, ConfigError> {
    SimClrConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .init(resnet(d), d)
}

fn moco_v2<B: Backend>(d: &B::Device, batch: usize) -> Result<MoCo<B, ResNet<B>>, ConfigError> {
    MoCoConfig::moco_v2()
        .with_hidden_dim(Some(8))
        .with_output_dim(4)
        .with_queue_size(2 * GLOBAL)
        .with_momentum(0.9)
        .init(resnet, batch, d)
}

fn byol<B: Backend>(d: &B::Device, _: usize) -> Result<Byol<B, ResNet<B>>, ConfigError> {
    ByolConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .init(resnet, d)
}

fn moco_extra<B: Backend>(m: &MoCo<B, ResNet<B>>) -> Vec<f64> {
    let mut v = values(m.key_encoder());
    v.extend(
        m.queue()
            .keys()
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .unwrap(),
    );
    v
}

#[test]
fn two_replicas_equal_one_device_with_the_whole_batch() {
    // Exact backend, tight tolerance.
    assert_same(
        "SimCLR (f64)",
        runs::<Exact, _>(&simclr, &|_| Vec::new()),
        1e-11,
    );
    assert_same(
        "MoCo v2 (f64)",
        runs::<Exact, _>(&moco_v2, &moco_extra),
        1e-11,
    );
    assert_same(
        "BYOL (f64)",
        runs::<Exact, _>(&byol, &|m| values(m.target())),
        1e-11,
    );
    // The CPU training backend.
    assert_same(
        "SimCLR (Flex)",
        runs::<Fast, _>(&simclr, &|_| Vec::new()),
        2e-4,
    );
    assert_same(
        "MoCo v2 (Flex)",
        runs::<Fast, _>(&moco_v2, &moco_extra),
        2e-4,
    );
    assert_same(
        "BYOL (Flex)",
        runs::<Fast, _>(&byol, &|m| values(m.target())),
        2e-4,
    );
}

#[test]
fn the_gather_concatenates_in_rank_order_and_sums_gradients_back() {
    // Replica r holds rows [r + 1, 10(r + 1)] (x2 rows); the loss on the gathered [4, 2] is
    // Σ w ⊙ gathered, whose gradient on a replica's own rows is w's rows; summed over the two
    // replicas, each replica's rows receive 2·w (lightly issue #1528: 1·w was the bug).
    let w = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]];
    let out = replicas::run::<Exact, _, String, _>(
        &DataParallelConfig::local(2),
        &[Default::default(), Default::default()],
        |replica, d| {
            let r = replica.rank() as f64;
            let rows = Tensor::<Exact, 2>::from_floats(
                [[r + 1.0, 10.0 * (r + 1.0)], [r + 1.5, 10.0 * (r + 1.5)]],
                d,
            )
            .require_grad();
            let gathered = replica.gather(rows.clone());
            let loss = (gathered.clone() * Tensor::from_floats(w, d)).sum();
            let grads = loss.backward();
            let grad = rows.grad(&grads).unwrap();
            let host = |t: Tensor<NdArray<f64>, 2>| t.into_data().to_vec::<f64>().unwrap();
            Ok((host(gathered.inner()), host(grad)))
        },
    )
    .unwrap();
    for (rank, (gathered, grad)) in out.into_iter().enumerate() {
        assert_eq!(
            gathered,
            vec![1.0, 10.0, 1.5, 15.0, 2.0, 20.0, 2.5, 25.0],
            "replica {rank}"
        );
        let own: Vec<f64> = w[2 * rank..2 * rank + 2]
            .iter()
            .flatten()
            .map(|v| 2.0 * v)
            .collect();
        assert_eq!(grad, own, "replica {rank}");
    }
}

#[test]
fn a_replica_that_fails_ends_the_run_naming_it_and_the_others_stop() {
    // Replica 1 fails before its first collective operation; replica 0 waits in a gather that
    // can never complete, and must be released with an error rather than hang.
    let err = replicas::run::<Exact, (), String, _>(
        &DataParallelConfig::local(2),
        &[Default::default(), Default::default()],
        |replica, d| {
            if replica.rank() == 1 {
                return Err("its data shard could not be read".into());
            }
            let _ = replica.gather(Tensor::<Exact, 2>::ones([2, 2], d));
            match replica.failure() {
                Some(reason) => Err(reason),
                None => Ok(()),
            }
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("replica 1 of 2 failed: its data shard could not be read"),
        "{err}"
    );
    assert!(err.contains("replica 0: "), "{err}");
}

#[test]
fn a_method_without_a_rule_for_replicas_is_refused() {
    // SimCLR with MICO's PGD attack is refused by name.
    let err = replicas::run::<Exact, (), String, _>(
        &DataParallelConfig::local(1),
        &[Default::default()],
        |replica, d| {
            let mut method = SimClrConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_pgd(Some(curriculum_ssl::method::pgd::PgdConfig::new()))
                .init(resnet::<Exact>(d), d)
                .map_err(|e| e.to_string())?;
            method.set_replica(replica).map_err(|e| e.to_string())
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("replica 0 of 1 failed: invalid `devices`") && err.contains("PGD"),
        "{err}"
    );
}
