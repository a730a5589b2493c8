//! A curriculum of your own through the training loop's extension point, without touching the
//! library: easy positive pairs first. Early in training, a batch whose two views' projections
//! agree less than a bound (mean cosine) is not trained on but drawn again; the bound falls
//! from 0.5 to nothing over the first half of the run, so the network meets hard pairs only
//! later. The hook decides before anything is applied ([`Verdict::Redraw`]), writes two columns
//! of `steps.csv` (`pair_cosine`, `pair_redraws`) and one of `epochs.csv`, and keeps its count in
//! every checkpoint, so a resumed run goes on counting.
//!
//! ```text
//! cargo run --release --example custom_hook
//! ```

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl::data::embedded::load_or_embedded;
use curriculum_ssl::data::idx::Split;
use curriculum_ssl::data::{Loader, LoaderConfig};
use curriculum_ssl::loss::l2_normalize;
use curriculum_ssl::method::{init_method, Progress, SimClrConfig};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;
use curriculum_ssl::train::{
    Cell, EpochReport, Hook, RunView, SelfSupervisedTask, TrainConfig, TrainError, Trainer, Verdict,
};
use curriculum_ssl_models::{BlockKind, ResNetConfig, Stem};

type Train = Autodiff<Flex>;

/// Easy positive pairs first (see the file's docs).
struct EasyPairsFirst {
    /// The bound at the start of the run.
    start: f64,
    /// The share of the run over which the bound falls to nothing.
    until: f64,
    /// Redraws of one step at most.
    max_redraws: usize,
    /// This step's redraws so far, and the applied attempt's cosine.
    redraws: usize,
    cosine: f64,
    /// Redraws of the current epoch, and of the whole run (the state a checkpoint keeps).
    epoch_redraws: usize,
    total_redraws: usize,
}

impl EasyPairsFirst {
    fn bound(&self, progress: Progress) -> f64 {
        self.start * (1.0 - progress.fraction() / self.until).max(0.0)
    }
}

impl<B: AutodiffBackend, K: SelfSupervisedTask<B>> Hook<B, K> for EasyPairsFirst {
    fn name(&self) -> &'static str {
        "easy_pairs_first"
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({ "start": self.start, "until": self.until, "max_redraws": self.max_redraws })
    }

    fn epoch_start(&mut self, _: &mut RunView<'_, B, K>, _: usize) -> Result<(), TrainError> {
        self.epoch_redraws = 0;
        Ok(())
    }

    fn after_forward(
        &mut self,
        output: &K::Output,
        progress: Progress,
    ) -> Result<Verdict, TrainError> {
        let Some([z1, z2]) = output.embeddings.clone() else {
            return Ok(Verdict::Apply); // a method without two views: nothing to judge
        };
        let cosine = (l2_normalize(z1) * l2_normalize(z2))
            .sum_dim(1)
            .mean()
            .into_scalar()
            .elem::<f64>();
        if cosine < self.bound(progress) && self.redraws < self.max_redraws {
            self.redraws += 1;
            self.epoch_redraws += 1;
            self.total_redraws += 1;
            return Ok(Verdict::Redraw);
        }
        self.cosine = cosine;
        Ok(Verdict::Apply)
    }

    fn after_step(
        &mut self,
        _: &mut RunView<'_, B, K>,
        _: Progress,
        _: f64,
    ) -> Result<Vec<(String, f64)>, TrainError> {
        let redraws = std::mem::take(&mut self.redraws);
        Ok(vec![
            ("pair_cosine".into(), self.cosine),
            ("pair_redraws".into(), redraws as f64),
        ])
    }

    fn epoch_end(
        &mut self,
        _: &mut RunView<'_, B, K>,
        _: usize,
        _: bool,
    ) -> Result<EpochReport, TrainError> {
        Ok(EpochReport {
            columns: vec![(
                "pair_redraws".into(),
                Cell::Value(self.epoch_redraws as f64),
            )],
            note: Some(format!(", {} hard batches drawn again", self.epoch_redraws)),
            checkpoint: false,
        })
    }

    fn state(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "total_redraws": self.total_redraws }))
    }

    fn load_state(
        &mut self,
        _: &mut RunView<'_, B, K>,
        state: Option<serde_json::Value>,
    ) -> Result<(), String> {
        let total = state
            .and_then(|s| s.get("total_redraws")?.as_u64())
            .ok_or("no redraw count")?;
        self.total_redraws = total as usize;
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Default::default();
    let train = load_or_embedded(None, Split::Train)?.select(&(0..1024).collect::<Vec<_>>())?;
    let backbone = ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
        .with_base_width(8)
        .with_in_channels(1)
        .with_stem(Stem::ImageNet);
    let config = SimClrConfig::new().with_hidden_dim(256).with_output_dim(64);
    let method = init_method::<Train, _, _>(&device, 0, |d| config.init(|d| backbone.init(d), d))?;
    let loader = Loader::new(
        train,
        "embedded subset",
        LoaderConfig {
            batch_size: 128,
            ..LoaderConfig::default()
        },
    )?;
    let run_dir = std::env::temp_dir().join(format!("custom-hook-{}", std::process::id()));
    let mut trainer = Trainer::builder(
        method,
        SgdConfig::new().init::<Train, _>()?,
        PipelineConfig::simclr(28, 1).init(1)?,
        loader,
    )
    .config(TrainConfig::new().with_epochs(4).with_lr(0.3))
    .run_dir(&run_dir)
    .hook(EasyPairsFirst {
        start: 0.5,
        until: 0.5,
        max_redraws: 2,
        redraws: 0,
        cosine: 0.0,
        epoch_redraws: 0,
        total_redraws: 0,
    })
    // On the CPU backend: augment the next batch while this one trains (off on a GPU).
    .augment_ahead(true)
    .build(&device)?;
    trainer.fit()?;
    let hook = trainer
        .hook::<EasyPairsFirst>()
        .expect("the run has the hook");
    println!(
        "{} batches were drawn again; steps.csv in {} has each step's pair cosine",
        hook.total_redraws,
        run_dir.display()
    );
    Ok(())
}
