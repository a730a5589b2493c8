//! All4One (documented on `All4One`).

use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::all4one_transformer::{positional_table, sequences, All4OneTransformer};
use super::encoder::{online_with_copy, Projected};
use super::momentum::MomentumEncoder;
use super::queue::{KeyQueue, KeyQueueConfig};
use super::ssl_method::{online_in, replica_in, HasBackbone, MethodOutput, SslMethod, Views};
use crate::base::error::{non_negative, ConfigError};
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::{MlpHead, MlpHeadConfig};
use crate::loss::{l2_normalize, All4OneInputs, All4OneLoss, All4OneLossConfig};
use crate::optim::LrGroup;

/// Configuration of [`All4One`] (solo-learn's `solo/methods/all4one.py` and its
/// `scripts/pretrain/cifar/all4one.yaml`).
#[derive(Config, Debug)]
pub struct All4OneConfig {
    /// Hidden width of the projector (solo-learn's 2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Projection width, also the transformer's (solo-learn's 256).
    #[config(default = 256)]
    pub output_dim: usize,
    /// Hidden width of both predictors (solo-learn's 4096).
    #[config(default = 4096)]
    pub predictor_hidden_dim: usize,
    /// Momentum projections in the support set (solo-learn's code default 65,536; its CIFAR
    /// setting 98,304).
    #[config(default = 65536)]
    pub support_set_size: usize,
    /// Neighbours per image, the transformer's sequence length (solo-learn's fixed 5).
    #[config(default = 5)]
    pub neighbours: usize,
    /// Transformer layers (solo-learn's 3).
    #[config(default = 3)]
    pub transformer_layers: usize,
    /// Transformer attention heads (solo-learn's 8).
    #[config(default = 8)]
    pub transformer_heads: usize,
    /// Dropout of the transformer, at PyTorch's four places (solo-learn's 0.1; 0 in the exact
    /// tests, whose dropout masks could not match).
    #[config(default = 0.1)]
    pub transformer_dropout: f64,
    /// Momentum of the momentum encoder at the start of training (rises to 1 along a cosine;
    /// solo-learn's 0.99).
    #[config(default = 0.99)]
    pub base_momentum: f64,
    /// The transformer's learning rate over the run's (0.1: solo-learn gives the transformer's
    /// parameter group a literal lr of 0.1 against its recipes' base lr of 1.0 at batch 256;
    /// 1 steps it with the rest).
    #[config(default = 0.1)]
    pub transformer_lr_factor: f64,
    /// The loss (temperatures 0.2 and 0.1, weights ½, feature scale 10).
    #[config(default = "All4OneLossConfig::new()")]
    pub loss: All4OneLossConfig,
}

impl All4OneConfig {
    /// Builds All4One around a backbone made by `backbone` (called twice: online, and a fresh
    /// module into which the momentum copy is loaded) for global batches of `batch_size` images
    /// (the support set takes that many projections per step).
    ///
    /// # Errors
    /// A zero width, a projection width under 2 (the feature term's off-diagonal), fewer than 2
    /// neighbours or more than the support set holds, heads that do not divide the projection
    /// width, a dropout outside `[0, 1)`, a momentum outside `[0, 1]`, a negative `transformer_lr_factor`, a support set that is not
    /// a multiple of the batch size, or a loss setting out of range.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        batch_size: usize,
        device: &B::Device,
    ) -> Result<All4One<B, M>, ConfigError> {
        if self.output_dim < 2 {
            return Err(ConfigError::new(
                "output_dim",
                "the feature term needs at least 2 projection features",
            ));
        }
        if self.neighbours < 2 || self.neighbours > self.support_set_size {
            return Err(ConfigError::new(
                "neighbours",
                format!(
                    "{} neighbours: at least 2 (the shifted sequence keeps all but the last) and \
                     at most the support set's {}",
                    self.neighbours, self.support_set_size
                ),
            ));
        }
        non_negative("transformer_lr_factor", self.transformer_lr_factor)?;
        let loss = self.loss.init()?;
        let support = KeyQueueConfig::new(self.support_set_size, self.output_dim)
            .init(batch_size, device)
            .map_err(|e| ConfigError::new("support_set_size", e.reason))?;
        let projector = |features: usize| {
            MlpHeadConfig::new(features, self.hidden_dim, self.output_dim)
                .with_num_layers(3)
                .with_output_batch_norm(true)
        };
        let predictor =
            MlpHeadConfig::new(self.output_dim, self.predictor_hidden_dim, self.output_dim);
        let network = |backbone, projector| -> Result<All4OneNetwork<B, M>, ConfigError> {
            Ok(All4OneNetwork {
                backbone,
                projector,
                predictor: predictor.init(device)?,
                predictor2: predictor.init(device)?,
                transformer: All4OneTransformer::new(
                    self.output_dim,
                    self.transformer_heads,
                    2 * self.output_dim,
                    self.transformer_layers,
                    self.transformer_dropout,
                    device,
                )?,
            })
        };
        let (online, copy) = online_with_copy(
            backbone,
            projector,
            network,
            |online, fresh| {
                let encoder = online.encoder();
                MomentumEncoder::new(&encoder, fresh, self.base_momentum, true, "base_momentum")
            },
            device,
        )?;
        Ok(All4One {
            online,
            copy,
            support,
            table: positional_table(self.neighbours, self.output_dim, device),
            neighbours: self.neighbours,
            transformer_lr_factor: self.transformer_lr_factor,
            loss,
            replica: None,
        })
    }
}

/// All4One's online network: backbone, projector, the two predictors and the transformer.
#[derive(Module, Debug)]
pub struct All4OneNetwork<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Projection head (`features → 2048 → 2048 → 256`, BatchNorm after every layer).
    pub projector: MlpHead<B>,
    /// Prediction head of the neighbour term (`256 → 4096 (BN, ReLU) → 256`).
    pub predictor: MlpHead<B>,
    /// Second prediction head, whose output leads the shifted sequence (same shape).
    pub predictor2: MlpHead<B>,
    /// The transformer over the neighbours.
    pub transformer: All4OneTransformer<B>,
}

impl<B: Backend, M> HasBackbone<M> for All4OneNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl<B: Backend, M: Backbone<B>> All4OneNetwork<B, M> {
    /// The encoder without its predictors and transformer (sharing its tensors: the source of
    /// the momentum copy).
    pub fn encoder(&self) -> Projected<B, M> {
        Projected {
            backbone: self.backbone.clone(),
            projector: self.projector.clone(),
        }
    }

    /// A view's projections `z`, predictions `p` and second predictions `q`.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → three `[N, output_dim]`
    pub fn forward(&self, images: Tensor<B, 4>) -> [Tensor<B, 2>; 3] {
        let z = self
            .projector
            .forward(self.backbone.forward_features(images));
        let p = self.predictor.forward(z.clone());
        let q = self.predictor2.forward(z.clone());
        [z, p, q]
    }
}

/// The checkpointed state of [`All4One`]: the momentum copy and the support set.
#[derive(Record)]
pub struct All4OneState<B: Backend, M: Backbone<B>> {
    /// The momentum copy's record (backbone and projector).
    pub momentum: <Projected<B, M> as Module<B>>::Record,
    /// The support set, `[size, dim]`.
    pub support: Tensor<B, 2>,
    /// The slot the next projections are written to.
    pub pointer: usize,
}

/// All4One. Build it with [`All4OneConfig::init`].
///
/// All4One (Estepa, Sarasúa, Nagarajan & Radeva, "All4One: Symbiotic Neighbour Contrastive
/// Learning via Self-Attention and Redundancy Reduction", ICCV 2023,
/// <https://arxiv.org/abs/2303.09417>), as
/// solo-learn's `solo/methods/all4one.py`: NNCLR's networks (backbone, three-layer projector,
/// predictor) with a momentum copy of the encoder, a second predictor and a transformer. Per
/// view:
/// - the momentum projections `m` (L2-normalised) find their `k = 5` nearest neighbours `nn`
///   (cosine) in a support set of earlier momentum projections ([`KeyQueue::nearest_k`]);
/// - the neighbour term contrasts `nn[:, 0]` with the other view's prediction (NNCLR's);
/// - the transformer reads the neighbours (plus a positional table) and, separately, the
///   second predictor's output followed by the first `k − 1` neighbours (the "shift
///   operation"); the centroid term contrasts the first tokens of one view's first sequence
///   with the other view's second;
/// - the feature term pushes the cross-correlation of the momentum and online projections
///   (columns normalised over the batch) towards the identity.
///
/// The loss is [`All4OneLoss`](crate::loss::All4OneLoss); after the optimiser step the momentum
/// copy (backbone and projector) moves by an EMA whose momentum rises from 0.99 to 1 along a
/// cosine, and the support set takes the first view's momentum projections (FIFO).
///
/// On several replicas the support set takes every replica's momentum projections (the same set
/// on every replica, as solo-learn's gathered enqueue), and every input of the loss is gathered,
/// so that the loss is the one-device loss of the global batch on every replica (solo-learn
/// gathers only the predictions of its contrastive terms, and its feature term is each GPU's
/// batch).
///
/// The math, the defaults and where solo-learn and the paper differ are in
/// `docs/methods.md#all4one`.
#[derive(Debug, Clone)]
pub struct All4One<B: Backend, M: Backbone<B>> {
    online: All4OneNetwork<B, M>,
    copy: MomentumEncoder<Projected<B, M>>,
    support: KeyQueue<B>,
    /// The positional table, `[k, output_dim]`.
    table: Tensor<B, 2>,
    neighbours: usize,
    transformer_lr_factor: f64,
    loss: All4OneLoss,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> All4One<B, M> {
    /// The support set.
    pub fn support_set(&self) -> &KeyQueue<B> {
        &self.support
    }

    /// The momentum copy of the encoder: its network and its momentum schedule.
    pub fn momentum_encoder(&self) -> &MomentumEncoder<Projected<B, M>> {
        &self.copy
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for All4One<B, M> {
    type Online = All4OneNetwork<B, M>;
    type Backbone = M;
    type State = All4OneState<B, M>;

    online_in!(online);

    fn check_batch_size(&self, batch_size: usize) -> Result<(), ConfigError> {
        self.support.check_steps(batch_size, batch_size)
    }

    /// The transformer at `transformer_lr_factor` × the run's rate.
    fn lr_groups(&self) -> Vec<LrGroup> {
        vec![LrGroup::of(
            &self.online.transformer,
            self.transformer_lr_factor,
        )]
    }

    fn state(&self) -> All4OneState<B, M> {
        All4OneState {
            momentum: self.copy.record(),
            support: self.support.keys(),
            pointer: self.support.pointer(),
        }
    }

    fn load_state(&mut self, state: All4OneState<B, M>) -> Result<(), ConfigError> {
        self.support.restore(
            state.support,
            state.pointer,
            "support_set_size",
            "All4One's support set",
        )?;
        self.copy.load_record(state.momentum);
        Ok(())
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let [view1, view2] = views.two();
        let [z1, p1, q1] = self.online.forward(view1.clone());
        let [z2, p2, q2] = self.online.forward(view2.clone());
        let momentum = |x: Tensor<B, 4>| l2_normalize(self.copy.network().forward(x)).detach();
        let (m1, m2) = (momentum(view1), momentum(view2));
        let k = self.neighbours;
        let (nn1, nn2) = (
            self.support.nearest_k(m1.clone(), k),
            self.support.nearest_k(m2.clone(), k),
        );
        let [n, _, d] = nn1.dims();
        let first = |nn: &Tensor<B, 3>| nn.clone().slice([0..n, 0..1, 0..d]).reshape([n, d]);
        let (nearest1, nearest2) = (first(&nn1), first(&nn2));
        let (trans1, strange1) = sequences(nn1, q1, &self.table);
        let (trans2, strange2) = sequences(nn2, q2, &self.table);
        // The four sequences through the transformer at once (each row on its own).
        let tokens = self
            .online
            .transformer
            .first_token(Tensor::cat(vec![trans1, trans2, strange1, strange2], 0));
        let part = |i: usize| tokens.clone().slice([i * n..(i + 1) * n, 0..d]);
        let gather = |x: Tensor<B, 2>| Replica::gather_on(self.replica.as_ref(), x);
        let inputs = All4OneInputs {
            rich: [gather(part(0)), gather(part(1))],
            strange: [gather(part(2)), gather(part(3))],
            nearest: [gather(nearest1), gather(nearest2)],
            predictions: [gather(p1), gather(p2)],
            momentum: [gather(m1.clone()), gather(m2)],
            projections: [gather(z1.clone()), gather(z2.clone())],
        };
        let terms = self.loss.forward(inputs);
        self.support.stage(gather(m1).detach());
        MethodOutput::new(terms.total)
            .with_stat("centroid_loss", terms.centroid)
            .with_stat("neighbour_loss", terms.neighbour)
            .with_stat("feature_loss", terms.feature)
            .with_momentum(self.copy.momentum_at(progress))
            .with_embeddings([z1, z2])
    }

    replica_in!(
        /// The support set takes every replica's momentum projections; every input of the loss is
        /// gathered, so the loss is the global batch's on every replica, and the gathers' backward
        /// with the average over replicas gives the one-device gradient (with synchronised batch
        /// norms).
        replica
    );

    fn after_step(&mut self, progress: Progress) {
        self.copy.update(&self.online, progress);
        self.support.commit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::TinyBackbone as Tiny;
    use crate::method::testing::{built, cosine, host, images, progress, Ad};
    use crate::optim::SgdConfig;
    use burn::module::{ModuleVisitor, Param, ParamId};
    use burn::optim::Optimizer;

    /// The tests' small All4One (the transformer's dropout at its default).
    fn small_config() -> All4OneConfig {
        All4OneConfig::new()
            .with_hidden_dim(8)
            .with_output_dim(4)
            .with_predictor_hidden_dim(8)
            .with_support_set_size(12)
            .with_neighbours(3)
            .with_transformer_heads(2)
    }

    fn all4one(dropout: f64) -> All4One<Ad, Tiny<Ad>> {
        let config = small_config().with_transformer_dropout(dropout);
        built(11, |d| config.init(|d| Tiny::new(16, 6, d), 4, d))
    }

    /// The `k` nearest keys are the support set's rows in descending order of cosine with the
    /// query, found here by sorting every row's cosine on the host.
    #[test]
    fn the_nearest_keys_are_the_most_similar_rows_in_order() {
        let m = all4one(0.0);
        let z: Tensor<Ad, 2> = Tensor::from_data(
            TensorData::new(
                (0..12)
                    .map(|i| (1.3 * i as f64).cos() + 0.2)
                    .collect::<Vec<f64>>(),
                [3, 4],
            ),
            &Default::default(),
        );
        let bank = host(m.support_set().keys());
        let found = host(m.support_set().nearest_k(z.clone(), 5));
        let z = host(z);
        for n in 0..3 {
            let row = &z[n * 4..(n + 1) * 4];
            let mut order: Vec<usize> = (0..12).collect();
            let cos = |k: usize| cosine(row, &bank[k * 4..(k + 1) * 4]);
            order.sort_by(|&a, &b| cos(b).total_cmp(&cos(a)));
            for (slot, &key) in order[..5].iter().enumerate() {
                let at = (n * 5 + slot) * 4;
                assert_eq!(&found[at..at + 4], &bank[key * 4..(key + 1) * 4]);
            }
        }
    }

    /// The positional table at entries worked by hand: `k = 5` gives 6 channels, frequencies
    /// `1, 10000^(−1/3), 10000^(−2/3)`; row `i` of column `j` is `sin`/`cos` of `j·f_{i/2}`.
    #[test]
    fn the_positional_table_is_solo_learns() {
        let table = host(positional_table::<Ad>(5, 7, &Default::default()));
        let f1 = 10000f64.powf(-1.0 / 3.0);
        let f2 = 10000f64.powf(-2.0 / 3.0);
        for (i, j, want) in [
            (0, 0, 0.0),
            (1, 0, 1.0),
            (0, 3, 3f64.sin()),
            (1, 3, 3f64.cos()),
            (2, 6, (6.0 * f1).sin()),
            (3, 2, (2.0 * f1).cos()),
            (4, 5, (5.0 * f2).sin()),
        ] {
            let got = table[i * 7 + j];
            assert!((got - want).abs() < 1e-15, "[{i}, {j}]: {got} vs {want}");
        }
    }

    /// The transformer's layers start with the same values (PyTorch's deep copy) but are
    /// distinct parameters: after one optimiser step their weights differ.
    #[test]
    fn the_transformer_layers_start_equal_and_train_apart() {
        struct Ids(Vec<ParamId>);
        impl ModuleVisitor<Ad> for Ids {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad, D>>) {
                self.0.push(param.id);
            }
        }
        let mut m = all4one(0.0);
        let layers = &m.online().transformer.layers;
        assert_eq!(layers.len(), 3);
        let weights = |i: usize, m: &All4One<Ad, Tiny<Ad>>| {
            host(m.online().transformer.layers[i].in_proj.weight.val())
        };
        assert_eq!(weights(0, &m), weights(2, &m));
        assert_eq!(
            host(layers[0].linear2.weight.val()),
            host(layers[1].linear2.weight.val())
        );
        let mut ids = Ids(Vec::new());
        m.online().transformer.visit(&mut ids);
        let unique: std::collections::HashSet<ParamId> = ids.0.iter().copied().collect();
        assert_eq!(unique.len(), ids.0.len(), "every parameter has its own id");
        let at = progress(0, 10, 0, 1);
        let out = m.forward(images(4, 0.0), images(4, 1.0), at);
        let grads = m.gradients(&out.loss);
        let mut optim = SgdConfig::new()
            .init::<Ad, All4OneNetwork<Ad, Tiny<Ad>>>()
            .unwrap();
        m.set_online(optim.step(0.5, m.online().clone(), grads));
        assert_ne!(weights(0, &m), weights(1, &m));
        assert_ne!(weights(1, &m), weights(2, &m));
    }

    /// The loss recomputed from the networks' outputs: the momentum projections' top-3
    /// neighbours, the sequences, the transformer's first tokens and the loss of those, and
    /// its statistics.
    #[test]
    fn the_step_feeds_the_loss_the_networks_outputs() {
        let mut m = all4one(0.0);
        let (v1, v2) = (images::<Ad>(4, 0.0), images::<Ad>(4, 1.0));
        let online = m.online().clone();
        let [z1, p1, q1] = online.forward(v1.clone());
        let [z2, p2, q2] = online.forward(v2.clone());
        let mom = |x: Tensor<Ad, 4>| l2_normalize(m.momentum_encoder().network().forward(x));
        let (m1, m2) = (mom(v1.clone()), mom(v2.clone()));
        let (nn1, nn2) = (
            m.support_set().nearest_k(m1.clone(), 3),
            m.support_set().nearest_k(m2.clone(), 3),
        );
        let table = positional_table::<Ad>(3, 4, &Default::default());
        let first = |nn: &Tensor<Ad, 3>| nn.clone().slice([0..4, 0..1, 0..4]).reshape([4, 4]);
        let nearest = [first(&nn1), first(&nn2)];
        let (t1, s1) = sequences(nn1, q1, &table);
        let (t2, s2) = sequences(nn2, q2, &table);
        let tr = &online.transformer;
        let terms = All4OneLossConfig::new()
            .init()
            .unwrap()
            .forward(All4OneInputs {
                rich: [tr.first_token(t1), tr.first_token(t2)],
                strange: [tr.first_token(s1), tr.first_token(s2)],
                nearest,
                predictions: [p1, p2],
                momentum: [m1, m2],
                projections: [z1, z2],
            });
        let out = m.forward(v1, v2, progress(0, 10, 0, 1));
        let (ours, want) = (host(out.loss)[0], host(terms.total)[0]);
        assert!((ours - want).abs() < 1e-12, "{ours} vs {want}");
        let stat = |name: &str| {
            host(
                out.stats
                    .iter()
                    .find(|(n, _)| *n == name)
                    .unwrap()
                    .1
                    .clone(),
            )[0]
        };
        assert!((stat("centroid_loss") - host(terms.centroid)[0]).abs() < 1e-12);
        assert!((stat("feature_loss") - host(terms.feature)[0]).abs() < 1e-12);
        assert_eq!(stat("momentum"), 0.99);
    }

    /// After the step the support set holds the first view's unit momentum projections (taken
    /// before the copy's EMA update) at the old pointer, and the copy moved by the scheduled
    /// momentum towards the online network.
    #[test]
    fn the_support_set_takes_the_momentum_projections_and_the_copy_moves() {
        let mut m = all4one(0.0);
        let at = progress(3, 10, 0, 1);
        let v1 = images::<Ad>(4, 0.0);
        let m1 = host(l2_normalize(
            m.momentum_encoder().network().forward(v1.clone()),
        ));
        let before = host(m.momentum_encoder().network().backbone.fc.weight.val());
        let out = m.forward(v1, images(4, 1.0), at);
        let grads = m.gradients(&out.loss);
        let mut optim = SgdConfig::new()
            .init::<Ad, All4OneNetwork<Ad, Tiny<Ad>>>()
            .unwrap();
        m.set_online(optim.step(0.5, m.online().clone(), grads));
        m.after_step(at);
        let keys = host(m.support_set().keys());
        for (a, b) in keys[..16].iter().zip(&m1) {
            assert!((a - b).abs() < 1e-12);
        }
        assert_eq!(m.support_set().pointer(), 4);
        let online = host(m.online().backbone.fc.weight.val());
        let after = host(m.momentum_encoder().network().backbone.fc.weight.val());
        let tau = 1.0 - 0.01 * ((std::f64::consts::PI * 0.3).cos() + 1.0) / 2.0;
        assert!(online != before, "the online network moved");
        for ((a, t), o) in after.iter().zip(&before).zip(&online) {
            assert!((a - (tau * t + (1.0 - tau) * o)).abs() < 1e-12);
        }
    }

    /// The checkpointed state (momentum copy, support set, pointer) loads into a method built
    /// from another seed and makes it the same; a support set of another size is refused naming
    /// `support_set_size`.
    #[test]
    fn the_state_round_trips() {
        let mut m = all4one(0.0);
        let at = progress(0, 10, 0, 1);
        m.forward(images(4, 0.0), images(4, 1.0), at);
        m.after_step(at);
        m.after_step(at);
        let mut other = built(12, |d| small_config().init(|d| Tiny::new(16, 6, d), 4, d));
        let copy = |m: &All4One<Ad, Tiny<Ad>>| {
            host(m.momentum_encoder().network().backbone.fc.weight.val())
        };
        assert_ne!(copy(&m), copy(&other));
        other.load_state(m.state()).unwrap();
        assert_eq!(copy(&m), copy(&other));
        assert_eq!(
            host(m.support_set().keys()),
            host(other.support_set().keys())
        );
        assert_eq!(other.support_set().pointer(), 4);
        let state = m.state();
        let wrong = All4OneState {
            momentum: state.momentum,
            support: Tensor::zeros([8, 4], &Default::default()),
            pointer: 0,
        };
        assert_eq!(
            other.load_state(wrong).unwrap_err().field,
            "support_set_size"
        );
    }

    /// The transformer's dropout acts in training: with dropout 0.5 the step's loss depends on
    /// the seed its forward pass runs under (the trainer seeds each step's), and repeats under
    /// the same seed; with dropout 0 it does not depend on it.
    #[test]
    fn the_dropout_is_drawn_from_the_steps_seed() {
        let device = Default::default();
        let loss = |dropout: f64, seed: u64| {
            let mut m = all4one(dropout);
            crate::base::seed::with_seed::<Ad, _>(&device, seed, || {
                host(
                    m.forward(images(4, 0.0), images(4, 1.0), progress(0, 10, 0, 1))
                        .loss,
                )[0]
            })
        };
        assert_eq!(loss(0.5, 1), loss(0.5, 1));
        assert_ne!(loss(0.5, 1), loss(0.5, 2));
        assert_eq!(loss(0.0, 1), loss(0.0, 2));
    }

    /// Settings out of range are refused by name.
    #[test]
    fn bad_settings_are_named() {
        let device = Default::default();
        let build = |c: All4OneConfig| {
            crate::base::seed::with_seed::<Ad, _>(&device, 1, || {
                c.with_hidden_dim(8)
                    .with_predictor_hidden_dim(8)
                    .init(|d| Tiny::<Ad>::new(16, 6, d), 4, &device)
                    .map(|_| ())
                    .unwrap_err()
                    .field
            })
        };
        let small = || {
            All4OneConfig::new()
                .with_output_dim(4)
                .with_support_set_size(12)
                .with_transformer_heads(2)
        };
        assert_eq!(build(small().with_neighbours(1)), "neighbours");
        assert_eq!(build(small().with_neighbours(13)), "neighbours");
        assert_eq!(
            build(small().with_transformer_heads(3)),
            "transformer_heads"
        );
        assert_eq!(
            build(small().with_transformer_layers(0)),
            "transformer_layers"
        );
        assert_eq!(
            build(small().with_transformer_dropout(1.0)),
            "transformer_dropout"
        );
        assert_eq!(build(small().with_support_set_size(10)), "support_set_size");
        assert_eq!(build(small().with_output_dim(1)), "output_dim");
        assert_eq!(build(small().with_base_momentum(1.5)), "base_momentum");
        assert_eq!(
            build(small().with_transformer_lr_factor(f64::NAN)),
            "transformer_lr_factor"
        );
    }
}
