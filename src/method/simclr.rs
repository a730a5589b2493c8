//! SimCLR (documented on `SimClr`).

use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};
use serde::{Deserialize, Serialize};

use super::branches::{ViewRows, ViewThreads};
use super::encoder::Projected;
use super::pgd::{attack_copy, Pgd, PgdConfig};
use super::ssl_method::{online_in, stat, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{
    CurricularLoss, CurricularLossConfig, CurricularState, DclLoss, DclLossConfig, HclLoss,
    HclLossConfig, HuberNtXentLoss, HuberNtXentLossConfig, MaclLoss, MaclLossConfig, NtXentLoss,
    NtXentLossConfig,
};

/// The two-view loss SimCLR trains with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PairLossConfig {
    /// NT-Xent (SimCLR's own loss).
    NtXent(NtXentLossConfig),
    /// Hard-negative sampling / debiased contrastive loss (HCL, DCL).
    Hcl(HclLossConfig),
    /// Curricular weighting of hard negatives with its adaptive `t` (checkpointed).
    Curricular(CurricularLossConfig),
    /// NT-Xent with a Huber penalty on the positive pairs.
    Huber(HuberNtXentLossConfig),
    /// The decoupled contrastive loss, DCL, or its weighted form DCLW.
    Dcl(DclLossConfig),
    /// The model-aware contrastive loss, MACL: a temperature that follows the views'
    /// alignment (logged as `macl_temperature`), re-weighted anchors.
    Macl(MaclLossConfig),
}

/// Configuration of [`SimClr`].
#[derive(Config, Debug)]
pub struct SimClrConfig {
    /// Hidden width of the projector.
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Projection width.
    #[config(default = 128)]
    pub output_dim: usize,
    /// The loss between the views (NT-Xent with τ = 0.5 as in SimCLR; 0.2 is common on CIFAR).
    #[config(default = "PairLossConfig::NtXent(NtXentLossConfig::new())")]
    pub loss: PairLossConfig,
    /// PGD-hardened negatives (MICO §3.3 eq. 4), for the NT-Xent and HCL losses; `None` (the
    /// default): off. Set its `normalize` to the views' normalisation.
    #[config(default = "None")]
    pub pgd: Option<PgdConfig>,
}

impl SimClrConfig {
    /// Builds SimCLR around the backbone `backbone` makes (called once).
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<SimClr<B, M>, ConfigError> {
        let backbone = backbone(device);
        let projector =
            MlpHeadConfig::simclr(backbone.feature_dim(), self.hidden_dim, self.output_dim)
                .init(device)?;
        let loss = match &self.loss {
            PairLossConfig::NtXent(c) => PairLoss::NtXent(c.init()?),
            PairLossConfig::Hcl(c) => PairLoss::Hcl(c.init()?),
            PairLossConfig::Curricular(c) => PairLoss::Curricular(c.init(device)?),
            PairLossConfig::Huber(c) => PairLoss::Huber(c.init()?),
            PairLossConfig::Dcl(c) => PairLoss::Dcl(c.init()?),
            PairLossConfig::Macl(c) => PairLoss::Macl(c.init()?),
        };
        let pgd = match &self.pgd {
            None => None,
            Some(c) => match loss {
                PairLoss::NtXent(_) | PairLoss::Hcl(_) => Some(c.init()?),
                _ => {
                    return Err(ConfigError::new(
                        "pgd",
                        "hardens the negatives of the NT-Xent and HCL losses only",
                    ))
                }
            },
        };
        Ok(SimClr {
            online: Projected {
                backbone,
                projector,
            },
            loss,
            pgd,
            view_threads: ViewThreads::default(),
            replica: None,
        })
    }
}

#[derive(Debug, Clone)]
enum PairLoss<B: Backend> {
    NtXent(NtXentLoss),
    Hcl(HclLoss),
    Curricular(CurricularLoss<B>),
    Huber(HuberNtXentLoss),
    Dcl(DclLoss),
    Macl(MaclLoss),
}

/// The first and second halves of a `[2B, D]` batch.
fn halves<B: Backend>(x: Tensor<B, 2>) -> [Tensor<B, 2>; 2] {
    let batch = x.dims()[0] / 2;
    [x.clone().narrow(0, 0, batch), x.narrow(0, batch, batch)]
}

/// The checkpointed state of [`SimClr`]: the curricular loss's state when that loss is used
/// (its `t`, read back from the device only when a checkpoint is written).
#[derive(Record)]
pub struct SimClrState {
    /// The adaptive `t` of the curricular loss; `None` for the other losses.
    pub curricular_t: Option<f64>,
}

/// SimCLR. Build it with [`SimClrConfig::init`].
///
/// SimCLR (Chen et al. 2020, <https://arxiv.org/abs/2002.05709>): backbone + MLP projector, a
/// two-view contrastive loss between the views — NT-Xent by default, one of its curriculum
/// variants from `loss/` (HCL, curricular weighting, Huber-regularised NT-Xent), the
/// decoupled contrastive loss (DCL / DCLW, whose paper trains SimCLR with it), or the
/// model-aware contrastive loss (MACL, likewise).
///
/// With [`SimClrConfig::pgd`], the negatives are hardened by PGD before the step (MICO §3.3
/// eq. 4, <https://arxiv.org/abs/2301.06916>; see [`Pgd`](super::Pgd)): the two views are
/// attacked together so that the loss of the clean anchors against them rises, each anchor keeps
/// its clean positive, and its negatives are the other images' hardened views
/// ([`NtXentLoss::forward_with_negatives`], [`HclLoss::forward_with_negatives`]). The hardened
/// views go through the network with gradients, so the step also learns to push them away. Cost:
/// S attack passes (forward and backward on `2B` images, on a copy of the network) and one more
/// forward and backward on `2B` images per step, while the attack is on.
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#simclr` (and `#nt-xent`, `#hcl`, `#curricular-weighting`,
/// `#huber-regularised-nt-xent`, `#dcl-and-dclw`, `#macl` for the losses).
#[derive(Debug, Clone)]
pub struct SimClr<B: Backend, M: Backbone<B>> {
    online: Projected<B, M>,
    loss: PairLoss<B>,
    pgd: Option<Pgd>,
    /// The two views' passes back-propagated on two threads, when on (not at the steps where
    /// PGD's hardened negatives add a third pass).
    view_threads: ViewThreads<B, Projected<B, M>>,
    /// This method's replica in a data-parallel run: the loss is computed on every replica's
    /// projections, gathered.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> SimClr<B, M> {
    /// The curricular `t`, when that loss is used.
    pub fn curricular_t(&self) -> Option<f64> {
        match &self.loss {
            PairLoss::Curricular(loss) => Some(loss.t()),
            _ => None,
        }
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SimClr<B, M> {
    /// The loss of the anchors `z1`, `z2` (clean positives) against negatives `n1`, `n2`, as the
    /// method's loss defines it (NT-Xent, or HCL at the `β` of `progress`).
    fn loss_against(
        &self,
        [z1, z2]: [Tensor<B, 2>; 2],
        [n1, n2]: [Tensor<B, 2>; 2],
        progress: Progress,
    ) -> Tensor<B, 1> {
        match &self.loss {
            PairLoss::NtXent(loss) => loss.forward_with_negatives(z1, z2, n1, n2),
            PairLoss::Hcl(loss) => {
                loss.forward_with_negatives(z1, z2, n1, n2, loss.beta_at(progress))
            }
            _ => unreachable!("SimClrConfig::init refuses PGD with the other losses"),
        }
    }

    /// PGD on the two views `clean` (`[2B, C, H, W]`, view1's then view2's, normalised): the
    /// attack raises the loss of the `anchors` (detached) against the candidates' projections
    /// through a copy of the network ([`attack_copy`]: no gradient reaches the weights, the
    /// running statistics stay). Returns the hardened views, normalised, detached.
    fn harden(
        &self,
        clean: Tensor<B, 4>,
        anchors: [Tensor<B, 2>; 2],
        progress: Progress,
    ) -> Tensor<B, 4> {
        let pgd = self.pgd.as_ref().expect("called with the attack on");
        let copy = attack_copy(&self.online);
        pgd.attack_views(clean, progress, |x| {
            self.loss_against(anchors.clone(), halves(copy.forward(x)), progress)
        })
    }

    /// Plain NT-Xent on one device at a step without the attack, the views through the
    /// networks as one batch: the loss of the stacked projections, not split for it (on a
    /// fusion backend the split's two slices under autodiff, the loss's concatenation of them
    /// and the gradient's copies back into one tensor were nine operations a step; the step's
    /// embeddings are slices of the detached projections). `Err` with the views otherwise.
    fn stacked_nt_xent(
        &mut self,
        views: [Tensor<B, 4>; 2],
        attack: bool,
        progress: Progress,
    ) -> Result<MethodOutput<B>, [Tensor<B, 4>; 2]> {
        let PairLoss::NtXent(loss) = &self.loss else {
            return Err(views);
        };
        if attack || self.replica.is_some() {
            return Err(views);
        }
        let z = self
            .view_threads
            .stacked(&self.online, views, |net, x, groups| {
                net.forward_grouped(x, groups)
            })?;
        let device = z.device();
        let embeddings = Some(z.clone().detach().split_views());
        let mut stats = Vec::new();
        if let Some(pgd) = &self.pgd {
            stats.push(("pgd_strength", stat(pgd.strength(progress), &device)));
        }
        Ok(MethodOutput {
            loss: loss.forward_stacked(z),
            stats,
            embeddings,
        })
    }

    /// The projections of the hardened views ([`SimClr::harden`]) by the network itself, with
    /// gradients: view1's and view2's.
    fn hardened_negatives(
        &self,
        clean: Tensor<B, 4>,
        z1: &Tensor<B, 2>,
        z2: &Tensor<B, 2>,
        progress: Progress,
    ) -> [Tensor<B, 2>; 2] {
        let anchors = [z1.clone().detach(), z2.clone().detach()];
        halves(self.online.forward(self.harden(clean, anchors, progress)))
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for SimClr<B, M> {
    type Online = Projected<B, M>;
    type Backbone = M;
    type State = SimClrState;

    online_in!(online, view_threads);

    fn state(&self) -> SimClrState {
        SimClrState {
            curricular_t: self.curricular_t(),
        }
    }

    fn load_state(&mut self, state: SimClrState) -> Result<(), ConfigError> {
        match (&mut self.loss, state.curricular_t) {
            (PairLoss::Curricular(loss), Some(t)) => {
                loss.load_state(CurricularState { t });
                Ok(())
            }
            (PairLoss::Curricular(_), None) => Err(ConfigError::new(
                "loss",
                "the checkpoint has no curricular t but this SimCLR uses the curricular loss",
            )),
            (_, Some(_)) => Err(ConfigError::new(
                "loss",
                "the checkpoint holds a curricular t but this SimCLR does not use that loss",
            )),
            (_, None) => Ok(()),
        }
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let attack = self
            .pgd
            .as_ref()
            .is_some_and(|pgd| pgd.at(progress).is_on());
        let [view1, view2] = match self.stacked_nt_xent(views.two(), attack, progress) {
            Ok(output) => return output,
            Err(views) => views,
        };
        let clean = attack.then(|| Tensor::cat(vec![view1.clone(), view2.clone()], 0).detach());
        // No split at a step with the attack: its negatives reach the networks too.
        let ([z1, z2], _) = self.view_threads.passes(
            &self.online,
            [view1, view2],
            clean.is_none(),
            |net, x, groups| (net.forward_grouped(x, groups), ()),
        );
        let embeddings = Some([z1.clone().detach(), z2.clone().detach()]);
        // Data-parallel: the loss sees every replica's images (negatives included), in rank order.
        let replica = self.replica.as_ref();
        let (z1, z2) = (
            Replica::gather_on(replica, z1),
            Replica::gather_on(replica, z2),
        );
        let device = z1.device();
        let mut stats = Vec::new();
        if let Some(pgd) = &self.pgd {
            stats.push(("pgd_strength", stat(pgd.strength(progress), &device)));
        }
        // The hardened negatives' projections, when the attack is on.
        let negatives = clean.map(|clean| self.hardened_negatives(clean, &z1, &z2, progress));
        match &mut self.loss {
            PairLoss::NtXent(loss) => MethodOutput {
                loss: match negatives {
                    None => loss.forward(z1, z2),
                    Some([n1, n2]) => loss.forward_with_negatives(z1, z2, n1, n2),
                },
                stats,
                embeddings,
            },
            PairLoss::Hcl(loss) => {
                let beta = loss.beta_at(progress);
                if loss.is_scheduled() {
                    stats.push(("hcl_beta", stat(beta, &device)));
                }
                if let Some(exponent) = loss.hard_positive_exponent(beta) {
                    stats.push(("hcl_k_minus_beta", stat(exponent, &device)));
                }
                MethodOutput {
                    loss: match negatives {
                        None => loss.forward_with_beta(z1, z2, beta),
                        Some([n1, n2]) => loss.forward_with_negatives(z1, z2, n1, n2, beta),
                    },
                    stats,
                    embeddings,
                }
            }
            PairLoss::Huber(loss) => MethodOutput {
                loss: loss.forward(z1, z2),
                stats,
                embeddings,
            },
            PairLoss::Dcl(loss) => MethodOutput {
                loss: loss.forward(z1, z2),
                stats,
                embeddings,
            },
            PairLoss::Macl(loss) => {
                let out = loss.forward_with_temperature(z1, z2);
                stats.push(("macl_temperature", out.temperature));
                MethodOutput {
                    loss: out.loss,
                    stats,
                    embeddings,
                }
            }
            PairLoss::Curricular(loss) => {
                let out = loss.forward(z1, z2);
                stats.push(("curricular_t", out.t));
                MethodOutput {
                    loss: out.loss,
                    stats,
                    embeddings,
                }
            }
        }
    }

    fn set_replica(&mut self, replica: Replica<B>) -> Result<(), ConfigError> {
        if self.pgd.is_some() {
            return Err(ConfigError::new(
                "devices",
                "SimCLR with PGD-hardened negatives (MICO) runs on one device: the attack's \
                 passes are not spread over replicas",
            ));
        }
        self.view_threads.replicated();
        self.replica = Some(replica);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::normalize::Normalize;
    use crate::loss::CurricularLossConfig;
    use burn::backend::{Autodiff, NdArray};

    type Inner = NdArray<f64>;
    type Ad = Autodiff<Inner>;

    use crate::method::testing::TinyBackbone as Tiny;

    const MEAN: f64 = 0.4;
    const STD: f64 = 0.25;

    fn simclr(config: SimClrConfig) -> SimClr<Ad, Tiny<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 11, |d| {
            config
                .with_hidden_dim(8)
                .with_output_dim(4)
                .init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap()
    }

    fn pgd(schedule: Option<crate::curriculum::SchedulerConfig>) -> PgdConfig {
        PgdConfig::new()
            .with_steps(4)
            .with_step_size(0.03)
            .with_epsilon(0.06)
            .with_schedule(schedule)
            .with_normalize(Some(Normalize::new(&[MEAN], &[STD])))
    }

    /// Normalised views of `n` images with pixels in [0, 1] (some at the range's ends).
    fn views(n: usize, salt: usize) -> Tensor<Ad, 4> {
        let pixels: Vec<f64> = (0..n * 16)
            .map(|i| ((i * 7 + salt * 13) % 23) as f64 / 22.0)
            .collect();
        let x = Tensor::from_data(TensorData::new(pixels, [n, 1, 4, 4]), &Default::default());
        Normalize::new(&[MEAN], &[STD]).apply(x)
    }

    fn host<const D: usize>(x: Tensor<Inner, D>) -> Vec<f64> {
        x.into_data().iter::<f64>().collect()
    }

    /// Every weight and running statistic of the network, as bytes.
    fn parameters(m: &SimClr<Ad, Tiny<Ad>>) -> Vec<u8> {
        use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
        BinBytesRecorder::<FullPrecisionSettings>::default()
            .record(m.online.clone().into_record(), ())
            .unwrap()
    }

    /// MICO eq. 4 in SimCLR: the hardened views raise the loss of the clean anchors against them
    /// (NT-Xent and HCL), stay within ε of the clean pixels and inside [0, 1] (in pixel units,
    /// through the normalisation), and the attack changes neither the weights nor the running
    /// statistics of the network.
    #[test]
    fn pgd_hardens_the_negatives_within_the_ball_and_leaves_the_network_alone() {
        let losses = [
            PairLossConfig::NtXent(NtXentLossConfig::new()),
            PairLossConfig::Hcl(HclLossConfig::new()),
        ];
        for loss in losses {
            let method = simclr(
                SimClrConfig::new()
                    .with_loss(loss)
                    .with_pgd(Some(pgd(None))),
            );
            let progress = Progress::default();
            let (v1, v2) = (views(4, 1), views(4, 2));
            let z1 = method.online.forward(v1.clone()).detach();
            let z2 = method.online.forward(v2.clone()).detach();
            let clean = Tensor::cat(vec![v1, v2], 0);
            let before = parameters(&method);
            // The attack's random start draws from the generator: under the seed lock, as the
            // trainer's forward pass holds it.
            let hard = crate::base::seed::with_seed::<Ad, _>(&Default::default(), 11, || {
                method.harden(clean.clone(), [z1.clone(), z2.clone()], progress)
            });
            assert_eq!(parameters(&method), before, "the attack moved the network");
            let copy = attack_copy(&method.online);
            let loss_of = |x: Tensor<Ad, 4>| {
                method
                    .loss_against([z1.clone(), z2.clone()], halves(copy.forward(x)), progress)
                    .into_scalar()
            };
            let (clean_loss, hard_loss) = (loss_of(clean.clone()), loss_of(hard.clone()));
            assert!(
                hard_loss > clean_loss + 1e-4,
                "clean {clean_loss}, hardened {hard_loss}"
            );
            let pixels = |x: Tensor<Ad, 4>| {
                host(x.inner())
                    .iter()
                    .map(|v| v * STD + MEAN)
                    .collect::<Vec<_>>()
            };
            let (c, h) = (pixels(clean), pixels(hard));
            let moved = c
                .iter()
                .zip(&h)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(moved <= 0.06 + 1e-6, "{moved}");
            assert!(moved > 0.03, "the attack moved the pixels: {moved}");
            assert!(h.iter().all(|v| (-1e-6..=1.0 + 1e-6).contains(v)), "{h:?}");
        }
    }

    /// While the schedule keeps the attack off, SimCLR with PGD is SimCLR: the same loss, bit
    /// for bit; once it is on, the loss differs and its strength is logged.
    #[test]
    fn pgd_off_is_plain_simclr_and_on_changes_the_loss() {
        let at = |epoch| Progress {
            step: epoch * 2,
            total_steps: 8,
            epoch,
            total_epochs: 4,
        };
        let loss_at = |pgd: Option<PgdConfig>, progress| {
            let mut m = simclr(SimClrConfig::new().with_pgd(pgd));
            let out = m.forward(views(4, 1), views(4, 2), progress);
            let stats: Vec<(String, f64)> = out
                .stats
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone().into_scalar()))
                .collect();
            (out.loss.into_scalar(), stats)
        };
        let schedule = Some(PgdConfig::default_schedule());
        let (plain, _) = loss_at(None, at(0));
        let (off, stats) = loss_at(Some(pgd(schedule.clone())), at(0));
        assert_eq!(plain.to_bits(), off.to_bits());
        assert_eq!(stats, vec![("pgd_strength".to_string(), 0.0)]);
        let (plain, _) = loss_at(None, at(3));
        let (on, stats) = loss_at(Some(pgd(schedule)), at(3));
        assert_ne!(plain, on);
        assert_eq!(stats, vec![("pgd_strength".to_string(), 1.0)]);
    }

    #[test]
    fn pgd_is_refused_with_a_loss_it_does_not_harden() {
        let device = Default::default();
        let err = crate::method::init_method::<Ad, _, _>(&device, 0, |d| {
            SimClrConfig::new()
                .with_loss(PairLossConfig::Curricular(CurricularLossConfig::new()))
                .with_pgd(Some(PgdConfig::new()))
                .init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap_err();
        assert_eq!(err.field, "pgd");
    }
}
