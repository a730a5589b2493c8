//! What a finished run reports: `summary.md` (the settings, the results, the plots) and where
//! its files are.

use super::settings::Settings;
use crate::backend;
use anyhow::Result;
use curriculum_ssl::eval::KnnResult;
use curriculum_ssl::hooks::KnnHook;
use curriculum_ssl::train::TrainSummary;
use std::path::Path;

/// The lines a run's report opens with: its time, speed and last loss, and each kNN accuracy
/// next to the backbone's at initialisation and the raw pixels'.
pub(super) fn result_lines(
    summary: &TrainSummary,
    elapsed: std::time::Duration,
    batch_size: usize,
    knn: Option<&KnnHook>,
    at_init: &[KnnResult],
    raw: &[KnnResult],
) -> Vec<String> {
    let mut lines = Vec::new();
    let Some(last) = summary.epochs.last() else {
        return lines;
    };
    let seconds = elapsed.as_secs_f64();
    let images = summary.steps.len() * batch_size;
    lines.push(format!(
        "done in {}: {} steps, {:.1} images/s, mean loss of the last epoch {:.4}",
        curriculum_ssl::train::format_duration(elapsed),
        summary.steps.len(),
        images as f64 / seconds,
        last.mean_loss,
    ));
    // A streamed run's unreadable files (each named in the log when it was met).
    let skipped: f64 = summary
        .steps
        .iter()
        .flat_map(|s| &s.stats)
        .filter(|(k, _)| k == "skipped_files")
        .map(|(_, v)| v)
        .sum();
    if skipped > 0.0 {
        lines.push(format!(
            "skipped {skipped} unreadable image files (each replaced by another image of the \
             data; named in the log, counted per step in steps.csv's skipped_files)"
        ));
    }
    let Some(knn) = knn else {
        lines.push(
            "kNN monitor off: the images have no labels (--knn-data DIR measures the features \
             on a labelled train/ + val/ tree)"
                .to_string(),
        );
        return lines;
    };
    let measured = knn.last().map_or(&[][..], |(_, r)| r);
    for r in measured {
        let same = |i: &&KnnResult| i.k == r.k && i.temperature == r.temperature;
        let pixels = raw.iter().find(same).map_or(String::new(), |p| {
            format!("; raw pixels {:.2}%", 100.0 * p.accuracy.top1)
        });
        let gain = at_init.iter().find(same).map_or(String::new(), |i| {
            format!(
                " (at initialisation {:.2}%: {:+.2} points{pixels})",
                100.0 * i.accuracy.top1,
                100.0 * (r.accuracy.top1 - i.accuracy.top1)
            )
        });
        lines.push(format!(
            "kNN (k = {}, T = {}): top-1 {:.2}%{gain}, top-5 {:.2}%",
            r.k,
            r.temperature,
            100.0 * r.accuracy.top1,
            100.0 * r.accuracy.top5
        ));
    }
    lines
}

/// `summary.md` in the run directory: the settings, the results and the plots.
pub(super) fn write_summary(
    run_dir: &Path,
    settings: &Settings,
    results: &[String],
    plots: &crate::plots::Plots,
) -> Result<()> {
    let source = match &settings.source.dir {
        Some(dir) => format!("{:?} in {}", settings.source.dataset, dir.display()),
        None => "the embedded Fashion-MNIST subset".to_string(),
    };
    let mut text = format!("# {}\n\n| setting | value |\n|---|---|\n", settings.recipe);
    for (name, value) in [
        ("data", source),
        ("backbone", format!("{:?}", settings.backbone)),
        ("backend", backend::NAME.to_string()),
        ("epochs", settings.schedule.epochs.to_string()),
        ("batch size", settings.schedule.batch_size.to_string()),
        ("learning rate", settings.schedule.lr.to_string()),
        (
            "warm-up epochs",
            settings.schedule.warmup_epochs.to_string(),
        ),
        ("seed", settings.seed.to_string()),
    ] {
        text.push_str(&format!("| {name} | {value} |\n"));
    }
    text.push_str(
        "\nEvery setting: [config.json](config.json); per step: [steps.csv](steps.csv); per \
         epoch: [epochs.csv](epochs.csv).\n\n## Results\n\n",
    );
    for line in results {
        text.push_str(&format!("- {line}\n"));
    }
    if !plots.constants.is_empty() {
        text.push_str("\nConstant throughout the run (no plot):\n\n");
        for (name, value) in &plots.constants {
            text.push_str(&format!("- {name}: {value}\n"));
        }
    }
    text.push_str("\n## Plots\n\n");
    for plot in &plots.files {
        if let Ok(relative) = plot.strip_prefix(run_dir) {
            let name = relative.display();
            text.push_str(&format!("![{name}]({name})\n"));
        }
    }
    curriculum_ssl::train::write_atomic(&run_dir.join("summary.md"), text.as_bytes())?;
    Ok(())
}

/// Where a finished run's files are, and the command that evaluates it.
pub(crate) fn print_where(run_dir: &Path) {
    println!(
        "metrics: {0}/steps.csv, {0}/epochs.csv; checkpoints: {0}/checkpoints; evaluate with \
         `{1}`",
        run_dir.display(),
        shell_command([
            Path::new("recipe"),
            Path::new("eval"),
            Path::new("--run-dir"),
            run_dir
        ])
    );
}

/// `word` as a POSIX shell reads it back as one word: unchanged when it holds only characters
/// no shell treats specially (letters, digits and `-_./:,+=@%`), else in single quotes, a quote
/// inside written `'\''`. A command printed for the user to paste (`recipe resume DIR`) quotes
/// each word so: a path with a space, `$`, a quote or a `*` reaches the binary as it was.
pub(crate) fn shell_word(word: &str) -> std::borrow::Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:,+=@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.into();
    }
    format!("'{}'", word.replace('\'', r"'\''")).into()
}

/// The words of a command, each quoted as a POSIX shell needs ([`shell_word`]), joined by
/// spaces: the command as the user pastes it. A word that is not UTF-8 is shown lossily.
pub(crate) fn shell_command<I, W>(words: I) -> String
where
    I: IntoIterator<Item = W>,
    W: AsRef<std::ffi::OsStr>,
{
    words
        .into_iter()
        .map(|w| shell_word(&w.as_ref().to_string_lossy()).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::{shell_command, shell_word};

    /// What a POSIX shell reads back from each quoted word (`sh -c 'printf "%s\n" WORDS'`):
    /// the word itself.
    #[test]
    fn printed_commands_quote_what_a_shell_would_change() {
        assert_eq!(shell_word("runs/simclr-1"), "runs/simclr-1");
        assert_eq!(shell_word("/tmp/a_b.c/x=1,y@z%:+"), "/tmp/a_b.c/x=1,y@z%:+");
        assert_eq!(shell_word("my runs/a"), "'my runs/a'");
        assert_eq!(shell_word("$HOME/run"), "'$HOME/run'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("~/run"), "'~/run'");
        assert_eq!(shell_word("a*b"), "'a*b'");
        assert_eq!(shell_word("café"), "'café'");
        assert_eq!(
            shell_command(["recipe", "resume", "runs/my run"]),
            "recipe resume 'runs/my run'"
        );
        let words = [
            "plain",
            "two words",
            "$HOME `x` $(y)",
            "it's \"quoted\"",
            "back\\slash",
            "new\nline",
            "*?[a]",
            "",
            "-dash",
            "'",
            "!bang",
            "#hash",
            "semi;colon&and|pipe<>",
        ];
        let Ok(output) = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s\\0' {}", shell_command(words)))
            .output()
        else {
            eprintln!("no sh here: the shell's reading of the words is not checked");
            return;
        };
        assert!(output.status.success(), "{output:?}");
        let read: Vec<String> = String::from_utf8(output.stdout)
            .unwrap()
            .split_terminator('\0')
            .map(str::to_string)
            .collect();
        assert_eq!(read, words);
    }
}
