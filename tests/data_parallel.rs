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
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl::augment::crop::CropBox;
use curriculum_ssl::data_parallel::{self, CollectiveBackend, DataParallelConfig, Replica};
use curriculum_ssl::method::*;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::ViewGeometry;
use curriculum_ssl::ConfigError;
use curriculum_ssl_models::{BlockKind, ResNet, ResNetConfig, Stem, Vit, VitConfig};

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

/// Side of the local crops of the multi-crop methods (SwAV, DINO, LeJEPA).
const LOCAL_SIDE: usize = 4;

/// Two local crops of step `step`'s global batch, `[GLOBAL, 3, LOCAL_SIDE, LOCAL_SIDE]` each.
fn local_views(step: usize) -> [Vec<f32>; 2] {
    let len = GLOBAL * 3 * LOCAL_SIDE * LOCAL_SIDE;
    let view = |v: usize| {
        (0..len)
            .map(|i| ((i as f64 * 0.53 + (step * 2 + v) as f64 * 0.77).cos() * 1.1) as f32)
            .collect()
    };
    [view(0), view(1)]
}

/// Rows `start .. start + n` of a view of `side` pixels, on `device`.
fn shard_of<B: Backend>(
    view: &[f32],
    side: usize,
    start: usize,
    n: usize,
    device: &B::Device,
) -> Tensor<B, 4> {
    let per = 3 * side * side;
    let data = view[start * per..(start + n) * per].to_vec();
    Tensor::from_data(TensorData::new(data, [n, 3, side, side]), device)
}

/// The labels of images `start .. start + n` of step `step`'s global batch (three classes), on
/// `device`.
fn labels<B: Backend>(
    step: usize,
    start: usize,
    n: usize,
    device: &B::Device,
) -> Tensor<B, 1, Int> {
    let values: Vec<i64> = (start..start + n)
        .map(|i| ((i + step) % 3) as i64)
        .collect();
    Tensor::from_data(TensorData::new(values, [n]), device)
}

/// Where images `start .. start + n` of step `step`'s two global views came from (VICRegL's
/// locations): crops of a 12-pixel image of varied sizes and offsets, some flipped.
fn view_geometry(step: usize, start: usize, n: usize) -> [Vec<ViewGeometry>; 2] {
    [0, 1].map(|v| {
        (start..start + n)
            .map(|i| ViewGeometry {
                crop: CropBox {
                    top: (i + step + v) % 4,
                    left: (2 * i + v) % 5,
                    height: 6 + (i + v) % 3,
                    width: 5 + (i + 2 * step) % 4,
                },
                flipped: (i + v + step).is_multiple_of(3),
                output: [SIDE, SIDE],
            })
            .collect()
    })
}

/// Rows `start .. start + n` of a global view, on `device`.
fn shard<B: Backend>(view: &[f32], start: usize, n: usize, device: &B::Device) -> Tensor<B, 4> {
    shard_of(view, SIDE, start, n, device)
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
    method: S,
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
    train_crops(method, extra, replica, start, n, device, true)
}

/// [`train`], the local crops given to a multi-crop method only with `local_crops`.
fn train_crops<B, S>(
    mut method: S,
    extra: &dyn Fn(&S) -> Vec<f64>,
    replica: Option<&Replica<B>>,
    start: usize,
    n: usize,
    device: &B::Device,
    local_crops: bool,
) -> Result<Outcome, String>
where
    B: CollectiveBackend,
    S: SslMethod<B>,
{
    let mut optim = SgdConfig::new().init::<B, S::Online>().unwrap();
    let mut losses = Vec::new();
    for step in 0..STEPS {
        // A method that reads the images' dataset indexes (DeepCluster v2, which clusters once
        // per epoch) goes through epochs of one step: the global batch's images are indexes
        // 0 .. GLOBAL at every step.
        let indexes = method.uses_indexes();
        let progress = Progress {
            step,
            total_steps: 10,
            epoch: if indexes { step } else { 0 },
            total_epochs: if indexes { STEPS } else { 1 },
        };
        let [v1, v2] = views(step);
        // A multi-crop method gets two local crops as well.
        let locals = match local_crops && method.takes_local_crops() {
            true => local_views(step)
                .iter()
                .map(|v| shard_of(v, LOCAL_SIDE, start, n, device))
                .collect(),
            false => Vec::new(),
        };
        let views = Views {
            global: [shard(&v1, start, n, device), shard(&v2, start, n, device)],
            local: locals,
        };
        if method.uses_labels() {
            method.set_labels(labels(step, start, n, device));
        }
        if method.uses_view_geometry() {
            method.set_view_geometry(view_geometry(step, start, n));
        }
        if indexes {
            method.set_indexes(&(start..start + n).collect::<Vec<_>>());
        }
        let out = method.forward_views(views, progress);
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

/// Builds a method on a device for a batch size.
type Build<B, S> = dyn Fn(&<B as burn::tensor::backend::BackendTypes>::Device, usize) -> Result<S, ConfigError>
    + Sync;

/// The one-device run on the whole batch, the one on its first half, and replica 0 and 1 of
/// the two-replica run.
fn runs<B, S>(
    build: &Build<B, S>,
    extra: &(dyn Fn(&S) -> Vec<f64> + Sync),
) -> (Outcome, Outcome, Vec<Outcome>)
where
    B: CollectiveBackend,
    S: SslMethod<B>,
{
    runs_crops(build, extra, true)
}

/// [`runs`], the local crops given to a multi-crop method only with `local_crops`.
fn runs_crops<B, S>(
    build: &Build<B, S>,
    extra: &(dyn Fn(&S) -> Vec<f64> + Sync),
    local_crops: bool,
) -> (Outcome, Outcome, Vec<Outcome>)
where
    B: CollectiveBackend,
    S: SslMethod<B>,
{
    let device = B::Device::default();
    // Built for `batch` images per step (MoCo sizes its queue's steps with it).
    let seeded =
        |d: &B::Device, batch: usize| init_method::<B, S, _>(d, 7, |d| build(d, batch)).unwrap();
    let whole = train_crops(
        seeded(&device, GLOBAL),
        extra,
        None,
        0,
        GLOBAL,
        &device,
        local_crops,
    )
    .unwrap();
    let half = train_crops(
        seeded(&device, GLOBAL / 2),
        extra,
        None,
        0,
        GLOBAL / 2,
        &device,
        local_crops,
    )
    .unwrap();
    let shard_size = GLOBAL / REPLICAS;
    let replicas = data_parallel::run::<B, _, String, _>(
        &DataParallelConfig::local(REPLICAS),
        &vec![device.clone(); REPLICAS],
        |replica, d| {
            let mut method = seeded(d, GLOBAL);
            method
                .set_replica(replica.clone())
                .map_err(|e| e.to_string())?;
            let start = replica.rank() * shard_size;
            train_crops(
                method,
                extra,
                Some(&replica),
                start,
                shard_size,
                d,
                local_crops,
            )
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
    let mut worst = 0.0f64;
    for (rank, replica) in replicas.iter().enumerate() {
        let values = within(&whole.values, &replica.values);
        worst = worst.max(values);
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
    // Shown with --nocapture: the margin on both sides.
    eprintln!("{label}: replicas within {worst:.3} tolerances, the half batch {control:.0} away");
    assert!(
        control > 1000.0,
        "{label}: the half batch ends only {control:.1} tolerances away: the test cannot tell"
    );
}

fn simclr<B: Backend>(d: &B::Device, _: usize) -> Result<SimClr<B, ResNet<B>>, ConfigError> {
    SimClrConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .init(|d| resnet(d), d)
}

/// SimCLR with MACL: the temperature follows the alignment of the global batch's pairs.
fn simclr_macl<B: Backend>(d: &B::Device, _: usize) -> Result<SimClr<B, ResNet<B>>, ConfigError> {
    SimClrConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_loss(PairLossConfig::Macl(
            curriculum_ssl::loss::MaclLossConfig::new(),
        ))
        .init(|d| resnet(d), d)
}

fn moco_v2<B: Backend>(d: &B::Device, batch: usize) -> Result<Moco<B, ResNet<B>>, ConfigError> {
    MocoConfig::moco_v2()
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

/// `method` with its two views passed as one batch ([`ViewPasses::Joint`]): on replicas each
/// batch norm synchronises each view's moments in turn.
fn joint<B: AutodiffBackend, S: SslMethod<B>>(mut method: S) -> S {
    method.set_view_passes(ViewPasses::Joint);
    method
}

fn simclr_joint<B: AutodiffBackend>(
    d: &B::Device,
    batch: usize,
) -> Result<SimClr<B, ResNet<B>>, ConfigError> {
    simclr(d, batch).map(joint)
}

fn byol_joint<B: AutodiffBackend>(
    d: &B::Device,
    batch: usize,
) -> Result<Byol<B, ResNet<B>>, ConfigError> {
    byol(d, batch).map(joint)
}

fn barlow_twins<B: Backend>(
    d: &B::Device,
    _: usize,
) -> Result<BarlowTwins<B, ResNet<B>>, ConfigError> {
    BarlowTwinsConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .init(|d| resnet(d), d)
}

fn vicreg<B: Backend>(d: &B::Device, _: usize) -> Result<VicReg<B, ResNet<B>>, ConfigError> {
    VicRegConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .init(|d| resnet(d), d)
}

/// VIbCReg: IterNorm's mean and covariance are the global batch's (as the batch norms').
fn vibcreg<B: Backend>(d: &B::Device, _: usize) -> Result<VibcReg<B, ResNet<B>>, ConfigError> {
    VibcRegConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_whitening_groups(2)
        .init(|d| resnet(d), d)
}

/// W-MSE: the whitened sub-batches are the global batch's (one order from the step on every
/// replica, over the gathered rows).
fn wmse<B: Backend>(d: &B::Device, _: usize) -> Result<Wmse<B, ResNet<B>>, ConfigError> {
    WmseConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(3)
        .with_loss(curriculum_ssl::loss::WmseLossConfig::new().with_w_size(6))
        .init(|d| resnet(d), d)
}

fn frossl<B: Backend>(d: &B::Device, _: usize) -> Result<FroSsl<B, ResNet<B>>, ConfigError> {
    FroSslConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .init(|d| resnet(d), d)
}

/// DirectCLR on the first 8 of the ResNet's 16 features.
fn directclr<B: Backend>(d: &B::Device, _: usize) -> Result<DirectClr<B, ResNet<B>>, ConfigError> {
    DirectClrConfig::new()
        .with_loss(curriculum_ssl::loss::DirectClrLossConfig::new().with_loss_dim(8))
        .init(|d| resnet(d), d)
}

/// SwAV with a queue of one global batch, used from the second step, and prototypes that
/// train from the first.
fn swav<B: Backend>(d: &B::Device, _: usize) -> Result<Swav<B, ResNet<B>>, ConfigError> {
    SwavConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_num_prototypes(6)
        .with_freeze_prototypes_epochs(0)
        .with_queue_size(GLOBAL)
        .with_queue_start_epoch(0)
        .init(|d| resnet(d), d)
}

fn swav_extra<B: AutodiffBackend>(m: &Swav<B, ResNet<B>>) -> Vec<f64> {
    let queue = m.state().queue.expect("a queue");
    queue.into_data().convert::<f64>().to_vec::<f64>().unwrap()
}

/// A ViT of the views' size in `patch`-pixel patches: width 8, one block of two heads.
fn views_vit<B: Backend>(patch: usize, d: &B::Device) -> Vit<B> {
    VitConfig::new(SIDE)
        .with_patch_size(patch)
        .with_embed_dim(8)
        .with_depth(1)
        .with_num_heads(2)
        .init(d)
}

/// MAE on a ViT of the views' size: width 8, one block, a one-block decoder.
fn mae<B: Backend>(d: &B::Device, _: usize) -> Result<Mae<B, Vit<B>>, ConfigError> {
    MaeConfig::new()
        .with_decoder_dim(8)
        .with_decoder_depth(1)
        .with_decoder_heads(2)
        .init(|d| views_vit(4, d), d)
}

/// AIM on a ViT of the views' size in 2-pixel patches (a 4 × 4 grid), a head 8 wide of one
/// block: each replica draws the global batch's prefix lengths and keeps its rows.
fn aim<B: Backend>(d: &B::Device, _: usize) -> Result<Aim<B, Vit<B>>, ConfigError> {
    AimConfig::new()
        .with_head_dim(8)
        .with_head_blocks(1)
        .init(|d| views_vit(2, d), d)
}

/// AIM: each replica draws the global batch's prefix lengths and keeps its rows; each image's
/// loss is its own mean, so the replicas' mean loss is the one-device loss (f64: the
/// differences are summation order).
#[test]
fn aim_two_replicas_equal_one_device() {
    assert_same("AIM (f64)", runs::<Exact, _>(&aim, &|_| Vec::new()), 1e-11);
}

/// CAPI on a ViT of 2-pixel patches (16 patches: 10 hidden, a block of 6 visible), 5 clusters:
/// each replica draws the global batch's masks and keeps its rows; the Sinkhorn's maximum and
/// batch sums are global, so the teacher's assignments are the one-device ones.
fn capi<B: Backend>(d: &B::Device, _: usize) -> Result<Capi<B, Vit<B>>, ConfigError> {
    CapiConfig::new()
        .with_num_clusters(5)
        .with_predictor_depth(1)
        .with_predictor_heads(2)
        .with_base_momentum(0.9)
        .init(|d| views_vit(2, d), d)
}

/// CAPI: both terms are means over as many tokens per replica and the assignments balance the
/// global batch, so the replicas' mean loss is the one-device loss; the teacher encoder moves
/// by the averaged weights (f64: the differences are summation order).
#[test]
fn capi_two_replicas_equal_one_device() {
    assert_same(
        "CAPI (f64)",
        runs::<Exact, _>(&capi, &|m| values(m.teacher().network())),
        1e-11,
    );
}

/// Hard patches mining on MAE's ViT, in 2-pixel patches (more patches to rank), half of the
/// hidden patches the hardest predicted from the first step: each replica ranks its own images
/// and draws their random patches by their global indices.
fn hpm<B: Backend>(d: &B::Device, _: usize) -> Result<Hpm<B, Vit<B>>, ConfigError> {
    HpmConfig::new()
        .with_mae(
            MaeConfig::new()
                .with_decoder_dim(8)
                .with_decoder_depth(1)
                .with_decoder_heads(2),
        )
        .with_hard_share(curriculum_ssl::curriculum::SchedulerConfig::Constant { value: 0.5 })
        .init(|d| views_vit(2, d), d)
}

/// SimMIM on a ViT of the views' size in 2-pixel patches (a 4 × 4 grid) with units of 3 × 3
/// patches: clipped at the edges, so images hide different numbers of patches and the replicas'
/// losses must be scaled by the global batch's hidden pixels.
fn simmim<B: Backend>(d: &B::Device, _: usize) -> Result<SimMim<B, Vit<B>>, ConfigError> {
    SimMimConfig::new()
        .with_mask_unit(3)
        .with_mask_ratio(0.5)
        .init(|d| views_vit(2, d), d)
}

/// DINO whose last layer trains from the first step.
/// LeJEPA with 32 directions: SIGReg and the invariance over the gathered views.
fn lejepa<B: Backend>(d: &B::Device, _: usize) -> Result<LeJepa<B, ResNet<B>>, ConfigError> {
    LeJepaConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_loss(
            curriculum_ssl::loss::LeJepaLossConfig::new()
                .with_lambda(0.3)
                .with_num_slices(32),
        )
        .init(|d| resnet(d), d)
}

/// VISReg with 32 directions, λ = 0.6: the moments, the sorted projections against the global
/// batch's quantiles and the invariance over the gathered views.
fn visreg<B: Backend>(d: &B::Device, _: usize) -> Result<VisReg<B, ResNet<B>>, ConfigError> {
    VisRegConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_loss(
            curriculum_ssl::loss::VisRegLossConfig::new()
                .with_lambda(0.6)
                .with_num_slices(32),
        )
        .init(|d| resnet(d), d)
}

/// VISReg (as LeJEPA here; lightly's default computes it on each replica's own batch): every
/// replica gathers the views, so the standard deviations, the sorted projections (against the
/// quantiles of the global batch's size) and the invariance are the global batch's, along the
/// step's directions, the same on every replica; two replicas end where one device ends (f64,
/// 1e-10, as LeJEPA; with two local crops).
#[test]
fn visreg_two_replicas_equal_one_device() {
    assert_same(
        "VISReg (f64)",
        runs::<Exact, _>(&visreg, &|_| Vec::new()),
        1e-10,
    );
}

/// VICRegL on a ViT of the views' size in 2-pixel patches (its feature map 4 × 4 positions of
/// 8 features), 5 and 3 matches.
fn vicregl<B: Backend>(d: &B::Device, _: usize) -> Result<VicRegL<B, Vit<B>>, ConfigError> {
    VicRegLConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_local_hidden_dim(6)
        .with_local_output_dim(3)
        .with_loss(curriculum_ssl::loss::VicRegLLossConfig::new().with_num_matches([5, 3]))
        .init(|d| views_vit(2, d), d)
}

/// VICRegL: each replica matches its own images' positions (by the local projections and by the
/// locations of their views' crops and flips), then gathers the global and the matched local
/// projections, so the variances and covariances are the global batch's and every replica
/// computes the one-device loss; two replicas end where one device ends (f64).
#[test]
fn vicregl_two_replicas_equal_one_device() {
    assert_same(
        "VICRegL (f64)",
        runs::<Exact, _>(&vicregl, &|_| Vec::new()),
        1e-10,
    );
}

/// DetCon on a ViT of the views' size in 2-pixel patches (its feature map 4 × 4 positions of 8
/// features), a 3 × 3 grid of regions; DetConB's target at momentum 0.9.
fn detcon<B: Backend>(
    d: &B::Device,
    variant: DetConVariant,
) -> Result<DetCon<B, Vit<B>>, ConfigError> {
    DetConConfig::new()
        .with_variant(variant)
        .with_grid([3, 3])
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_base_momentum(0.9)
        .init(|d| views_vit(2, d), d)
}

fn detcon_s<B: Backend>(d: &B::Device, _: usize) -> Result<DetCon<B, Vit<B>>, ConfigError> {
    detcon(d, DetConVariant::S)
}

fn detcon_b<B: Backend>(d: &B::Device, _: usize) -> Result<DetCon<B, Vit<B>>, ConfigError> {
    detcon(d, DetConVariant::B)
}

/// DetConS and DetConB: each replica pools its images' regions (through their views' crops and
/// flips), projects them (batch norms synchronised) and compares its rows with every replica's
/// targets (gathered); the replicas' mean loss and averaged gradients are one device's, so two
/// replicas end where one device ends (f64), DetConB's target included.
#[test]
fn detcon_two_replicas_equal_one_device() {
    assert_same(
        "DetConS (f64)",
        runs::<Exact, _>(&detcon_s, &|_| Vec::new()),
        1e-10,
    );
    let target = |m: &DetCon<Exact, Vit<Exact>>| values(m.target().unwrap().network());
    assert_same("DetConB (f64)", runs::<Exact, _>(&detcon_b, &target), 1e-10);
}

/// SMoG on the test ResNet: three groups, the momentum copy at 0.9, a reset after the second
/// step (the memory bank's 16 rows the two steps' global batches, clustered by k-means).
fn smog<B: Backend>(d: &B::Device, _: usize) -> Result<Smog<B, ResNet<B>>, ConfigError> {
    SmogConfig::new()
        .with_hidden_dim(8)
        .with_predictor_hidden_dim(8)
        .with_output_dim(4)
        .with_groups(3)
        .with_momentum(0.9)
        .with_reset_interval(2)
        .with_memory_bank_size(2 * GLOBAL)
        .init(|d| resnet(d), d)
}

/// SMoG: each replica moves the groups by every replica's online projections (gathered, their
/// gradient back to their replica), fills the memory bank with them and clusters it alike at
/// the reset; each replica's loss is the mean over its images. Two replicas end where one device
/// ends (f64): the online networks, the copy (reset to the online weights after the second
/// step), the groups (the k-means centres then) and the bank.
#[test]
fn smog_two_replicas_equal_one_device() {
    let state = |m: &Smog<Exact, ResNet<Exact>>| {
        let mut v = values(m.copy().network());
        let (bank, _) = m.memory_bank();
        for t in [m.groups(), bank] {
            v.extend(t.into_data().convert::<f64>().to_vec::<f64>().unwrap());
        }
        v
    };
    assert_same("SMoG (f64)", runs::<Exact, _>(&smog, &state), 1e-10);
}

/// All4One with dropout 0 (dropout masks are drawn per replica): the support set takes every
/// replica's momentum projections, and every input of the loss is gathered (the transformer runs
/// on each replica's rows, its first tokens gathered).
fn all4one<B: Backend>(d: &B::Device, batch: usize) -> Result<All4One<B, ResNet<B>>, ConfigError> {
    All4OneConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_predictor_hidden_dim(8)
        .with_support_set_size(2 * GLOBAL)
        .with_neighbours(3)
        .with_transformer_heads(2)
        .with_transformer_dropout(0.0)
        .with_base_momentum(0.9)
        .init(resnet, batch, d)
}

/// All4One: two replicas end where one device ends (f64): the online networks, the momentum
/// copy and the support set.
#[test]
fn all4one_two_replicas_equal_one_device() {
    let state = |m: &All4One<Exact, ResNet<Exact>>| {
        let mut v = values(m.momentum_encoder().network());
        v.extend(host_values(m.support_set().keys()));
        v
    };
    assert_same("All4One (f64)", runs::<Exact, _>(&all4one, &state), 1e-10);
}

/// DeepCluster v2 on the test ResNet: two heads of 3 and 2 prototypes; the first step (epoch 0)
/// fills the bank, the second (epoch 1) clusters it and learns the clusters.
fn deepcluster_v2<B: Backend>(
    d: &B::Device,
    _: usize,
) -> Result<DeepClusterV2<B, ResNet<B>>, ConfigError> {
    DeepClusterV2Config::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_prototypes(vec![3, 2])
        .init(|d| resnet(d), d)
}

/// DeepCluster v2: each replica writes every replica's normalised projections (gathered) into
/// the bank under their indexes (gathered), so every replica clusters the same bank alike at the
/// second epoch's first step; each replica's loss is its rows' share of the global batch's mean
/// over assigned rows. Two replicas end where one device ends (f64): the online networks, each
/// head's prototypes, both views' banks and the assignments. The second step's loss is positive
/// (the clusters are learnt, not the first epoch's 0).
#[test]
fn deepcluster_v2_two_replicas_equal_one_device() {
    // As many values whatever the bank holds (the control run on half the batch holds 4 rows):
    // the bank's and the assignments' first GLOBAL rows, padded.
    let state = |m: &DeepClusterV2<Exact, ResNet<Exact>>| {
        let host = |t: Tensor<Exact, 2>| t.into_data().convert::<f64>().to_vec::<f64>().unwrap();
        let mut v = Vec::new();
        for t in m.prototypes() {
            v.extend(host(t.clone()));
        }
        for view in [0, 1] {
            let mut rows = host(m.bank(view).unwrap());
            rows.resize(GLOBAL * 4, 0.0);
            v.extend(rows);
        }
        for a in m.assignments() {
            let mut a: Vec<f64> = a.iter().map(|&a| a as f64).collect();
            a.resize(GLOBAL, -1.0);
            v.extend(a);
        }
        v
    };
    let (whole, half, replicas) = runs::<Exact, _>(&deepcluster_v2, &state);
    assert!(whole.losses[1] > 0.0, "{:?}", whole.losses);
    assert_same("DeepCluster v2 (f64)", (whole, half, replicas), 1e-10);
}

/// SupCon with the runs' two local crops as further views.
fn supcon<B: Backend>(d: &B::Device, _: usize) -> Result<SupCon<B, ResNet<B>>, ConfigError> {
    SupConConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .init(|d| resnet(d), d)
}

/// SupCon: each replica's rows (every view, its labels) against every replica's rows and labels,
/// gathered; the replicas' mean loss is the one-device loss, and two replicas end where one
/// device ends (f64; with two local crops, and without).
#[test]
fn supcon_two_replicas_equal_one_device() {
    assert_same(
        "SupCon (f64)",
        runs::<Exact, _>(&supcon, &|_| Vec::new()),
        1e-11,
    );
    assert_same(
        "SupCon, two views (f64)",
        runs_crops::<Exact, _>(&supcon, &|_| Vec::new(), false),
        1e-11,
    );
}

/// EMP-SSL with the runs' two local crops as further patches.
fn emp_ssl<B: Backend>(d: &B::Device, _: usize) -> Result<EmpSsl<B, ResNet<B>>, ConfigError> {
    EmpSslConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_loss(curriculum_ssl::loss::EmpSslLossConfig::new().with_inv_coef(5.0))
        .init(|d| resnet(d), d)
}

/// MMCR with the runs' two local crops as further views.
fn mmcr<B: Backend>(d: &B::Device, _: usize) -> Result<Mmcr<B, ResNet<B>>, ConfigError> {
    MmcrConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_base_momentum(0.9)
        .init(resnet, d)
}

fn dino<B: Backend>(d: &B::Device, _: usize) -> Result<Dino<B, ResNet<B>>, ConfigError> {
    DinoConfig::new()
        .with_hidden_dim(8)
        .with_bottleneck_dim(4)
        .with_output_dim(6)
        .with_base_momentum(0.9)
        .with_freeze_last_layer_epochs(0)
        .init(resnet, d)
}

fn dino_extra<B: Backend>(m: &Dino<B, ResNet<B>>) -> Vec<f64> {
    let mut v = values(m.teacher().network());
    v.extend(
        m.center()
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .unwrap(),
    );
    v
}

/// iBOT on a ViT of the views' size in 2-pixel patches, heads trained from the first step:
/// masks hide different numbers of patches per view, so the patch centre needs every replica's
/// hidden count.
fn ibot<B: Backend>(d: &B::Device, _: usize) -> Result<Ibot<B, Vit<B>>, ConfigError> {
    ibot_on_vit(d, IbotConfig::new())
}

/// [`ibot`] with DINOv2's KoLeo: its nearest neighbours are the global batch's.
fn ibot_koleo<B: Backend>(d: &B::Device, _: usize) -> Result<Ibot<B, Vit<B>>, ConfigError> {
    ibot_on_vit(d, IbotConfig::new().with_koleo_weight(0.1))
}

/// iBOT with DINOv2's Sinkhorn–Knopp centring and KoLeo: the [CLS] outputs and the hidden
/// tokens' outputs (different numbers per replica) balanced over the global batch.
fn ibot_sinkhorn<B: Backend>(d: &B::Device, _: usize) -> Result<Ibot<B, Vit<B>>, ConfigError> {
    ibot_on_vit(
        d,
        IbotConfig::new()
            .with_koleo_weight(0.1)
            .with_sinkhorn_knopp(true),
    )
}

/// iBOT++ (the visible tokens weighted 0.5): the patch centre moves by every replica's patch
/// tokens, hidden and visible.
fn ibot_plus_plus<B: Backend>(d: &B::Device, _: usize) -> Result<Ibot<B, Vit<B>>, ConfigError> {
    ibot_on_vit(
        d,
        IbotConfig::new().with_patch_loss(
            curriculum_ssl::loss::IbotPatchLossConfig::new().with_visible_loss_weight(0.5),
        ),
    )
}

fn ibot_on_vit<B: Backend>(
    d: &B::Device,
    config: IbotConfig,
) -> Result<Ibot<B, Vit<B>>, ConfigError> {
    let vit = |d: &B::Device| {
        VitConfig::new(SIDE)
            .with_patch_size(2)
            .with_embed_dim(8)
            .with_depth(1)
            .with_num_heads(2)
            .init(d)
    };
    config
        .with_hidden_dim(8)
        .with_bottleneck_dim(4)
        .with_output_dim(6)
        .with_base_momentum(0.9)
        .with_freeze_last_layer_epochs(0)
        .init(vit, d)
}

fn ibot_extra<B: Backend>(m: &Ibot<B, Vit<B>>) -> Vec<f64> {
    let mut v = values(m.teacher().network());
    for centre in [m.center(), m.patch_center()] {
        v.extend(centre.into_data().convert::<f64>().to_vec::<f64>().unwrap());
    }
    v
}

/// MSN on a ViT of the views' size in 2-pixel patches, 30 % of every anchor's tokens dropped:
/// the replicas draw the global batch's masks, balance the gathered batch's targets and sum the
/// mean assignment over replicas.
fn msn<B: Backend>(d: &B::Device, _: usize) -> Result<Msn<B, Vit<B>>, ConfigError> {
    let vit = |d: &B::Device| {
        VitConfig::new(SIDE)
            .with_patch_size(2)
            .with_embed_dim(8)
            .with_depth(1)
            .with_num_heads(2)
            .init(d)
    };
    MsnConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_num_prototypes(6)
        .with_mask_ratio(0.3)
        .with_base_momentum(0.9)
        .init(vit, d)
}

/// I-JEPA on a ViT of the views' size in 2-pixel patches (a 4 × 4 grid), a one-block predictor:
/// the replicas must draw the global batch's blocks, cut to its shortest lists.
fn ijepa<B: Backend>(d: &B::Device, _: usize) -> Result<Ijepa<B, Vit<B>>, ConfigError> {
    let vit = |d: &B::Device| {
        VitConfig::new(SIDE)
            .with_patch_size(2)
            .with_embed_dim(8)
            .with_depth(1)
            .with_num_heads(2)
            .init(d)
    };
    IjepaConfig::new()
        .with_predictor_dim(8)
        .with_predictor_depth(1)
        .with_predictor_heads(2)
        .with_base_momentum(0.9)
        .init(vit, d)
}

fn nnclr<B: Backend>(d: &B::Device, batch: usize) -> Result<NnClr<B, ResNet<B>>, ConfigError> {
    NnClrConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_predictor_hidden_dim(8)
        .with_support_set_size(2 * GLOBAL)
        .init(|d| resnet(d), batch, d)
}

fn nnclr_extra<B: Backend>(m: &NnClr<B, ResNet<B>>) -> Vec<f64> {
    host_values(m.support_set().keys())
}

/// A tensor's values on the host.
fn host_values<B: Backend>(x: Tensor<B, 2>) -> Vec<f64> {
    x.into_data().convert::<f64>().to_vec::<f64>().unwrap()
}

fn nnsiam<B: Backend>(d: &B::Device, batch: usize) -> Result<NnSiam<B, ResNet<B>>, ConfigError> {
    NnSiamConfig::new()
        .with_simsiam(SimSiamConfig::new().with_dim(4).with_predictor_dim(8))
        .with_support_set_size(2 * GLOBAL)
        .init(|d| resnet(d), batch, d)
}

fn nnbyol<B: Backend>(d: &B::Device, batch: usize) -> Result<NnByol<B, ResNet<B>>, ConfigError> {
    NnByolConfig::new()
        .with_byol(
            ByolConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_base_momentum(0.9),
        )
        .with_support_set_size(2 * GLOBAL)
        .init(resnet, batch, d)
}

fn nnbyol_extra<B: Backend>(m: &NnByol<B, ResNet<B>>) -> Vec<f64> {
    let mut v = values(m.target().network());
    v.extend(host_values(m.support_set().keys()));
    v
}

fn ressl<B: Backend>(d: &B::Device, batch: usize) -> Result<ReSsl<B, ResNet<B>>, ConfigError> {
    ReSslConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_base_momentum(0.9)
        .with_queue_size(2 * GLOBAL)
        .init(resnet, batch, d)
}

fn ressl_extra<B: Backend>(m: &ReSsl<B, ResNet<B>>) -> Vec<f64> {
    let mut v = values(m.momentum_encoder().network());
    v.extend(host_values(m.queue().keys()));
    v
}

fn tico<B: Backend>(d: &B::Device, _: usize) -> Result<Tico<B, ResNet<B>>, ConfigError> {
    TicoConfig::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_base_momentum(0.9)
        .init(resnet, d)
}

fn tico_extra<B: Backend>(m: &Tico<B, ResNet<B>>) -> Vec<f64> {
    let mut v = values(m.momentum_encoder().network());
    v.extend(
        m.covariance()
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .unwrap(),
    );
    v
}

fn moco_v3<B: Backend>(d: &B::Device, _: usize) -> Result<MocoV3<B, ResNet<B>>, ConfigError> {
    MocoV3Config::new()
        .with_hidden_dim(8)
        .with_output_dim(4)
        .with_base_momentum(0.9)
        .init(resnet, d)
}

fn moco_extra<B: Backend>(m: &Moco<B, ResNet<B>>) -> Vec<f64> {
    let mut v = values(m.key_encoder().network());
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
        runs::<Exact, _>(&byol, &|m| values(m.target().network())),
        1e-11,
    );
    // The two views as one batch, on each replica and on the one device.
    assert_same(
        "SimCLR, views joint (f64)",
        runs::<Exact, _>(&simclr_joint, &|_| Vec::new()),
        1e-11,
    );
    // MACL's alignment (its temperature) is the global batch's: the gathered projections'.
    assert_same(
        "SimCLR with MACL (f64)",
        runs::<Exact, _>(&simclr_macl, &|_| Vec::new()),
        1e-11,
    );
    assert_same(
        "BYOL, views joint (f64)",
        runs::<Exact, _>(&byol_joint, &|m| values(m.target().network())),
        1e-11,
    );
    // Losses on the batch's statistics, on the gathered projections. 1e-10: the standardisation
    // over 8 rows divides the sums' last-bit differences (the gather adds zeros in another
    // order) by small standard deviations; the half-batch control stays > 1000 tolerances away.
    assert_same(
        "Barlow Twins (f64)",
        runs::<Exact, _>(&barlow_twins, &|_| Vec::new()),
        1e-10,
    );
    assert_same(
        "VICReg (f64)",
        runs::<Exact, _>(&vicreg, &|_| Vec::new()),
        1e-10,
    );
    // VIbCReg: IterNorm whitens with the global batch's mean and covariance, and the loss's
    // variances and correlations are the global batch's.
    assert_same(
        "VIbCReg (f64)",
        runs::<Exact, _>(&vibcreg, &|_| Vec::new()),
        1e-10,
    );
    // W-MSE: each sub-batch's mean, covariance and Cholesky factor are those of the global
    // batch's rows the step's order puts in it.
    assert_same(
        "W-MSE (f64)",
        runs::<Exact, _>(&wmse, &|_| Vec::new()),
        1e-10,
    );
    // FroSSL's column norms and covariance are the global batch's.
    assert_same(
        "FroSSL (f64)",
        runs::<Exact, _>(&frossl, &|_| Vec::new()),
        1e-10,
    );
    // DirectCLR's negatives are the global batch's backbone features.
    assert_same(
        "DirectCLR (f64)",
        runs::<Exact, _>(&directclr, &|_| Vec::new()),
        1e-11,
    );
    // Multi-crop with two local crops; SwAV's codes over the gathered batch and its queue,
    // DINO's centre from the replicas' mean teacher output.
    assert_same("SwAV (f64)", runs::<Exact, _>(&swav, &swav_extra), 1e-10);
    assert_same("DINO (f64)", runs::<Exact, _>(&dino, &dino_extra), 1e-10);
    // LeJEPA: the characteristic functions and the global views' mean over the global batch,
    // the step's directions the same on every replica.
    assert_same(
        "LeJEPA (f64)",
        runs::<Exact, _>(&lejepa, &|_| Vec::new()),
        1e-10,
    );

    // EMP-SSL: the coding rates and the images' mean embeddings over the gathered patches.
    assert_same(
        "EMP-SSL (f64)",
        runs::<Exact, _>(&emp_ssl, &|_| Vec::new()),
        1e-10,
    );
    // MMCR: the centroids' nuclear norm is the global batch's (every view gathered).
    assert_same(
        "MMCR (f64)",
        runs::<Exact, _>(&mmcr, &|m| values(m.momentum_encoder().network())),
        1e-10,
    );
    // NNCLR's support set takes every replica's projections; TiCo's covariance is the global
    // batch's.
    assert_same("NNCLR (f64)", runs::<Exact, _>(&nnclr, &nnclr_extra), 1e-10);
    // NNSiam's and NNBYOL's support sets take every replica's (target) projections; each
    // replica's images find their neighbours in it.
    assert_same(
        "NNSiam (f64)",
        runs::<Exact, _>(&nnsiam, &|m| host_values(m.support_set().keys())),
        1e-10,
    );
    assert_same(
        "NNBYOL (f64)",
        runs::<Exact, _>(&nnbyol, &nnbyol_extra),
        1e-10,
    );
    // ReSSL's queue takes every replica's keys.
    assert_same("ReSSL (f64)", runs::<Exact, _>(&ressl, &ressl_extra), 1e-10);
    assert_same("TiCo (f64)", runs::<Exact, _>(&tico, &tico_extra), 1e-10);
    // MoCo v3's keys are every replica's; each replica's queries find their positives at its
    // own rows.
    assert_same(
        "MoCo v3 (f64)",
        runs::<Exact, _>(&moco_v3, &|m| values(m.momentum_encoder().network())),
        1e-10,
    );
    // MAE: each replica draws the global batch's masks and keeps its rows; every image hides
    // as many patches, so the replicas' mean loss is the one-device loss (no batch statistics).
    assert_same("MAE (f64)", runs::<Exact, _>(&mae, &|_| Vec::new()), 1e-11);
    // Hard patches mining: the masks follow each replica's predictions for its own images.
    assert_same("HPM (f64)", runs::<Exact, _>(&hpm, &|_| Vec::new()), 1e-11);
    // SimMIM: the images of a replica hide other numbers of patches than the other's; each
    // replica's loss divides by the global batch's hidden pixels.
    assert_same(
        "SimMIM (f64)",
        runs::<Exact, _>(&simmim, &|_| Vec::new()),
        1e-11,
    );
    // I-JEPA: the global batch's blocks; the target encoder moves by the averaged weights.
    assert_same(
        "I-JEPA (f64)",
        runs::<Exact, _>(&ijepa, &|m| values(m.target().network())),
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
        runs::<Fast, _>(&byol, &|m| values(m.target().network())),
        2e-4,
    );
    // iBOT: the global batch's masks, both centres. On Flex: its local crops' positional
    // embeddings are interpolated bicubically, whose backward NdArray does not have; f32 sums
    // in another order, as the runs above.
    assert_same("iBOT (Flex)", runs::<Fast, _>(&ibot, &ibot_extra), 2e-4);
    // KoLeo over the gathered batch, and DINOv2's Sinkhorn–Knopp centring over the global batch
    // (the teacher's [CLS] outputs and the hidden tokens' outputs, different numbers per
    // replica): in f64 on the global crops (no interpolation). Not in f32: KoLeo's nearest
    // neighbour is an argmax over cosines that this one-block ViT makes nearly alike (chords of
    // about 0.05 from its loss, cosines near 0.999), so a last-bit change in any
    // operation can pick another neighbour — measured: changing the rounding of the softmax
    // and the layer norm alone moved the f32 one-device run by 447 tolerances of 2e-4, with
    // KoLeo off by 0.12.
    assert_same(
        "iBOT + KoLeo (f64)",
        runs_crops::<Exact, _>(&ibot_koleo, &ibot_extra, false),
        1e-10,
    );
    assert_same(
        "iBOT + Sinkhorn-Knopp + KoLeo (f64)",
        runs_crops::<Exact, _>(&ibot_sinkhorn, &ibot_extra, false),
        1e-10,
    );
    // MSN: the global batch's masks (anchor and focal views), Sinkhorn over the gathered
    // targets, the regulariser's mean over every replica's anchors; Flex for the same reason.
    // 1e-3: its projector batch-normalises [CLS] features that the one-block ViT makes nearly
    // alike across images, so the replicas' other summation order of the batch moments is
    // divided by a small spread (measured 1.05 tolerances of 2e-4 on AVX2: a margin of 5 here).
    assert_same(
        "MSN (Flex)",
        runs::<Fast, _>(&msn, &|m| values(m.target().network())),
        1e-3,
    );
}

/// iBOT++ on two replicas equals one device (f64, the global crops): each replica's patch loss
/// over its images' hidden and visible tokens, the patch centre from every replica's tokens.
#[test]
fn ibot_plus_plus_on_two_replicas_equals_one_device() {
    assert_same(
        "iBOT++ (f64)",
        runs_crops::<Exact, _>(&ibot_plus_plus, &ibot_extra, false),
        1e-10,
    );
}

/// MoCo's shuffling batch norm on two replicas: the keys each replica enqueues are the key
/// encoder's on the replicas' slices of the shuffled global batch, each slice normalised with its
/// own statistics, put back in the images' order (computed here on one device); synchronised
/// batch norm would give other keys.
#[test]
fn shuffle_bn_encodes_each_slice_of_the_shuffle_with_its_own_statistics() {
    use curriculum_ssl::loss::l2_normalize;
    use curriculum_ssl::method::shuffle_permutation;
    let build = |d: &<Exact as burn::tensor::backend::BackendTypes>::Device| {
        MocoConfig::moco_v2()
            .with_hidden_dim(Some(8))
            .with_output_dim(4)
            .with_queue_size(2 * GLOBAL)
            .with_shuffle_bn(true)
            .init(resnet, GLOBAL, d)
    };
    let device = Default::default();
    let reference = init_method::<Exact, _, _>(&device, 7, build).unwrap();
    let [v1, v2] = views(0);
    let whole = shard::<Exact>(&v2, 0, GLOBAL, &device);
    let order = shuffle_permutation(GLOBAL, 0, 2);
    let half = GLOBAL / 2;
    let rows = |t: Tensor<Exact, 2>| -> Vec<Vec<f64>> {
        let [n, d] = t.dims();
        let v: Vec<f64> = t.into_data().convert::<f64>().to_vec().unwrap();
        (0..n).map(|i| v[i * d..(i + 1) * d].to_vec()).collect()
    };
    let mut expected = vec![Vec::new(); GLOBAL];
    for slice in order.chunks(half) {
        let ids: Vec<i64> = slice.iter().map(|&i| i as i64).collect();
        let x = whole
            .clone()
            .select(0, Tensor::from_data(TensorData::new(ids, [half]), &device));
        let keys = rows(l2_normalize(reference.key_encoder().network().forward(x)));
        for (key, &image) in keys.into_iter().zip(slice) {
            expected[image] = key;
        }
    }
    let synchronised = rows(l2_normalize(
        reference.key_encoder().network().forward(whole),
    ));
    let progress = Progress {
        step: 0,
        total_steps: 10,
        epoch: 0,
        total_epochs: 1,
    };
    let queues = data_parallel::run::<Exact, _, String, _>(
        &DataParallelConfig::local(2),
        &[Default::default(), Default::default()],
        |replica, d| {
            let mut method = init_method::<Exact, _, _>(d, 7, build).map_err(|e| e.to_string())?;
            method
                .set_replica(replica.clone())
                .map_err(|e| e.to_string())?;
            let start = replica.rank() * half;
            let out = method.forward(
                shard(&v1, start, half, d),
                shard(&v2, start, half, d),
                progress,
            );
            let _ = method.gradients(&out.loss);
            method.after_step(progress);
            Ok(rows(method.queue().keys().narrow(0, 0, GLOBAL)))
        },
    )
    .unwrap();
    let off = |a: &[Vec<f64>], b: &[Vec<f64>]| -> f64 {
        a.iter()
            .flatten()
            .zip(b.iter().flatten())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    };
    for queue in &queues {
        assert!(off(queue, &expected) < 1e-12, "{}", off(queue, &expected));
        assert!(
            off(queue, &synchronised) > 1e-3,
            "sync-BN keys would pass too"
        );
    }
}

#[test]
fn the_gather_concatenates_in_rank_order_and_sums_gradients_back() {
    // Replica r holds rows [r + 1, 10(r + 1)] (x2 rows); the loss on the gathered [4, 2] is
    // Σ w ⊙ gathered, whose gradient on a replica's own rows is w's rows; summed over the two
    // replicas, each replica's rows receive 2·w (lightly issue #1528: 1·w was the bug).
    let w = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]];
    let out = data_parallel::run::<Exact, _, String, _>(
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
    let err = data_parallel::run::<Exact, (), String, _>(
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
    let err = data_parallel::run::<Exact, (), String, _>(
        &DataParallelConfig::local(1),
        &[Default::default()],
        |replica, d| {
            let mut method = init_method::<Exact, _, _>(d, 0, |d| {
                SimClrConfig::new()
                    .with_hidden_dim(8)
                    .with_output_dim(4)
                    .with_pgd(Some(curriculum_ssl::method::PgdConfig::new()))
                    .init(resnet::<Exact>, d)
            })
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

// ---------------------------------------------------------------------------------------------
// The training loop with replicas (`TrainerBuilder::replica`).

mod trainer {
    use super::*;
    use curriculum_ssl::data::{embedded, ImageArray, Loader, LoaderConfig};
    use curriculum_ssl::pipeline::{Augmenter, PipelineConfig};
    use curriculum_ssl::train::{
        Hook, SelfSupervised, StartMode, TrainConfig, TrainError, Trainer,
    };
    use std::path::{Path, PathBuf};

    type Dev = <Fast as burn::tensor::backend::BackendTypes>::Device;
    type MethodOn<B> = SimClr<B, ResNet<B>>;
    type StepOn<B> = SelfSupervised<
        B,
        MethodOn<B>,
        curriculum_ssl::optim::SgdOptimizer<<MethodOn<B> as SslMethod<B>>::Online, B>,
        ImageArray,
    >;
    type Step = StepOn<Fast>;

    /// The relative tolerance (plus a tenth of it absolute) of the trainer's comparisons, which
    /// run in f64 (`NdArray<f64>`). The one-device run and the replicas differ only in the order
    /// of floating-point sums (sync-BN's statistics, the averaged gradients, the gathered
    /// negatives). Measured on an Intel Xeon with AVX-512 (2026-11-26), as the largest
    /// |a − b| / max(|a|, |b|): online networks 8.8e-12 after 4 steps (1.8e-13 after the
    /// resume), losses 4e-16, the curation test's FRDs 4e-13; 1e-9 leaves two orders of
    /// magnitude for other CPUs' summation orders, and the closest curation decision (an FRD
    /// 1.7e-4 below its threshold) is five orders of magnitude wider than that.
    ///
    /// Not f32: these runs train a batch-normalised network for several epochs on images with
    /// flat regions, where a last-bit difference can flip a ReLU for thousands of pixels at
    /// once, or a curation decision (that FRD is 1.7e-4 from its threshold, within f32's drift
    /// over 8 steps); on an AMD EPYC machine without AVX-512 the f32 versions of these tests
    /// ended 58 tolerances (of 2e-4) apart and redrew one batch more on one side, every run,
    /// while they passed on Intel machines. The claim — the replicas compute the one-device
    /// run — is exact up to the order of sums, which f64 shows on every CPU.
    const F64: f64 = 1e-9;

    fn run_dir(name: &str) -> PathBuf {
        crate::common::run_scratch("curriculum-ssl-data-parallel", name)
    }

    /// SimCLR's pipeline with all its random operations (crop, flip, colour jitter, grayscale):
    /// each replica draws the parameters of the whole global batch and keeps its rows, so the
    /// views are the one-device run's.
    fn pipeline() -> Augmenter {
        PipelineConfig::simclr(28, 1).init(1).unwrap()
    }

    /// SimCLR on the small CIFAR-stem ResNet (sync-BN in every block and the head). Not LeNet:
    /// its max-pooling over Fashion-MNIST's flat background meets exact ties, which a last-bit
    /// difference between the runs breaks the other way (one weight of 53,084 ended 1.6 % off).
    fn method<B: CollectiveBackend>(d: &B::Device) -> MethodOn<B> {
        init_method::<B, _, ConfigError>(d, 3, |d| {
            SimClrConfig::new()
                .with_hidden_dim(16)
                .with_output_dim(8)
                .init(
                    |d| {
                        ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
                            .with_base_width(2)
                            .with_in_channels(1)
                            .with_stem(Stem::Cifar)
                            .init(d)
                    },
                    d,
                )
        })
        .unwrap()
    }

    /// 64 embedded images with a pattern added, global batches of 16: 4 steps an epoch.
    fn loader() -> Loader<ImageArray> {
        let images = embedded::train()
            .unwrap()
            .select(&(0..64).collect::<Vec<_>>())
            .unwrap();
        // A fixed pattern of 0–22 grey levels over every pixel. Fashion-MNIST's flat black
        // background gives thousands of exactly equal pre-activations per channel; when sync-BN
        // centres one of them within an ulp of zero, the last-bit difference between one
        // device's and two replicas' sums flips the ReLU for all of them at once (on an AMD
        // EPYC machine: 1,606 of 5,610 values more than 2e-4 apart after four steps). With the
        // pattern the runs end 2.4e-6 apart.
        let pixels: Vec<u8> = images
            .all_pixels()
            .iter()
            .enumerate()
            .map(|(i, &p)| p.saturating_add(((i * 7919) % 23) as u8))
            .collect();
        let labels = images.labels().map(|l| l.to_vec());
        let images = ImageArray::new("embedded + pattern", 28, 28, 1, pixels, labels, 10).unwrap();
        let config = LoaderConfig {
            batch_size: 16,
            seed: 2,
            workers: 1,
            ..LoaderConfig::default()
        };
        Loader::new(images, "embedded", config).unwrap()
    }

    /// Builds and trains a run of `epochs` epochs in `dir` (as replica `replica`, if given),
    /// with `hooks`; returns the online networks' values and the losses of its steps.
    fn train<B: CollectiveBackend>(
        dir: &Path,
        epochs: usize,
        mode: StartMode,
        replica: Option<Replica<B>>,
        hooks: Vec<Box<dyn Hook<B, StepOn<B>>>>,
        d: &B::Device,
    ) -> Result<Trained, TrainError> {
        train_with(pipeline(), 0.05, dir, epochs, mode, replica, hooks, d)
    }

    /// [`train`] with another augmentation and learning rate.
    #[allow(clippy::too_many_arguments)]
    fn train_with<B: CollectiveBackend>(
        augmenter: Augmenter,
        lr: f64,
        dir: &Path,
        epochs: usize,
        mode: StartMode,
        replica: Option<Replica<B>>,
        hooks: Vec<Box<dyn Hook<B, StepOn<B>>>>,
        d: &B::Device,
    ) -> Result<Trained, TrainError> {
        let mut builder = Trainer::builder(
            method(d),
            curriculum_ssl::optim::SgdConfig::new().init().unwrap(),
            augmenter,
            loader(),
        )
        .config(
            TrainConfig::new()
                .with_epochs(epochs)
                .with_warmup_epochs(0)
                .with_lr(lr)
                .with_checkpoint_every(1)
                .with_progress_bar(false),
        )
        .run_dir(dir)
        .start(mode);
        for hook in hooks {
            builder = builder.boxed_hook(hook);
        }
        if let Some(replica) = replica {
            builder = builder.replica(replica);
        }
        let mut trainer = builder.build(d)?;
        let summary = trainer.fit()?;
        Ok((
            values(trainer.method().online()),
            summary.steps.iter().map(|s| s.loss).collect(),
        ))
    }

    /// The online networks' values and the losses of the steps.
    type Trained = (Vec<f64>, Vec<f64>);

    fn on_replicas<B: CollectiveBackend>(
        dir: &Path,
        epochs: usize,
        mode: StartMode,
        hooks: impl Fn(usize) -> Vec<Box<dyn Hook<B, StepOn<B>>>> + Sync,
    ) -> Result<Vec<Trained>, data_parallel::DataParallelError> {
        data_parallel::run::<B, _, TrainError, _>(
            &DataParallelConfig::local(2),
            &[B::Device::default(), B::Device::default()],
            |replica, d| {
                let rank = replica.rank();
                train(dir, epochs, mode, Some(replica), hooks(rank), d)
            },
        )
    }

    /// Asserts `a` and `b` equal within [`F64`]'s tolerance: the runs compared here are f64
    /// (see [`F64`] for why not f32).
    fn close(label: &str, a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{label}");
        let worst = a
            .iter()
            .zip(b)
            .map(|(a, b)| (a - b).abs() / (F64 * a.abs().max(b.abs()) + F64 / 10.0))
            .fold(0.0, f64::max);
        assert!(worst <= 1.0, "{label}: off by {worst:.2} tolerances");
    }

    fn files_under(dir: &Path) -> Vec<String> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.extend(files_under(&path));
            } else {
                found.push(path.display().to_string());
            }
        }
        found.sort();
        found
    }

    #[test]
    fn two_replicas_train_as_one_device_write_once_and_resume_on_one() {
        let d = Default::default();
        let one = run_dir("one");
        let (one_values, one_losses) =
            train::<Exact>(&one, 1, StartMode::Fresh, None, vec![], &d).unwrap();
        let two = run_dir("two");
        let replicas = on_replicas::<Exact>(&two, 1, StartMode::Fresh, |_| vec![]).unwrap();
        for (rank, (values, losses)) in replicas.iter().enumerate() {
            // The loss each replica reports is the replicas' mean, the one-device loss.
            close(&format!("replica {rank}: losses"), &one_losses, losses);
            close(
                &format!("replica {rank}: online networks"),
                &one_values,
                values,
            );
        }
        // The same files as the one-device run, written once (replica 0), and every step's row
        // (one TensorBoard event file, named by the time it was opened).
        let relative = |dir: &Path| -> Vec<String> {
            files_under(dir)
                .into_iter()
                .map(|f| f.replace(&dir.display().to_string(), ""))
                .map(
                    |f| match f.split_once("/tensorboard/events.out.tfevents.") {
                        Some((head, _)) => format!("{head}/tensorboard/events.out.tfevents.*"),
                        None => f,
                    },
                )
                .collect()
        };
        assert_eq!(relative(&one), relative(&two));
        let rows = std::fs::read_to_string(two.join("steps.csv")).unwrap();
        assert_eq!(rows.lines().count(), 1 + 4, "{rows}");
        // A checkpoint of two replicas continues on one device, and one of one device on two.
        let (two_then_one, _) =
            train::<Exact>(&two, 2, StartMode::Extend, None, vec![], &d).unwrap();
        let extended = on_replicas::<Exact>(&one, 2, StartMode::Extend, |_| vec![]).unwrap();
        close("2 then 1 against 1 then 2", &extended[0].0, &two_then_one);
        close("the replicas stay equal", &extended[0].0, &extended[1].0);
    }

    /// The steps.csv columns `name` of a run.
    fn column(dir: &Path, name: &str) -> Vec<String> {
        let text = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
        let mut lines = text.lines();
        let i = lines
            .next()
            .unwrap()
            .split(',')
            .position(|c| c == name)
            .unwrap_or_else(|| panic!("no column {name}"));
        lines
            .map(|l| l.split(',').nth(i).unwrap().to_string())
            .collect()
    }

    /// Fréchet batch curation on two replicas: every replica measures the gathered batch, so
    /// they keep one threshold and redraw the same batches, as the one-device run does.
    #[test]
    fn batch_curation_on_two_replicas_decides_as_one_device() {
        use curriculum_ssl::curation::FrechetCurationConfig;
        use curriculum_ssl::hooks::FrechetCurationHook;
        let curation = || -> Vec<Box<dyn Hook<Exact, StepOn<Exact>>>> {
            vec![Box::new(
                FrechetCurationHook::new(
                    FrechetCurationConfig::new()
                        .with_warmup_epochs(1)
                        .with_max_retries(2),
                )
                .unwrap(),
            )]
        };
        // A small learning rate: the FRDs after the calibration epoch stay near its mean, so
        // some batches are redrawn (at 0.05 the features settle and every later batch passes).
        let lr = 0.002;
        let d = Default::default();
        let one = run_dir("curation-one");
        let (one_values, one_losses) = train_with::<Exact>(
            pipeline(),
            lr,
            &one,
            3,
            StartMode::Fresh,
            None,
            curation(),
            &d,
        )
        .unwrap();
        let two = run_dir("curation-two");
        let replicas = data_parallel::run::<Exact, _, TrainError, _>(
            &DataParallelConfig::local(2),
            &[Default::default(), Default::default()],
            |replica, d| {
                train_with(
                    pipeline(),
                    lr,
                    &two,
                    3,
                    StartMode::Fresh,
                    Some(replica),
                    curation(),
                    d,
                )
            },
        )
        .unwrap();
        let redraws = column(&one, "redraws");
        assert_eq!(redraws, column(&two, "redraws"));
        assert!(
            redraws.iter().any(|r| r != "0"),
            "no batch was redrawn: the test cannot tell ({redraws:?})"
        );
        let frd = |dir: &Path| -> Vec<f64> {
            column(dir, "frd")
                .iter()
                .map(|v| v.parse().unwrap())
                .collect()
        };
        close("FRD", &frd(&one), &frd(&two));
        for (values, losses) in &replicas {
            close("losses", &one_losses, losses);
            close("online networks", &one_values, values);
        }
    }

    /// MICO's self-paced AutoAugment on two replicas: the same sub-policies, coins and learned
    /// magnitudes as on one device (the magnitudes move, so the test can tell). In f64: its
    /// posterise and solarise operations are steps in the magnitude, which f32's last-bit
    /// differences between the runs' losses cross within a few steps.
    #[test]
    fn self_paced_auto_augment_on_two_replicas_learns_as_one_device() {
        use curriculum_ssl::curriculum::SelfPacedAutoAugmentConfig;
        use curriculum_ssl::hooks::SelfPacedAutoAugmentHook;
        let augmenter = || {
            let mut p = PipelineConfig::simclr(28, 1);
            p.auto_augment = Some(SelfPacedAutoAugmentConfig::new());
            p.init(1).unwrap()
        };
        let hooks = || -> Vec<Box<dyn Hook<Exact, StepOn<Exact>>>> {
            vec![Box::new(SelfPacedAutoAugmentHook::new())]
        };
        let d = Default::default();
        let one = run_dir("aa-one");
        let (one_values, one_losses) = train_with::<Exact>(
            augmenter(),
            0.05,
            &one,
            1,
            StartMode::Fresh,
            None,
            hooks(),
            &d,
        )
        .unwrap();
        let two = run_dir("aa-two");
        let replicas = data_parallel::run::<Exact, _, TrainError, _>(
            &DataParallelConfig::local(2),
            &[Default::default(), Default::default()],
            |replica, d| {
                train_with(
                    augmenter(),
                    0.05,
                    &two,
                    1,
                    StartMode::Fresh,
                    Some(replica),
                    hooks(),
                    d,
                )
            },
        )
        .unwrap();
        assert_eq!(column(&one, "aa_policy"), column(&two, "aa_policy"));
        let magnitudes = |dir: &Path| -> Vec<f64> {
            let text =
                std::fs::read_to_string(dir.join("checkpoints/epoch-0001/curricula.json")).unwrap();
            let json: serde_json::Value = serde_json::from_str(&text).unwrap();
            json["augmenter"]["auto_augment"]["magnitudes"]
                .as_array()
                .unwrap_or_else(|| panic!("{text}"))
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        };
        let (m1, m2) = (magnitudes(&one), magnitudes(&two));
        assert!(
            m1.iter().any(|&m| (m - 0.1).abs() > 1e-6),
            "{m1:?}: nothing learned"
        );
        close("magnitudes", &m1, &m2);
        for (values, losses) in &replicas {
            close("losses", &one_losses, losses);
            close("online networks", &one_values, values);
        }
    }

    /// Fails the step `at` of replica `rank` (the data of a replica that could not be read,
    /// say).
    struct Fails {
        at: usize,
    }

    impl Hook<Fast, Step> for Fails {
        fn name(&self) -> &'static str {
            "fails"
        }

        fn runs_on_replicas(&self) -> bool {
            true
        }

        fn after_step(
            &mut self,
            _: &mut curriculum_ssl::train::RunView<'_, Fast, Step>,
            progress: Progress,
            _: f64,
        ) -> Result<Vec<(String, f64)>, TrainError> {
            if progress.step == self.at {
                return Err(TrainError::Hook {
                    hook: "fails",
                    step: progress.step,
                    reason: "the replica's shard could not be read".into(),
                });
            }
            Ok(Vec::new())
        }
    }

    #[test]
    fn a_replica_that_fails_mid_run_is_named_and_the_last_checkpoint_resumes() {
        let dir = run_dir("fails");
        // Replica 1 fails at step 5 (epoch 2); epoch 1's checkpoint is on disk.
        let err = on_replicas::<Fast>(&dir, 2, StartMode::Fresh, |rank| {
            vec![Box::new(Fails {
                at: if rank == 1 { 5 } else { usize::MAX },
            })]
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("replica 1 of 2 failed: fails at step 6: the replica's shard"),
            "{err}"
        );
        assert!(err.contains("replica 0: replica 0:"), "{err}");
        // The run resumes from it, on one device, and finishes.
        let d = Dev::default();
        let hook: Vec<Box<dyn Hook<Fast, Step>>> = vec![Box::new(Fails { at: usize::MAX })];
        let (_, losses) = train(&dir, 2, StartMode::Resume, None, hook, &d).unwrap();
        assert_eq!(losses.len(), 4, "epoch 2 only");
    }
}

// ---------------------------------------------------------------------------------------------
// Two machines, played by two processes on the loopback address with burn-collective's
// orchestrator: the global level of the collective layer (websockets and its data service).

mod machines {
    use super::*;
    use curriculum_ssl::data_parallel::MultiNode;
    use std::net::TcpListener;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    const NODE: &str = "CURRICULUM_SSL_TEST_NODE";

    /// The test name of [`machine`] in this binary (its module path less the crate's name).
    fn machine_test() -> String {
        let path = module_path!();
        let inside = path.split_once("::").map_or(path, |(_, rest)| rest);
        format!("{inside}::machine")
    }

    /// A port free now on the loopback address.
    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// One machine's part of the two-machine SimCLR run: run by [`start`] in a process of its
    /// own (the environment names the
    /// machine), its result written as JSON; without that environment there is nothing to do.
    #[test]
    #[ignore = "a machine of two_processes_equal_one_device, started by it"]
    fn machine() {
        let Ok(spec) = std::env::var(NODE) else {
            return;
        };
        let [rank, orchestrator, port, out, mode, timeout]: [String; 6] = spec
            .split(' ')
            .map(String::from)
            .collect::<Vec<_>>()
            .try_into()
            .unwrap();
        let (rank, port): (u32, u16) = (rank.parse().unwrap(), port.parse().unwrap());
        let timeout_s: u64 = timeout.parse().unwrap();
        let config = DataParallelConfig {
            devices: 1,
            nodes: Some(MultiNode {
                nodes: 2,
                rank,
                orchestrator,
                address: format!("ws://127.0.0.1:{port}"),
                data_port: port,
                timeout_s,
            }),
        };
        let shard = GLOBAL / 2;
        let outcome =
            data_parallel::run::<Exact, _, String, _>(&config, &[Default::default()], |r, d| {
                match mode.as_str() {
                    // A machine that stops once registered (a crash, a lost machine).
                    "stops" => std::process::exit(3),
                    // One that hangs, its connections open (stopped by a debugger, a
                    // deadlock).
                    "hangs" => std::thread::sleep(Duration::from_secs(600)),
                    _ => {}
                }
                let mut method = init_method::<Exact, _, _>(d, 7, |d| simclr(d, GLOBAL)).unwrap();
                method.set_replica(r.clone()).map_err(|e| e.to_string())?;
                train(
                    method,
                    &|_| Vec::new(),
                    Some(&r),
                    r.rank() * shard,
                    shard,
                    d,
                )
            })
            .unwrap_or_else(|e| {
                eprintln!("{e}");
                std::process::exit(2)
            });
        std::fs::write(out, serde_json::to_vec(&outcome[0].values).unwrap()).unwrap();
    }

    /// The machines' processes, killed if the test ends before them (a hung machine must not
    /// outlive the test and hold its output open).
    struct Machines(Vec<std::process::Child>);

    impl Drop for Machines {
        fn drop(&mut self) {
            for child in &mut self.0 {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Starts the orchestrator (unless `orchestrator` is false: the machines are then given a
    /// port nothing listens on) and the machines of `modes` (`runs`, `stops` once registered,
    /// `hangs` once registered, `absent`: not started), each with its log and result file in
    /// `dir`, waiting `timeout` seconds at most for the others.
    fn start_with(
        dir: &Path,
        orchestrator: bool,
        modes: [&str; 2],
        timeout: u64,
    ) -> (Machines, Vec<PathBuf>) {
        let orchestrator_port = if orchestrator {
            start_orchestrator()
        } else {
            free_port()
        };
        std::fs::create_dir_all(dir).unwrap();
        let mut machines = Machines(Vec::new());
        let mut outs = Vec::new();
        for (rank, mode) in modes.iter().enumerate() {
            if *mode == "absent" {
                continue;
            }
            let (child, out) = spawn_machine(dir, rank, orchestrator_port, mode, timeout);
            machines.0.push(child);
            outs.push(out);
        }
        (machines, outs)
    }

    /// An orchestrator on a free loopback port, serving on a thread of this process; its port.
    fn start_orchestrator() -> u16 {
        let orchestrator = data_parallel::Orchestrator::bind("127.0.0.1:0").unwrap();
        let port = orchestrator.address().unwrap().port();
        std::thread::spawn(move || orchestrator.serve());
        port
    }

    /// Starts machine `rank` (see [`start_with`]) with its log and result file in `dir`.
    fn spawn_machine(
        dir: &Path,
        rank: usize,
        orchestrator_port: u16,
        mode: &str,
        timeout: u64,
    ) -> (std::process::Child, PathBuf) {
        let out = dir.join(format!("machine-{rank}.json"));
        let spec = format!(
            "{rank} ws://127.0.0.1:{orchestrator_port} {} {} {mode} {timeout}",
            free_port(),
            out.display(),
        );
        let log = std::fs::File::create(dir.join(format!("machine-{rank}.log"))).unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &machine_test(),
                "--include-ignored",
                "--quiet",
                "--nocapture",
            ])
            .env(NODE, spec)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        (child, out)
    }

    /// Starts the two machines (rank 1 stopping at once when `stops`).
    fn start(dir: &Path, stops: bool) -> (Machines, Vec<PathBuf>) {
        start_with(
            dir,
            true,
            ["runs", if stops { "stops" } else { "runs" }],
            60,
        )
    }

    /// The error line of a machine's log (the first `replica ... failed:` line), asserting that
    /// nothing panicked on the way.
    fn error_line(dir: &Path, rank: usize) -> String {
        let log = std::fs::read_to_string(dir.join(format!("machine-{rank}.log"))).unwrap();
        assert!(!log.contains("panicked"), "{log}");
        log.lines()
            .find(|l| l.starts_with("replica "))
            .unwrap_or_else(|| panic!("no error line in {log}"))
            .to_string()
    }

    /// Waits a minute at most for a machine.
    fn wait(child: &mut std::process::Child, out: &Path) -> std::process::ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if started.elapsed() > Duration::from_secs(60) {
                panic!("machine {} did not finish in a minute", out.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn dir(name: &str) -> PathBuf {
        crate::common::run_scratch("curriculum-ssl-machines", name)
    }

    #[test]
    fn two_processes_equal_one_device() {
        let dir = dir("machines");
        let (mut machines, outs) = start(&dir, false);
        let device = Default::default();
        let method = init_method::<Exact, _, _>(&device, 7, |d| simclr(d, GLOBAL)).unwrap();
        let whole = train(method, &|_| Vec::new(), None, 0, GLOBAL, &device).unwrap();
        for (child, out) in machines.0.iter_mut().zip(&outs) {
            let status = wait(child, out);
            assert!(status.success(), "machine {}: {status}", out.display());
            let values: Vec<f64> = serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
            let worst = whole
                .values
                .iter()
                .zip(&values)
                .map(|(a, b)| (a - b).abs() / (1e-11 * a.abs().max(b.abs()) + 1e-12))
                .fold(0.0, f64::max);
            assert_eq!(values.len(), whole.values.len());
            assert!(
                worst <= 1.0,
                "{}: off by {worst:.2} tolerances",
                out.display()
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_machine_that_stops_ends_the_other_with_an_error_naming_its_replicas() {
        let dir = dir("machine-stops");
        let (mut machines, outs) = start(&dir, true);
        let survivor = wait(&mut machines.0[0], &outs[0]);
        let log = std::fs::read_to_string(dir.join("machine-0.log")).unwrap();
        assert_eq!(survivor.code(), Some(2), "{log}");
        let error = log
            .lines()
            .find(|l| l.starts_with("replica 0 of 2 failed: "))
            .unwrap_or_else(|| panic!("no error line in {log}"));
        // One line naming the machine that stopped, and no panic of the collective layer's
        // threads on the way.
        assert!(
            error.contains(
                "an all-reduce failed: lost the connection to the machine at ws://127.0.0.1:"
            ) && error.ends_with(": it stopped or its network failed"),
            "{error}"
        );
        assert!(!log.contains("panicked"), "{log}");
        assert_eq!(wait(&mut machines.0[1], &outs[1]).code(), Some(3));
        eprintln!("{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Only one machine of two starts: it waits `--timeout` (2 s here) for the other to
    /// register, then ends with one line naming the machine that did not arrive.
    #[test]
    fn a_machine_that_never_comes_is_named_after_the_timeout() {
        let dir = dir("machine-absent");
        let started = Instant::now();
        let (mut machines, outs) = start_with(&dir, true, ["runs", "absent"], 2);
        let status = wait(&mut machines.0[0], &outs[0]);
        assert_eq!(status.code(), Some(2));
        let error = error_line(&dir, 0);
        assert!(
            error.contains("could not join the other replicas: the run needs 2 machines but 1 registered with the orchestrator ws://127.0.0.1:")
                && error.contains("within 2 s (machine 0 at ws://127.0.0.1:")
                && error.contains("): machine 1 (replica 1) did not arrive; start it with --nodes 2"),
            "{error}"
        );
        // The orchestrator answers at the deadline; the machine does not wait for its own
        // longer limit (the timeout + 15 s).
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
        eprintln!("{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// No orchestrator at the address given: the machine tries once a second for `--timeout`
    /// seconds (not forever), then says so.
    #[test]
    fn without_an_orchestrator_a_machine_stops_after_the_timeout() {
        let dir = dir("machine-no-orchestrator");
        let (mut machines, outs) = start_with(&dir, false, ["runs", "absent"], 2);
        let status = wait(&mut machines.0[0], &outs[0]);
        assert_eq!(status.code(), Some(2));
        let error = error_line(&dir, 0);
        assert!(
            error.contains("the orchestrator ws://127.0.0.1:")
                && error.contains("could not be reached within 2 s"),
            "{error}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A machine that registers and then hangs with its connections open: the other waits at
    /// its first collective operation for `--timeout` seconds, then names it.
    #[test]
    fn a_machine_that_hangs_is_named_at_the_timeout() {
        let dir = dir("machine-hangs");
        let (mut machines, outs) = start_with(&dir, true, ["runs", "hangs"], 3);
        let status = wait(&mut machines.0[0], &outs[0]);
        assert_eq!(status.code(), Some(2));
        let error = error_line(&dir, 0);
        assert!(
            error.contains(
                "waited 3 s at a collective operation for the machines at ws://127.0.0.1:"
            ) && error.contains("they stopped, hung or lost their connection"),
            "{error}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A machine killed while it waits for the others to register leaves the registration (the
    /// orchestrator forgot nothing, so the run of the machines started next met a ghost): the
    /// machines started after it run, and end as one device does. With a long-running
    /// orchestrator, a second run of other machines follows the first.
    #[test]
    fn a_machine_killed_while_waiting_is_forgotten_and_the_next_run_starts_afresh() {
        let dir = dir("machine-ghost");
        std::fs::create_dir_all(&dir).unwrap();
        let port = start_orchestrator();
        let (mut ghost, _) = spawn_machine(&dir, 1, port, "runs", 60);
        // Registered (or trying to): it waits for machine 0, which is not there yet.
        std::thread::sleep(Duration::from_millis(1500));
        ghost.kill().unwrap();
        ghost.wait().unwrap();
        let device = Default::default();
        let method = init_method::<Exact, _, _>(&device, 7, |d| simclr(d, GLOBAL)).unwrap();
        let whole = train(method, &|_| Vec::new(), None, 0, GLOBAL, &device).unwrap();
        for round in 0..2 {
            let mut machines = Machines(Vec::new());
            let mut outs = Vec::new();
            for rank in 0..2 {
                let (child, out) = spawn_machine(&dir, rank, port, "runs", 60);
                machines.0.push(child);
                outs.push(out);
            }
            for (rank, (child, out)) in machines.0.iter_mut().zip(&outs).enumerate() {
                let status = wait(child, out);
                let log = std::fs::read_to_string(dir.join(format!("machine-{rank}.log")));
                assert!(
                    status.success(),
                    "round {round}, machine {rank}: {status}\n{log:?}"
                );
                let values: Vec<f64> =
                    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
                assert_eq!(values.len(), whole.values.len());
                let worst = whole
                    .values
                    .iter()
                    .zip(&values)
                    .map(|(a, b)| (a - b).abs() / (1e-11 * a.abs().max(b.abs()) + 1e-12))
                    .fold(0.0, f64::max);
                assert!(
                    worst <= 1.0,
                    "round {round}, machine {rank}: off by {worst:.2}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
