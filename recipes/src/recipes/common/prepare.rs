//! Preparing a run, in order: the options parsed ([`super::args`], with the settings file's),
//! the settings resolved over the recipe's defaults ([`super::settings`]), the device opened,
//! the data loaded and the backbone checked against it ([`super::backbone_fit`]), the augmentation
//! built ([`super::augmentation`]); and what recipe.toml records of the options.

use super::args::{
    loader_workers, recorded, BackboneArgs, ComputeArgs, CurriculumArgs, DatasetChoice, MethodArgs,
    RecipeArgs, RunArgs, SourceArgs,
};
use super::augmentation::{local_crops, normalization, pipeline};
use super::backbone::BackboneChoice;
use super::backbone_fit::check_backbone;
use super::config_file::{self, Overrides};
use super::data::TrainData;
use super::settings::{
    curation, curricula, pair_loss, pgd, settings, Defaults, Schedule, Settings,
};
use crate::backend;
use crate::backend::Device;
use crate::usage::usage;
use anyhow::Result;
use curriculum_ssl::augment::normalize::Normalize;
use curriculum_ssl::curation::FrechetCurationConfig;
use curriculum_ssl::method::{PairLossConfig, PgdConfig};
use curriculum_ssl::pipeline::PipelineConfig;
use curriculum_ssl::train::DataFingerprint;
use serde::Serialize;

/// Everything a training recipe starts from: its options, settings, device, data and pipeline.
pub struct Prepared {
    /// Command-line options.
    pub args: RecipeArgs,
    /// Resolved settings.
    pub settings: Settings,
    /// The training device.
    pub device: Device,
    /// Train and test images, in memory or streamed.
    pub data: TrainData,
    /// The augmentation.
    pub pipeline: PipelineConfig,
    /// The two-view loss with the command line's changes, if the recipe is of the SimCLR family.
    pub pair_loss: Option<PairLossConfig>,
    /// Fréchet batch curation, if the recipe curates its batches.
    pub curation: Option<FrechetCurationConfig>,
    /// PGD-hardened negatives, if the recipe uses them, with the views' normalisation.
    pub pgd: Option<PgdConfig>,
    /// The settings file's and the command line's settings of the method, optimiser and
    /// augmentation ([`Prepared::section`]).
    pub overrides: Overrides,
    /// The fingerprint of the images trained on, computed once for every replica.
    pub(super) fingerprint: std::sync::OnceLock<DataFingerprint>,
}

/// Parses and checks the options, loads the data and builds the pipeline.
pub fn prepare(args: &[String], defaults: Defaults) -> Result<Prepared> {
    let (args, overrides) = RecipeArgs::parse_with_settings(defaults.recipe, args)?;
    let recipe = defaults.recipe;
    if args.method.shuffle_bn && !defaults.shuffle_bn {
        return Err(usage(
            "--shuffle-bn: only the MoCo recipes (MoCo v1/v2, Light-MoCo and their MICO \
             variants) have a key encoder whose batch can be shuffled",
        ));
    }
    let mut settings = settings(&args, &defaults)?;
    let (mixup, strength) = curricula(&args.curriculum, defaults.mixup, defaults.strength, recipe)?;
    let pair_loss = pair_loss(&args.method, defaults.pair_loss, recipe)?;
    let curation = curation(
        &args.method,
        defaults.curation,
        recipe,
        settings.schedule.epochs,
    )?
    .map(|c| overrides.apply("curation", c))
    .transpose()?;
    // The settings the policy refuses (a quantile outside (0, 1], an empty window) are usage
    // errors here, before anything is written (`--check` included).
    if let Some(Err(e)) = curation.as_ref().map(|c| c.init()) {
        return Err(usage(format!("curation.{}: {}", e.field, e.reason)));
    }
    let pgd = pgd(&args.method, defaults.pgd, pair_loss.as_ref(), recipe)?;
    let device = backend::open(args.compute.device, args.compute.precision)?;
    // A resume streams as its run did (recipe.toml says so since `stream` existed; config.json
    // for the runs before).
    let stream = match args.source.stream {
        None if args.start.resume || args.start.extend => {
            super::data::recorded_stream(&settings.run_dir)
        }
        given => given,
    };
    let data = settings.source.load_for_training(stream)?;
    settings.stream = matches!(data, TrainData::Stream(_));
    check_backbone(&settings, &data, &device)?;
    let normalize = normalization(&args.source, &settings.source, &data)?;
    let mut pipeline = pipeline(defaults.preset, &data, settings.seed, normalize);
    local_crops(&args.method, &mut pipeline, recipe)?;
    pipeline.mixup_curriculum = mixup;
    pipeline.strength_curriculum = strength;
    let pipeline = overrides.apply("augmentation", pipeline)?;
    check_normalization_given(&args.source, &pipeline)?;
    let pgd = pgd.map(|p| p.with_normalize(pipeline.view1.normalize.clone()));
    Ok(Prepared {
        args,
        settings,
        device,
        data,
        pipeline,
        pair_loss,
        curation,
        pgd,
        overrides,
        fingerprint: Default::default(),
    })
}

/// Refuses `--mean` / `--std` that the views do not normalise with: the augmentation's settings
/// (a resumed run's recipe.toml, or `augmentation.view1.normalize…` given) came after them and
/// won, so `recipe resume RUN --mean 0.5 --std 0.2` trained on the run's own normalisation while
/// recipe.toml recorded the options given beside it.
fn check_normalization_given(args: &SourceArgs, pipeline: &PipelineConfig) -> Result<()> {
    let (Some(mean), Some(std)) = (&args.mean, &args.std) else {
        return Ok(());
    };
    let given = Normalize::new(mean, std);
    let mut views = vec![
        ("view1", &pipeline.view1.normalize),
        ("view2", &pipeline.view2.normalize),
    ];
    if let Some(local) = &pipeline.local_crops {
        views.push(("local_crops.view", &local.view.normalize));
    }
    for (name, normalize) in views {
        if normalize.as_ref() != Some(&given) {
            let used = normalize.as_ref().map_or("none".to_string(), |n| {
                format!("mean {:?}, std {:?}", n.mean, n.std)
            });
            return Err(usage(format!(
                "--mean {mean:?} / --std {std:?}: the views are normalised otherwise \
                 (augmentation.{name}.normalize: {used}), by an [augmentation] that comes after \
                 the options: a resumed run's recipe.toml (a run keeps its normalisation; where \
                 its [options] hold mean and std beside it, as an earlier version's resume \
                 wrote, delete those two lines) or a --config file's (set its \
                 augmentation.view1.normalize and view2's instead, or leave --mean and --std \
                 out)"
            )));
        }
    }
    Ok(())
}

/// recipe.toml's `[options]`: every option that shapes the run, under its long name (`batch_size`
/// is `--batch-size`: [`super::config_file`] reads each back as `--key=value`). The option
/// groups write themselves (their `Serialize` leaves out what belongs to one invocation: the
/// run directory, resuming, the device, the machines). The schedule, the backbone, `stream` and
/// `workers` are the values the run resolved instead of the ones given, so that a resume trains
/// as the run did whatever default changed since (a recipe's, the backend's, the data's or the
/// machine's): they are fields of their own here, placed among the groups.
#[derive(Serialize)]
struct RecordedOptions<'a> {
    #[serde(flatten)]
    source: &'a SourceArgs,
    /// Whether the files were streamed (chosen from the data's size when `--stream` is not
    /// given): for the datasets that can stream, and whenever `--stream` was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    /// Epochs, batch and learning rate with the recipe's defaults and rules applied.
    #[serde(flatten)]
    schedule: &'a Schedule,
    /// `--backbone`, else the recipe's or the backend's default.
    #[serde(serialize_with = "recorded::name")]
    backbone: BackboneChoice,
    #[serde(flatten)]
    backbone_options: &'a BackboneArgs,
    #[serde(flatten)]
    run: &'a RunArgs,
    /// The loader's threads: `--workers`, else chosen from the machine's cores.
    workers: usize,
    #[serde(flatten)]
    curriculum: &'a CurriculumArgs,
    #[serde(flatten)]
    method: &'a MethodArgs,
    #[serde(flatten)]
    compute: &'a ComputeArgs,
}

impl<'a> RecordedOptions<'a> {
    /// The options of `args` with the values `settings` resolved and the loader's `workers`.
    fn new(args: &'a RecipeArgs, settings: &'a Settings, workers: usize) -> Self {
        let dataset = settings.source.dataset;
        let streams = dataset.is_files() || dataset == DatasetChoice::Stl10;
        Self {
            source: &args.source,
            stream: (streams || args.source.stream.is_some()).then_some(settings.stream),
            schedule: &settings.schedule,
            backbone: settings.backbone,
            backbone_options: &args.backbone,
            run: &args.run,
            workers,
            curriculum: &args.curriculum,
            method: &args.method,
            compute: &args.compute,
        }
    }

    /// The options as a TOML table.
    ///
    /// # Errors
    /// An option above `i64::MAX` (TOML's integers are 64-bit signed), named as on the command
    /// line.
    fn table(&self) -> Result<toml::Table> {
        if let Some((key, n)) = config_file::first_too_large(&serde_json::to_value(self)?, "") {
            return Err(usage(format!(
                "--{} {n}: above {}, the largest integer a run's recipe.toml records",
                key.replace('_', "-"),
                i64::MAX
            )));
        }
        Ok(toml::Table::try_from(self)?)
    }
}

impl Prepared {
    /// The options of the run as recipe.toml records them ([`RecordedOptions`]).
    ///
    /// # Errors
    /// An option above `i64::MAX`, which recipe.toml cannot record.
    pub fn recorded_options(&self) -> Result<toml::Table> {
        RecordedOptions::new(&self.args, &self.settings, self.loader_workers()).table()
    }

    /// The loader threads of each replica ([`loader_workers`]).
    pub fn loader_workers(&self) -> usize {
        loader_workers(
            self.args.compute.workers,
            self.settings.stream,
            !backend::on_cpu(),
            self.args.compute.devices,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::args::parse_recipe_args;
    use super::super::config_file::{self, Overrides, RECIPE_TOML};
    use super::*;
    use clap::CommandFactory;

    /// The options of `command` (its words) as recipe.toml records them, with the schedule
    /// resolved over a recipe's defaults (epochs 20, batch 128, lr 0.1, warm-up 2), `stream`
    /// the run's and 3 loader threads unless `--workers` says otherwise.
    fn recorded(command: &str, stream: bool) -> toml::Table {
        let argv: Vec<String> = command.split_whitespace().map(String::from).collect();
        recorded_args(&argv, stream)
    }

    /// [`recorded`] of the arguments `argv`.
    fn recorded_args(argv: &[String], stream: bool) -> toml::Table {
        let args: RecipeArgs = parse_recipe_args("t", argv).unwrap();
        let defaults = Schedule {
            epochs: 20,
            batch_size: 128,
            lr: 0.1,
            warmup_epochs: 2,
        };
        let schedule = Schedule::resolve(&args.schedule, defaults, None);
        let backbone = args.backbone.backbone.unwrap_or(BackboneChoice::Small);
        let mut settings = Settings::from_options("t", &args, schedule, backbone);
        settings.stream = stream;
        let workers = args.compute.workers.unwrap_or(3);
        RecordedOptions::new(&args, &settings, workers)
            .table()
            .unwrap()
    }

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    /// Every option recipe.toml records, given: each under its key with the value and type
    /// the file has always had (a seed above i64's range as text, the value enums by their
    /// command-line names, `checkpoint_every_steps` and `precision` when not their defaults);
    /// what belongs to one invocation is left out.
    #[test]
    fn the_options_are_recorded_under_their_keys_with_their_types() {
        let command = "--dataset image-folder --data-dir /d --image-size 32 --classes /c.txt \
             --val-labels /v.csv --stream --knn-data /k --mean 0.5,0.25,0.125 --std \
             0.2,0.3,0.4 --run-dir /r --epochs 3 --batch-size 16 --lr 0.05 --warmup-epochs \
             1 --backbone resnet18 --stem imagenet --pooled-grid 2 --weights /w.safetensors \
             --seed 18446744073709551615 --knn-every 2 --no-baselines --checkpoint-every 3 \
             --checkpoint-every-steps 7 --check --print-settings --easy-to-hard --strength \
             1.5 --schedule two-step --workers 5 --device 1 --devices 2 --precision bf16 \
             --nodes 2 --node-rank 0 --orchestrator ws://a:1 --node-address ws://b:2 \
             --timeout 9 --shuffle-bn --local-crops 4 --augment-ahead false --view-threads \
             true --loss hcl --hard-positive-k 2 --curation-warmup 2 --curation-retries 1 \
             --pgd-steps 3";
        let expected = table(
            r#"
            dataset = "image-folder"
            data_dir = "/d"
            image_size = 32
            knn_data = "/k"
            classes = "/c.txt"
            val_labels = "/v.csv"
            stream = true
            mean = [0.5, 0.25, 0.125]
            std = [0.2, 0.3, 0.4]
            epochs = 3
            batch_size = 16
            lr = 0.05
            warmup_epochs = 1
            backbone = "resnet18"
            stem = "imagenet"
            pooled_grid = 2
            weights = "/w.safetensors"
            seed = "18446744073709551615"
            knn_every = 2
            checkpoint_every = 3
            checkpoint_every_steps = 7
            workers = 5
            easy_to_hard = true
            strength = 1.5
            schedule = "two-step"
            shuffle_bn = true
            local_crops = 4
            augment_ahead = false
            view_threads = true
            loss = "hcl"
            hard_positive_k = 2.0
            curation_warmup = 2
            curation_retries = 1
            pgd_steps = 3
            precision = "bf16"
            "#,
        );
        let got = recorded(command, true);
        assert_eq!(got, expected, "{got}");
    }

    /// With no option given: the resolved values (the dataset, the schedule, the backbone, the
    /// loader's threads) and the switches; no `stream` for a dataset that cannot stream, no
    /// `checkpoint_every_steps` at 0, no `precision` in f32, a seed in range as an integer.
    #[test]
    fn the_defaults_are_recorded_as_the_run_resolved_them() {
        let expected = table(
            r#"
            dataset = "fashion-mnist"
            epochs = 20
            batch_size = 128
            lr = 0.1
            warmup_epochs = 2
            backbone = "small"
            seed = 0
            knn_every = 5
            checkpoint_every = 5
            workers = 3
            easy_to_hard = false
            shuffle_bn = false
            "#,
        );
        let got = recorded("", false);
        assert_eq!(got, expected, "{got}");
        // STL-10 and the user's files record whether they streamed, given or not.
        let got = recorded("--dataset stl10 --data-dir /s", false);
        assert_eq!(got["stream"].as_bool(), Some(false), "{got}");
    }

    /// recipe.toml's options read back (as `--config`, `--resume` and `--extend` read them)
    /// into the same options: every key names an option, every value parses.
    #[test]
    fn the_recorded_options_read_back_to_the_same_options() {
        let command =
            "--dataset folder --data-dir /d --stream false --mean 0.5 --std 0.25 --epochs 3 \
             --lr 0.05 --backbone vit-tiny --seed 18446744073709551615 \
             --checkpoint-every-steps 7 --easy-to-hard --schedule linear --shuffle-bn \
             --loss dclw --precision bf16 --view-threads false";
        let written = recorded(command, false);
        let dir = std::env::temp_dir().join(format!("prepare-options-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Overrides::default()
            .write(&dir, "t", written.clone())
            .unwrap();
        let file = dir.join(RECIPE_TOML);
        let (flags, _) = config_file::resolve(
            &RecipeArgs::command(),
            "t",
            Some((&file, "recipe.toml")),
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(recorded_args(&flags, false), written, "{flags:?}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
