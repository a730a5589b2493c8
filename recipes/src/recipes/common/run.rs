//! Running a prepared recipe: its method's and optimiser's settings sections, the method built
//! from the seed (its size checked against the machine first), training on one device or as
//! replicas (`--devices`, `--nodes`), the trainer with its hooks, the kNN of the backbone at
//! initialisation and of the raw pixels, and the report.

use super::args::{MethodArgs, RecipeRun, StartArgs};
use super::backbone::BackboneSpec;
use super::data::{available_memory, raw_pixels_too_large, TrainData};
use super::prepare::Prepared;
use super::report::{print_where, result_lines, write_summary};
use super::settings::Settings;
use crate::backend;
use crate::backend::{Device, Train};
use crate::run_files::{read_knn_results, KNN_AT_INIT, KNN_RAW_PIXELS};
use crate::usage::usage;
use anyhow::Result;
use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{Adam, AdamConfig, AdamW, AdamWConfig, Optimizer};
use curriculum_ssl::data::stream::{ImageSource, StreamConfig, StreamLoader, ViewCrop};
use curriculum_ssl::data::{ImageArray, Loader, LoaderConfig};
use curriculum_ssl::data_parallel::{
    self, DataParallelConfig, DataParallelError, MultiNode, Replica,
};
use curriculum_ssl::eval::{KnnMonitor, KnnResult, RawPixels};
use curriculum_ssl::hooks::{
    FrechetCurationHook, KnnHook, ObjectBoxesHook, SelfPacedAutoAugmentHook,
};
use curriculum_ssl::method::{init_method, MocoConfig, SslMethod, ViewPasses};
use curriculum_ssl::optim::{Lars, LarsConfig, SgdConfig, SgdOptimizer};
use curriculum_ssl::pipeline::{Augmenter, PipelineConfig, ViewConfig};
use curriculum_ssl::seed;
use curriculum_ssl::train::{DataFingerprint, SelfSupervised, StartMode, TrainConfig, Trainer};
use curriculum_ssl_models::AnyBackbone;
use serde::Serialize;

impl Prepared {
    /// `config` (of the method, or the optimiser) with the settings file's `[section]` and the
    /// command line's `section.KEY=VALUE` applied, recorded for the run's recipe.toml.
    ///
    /// # Errors
    /// A key the configuration does not have, or a value of the wrong kind.
    pub fn section<C>(&self, section: &str, config: C) -> Result<C>
    where
        C: Serialize + serde::de::DeserializeOwned,
    {
        self.overrides.apply(section, config)
    }

    /// The backbone's configuration for the data's channel count.
    pub fn backbone_config(&self) -> BackboneSpec {
        self.settings.backbone_spec(self.data.shape())
    }

    /// Builds the method on `device` with the backend's generator seeded by `--seed`, so that
    /// its initial weights depend on the seed alone (every replica of a data-parallel run starts
    /// from the same weights).
    ///
    /// The networks' size is checked from their shapes before their weights are drawn: a run
    /// that cannot fit in memory (e.g. `method.hidden_dim=100000000`) is refused naming its size,
    /// instead of growing until the system kills it. The methods check it themselves before they
    /// draw or copy a network ([`seed::with_size_limit`]: a momentum encoder's copy drew the
    /// online network while it was built, before any check after the build).
    pub fn init<S, E>(
        &self,
        device: &Device,
        build: impl FnOnce(&Device) -> Result<S, E>,
    ) -> Result<S>
    where
        S: SslMethod<Train>,
        E: Into<anyhow::Error>,
    {
        let replicas = self.args.compute.devices.max(1);
        let limit = parameter_limit(replicas);
        let (built, refused) = seed::with_size_limit(limit, || {
            init_method::<Train, S, anyhow::Error>(device, self.settings.seed, |d| {
                build(d).map_err(Into::into)
            })
        });
        // `init_method` checked the online network against the limit before drawing it: a
        // refusal is worded with the size and the settings to lower.
        if let Some(parameters) = refused {
            check_fits(parameters, replicas)?;
        }
        built
    }

    /// A MoCo recipe's method: its `preset` with the command line's `--shuffle-bn` (which only
    /// the recipes whose [`Defaults::shuffle_bn`] is set accept) and the `method` section's
    /// settings.
    ///
    /// # Errors
    /// As [`Prepared::section`]; and InfoNCE's `method.temperature` changed from the preset's
    /// while SoftNCE, with its own temperature, computes the loss: it would be unused
    /// (`method.temperature=0.05` on light_moco trained at SoftNCE's 0.1 without a word).
    pub fn moco(&self, preset: MocoConfig) -> Result<MocoConfig> {
        let preset = preset.with_shuffle_bn(self.args.method.shuffle_bn);
        let built = self.section("method", preset.clone())?;
        if let Some(soft) = &built.soft_nce {
            if built.temperature != preset.temperature {
                return Err(usage(format!(
                    "method.temperature={}: InfoNCE's temperature, unused with SoftNCE, whose \
                     own is method.soft_nce.temperature ({}); set that one, and leave this at \
                     {}",
                    built.temperature, soft.temperature, preset.temperature
                )));
            }
        }
        Ok(built)
    }
}

/// The most parameters a run may have whatever the machine: 2³² (16 GiB of f32 weights alone).
const MAX_PARAMETERS: u64 = 1 << 32;

/// Bytes a run needs per parameter at the least: f32 weights, their gradients, the optimiser's
/// state (momentum; Adam and LARS keep more) and a momentum encoder's copy. Activations come
/// on top, so a run refused by this bound could never have fitted.
const BYTES_PER_PARAMETER: u64 = 16;

/// The most parameters [`check_fits`] lets through on `replicas` replicas (a network of more is
/// refused by it): the limit the methods check before they draw a network.
fn parameter_limit(replicas: usize) -> u64 {
    let mut limit = MAX_PARAMETERS;
    if backend::NAME.starts_with("cpu") {
        if let Some(available) = available_memory() {
            limit = limit.min(available / BYTES_PER_PARAMETER / replicas.max(1) as u64);
        }
    }
    limit
}

/// Refuses networks of `parameters` values (on each of `replicas` replicas) that cannot fit:
/// above [`MAX_PARAMETERS`], or, on the CPU backend, above the memory the system says is
/// available.
fn check_fits(parameters: u64, replicas: usize) -> Result<()> {
    let needed = parameters
        .saturating_mul(BYTES_PER_PARAMETER)
        .saturating_mul(replicas as u64);
    let gib = |bytes: u64| bytes as f64 / f64::from(1u32 << 30);
    let refuse = |limit: String| {
        usage(format!(
            "the networks have {parameters} parameters: at least {:.1} GiB with their gradients \
             and optimiser state{}, more than {limit}; lower the method's sizes \
             (method.hidden_dim, method.output_dim, a queue's method.queue_size, SMoG's memory \
             bank of 300 × --batch-size rows) or choose a smaller --backbone",
            gib(needed),
            if replicas > 1 {
                format!(" on {replicas} replicas")
            } else {
                String::new()
            }
        ))
    };
    if parameters > MAX_PARAMETERS {
        return Err(refuse(format!("the {MAX_PARAMETERS} a run may have")));
    }
    if backend::NAME.starts_with("cpu") {
        if let Some(available) = available_memory() {
            if needed > available {
                return Err(refuse(format!(
                    "the {:.1} GiB of memory available",
                    gib(available)
                )));
            }
        }
    }
    Ok(())
}

impl Prepared {
    /// The data-parallel layout of `--devices` and `--nodes` (`None`: one device).
    fn data_parallel(&self) -> Result<Option<DataParallelConfig>> {
        let args = &self.args.compute;
        let nodes = match (
            args.nodes,
            args.node_rank,
            &args.orchestrator,
            &args.node_address,
        ) {
            (None, None, None, None) => None,
            (Some(nodes), Some(rank), Some(orchestrator), Some(address)) => {
                let port = address
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok())
                    .ok_or_else(|| {
                        usage(format!("--node-address {address}: not ws://HOST:PORT"))
                    })?;
                Some(MultiNode {
                    nodes,
                    rank,
                    orchestrator: orchestrator.clone(),
                    address: address.clone(),
                    data_port: port,
                    timeout_s: args.timeout,
                })
            }
            _ => {
                return Err(usage(
                    "--nodes, --node-rank, --orchestrator and --node-address go together (a \
                     run on several machines needs all four)",
                ))
            }
        };
        let config = DataParallelConfig {
            devices: args.devices,
            nodes,
        };
        config.validate().map_err(|e| usage(e.to_string()))?;
        if config.replicas() == 1 && config.nodes.is_none() {
            return Ok(None);
        }
        let batch = self.settings.schedule.batch_size;
        if !batch.is_multiple_of(config.replicas()) {
            return Err(usage(format!(
                "--batch-size {batch}: the global batch must split equally over the {} replicas",
                config.replicas()
            )));
        }
        if batch / config.replicas() < 2 {
            return Err(usage(format!(
                "--batch-size {batch}: each of the {} replicas would get {} image(s) of every \
                 batch; each needs at least 2 (batch norm's statistics on one replica): use \
                 --batch-size {} or more",
                config.replicas(),
                batch / config.replicas(),
                2 * config.replicas()
            )));
        }
        if backend::NAME.starts_with("cpu") && config.devices > MAX_CPU_REPLICAS {
            return Err(usage(format!(
                "--devices {}: the CPU backend runs each replica as a thread on the same cores; \
                 at most {MAX_CPU_REPLICAS} (this machine has {} cores)",
                config.devices,
                std::thread::available_parallelism().map_or(1, |n| n.get())
            )));
        }
        Ok(Some(config))
    }

    /// Trains the method `build` makes around the recipe's backbone (`--backbone`, with
    /// `--weights`) with the optimiser `optimizer` describes: `build(backbone, device)` is the
    /// method's `init` (`|b, d| config.init(b, d)`), `method_config` its settings as
    /// `config.json` records them. [`Prepared::train`] for a method built otherwise.
    pub fn train_method<S, E>(
        self,
        method_config: &impl Serialize,
        optimizer: &(impl OptimizerSettings<S::Online> + Sync),
        build: impl Fn(&dyn Fn(&Device) -> AnyBackbone<Train>, &Device) -> Result<S, E> + Sync,
    ) -> Result<()>
    where
        S: SslMethod<Train>,
        E: Into<anyhow::Error>,
    {
        let backbone = self.backbone_config();
        self.train(method_config, |recipe, device| {
            let method = recipe.init(device, |d| build(&|d| backbone.init::<Train>(d), d))?;
            Ok((method, optimizer.build()?))
        })
    }

    /// Trains the method `build` makes (configured by `method_config`, recorded in
    /// `config.json`) with the optimiser it makes, and prints what the run measured. With
    /// `--devices` or `--nodes`, every replica builds its own from the same seed.
    pub fn train<S, O>(
        self,
        method_config: &impl Serialize,
        build: impl Fn(&Prepared, &Device) -> Result<(S, O)> + Sync,
    ) -> Result<()>
    where
        S: SslMethod<Train>,
        O: Optimizer<S::Online, Train> + 'static,
    {
        let method_config = serde_json::to_value(method_config)?;
        if self.args.run.check {
            self.overrides.check_used(self.settings.recipe)?;
            // What the run would refuse, refused here: the augmentation's settings (a crop
            // scale whose bounds are reversed), and the method as the run builds it, its size
            // checked before its weights are drawn (`--check` passed methods whose networks
            // could not fit, and settings the run then refused). Nothing is written.
            let channels = self.data.shape().2;
            let _: Augmenter = self.pipeline.clone().init(channels)?;
            drop(build(&self, &self.device)?);
            if self.args.run.print_settings {
                let options = self.recorded_options()?;
                let table = self.overrides.table(self.settings.recipe, options);
                println!("{}", serde_json::to_string(&table)?);
            }
            println!(
                "recipe `{}`: the options and settings are valid (--check: nothing trained)",
                self.settings.recipe
            );
            return Ok(());
        }
        let Some(parallel) = self.data_parallel()? else {
            let (method, optimizer) = build(&self, &self.device)?;
            return run(&self, method, method_config, optimizer, &self.device, None);
        };
        let compute = &self.args.compute;
        let devices = backend::devices(compute.device, parallel.devices, compute.precision)?;
        // The replicas' errors themselves, so that the exit code of the first (2 for what the
        // user gave) survives the replicas' threads.
        let errors: std::sync::Mutex<Vec<(usize, anyhow::Error)>> = Default::default();
        let outcome =
            data_parallel::run::<Train, (), String, _>(&parallel, &devices, |replica, device| {
                let rank = replica.rank();
                let result = build(&self, device).and_then(|(method, optimizer)| {
                    run(
                        &self,
                        method,
                        method_config.clone(),
                        optimizer,
                        device,
                        Some(replica),
                    )
                });
                result.map_err(|error| {
                    let text = crate::usage::chain_text(&error);
                    errors
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((rank, error));
                    text
                })
            });
        match outcome {
            Ok(_) => Ok(()),
            Err(error) => Err(replica_failure(
                error,
                errors.into_inner().unwrap_or_else(|e| e.into_inner()),
            )),
        }
    }
}

/// The error a data-parallel run ends with, from the collective's `error` and the replicas' own
/// `errors` (with their ranks): stopped on purpose (Ctrl-C) everywhere, the lowest replica's
/// word, which wrote the last checkpoint on machine 0; else the error of the replica that failed
/// first (a panic has no error of its own: its text is the reason), the others logged.
fn replica_failure(
    error: DataParallelError,
    mut errors: Vec<(usize, anyhow::Error)>,
) -> anyhow::Error {
    let (rank, replicas, reason, others) = match error {
        DataParallelError::Replica {
            rank,
            replicas,
            reason,
            others,
        } => (rank, replicas, reason, others),
        error => return usage(error.to_string()),
    };
    let interrupted = |e: &anyhow::Error| {
        matches!(
            e.downcast_ref::<curriculum_ssl::train::TrainError>(),
            Some(curriculum_ssl::train::TrainError::Interrupted { .. })
        )
    };
    if !errors.is_empty() && errors.iter().all(|(_, e)| interrupted(e)) {
        errors.sort_by_key(|(rank, _)| *rank);
        let (rank, error) = errors.swap_remove(0);
        return error.context(format!("replica {rank} of {replicas}"));
    }
    for (other, reason) in others {
        log::warn!("replica {other} stopped too: {reason}");
    }
    let (rank, error) = match errors.is_empty() {
        true => (rank, anyhow::anyhow!(reason)),
        false => errors.swap_remove(0),
    };
    error.context(format!("replica {rank} of {replicas}"))
}

/// The most replicas `--devices` runs on the CPU backend: each is a thread sharing the same
/// cores, so more only slow a run down (and thousands exhaust the system's threads).
const MAX_CPU_REPLICAS: usize = 64;

/// The kNN hook of a training recipe whose data has labels.
fn knn_hook<S, O>(
    trainer: &Trainer<Train, SelfSupervised<Train, S, O, ImageArray>>,
) -> Option<&KnnHook>
where
    S: SslMethod<Train> + 'static,
    O: Optimizer<S::Online, Train> + 'static,
{
    trainer.hook::<KnnHook>()
}

/// Trains `method` and prints what the run measured; in a data-parallel run, as one replica
/// (replica 0 writes and prints).
fn run<S, O>(
    prepared: &Prepared,
    method: S,
    method_config: serde_json::Value,
    optimizer: O,
    device: &Device,
    replica: Option<Replica<Train>>,
) -> Result<()>
where
    S: SslMethod<Train>,
    O: Optimizer<S::Online, Train> + 'static,
{
    let lead = replica.as_ref().is_none_or(|r| r.is_lead());
    let replicas = replica.as_ref().map_or(1, |r| r.replicas());
    let (mut trainer, mode) =
        build_trainer(prepared, method, method_config, optimizer, device, replica)?;
    if !lead {
        // Replica 0 reports; the others train.
        trainer.fit()?;
        return Ok(());
    }
    let settings = &prepared.settings;
    let run_dir = trainer.run_dir().to_path_buf();
    print_start(&trainer, settings, mode, replicas);
    let (at_init, raw) = baselines(&trainer, prepared, device)?;
    let started = std::time::Instant::now();
    let summary = trainer.fit()?;
    let mut lines = result_lines(
        &summary,
        started.elapsed(),
        settings.schedule.batch_size,
        knn_hook(&trainer),
        &at_init,
        &raw,
    );
    // What the listing of streamed files left out (each named in the log when listed).
    if let TrainData::Stream(s) = &prepared.data {
        if let Some(line) = s.files.left_out_line() {
            lines.insert(lines.len().min(1), line);
        }
    }
    for line in &lines {
        println!("{line}");
    }
    // The run is complete: a plot or summary that cannot be written is a warning, not a
    // failed run.
    let plots = crate::plots::plot_run(&run_dir).unwrap_or_else(|e| {
        log::warn!(
            "the run is complete, but its plots could not be drawn: {}",
            crate::usage::chain_text(&e)
        );
        Default::default()
    });
    if let Err(e) = write_summary(&run_dir, settings, &lines, &plots) {
        log::warn!(
            "the run is complete, but its summary could not be written: {}",
            crate::usage::chain_text(&e)
        );
    }
    print_where(&run_dir);
    Ok(())
}

/// The trainer of a prepared recipe's run (this replica's, in a data-parallel run): the
/// loader, the augmentation, the run's record, its hooks (batch curation, object boxes, the
/// self-paced AutoAugment, the kNN monitor), its directory checked and, on replica 0, its
/// recipe.toml written; and how it started.
fn build_trainer<S, O>(
    prepared: &Prepared,
    method: S,
    method_config: serde_json::Value,
    optimizer: O,
    device: &Device,
    replica: Option<Replica<Train>>,
) -> Result<(RecipeTrainer<S, O>, StartMode)>
where
    S: SslMethod<Train>,
    O: Optimizer<S::Online, Train> + 'static,
{
    let (args, settings) = (&prepared.args, &prepared.settings);
    let pipeline = prepared.pipeline.clone();
    let curation = prepared.curation.clone();
    let lead = replica.as_ref().is_none_or(|r| r.is_lead());
    let channels = prepared.data.shape().2;
    // On the CPU a view's operations after the crop run on the host, image by image (several
    // times faster there than as tensor operations; the same draws and values to f32 rounding).
    let augmenter: Augmenter = pipeline
        .clone()
        .init(channels)?
        .with_host_ops(crate::backend::on_cpu());
    let (feed, monitor, fingerprint) = feed(prepared, &pipeline)?;
    let schedule = &settings.schedule;
    let train_config = TrainConfig::new()
        .with_epochs(schedule.epochs)
        .with_lr(schedule.lr)
        .with_warmup_epochs(schedule.warmup_epochs)
        .with_checkpoint_every(args.run.checkpoint_every)
        .with_checkpoint_every_steps(args.run.checkpoint_every_steps)
        .with_seed(settings.seed);
    let run_dir = settings.run_dir.clone();
    crate::run_files::check_run_dir_writable(&run_dir)?;
    let description = description(prepared, method_config);
    let mode = start_mode(&args.start);
    if lead {
        warn_of_threads_on_a_gpu(&args.method);
    }
    prepared.overrides.check_used(settings.recipe)?;
    let uses_boxes = method.uses_object_boxes();
    let adaptive = augmenter.is_adaptive();
    let task = match feed {
        Feed::Memory(loader) => SelfSupervised::new(method, optimizer, augmenter, loader),
        Feed::Stream(loader) => SelfSupervised::streaming(method, optimizer, augmenter, loader)?,
    };
    let mut builder = Trainer::with_task(task)
        .config(train_config)
        .run_dir(&run_dir)
        .describe(&description)
        .data(fingerprint)
        .machine_specific(MACHINE_SPECIFIC)
        .recorded_since(RECORDED_SINCE)
        .stop_when(crate::signals::stop_flag());
    if let Some(curation) = curation {
        builder = builder.hook(FrechetCurationHook::new(curation)?);
    }
    if uses_boxes {
        builder = builder.hook(ObjectBoxesHook::new());
    }
    if adaptive {
        builder = builder.hook(SelfPacedAutoAugmentHook::new());
    }
    if let Some(monitor) = monitor {
        builder = builder.hook(KnnHook::new(monitor, args.run.knn_every));
    } else if lead {
        log::info!(
            "no labelled images: the kNN monitor is off (--knn-data DIR with a train/ and a val/ \
             tree of class folders turns it on)"
        );
    }
    let mut builder = builder
        .start(mode)
        .augment_ahead(args.method.augment_ahead.unwrap_or(backend::AUGMENT_AHEAD))
        .view_passes(match args.method.view_threads {
            Some(true) => ViewPasses::Threads,
            Some(false) => ViewPasses::Separate,
            None => backend::VIEW_PASSES,
        });
    if let Some(replica) = replica {
        builder = builder.replica(replica);
    }
    // Before the build, which creates the run directory: an option recipe.toml cannot record
    // is refused with nothing written.
    let recorded = prepared.recorded_options()?;
    let trainer = builder.build(device)?;
    if lead {
        prepared
            .overrides
            .write(&run_dir, settings.recipe, recorded)?;
    }
    Ok((trainer, mode))
}

/// Where the run's batches come from (memory or streamed files), its kNN monitor where there
/// are labelled images, and the fingerprint of the images trained on (computed once for every
/// replica).
fn feed(
    prepared: &Prepared,
    pipeline: &PipelineConfig,
) -> Result<(Feed, Option<KnnMonitor>, DataFingerprint)> {
    let settings = &prepared.settings;
    let loader_config = LoaderConfig {
        batch_size: settings.schedule.batch_size,
        seed: settings.seed,
        workers: prepared.loader_workers(),
        ..LoaderConfig::default()
    };
    let normalize = pipeline.view1.normalize.clone();
    Ok(match &prepared.data {
        TrainData::Memory(data) => {
            let data = data.clone();
            let monitor = match &data.test {
                Some(test) if data.train.is_labeled() => Some(KnnMonitor::new(
                    data.train.clone(),
                    test.clone(),
                    normalize,
                )?),
                _ => None,
            };
            let (images, what) = match data.pretrain {
                Some(pretrain) => (pretrain, "pre-training images"),
                None => (data.train, "training images"),
            };
            let fingerprint = prepared
                .fingerprint
                .get_or_init(|| DataFingerprint::of_images(&images))
                .clone();
            let loader = Loader::new(images, what, loader_config)?;
            (Feed::Memory(loader), monitor, fingerprint)
        }
        TrainData::Stream(s) => {
            let monitor = match &s.monitor {
                Some((bank, queries)) => Some(KnnMonitor::new(
                    s.eval_set(bank)?,
                    s.eval_set(queries)?,
                    normalize,
                )?),
                None => None,
            };
            let fingerprint = prepared
                .fingerprint
                .get_or_init(|| {
                    DataFingerprint::of_files(&s.files, s.files.root(), [s.side, s.side, 3])
                })
                .clone();
            let source: Box<dyn ImageSource> = Box::new(s.files.clone());
            let config = StreamConfig {
                loader: loader_config,
                channels: 3,
                views: stream_views(pipeline, s.side),
            };
            (
                Feed::Stream(StreamLoader::new(source, config)?),
                monitor,
                fingerprint,
            )
        }
    })
}

/// The run's record: the recipe and its settings, the data, the backbone and the method.
fn description(prepared: &Prepared, method_config: serde_json::Value) -> RecipeRun {
    let settings = &prepared.settings;
    RecipeRun {
        recipe: settings.recipe.to_string(),
        backbone: settings.backbone,
        data: settings.source.dir.clone(),
        dataset: settings.source.dataset,
        image_size: settings.source.image_size,
        knn_data: settings.source.knn_data.clone(),
        classes: settings.source.classes.clone(),
        val_labels: settings.source.val_labels.clone(),
        stream: settings.stream,
        input_shape: {
            let (h, w, c) = prepared.data.shape();
            Some([h, w, c])
        },
        stem: settings.stem,
        pooled_grid: settings.recorded_pooled_grid(prepared.data.shape().0),
        vit_pool: settings.vit_pool,
        weights: settings.weights.clone(),
        method: method_config,
        optimizer: prepared.overrides.built("optimizer"),
        backend: backend::NAME.to_string(),
        precision: prepared.args.compute.precision,
    }
}

/// How the run starts: `--extend`, `--resume` or afresh.
fn start_mode(args: &StartArgs) -> StartMode {
    if args.extend {
        StartMode::Extend
    } else if args.resume {
        StartMode::Resume
    } else {
        StartMode::Fresh
    }
}

/// Warns where `--augment-ahead` or `--view-threads` puts two threads on one GPU device.
fn warn_of_threads_on_a_gpu(args: &MethodArgs) {
    if !backend::NAME.starts_with("cpu") {
        for (flag, on) in [
            ("--augment-ahead", args.augment_ahead),
            ("--view-threads", args.view_threads),
        ] {
            if on == Some(true) {
                log::warn!(
                    "{flag} true on the {} backend: with burn 0.21, two threads working on one \
                     GPU device at once changed training results on wgpu (docs/gpu.md)",
                    backend::NAME
                );
            }
        }
    }
}

/// A recipe's trainer.
type RecipeTrainer<S, O> = Trainer<Train, SelfSupervised<Train, S, O, ImageArray>>;

/// Where a recipe's batches come from.
enum Feed {
    /// Images decoded into memory.
    Memory(Loader<ImageArray>),
    /// Image files decoded every epoch.
    Stream(StreamLoader<Box<dyn ImageSource>>),
}

/// The views a streaming loader cuts for `pipeline`, in the augmentation's order (view 1, view
/// 2, the local crops): each view's own random resized crop, or for a view without one the
/// whole image's centre square at `side` (what the in-memory path resizes every image to).
fn stream_views(pipeline: &PipelineConfig, side: usize) -> Vec<ViewCrop> {
    let cut = |view: &ViewConfig| match view.crop {
        Some(crop) => ViewCrop::Random(crop),
        None => ViewCrop::Center {
            size: (side, side),
            ratio: 1.0,
        },
    };
    let mut views = vec![cut(&pipeline.view1), cut(&pipeline.view2)];
    if let Some(local) = &pipeline.local_crops {
        views.extend(std::iter::repeat_n(cut(&local.view), local.count));
    }
    views
}

/// Says where the run starts (resumed, or afresh) and with what.
fn print_start<S, O>(
    trainer: &RecipeTrainer<S, O>,
    settings: &Settings,
    mode: StartMode,
    replicas: usize,
) where
    S: SslMethod<Train> + 'static,
    O: Optimizer<S::Online, Train> + 'static,
{
    let run_dir = trainer.run_dir();
    match trainer.resumed_from() {
        Some(dir) => println!("resuming from {}", dir.display()),
        None if mode != StartMode::Fresh => {
            println!("no checkpoint in {}: starting afresh", run_dir.display())
        }
        None => {}
    }
    println!(
        "{}: {} epochs, batch {}{}, lr {}, backbone {:?}, backend {}, run directory {}",
        settings.recipe,
        settings.schedule.epochs,
        settings.schedule.batch_size,
        if replicas > 1 {
            format!(" over {replicas} replicas")
        } else {
            String::new()
        },
        settings.schedule.lr,
        settings.backbone,
        backend::NAME,
        run_dir.display()
    );
}

/// The kNN accuracies of the backbone at initialisation and of the raw pixels (the baseline a
/// representation has to beat): measured at the start of a run and kept in its directory, so
/// that the report of a resumed run says how much the training helped too; none without
/// labels.
fn baselines<S, O>(
    trainer: &RecipeTrainer<S, O>,
    prepared: &Prepared,
    device: &Device,
) -> Result<(Vec<KnnResult>, Vec<KnnResult>)>
where
    S: SslMethod<Train> + 'static,
    O: Optimizer<S::Online, Train> + 'static,
{
    let init_file = trainer.run_dir().join(KNN_AT_INIT);
    let raw_file = trainer.run_dir().join(KNN_RAW_PIXELS);
    if trainer.step() > 0 {
        return Ok((read_knn_results(&init_file), read_knn_results(&raw_file)));
    }
    if prepared.args.run.no_baselines {
        return Ok(Default::default());
    }
    let Some(hook) = knn_hook(trainer) else {
        return Ok(Default::default());
    };
    let at_init = hook.evaluate(trainer.method(), device)?;
    // The raw pixels' features are the images themselves: a bank of ImageNet's size would not
    // fit, so the baseline is left out above RAW_PIXELS_BYTES of bank.
    let shape = prepared.data.shape();
    let raw = if let Some(gib) = raw_pixels_too_large(hook.monitor().bank_len(), shape) {
        log::info!("the raw pixels' kNN is left out: its bank would hold {gib:.1} GiB of pixels");
        Vec::new()
    } else {
        hook.monitor()
            .evaluate::<backend::Inner, _>(&RawPixels::new(shape), device)?
    };
    for (file, r) in [(&init_file, &at_init), (&raw_file, &raw)] {
        curriculum_ssl::train::write_atomic(file, &serde_json::to_vec_pretty(r)?)?;
    }
    Ok((at_init, raw))
}

/// Settings of the run record that runs recorded before them lack (the optimiser's, since
/// 2026-12-07: a resume could change it unnoticed): such a run resumes on the given value.
const RECORDED_SINCE: &[&str] = &["run.optimizer"];

/// The run record's settings that may differ between the machines of a run on several
/// (paths: each machine reads its own copy of the data; the data's fingerprint is compared).
const MACHINE_SPECIFIC: &[&str] = &[
    "run.data",
    "run.knn_data",
    "run.weights",
    "run.classes",
    "run.val_labels",
];

/// An optimiser's settings, from which every replica of a run builds its own optimiser
/// ([`Prepared::train_method`]): burn's Adam and AdamW, the crate's SGD and LARS.
pub trait OptimizerSettings<M: AutodiffModule<Train> + 'static> {
    /// The optimiser.
    type Optimizer: Optimizer<M, Train> + 'static;

    /// Builds the optimiser.
    ///
    /// # Errors
    /// Settings the optimiser refuses, named.
    fn build(&self) -> Result<Self::Optimizer>;
}

/// Refuses Adam's and AdamW's settings that make no optimiser (burn checks none of them; its
/// configurations keep their fields private, so they are read from the serialised form):
/// `beta_1`, `beta_2` in [0, 1), `epsilon` > 0, `weight_decay` ≥ 0, all finite. A negative
/// `beta_1` trained until the loss became NaN, naming no setting.
fn check_adam(config: &impl Serialize) -> Result<()> {
    let value = serde_json::to_value(config)?;
    let read = |key: &str| value.get(key).and_then(serde_json::Value::as_f64);
    for (key, low, high, rule) in [
        ("beta_1", 0.0, 1.0, "must lie in [0, 1)"),
        ("beta_2", 0.0, 1.0, "must lie in [0, 1)"),
        (
            "epsilon",
            f64::MIN_POSITIVE,
            f64::MAX,
            "must be a finite number > 0",
        ),
        ("weight_decay", 0.0, f64::MAX, "must be a finite number ≥ 0"),
    ] {
        if let Some(v) = read(key) {
            let inside = v.is_finite() && v >= low && (v < high || high == f64::MAX);
            if !inside {
                return Err(usage(format!("optimizer.{key}={v}: {rule}")));
            }
        }
    }
    Ok(())
}

impl<M: AutodiffModule<Train> + 'static> OptimizerSettings<M> for AdamWConfig {
    type Optimizer = OptimizerAdaptor<AdamW, M, Train>;

    fn build(&self) -> Result<Self::Optimizer> {
        check_adam(self)?;
        Ok(self.init())
    }
}

impl<M: AutodiffModule<Train> + 'static> OptimizerSettings<M> for AdamConfig {
    type Optimizer = OptimizerAdaptor<Adam, M, Train>;

    fn build(&self) -> Result<Self::Optimizer> {
        check_adam(self)?;
        Ok(self.init())
    }
}

impl<M: AutodiffModule<Train> + 'static> OptimizerSettings<M> for SgdConfig {
    type Optimizer = SgdOptimizer<M, Train>;

    fn build(&self) -> Result<Self::Optimizer> {
        Ok(self.init()?)
    }
}

impl<M: AutodiffModule<Train> + 'static> OptimizerSettings<M> for LarsConfig {
    type Optimizer = OptimizerAdaptor<Lars, M, Train>;

    fn build(&self) -> Result<Self::Optimizer> {
        Ok(self.init()?)
    }
}
