//! DINO (documented on `Dino`).

use burn::module::Param;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::layers::linear_zero_bias;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::momentum::MomentumEncoder;
use super::running::Running;
use super::ssl_method::{
    gradients_without, locals_through, online_in, replica_in, split_views, HasBackbone,
    MethodOutput, SslMethod, Views,
};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::BatchNorm1d;
use crate::loss::{l2_normalize, DinoLoss, DinoLossConfig};

/// Configuration of a [`DinoHead`].
#[derive(Config, Debug)]
pub struct DinoHeadConfig {
    /// Input width (the backbone's feature dimension).
    pub input_dim: usize,
    /// Hidden width (the paper's 2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Bottleneck width before the last layer (the paper's 256).
    #[config(default = 256)]
    pub bottleneck_dim: usize,
    /// Output width `K` (the paper's 65,536).
    #[config(default = 65536)]
    pub output_dim: usize,
    /// BatchNorm after the hidden layers (off in the paper).
    #[config(default = false)]
    pub batch_norm: bool,
}

impl DinoHeadConfig {
    /// Validates the widths and initialises the head on `device`.
    ///
    /// # Errors
    /// A zero width, named.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<DinoHead<B>, ConfigError> {
        for (field, value) in [
            ("input_dim", self.input_dim),
            ("hidden_dim", self.hidden_dim),
            ("bottleneck_dim", self.bottleneck_dim),
            ("output_dim", self.output_dim),
        ] {
            if value == 0 {
                return Err(ConfigError::new(field, "must be at least 1"));
            }
        }
        let normal = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        let linear = |from: usize, to: usize| linear_zero_bias(from, to, normal.clone(), device);
        let hidden = self.hidden_dim;
        // The direction `V` starts as PyTorch's default linear weight (Kaiming uniform).
        let last = LinearConfig::new(self.bottleneck_dim, self.output_dim)
            .with_bias(false)
            .init(device);
        Ok(DinoHead {
            layers: vec![
                linear(self.input_dim, hidden),
                linear(hidden, hidden),
                linear(hidden, self.bottleneck_dim),
            ],
            norms: if self.batch_norm {
                vec![
                    BatchNorm1d::new(hidden, device),
                    BatchNorm1d::new(hidden, device),
                ]
            } else {
                Vec::new()
            },
            last_layer: last.weight,
        })
    }
}

/// DINO's projection head (see the module docs). Build it with [`DinoHeadConfig::init`].
#[derive(Module, Debug)]
pub struct DinoHead<B: Backend> {
    /// The MLP's three linear layers.
    pub layers: Vec<Linear<B>>,
    /// BatchNorms after the two hidden layers (empty without).
    pub norms: Vec<BatchNorm1d<B>>,
    /// The last layer's direction `V`, `[bottleneck, K]`; its weight is `V` with unit columns.
    pub last_layer: Param<Tensor<B, 2>>,
}

impl<B: Backend> DinoHead<B> {
    /// The L2-normalised bottleneck and the outputs.
    ///
    /// # Shapes
    /// - `x`: `[N, input_dim]` → (`[N, bottleneck]`, `[N, K]`)
    pub fn forward_with_bottleneck(&self, x: Tensor<B, 2>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let mut x = x;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if i + 1 < self.layers.len() {
                if let Some(norm) = self.norms.get(i) {
                    x = norm.forward(x);
                }
                x = curriculum_ssl_models::layers::gelu(x);
            }
        }
        let bottleneck = l2_normalize(x);
        let v = self.last_layer.val();
        let w = v.clone() / crate::loss::safe_norm(v, 0, 1e-12);
        (bottleneck.clone(), bottleneck.matmul(w))
    }

    /// The outputs.
    ///
    /// # Shapes
    /// - `x`: `[N, input_dim]` → `[N, K]`
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.forward_with_bottleneck(x).1
    }

    /// Output width `K`.
    pub fn output_dim(&self) -> usize {
        self.last_layer.lazy_shape().dims::<2>()[1]
    }
}

/// Configuration of [`Dino`].
#[derive(Config, Debug)]
pub struct DinoConfig {
    /// Hidden width of the head (the paper's 2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Bottleneck width (the paper's 256).
    #[config(default = 256)]
    pub bottleneck_dim: usize,
    /// Output width `K` (the paper's 65,536).
    #[config(default = 65536)]
    pub output_dim: usize,
    /// BatchNorm in the head (off in the paper).
    #[config(default = false)]
    pub batch_norm: bool,
    /// The teacher's momentum at the start (the paper's 0.996), rising to 1 along a cosine.
    #[config(default = 0.996)]
    pub base_momentum: f64,
    /// Epochs during which the last layer receives no update (the paper's 1).
    #[config(default = 1)]
    pub freeze_last_layer_epochs: usize,
    /// The loss (temperatures, centre momentum).
    #[config(default = "DinoLossConfig::new()")]
    pub loss: DinoLossConfig,
}

/// The student (or teacher): backbone and head.
#[derive(Module, Debug)]
pub struct DinoNetwork<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// The head.
    pub head: DinoHead<B>,
}

impl<B: Backend, M> HasBackbone<M> for DinoNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl<B: Backend, M: Backbone<B>> DinoNetwork<B, M> {
    /// The normalised bottleneck and the outputs of a batch of crops.
    ///
    /// # Shapes
    /// - `x`: `[N, C, H, W]` → (`[N, bottleneck]`, `[N, K]`)
    pub fn forward(&self, x: Tensor<B, 4>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        self.head
            .forward_with_bottleneck(self.backbone.forward_features(x))
    }
}

impl DinoConfig {
    /// Builds DINO around a backbone made by `backbone` (called twice: the student, and a fresh
    /// module into which the teacher's copy is loaded).
    ///
    /// # Errors
    /// A zero width or an impossible momentum or temperature, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Dino<B, M>, ConfigError> {
        let student_backbone = backbone(device);
        let head = DinoHeadConfig::new(student_backbone.feature_dim())
            .with_hidden_dim(self.hidden_dim)
            .with_bottleneck_dim(self.bottleneck_dim)
            .with_output_dim(self.output_dim)
            .with_batch_norm(self.batch_norm);
        let student = DinoNetwork {
            backbone: student_backbone,
            head: head.init(device)?,
        };
        let fresh = DinoNetwork {
            backbone: backbone(device),
            head: head.init(device)?,
        };
        let teacher =
            MomentumEncoder::new(&student, fresh, self.base_momentum, true, "base_momentum")?;
        Ok(Dino {
            student,
            teacher,
            loss: self.loss.init()?,
            center: Running::new(Tensor::zeros([1, self.output_dim], device)),
            freeze_last_layer_epochs: self.freeze_last_layer_epochs,
            frozen: false,
            replica: None,
        })
    }
}

/// The checkpointed state of [`Dino`]: the teacher and the centre.
#[derive(Record)]
pub struct DinoState<B: Backend, M: Backbone<B>> {
    /// The teacher's record (weights and batch-norm statistics).
    pub teacher: <DinoNetwork<B, M> as Module<B>>::Record,
    /// The centre, `[1, K]`.
    pub center: Tensor<B, 2>,
}

/// DINO. Build it with [`DinoConfig::init`].
///
/// DINO (Caron et al., "Emerging Properties in Self-Supervised Vision Transformers", ICCV 2021,
/// <https://arxiv.org/abs/2104.14294>): a student (backbone + [`DinoHead`]) learns to match a
/// momentum teacher's centred, sharpened output on the other views
/// ([`DinoLoss`](crate::loss::DinoLoss)). The teacher sees the two global views, the student every
/// view, local crops included.
///
/// The paper's training details, all here:
/// - the head: three linear layers (`features → 2048 → 2048 → 256`, GELU between, BatchNorm
///   optional, off as in the paper), L2 normalisation, then a weight-normalised linear layer to
///   `K` outputs with its gain fixed at 1 (`norm_last_layer`): `W = V / ‖V‖` per output;
///   linear weights drawn from `N(0, 0.02²)` (the authors' truncated normal at ±2 never
///   truncates at this width), biases 0;
/// - the last layer is frozen for the first `freeze_last_layer_epochs` epochs (its gradient is
///   dropped, as the authors' `cancel_gradients_last_layer`);
/// - the teacher is an EMA of the student, the momentum rising along a cosine from
///   `base_momentum` (0.996) to 1; its temperature warms up per epoch; the centre is a moving
///   average (0.9) of the teacher's mean output;
/// - crops of one resolution go through the networks in one batch (the authors' multi-crop
///   forward).
///
/// On several replicas each replica's loss is the mean over its images (the average over
/// replicas is the one-device loss) and the centre moves by the mean of every replica's teacher
/// outputs, the same on every replica.
///
/// The math, the defaults and the worked values are in `docs/methods.md#dino`.
#[derive(Debug, Clone)]
pub struct Dino<B: Backend, M: Backbone<B>> {
    student: DinoNetwork<B, M>,
    teacher: MomentumEncoder<DinoNetwork<B, M>>,
    loss: DinoLoss,
    center: Running<B, 2>,
    freeze_last_layer_epochs: usize,
    /// Whether the last layer is frozen at the step being computed.
    frozen: bool,
    /// This method's replica in a data-parallel run (the centre moves by the global mean).
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> Dino<B, M> {
    /// The momentum copy (the EMA teacher): its network and its momentum schedule.
    pub fn teacher(&self) -> &MomentumEncoder<DinoNetwork<B, M>> {
        &self.teacher
    }

    /// The centre of the teacher's outputs, `[1, K]`.
    pub fn center(&self) -> Tensor<B, 2> {
        self.center.value()
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for Dino<B, M> {
    type Online = DinoNetwork<B, M>;
    type Backbone = M;
    type State = DinoState<B, M>;

    online_in!(student);

    fn state(&self) -> DinoState<B, M> {
        DinoState {
            teacher: self.teacher.record(),
            center: self.center.value(),
        }
    }

    fn load_state(&mut self, state: DinoState<B, M>) -> Result<(), ConfigError> {
        self.center
            .restore(state.center, "output_dim", "DINO's centre")?;
        self.teacher.load_record(state.teacher);
        Ok(())
    }

    fn takes_local_crops(&self) -> bool {
        true
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (globals, n, locals) = views.batched();
        self.frozen = progress.epoch < self.freeze_last_layer_epochs;
        let (_, teacher_out) = self.teacher.network().forward(globals.clone().detach());
        let teacher = split_views(teacher_out.detach(), n, 2);
        let (bottleneck, student_out) = self.student.forward(globals);
        let embeddings = split_views(bottleneck.detach(), n, 2);
        let mut student = split_views(student_out, n, 2);
        student.extend(locals_through(locals, n, |x| self.student.forward(x).1));
        let teacher_temp = self.loss.teacher_temp_at(progress.epoch);
        let loss = self
            .loss
            .forward(&teacher, &student, self.center.value(), teacher_temp);
        let center = next_center(
            &self.loss,
            self.center.value(),
            &teacher,
            self.replica.as_ref(),
        );
        // Moved after the step (a redrawn attempt's outputs never move it).
        self.center.propose(center);
        MethodOutput::new(loss)
            .with_value("teacher_temp", teacher_temp)
            .with_momentum(self.teacher.momentum_at(progress))
            .with_embeddings([embeddings[0].clone(), embeddings[1].clone()])
    }

    /// Drops the last layer's gradient while it is frozen (no optimiser moves or decays it).
    fn gradients(&mut self, loss: &Tensor<B, 1>) -> GradientsParams {
        let frozen = self.frozen.then_some(self.student.head.last_layer.id);
        gradients_without(loss, &self.student, frozen)
    }

    replica_in!(
        /// Each replica's loss is the mean over its images; the centre moves by the replicas' mean
        /// teacher output (`m·c + (1 − m)·mean`, averaged: the same on every replica).
        replica
    );

    fn after_step(&mut self, progress: Progress) {
        self.center.commit();
        self.teacher.update(&self.student, progress);
    }
}

/// The centre after a step: `m·c + (1 − m)·mean` of the teacher's outputs over the global batch
/// (on replicas every replica's updated centre, averaged: the same on every replica, and the
/// one-device centre for equal shards). Shared by DINO and iBOT's \[CLS\] centre.
///
/// # Shapes
/// - `center`: `[1, K]`; `teacher[g]`: `[N, K]` → `[1, K]`
pub(crate) fn next_center<B: AutodiffBackend>(
    loss: &DinoLoss,
    center: Tensor<B, 2>,
    teacher: &[Tensor<B, 2>],
    replica: Option<&Replica<B>>,
) -> Tensor<B, 2> {
    let next = loss.updated_center(center, teacher);
    match replica {
        Some(r) => {
            let k = next.dims()[1];
            Tensor::from_inner(r.mean_of(next.inner().reshape([k])).reshape([1, k]))
        }
        None => next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::branches::fresh_leaves;
    use crate::method::testing::{host, images, progress, Ad, TinyBackbone as Tiny};
    use crate::optim::SgdConfig;
    use burn::backend::NdArray;
    use burn::optim::Optimizer;

    fn dino(config: DinoConfig) -> Dino<Ad, Tiny<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 3, |d| {
            let tiny =
                |d: &<Ad as burn::tensor::backend::BackendTypes>::Device| Tiny::new(16, 6, d);
            config
                .with_hidden_dim(8)
                .with_bottleneck_dim(4)
                .with_output_dim(5)
                .init(tiny, d)
        })
        .unwrap()
    }

    fn at(step: usize, epoch: usize) -> Progress {
        progress(step, 100, epoch, 10)
    }

    /// The head's output is the normalised bottleneck times the last layer's direction with
    /// unit columns (gain 1), computed here by hand.
    #[test]
    fn the_last_layer_is_weight_normalised_with_gain_one() {
        let m = dino(DinoConfig::new());
        let head = &m.online().head;
        let x: Tensor<Ad, 2> = Tensor::from_data(
            TensorData::new(
                (0..18)
                    .map(|i| (0.3 * i as f64).cos())
                    .collect::<Vec<f64>>(),
                [3, 6],
            ),
            &Default::default(),
        );
        let (bottleneck, out) = head.forward_with_bottleneck(x);
        let (b, out) = (host(bottleneck), host(out));
        let v = host(head.last_layer.val());
        for n in 0..3 {
            let row = &b[n * 4..(n + 1) * 4];
            let norm: f64 = row.iter().map(|x| x * x).sum();
            assert!((norm - 1.0).abs() < 1e-12);
            for k in 0..5 {
                let column: Vec<f64> = (0..4).map(|i| v[i * 5 + k]).collect();
                let length = column.iter().map(|x| x * x).sum::<f64>().sqrt();
                let expected: f64 = row.iter().zip(&column).map(|(a, c)| a * c / length).sum();
                assert!((out[n * 5 + k] - expected).abs() < 1e-12);
            }
        }
    }

    /// The last layer is frozen during the first epoch (weight decay included) and trains
    /// afterwards; the rest of the student trains from the start; the centre moves to
    /// `0.9·c + 0.1·mean(teacher outputs)`.
    #[test]
    fn the_last_layer_is_frozen_for_the_first_epoch_and_the_centre_moves() {
        let mut m = dino(DinoConfig::new());
        let mut optim = SgdConfig::new()
            .with_weight_decay(0.1)
            .init::<Ad, DinoNetwork<Ad, Tiny<Ad>>>()
            .unwrap();
        let mut step = |m: &mut Dino<Ad, Tiny<Ad>>, progress: Progress| {
            let last = host(m.online().head.last_layer.val());
            let first = host(m.online().head.layers[0].weight.val());
            let center = host(m.center());
            let (v1, v2) = (images(4, 0.0), images(4, 1.0));
            let (_, t) = m
                .teacher()
                .network()
                .forward(Tensor::cat(vec![v1.clone(), v2.clone()], 0));
            let t = host(t);
            let out = m.forward_views(
                Views {
                    global: [v1, v2],
                    local: vec![images(4, 2.0)],
                },
                progress,
            );
            let grads = m.gradients(&out.loss);
            // New leaves, as the trainer makes them: the frozen last layer keeps the leaf this
            // backward pass consumed (crate::method::branches::fresh_leaves says why).
            m.set_online(fresh_leaves(&optim.step(0.5, m.online().clone(), grads)));
            m.after_step(progress);
            let expected: Vec<f64> = (0..5)
                .map(|k| 0.9 * center[k] + 0.1 * (0..8).map(|n| t[n * 5 + k]).sum::<f64>() / 8.0)
                .collect();
            for (a, b) in host(m.center()).iter().zip(&expected) {
                assert!((a - b).abs() < 1e-12, "centre");
            }
            let moved = |a: &[f64], b: &[f64]| {
                a.iter()
                    .zip(b)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max)
            };
            (
                moved(&last, &host(m.online().head.last_layer.val())),
                moved(&first, &host(m.online().head.layers[0].weight.val())),
            )
        };
        let (last, first) = step(&mut m, at(0, 0));
        assert_eq!(last, 0.0, "last layer frozen in epoch 0");
        assert!(first > 1e-6, "the MLP trains in epoch 0");
        let (last, _) = step(&mut m, at(10, 1));
        assert!(last > 1e-6, "the last layer trains in epoch 1");
    }

    /// A redrawn attempt (batch curation runs the forward again) leaves no trace: the centre
    /// moves by the outputs of the attempt that was applied.
    #[test]
    fn only_the_applied_attempt_moves_the_centre() {
        let (mut once, mut twice) = (dino(DinoConfig::new()), dino(DinoConfig::new()));
        // The same start whatever other tests' threads drew from the backend's generator.
        twice.set_online(once.online().clone());
        twice.load_state(once.state()).unwrap();
        once.forward(images(4, 0.0), images(4, 1.0), at(0, 0));
        once.after_step(at(0, 0));
        twice.forward(images(4, 5.0), images(4, 6.0), at(0, 0));
        assert_eq!(host(twice.center()), vec![0.0; 5], "not before the step");
        twice.forward(images(4, 0.0), images(4, 1.0), at(0, 0));
        twice.after_step(at(0, 0));
        assert_eq!(host(once.center()), host(twice.center()));
    }

    #[test]
    fn the_head_starts_as_the_authors() {
        // The authors' DINOHead (and lightly's DINOProjectionHead): trunc_normal_(std 0.02) on
        // the MLP's weights (at ±2, so never truncated at this scale), biases 0.
        use crate::method::testing::assert_initialised;
        let head = crate::base::seed::init_module::<NdArray<f64>, _>(&Default::default(), 0, |d| {
            DinoHeadConfig::new(64)
                .with_hidden_dim(128)
                .with_bottleneck_dim(64)
                .with_output_dim(256)
                .init(d)
                .unwrap()
        });
        for layer in &head.layers {
            assert_initialised(layer, 0.02, "DINO head layer");
        }
    }
}
