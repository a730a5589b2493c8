//! A recipe's settings as a file: `recipe.toml`, written into every run directory and read back
//! with `--config FILE` (and by `--resume` / `--extend` from the run directory), plus `key=value`
//! overrides on the command line.
//!
//! ```toml
//! recipe = "light_moco"
//!
//! [options]            # the command-line options: `epochs = 20` is `--epochs 20`
//! epochs = 20
//! batch_size = 128
//!
//! [method]             # the method's configuration (loss, heads, queue, momentum, …)
//! queue_size = 4096
//!
//! [optimizer]          # the optimiser's (learning-rate schedule aside: options lr, warmup_epochs)
//! weight_decay = 0.0001
//!
//! [augmentation]       # the views' operations and their probabilities
//! [augmentation.view1.jitter]
//! p = 0.8
//!
//! [curation]           # batch curation's settings, for the recipe that curates (bad_batches)
//! ```
//!
//! Precedence, lowest first: the recipe's defaults, the file's values, the command line's
//! options and `key=value` overrides (`method.queue_size=8192`, `augmentation.view1.blur.p=0.2`,
//! `optimizer.weight_decay=1e-5`, `epochs=10`). A section's keys are the recipe's own: a key it
//! does not have is an error that lists the ones it has. A setting that is off (`None`) reads
//! `"none"` in the file (TOML has no null), and `"none"` (or `key=none`) turns one off.
//!
//! The TOML is read and written with the `toml` crate (Cargo's); the sections go through
//! `serde_json` values because the configurations serialise to JSON already (`config.json`).

use crate::usage::usage;
use anyhow::{Context, Result};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use crate::run_files::RECIPE_TOML;

/// The sections a recipe configures besides its options.
pub const SECTIONS: [&str; 4] = ["method", "optimizer", "augmentation", "curation"];

/// One `key=value` of the command line or one key of a file's section: a path below a section
/// and its value.
#[derive(Debug, Clone)]
struct Setting {
    /// Where it came from (for errors): `method.queue_size=8192` or `FILE [method]`.
    origin: String,
    /// The keys below the section.
    path: Vec<String>,
    /// The value (`Null` turns a setting off).
    value: Value,
}

/// The settings given for the sections (from a file and the command line), applied as the
/// recipe builds each one ([`Overrides::apply`]), and the sections as built, for `recipe.toml`.
#[derive(Debug, Default)]
pub struct Overrides {
    /// Per section: file values first, then command-line overrides.
    given: BTreeMap<String, Vec<Setting>>,
    /// Per section: the section file's whole table (merged under the overrides).
    file: BTreeMap<String, Value>,
    /// The sections as the recipe built them (after the overrides).
    built: Mutex<BTreeMap<String, Value>>,
    /// The file the options came from, if any.
    pub source: Option<PathBuf>,
}

impl Overrides {
    /// `config` with the file's section `section` and the command line's `section.*` overrides
    /// applied; recorded for `recipe.toml`.
    ///
    /// # Errors
    /// A key the configuration does not have (the error lists those it has), or a value of the
    /// wrong kind for its setting.
    pub fn apply<C: Serialize + DeserializeOwned>(&self, section: &str, config: C) -> Result<C> {
        let mut value = serde_json::to_value(&config)?;
        if let Some(file) = self.file.get(section) {
            let origin = format!(
                "[{section}] of {}",
                self.source
                    .as_deref()
                    .map_or("the file".into(), |p| p.display().to_string())
            );
            merge(&mut value, file, &origin, section)?;
        }
        let defaults = value.clone();
        for setting in self.given.get(section).into_iter().flatten() {
            set(&mut value, section, setting).map_err(|e| {
                // A key at the wrong level (`method.temperature` for SimCLR, whose temperature
                // is its loss's): name where the key is.
                let found = leaves_named(&defaults, setting.path.last().map_or("", |k| k), section);
                if found.is_empty() {
                    e
                } else {
                    usage(format!("{e}; did you mean {}?", found.join(" or ")))
                }
            })?;
        }
        restore_large_integers(&mut value, &serde_json::to_value(&config)?);
        let config = serde_json::from_value::<C>(value).map_err(|e| {
            usage(format!(
                "{section}: the settings given do not make a valid configuration: {e}"
            ))
        })?;
        // What was built, as it serialises (a round trip normalises the value).
        let built = serde_json::to_value(&config)?;
        self.built
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(section.to_string(), built);
        Ok(config)
    }

    /// The section `section` as the recipe built it ([`Overrides::apply`]), if it did.
    pub fn built(&self, section: &str) -> Option<Value> {
        self.built
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(section)
            .cloned()
    }

    /// Checks that every section given a value was built by the recipe.
    pub fn check_used(&self, recipe: &str) -> Result<()> {
        let built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        let given: BTreeSet<&String> = self.given.keys().chain(self.file.keys()).collect();
        for section in given {
            if !built.contains_key(section) {
                return Err(usage(format!(
                    "{section}.*: recipe `{recipe}` has no {section} settings"
                )));
            }
        }
        Ok(())
    }

    /// What `recipe.toml` holds: the recipe, its options and the sections built.
    pub fn table(&self, recipe: &str, options: toml::Table) -> toml::Table {
        let mut table = toml::Table::new();
        table.insert("recipe".into(), toml::Value::String(recipe.into()));
        table.insert("options".into(), toml::Value::Table(options));
        let built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        for section in SECTIONS {
            if let Some(value) = built.get(section) {
                table.insert(section.into(), to_toml(value));
            }
        }
        table
    }

    /// Writes `recipe.toml` into `run_dir` ([`Overrides::table`]).
    pub fn write(&self, run_dir: &Path, recipe: &str, options: toml::Table) -> Result<()> {
        let table = self.table(recipe, options);
        let text = format!(
            "# The settings of this run, as `recipe {recipe}` resolved them. Run them again with\n\
             # `recipe {recipe} --config recipe.toml --run-dir NEW_DIR` (command-line options and\n\
             # key=value overrides such as `epochs=3` or `optimizer.weight_decay=1e-5` win over\n\
             # the file); `--resume` and `--extend` read this file from the run directory. A\n\
             # setting that is off reads \"none\".\n\n{}",
            toml::to_string(&table)?
        );
        // Written beside and renamed: never through a link planted at `recipe.toml`.
        let path = run_dir.join(RECIPE_TOML);
        curriculum_ssl::train::write_atomic(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))
    }
}

/// A settings file: its recipe, its options (as command-line arguments) and its sections.
pub struct ConfigFile {
    /// The recipe it was written for, if it says.
    pub recipe: Option<String>,
    /// `[options]`.
    pub options: toml::Table,
    /// `[method]`, `[optimizer]`, `[augmentation]`.
    pub sections: BTreeMap<String, Value>,
}

impl ConfigFile {
    /// Reads and checks a settings file, its errors headed by `name` (how the user knows the
    /// file: `--config F`, or a run's own `recipe.toml` read on `--resume`).
    ///
    /// # Errors
    /// A file that is not a regular file of at most [`MAX_SETTINGS_BYTES`] of UTF-8, invalid
    /// TOML, or a top-level key other than `recipe`, `options` and the sections.
    pub fn read_named(path: &Path, name: &str) -> Result<Self> {
        let text = read_settings_text(path).map_err(|e| usage(format!("{name}: {e}")))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e| usage(format!("{name}: not valid TOML: {e}")))?;
        let mut file = Self {
            recipe: None,
            options: toml::Table::new(),
            sections: BTreeMap::new(),
        };
        if let Some(key) = first_non_finite(&toml::Value::Table(table.clone()), "") {
            return Err(usage(format!(
                "{name}: {key} is not a finite number (nan and inf are not settings)"
            )));
        }
        for (key, value) in table {
            match (key.as_str(), value) {
                ("recipe", toml::Value::String(name)) => file.recipe = Some(name),
                ("options", toml::Value::Table(options)) => file.options = options,
                (section, toml::Value::Table(t)) if SECTIONS.contains(&section) => {
                    file.sections
                        .insert(section.to_string(), from_toml(toml::Value::Table(t)));
                }
                // A known key with a value of the wrong kind: say so, not that it is unknown.
                ("recipe", value) => {
                    return Err(usage(format!(
                        "{name}: `recipe` must be a recipe's name in quotes (recipe = \
                         \"light_moco\"), not {value}"
                    )))
                }
                (key, value) if key == "options" || SECTIONS.contains(&key) => {
                    return Err(usage(format!(
                        "{name}: `{key}` must be a table of settings ([{key}] with KEY = VALUE \
                         lines under it), not {value}"
                    )))
                }
                (key, _) => {
                    return Err(usage(format!(
                        "{name}: `{key}` is not a setting of a recipe file (recipe, \
                         [options], [method], [optimizer], [augmentation], [curation])"
                    )))
                }
            }
        }
        Ok(file)
    }
}

/// The largest settings file read: a recipe's whole `recipe.toml` is a few KB.
pub const MAX_SETTINGS_BYTES: u64 = 1 << 20;

/// Reads a settings file: a regular file (a FIFO or a device such as `/dev/zero` is refused
/// before it is opened for reading: one blocked forever, the other grew without bound) of at
/// most [`MAX_SETTINGS_BYTES`], as UTF-8. The reasons are worded for the user.
fn read_settings_text(path: &Path) -> std::result::Result<String, String> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(|e| io_reason(&e))?;
    if meta.is_dir() {
        return Err("is a directory, not a settings file".into());
    }
    if !meta.is_file() {
        return Err(
            "not a regular file (a pipe, socket or device); give the path of a TOML file".into(),
        );
    }
    if meta.len() > MAX_SETTINGS_BYTES {
        return Err(format!(
            "{} bytes; a settings file holds at most {} KiB",
            meta.len(),
            MAX_SETTINGS_BYTES >> 10
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| io_reason(&e))?;
    let mut bytes = Vec::new();
    // Bounded again while reading: the file may grow after its size was read.
    file.take(MAX_SETTINGS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_reason(&e))?;
    if bytes.len() as u64 > MAX_SETTINGS_BYTES {
        return Err(format!(
            "more than {} KiB; a settings file holds at most that",
            MAX_SETTINGS_BYTES >> 10
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "not a text file (invalid UTF-8 at byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// An I/O error in the user's words: the system's message without Rust's `(os error N)`.
fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The command line with a settings file and `key=value` overrides resolved: the arguments
/// clap parses (the file's options first, so that the command line wins) and the section
/// overrides.
///
/// `command` is the recipe's clap command (to turn option names into flags); `file` the file
/// to read, if any, and how its errors name it (`--config F`, or a run's own `recipe.toml`);
/// `pairs` the command line's `key=value` tokens.
pub fn resolve(
    command: &clap::Command,
    recipe: &str,
    file: Option<(&Path, &str)>,
    args: &[String],
    pairs: &[String],
) -> Result<(Vec<String>, Overrides)> {
    let mut overrides = Overrides::default();
    let mut resolved = Vec::new();
    if let Some((path, name)) = file {
        resolved = from_file(command, recipe, path, name, &mut overrides)?;
    }
    // The command line itself, without its key=value tokens (they are applied below).
    let given: Vec<String> = args
        .iter()
        .filter(|a| !pairs.contains(a))
        .cloned()
        .collect();
    resolved.extend(given.iter().cloned());
    // The options the command line names (`--epochs 3`, `--epochs=3`), by argument id.
    let flagged: Vec<&str> = given
        .iter()
        .filter_map(|a| a.strip_prefix("--"))
        .filter_map(|a| option_id(command, a.split('=').next().unwrap_or(a)))
        .collect();
    let mut seen: BTreeMap<String, &String> = BTreeMap::new();
    for pair in pairs {
        let Some((key, text)) = pair.split_once('=') else {
            return Err(usage(format!(
                "`{pair}`: not an option; settings are given as KEY=VALUE (e.g. epochs=3, \
                 optimizer.weight_decay=1e-5) or --option VALUE"
            )));
        };
        let mut path: Vec<String> = key.split('.').map(str::to_string).collect();
        let head = path.remove(0);
        // A section's numbers become JSON, which has no NaN or infinity (they read as null, or
        // turned an optional setting off). An option's value goes to its own parser and check.
        let section = SECTIONS.contains(&head.as_str()) && !path.is_empty();
        let non_finite = text.trim().parse::<f64>().is_ok_and(|f| !f.is_finite())
            || first_non_finite(&parse_value(text), "").is_some();
        if section && non_finite {
            return Err(usage(format!("`{pair}`: {text} is not a finite number")));
        }
        // An option and `options.OPTION` are one setting; a section's setting is its path.
        let name = match head.as_str() {
            "options" if path.len() == 1 => path[0].replace('-', "_"),
            _ if path.is_empty() => head.replace('-', "_"),
            _ => key.to_string(),
        };
        if let Some(earlier) = seen.insert(name.clone(), pair) {
            return Err(usage(format!(
                "`{pair}`: {name} is given twice (also `{earlier}`); give it once"
            )));
        }
        if head == "options" || path.is_empty() {
            if let Some(id) = option_id(command, &name.replace('_', "-")) {
                if flagged.contains(&id) {
                    return Err(usage(format!(
                        "`{pair}`: --{} is given as well; give it once",
                        name.replace('_', "-")
                    )));
                }
            }
        }
        match head.as_str() {
            "options" if path.len() == 1 => {
                resolved.extend(as_flag(command, &path[0], &parse_value(text), pair)?)
            }
            section if SECTIONS.contains(&section) && !path.is_empty() => {
                let value = match parse_value(text) {
                    toml::Value::String(s) if s == "none" => Value::Null,
                    v => from_toml(v),
                };
                overrides
                    .given
                    .entry(section.to_string())
                    .or_default()
                    .push(Setting {
                        origin: pair.clone(),
                        path,
                        value,
                    });
            }
            option if path.is_empty() => {
                resolved.extend(as_flag(command, option, &parse_value(text), pair)?)
            }
            _ => {
                return Err(usage(format!(
                    "`{pair}`: `{head}` is not a section (options, method, optimizer, \
                     augmentation, curation)"
                )))
            }
        }
    }
    Ok((resolved, overrides))
}

/// The settings file at `path` (named `name` in messages) for `recipe`: its options as command
/// line flags, its sections kept in `overrides` (the file's settings, under the command line's).
///
/// # Errors
/// A file that cannot be read or parsed, written for another recipe, or an option of it that
/// the recipe does not have (exit code 2).
fn from_file(
    command: &clap::Command,
    recipe: &str,
    path: &Path,
    name: &str,
    overrides: &mut Overrides,
) -> Result<Vec<String>> {
    let file = ConfigFile::read_named(path, name)?;
    if let Some(other) = file.recipe.as_deref().filter(|r| *r != recipe) {
        return Err(usage(format!(
            "{name}: written for recipe `{other}`, not `{recipe}`"
        )));
    }
    let mut flags = Vec::new();
    for (key, value) in &file.options {
        flags.extend(as_flag(
            command,
            key,
            value,
            &format!("{}", path.display()),
        )?);
    }
    overrides.file = file.sections;
    overrides.source = Some(path.to_path_buf());
    Ok(flags)
}

/// The id of the option whose long name or alias is `long` (without the dashes).
fn option_id<'a>(command: &'a clap::Command, long: &str) -> Option<&'a str> {
    command
        .get_arguments()
        .find(|a| {
            a.get_long() == Some(long)
                || a.get_all_aliases()
                    .is_some_and(|aliases| aliases.contains(&long))
        })
        .map(|a| a.get_id().as_str())
}

/// `at.key`, or `key` at the top (`at` empty): a setting's dotted path.
fn dotted(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

/// The dotted path of the first float in `value` that is not finite (NaN, ±inf), if any.
fn first_non_finite(value: &toml::Value, at: &str) -> Option<String> {
    let join = |key: &str| dotted(at, key);
    match value {
        toml::Value::Float(f) if !f.is_finite() => Some(if at.is_empty() {
            f.to_string()
        } else {
            at.to_string()
        }),
        toml::Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| first_non_finite(v, &join(&i.to_string()))),
        toml::Value::Table(t) => t.iter().find_map(|(k, v)| first_non_finite(v, &join(k))),
        _ => None,
    }
}

/// Where `value` holds the digits of an integer above `i64::MAX` as text (recipe.toml records
/// such an integer so: TOML's integers are 64-bit signed; and TOML reads a longer one given as
/// KEY=VALUE as text) and `default`, the configuration's own value, holds an integer there,
/// puts the integer back (a seed of 2^64 − 1 written and read back; it was written as a float,
/// which the resume then refused).
fn restore_large_integers(value: &mut Value, default: &Value) {
    match (value, default) {
        (Value::Object(map), Value::Object(defaults)) => {
            for (key, v) in map.iter_mut() {
                if let Some(d) = defaults.get(key) {
                    restore_large_integers(v, d);
                }
            }
        }
        (Value::Array(items), Value::Array(defaults)) => {
            for (v, d) in items.iter_mut().zip(defaults) {
                restore_large_integers(v, d);
            }
        }
        (value @ Value::String(_), Value::Number(n)) if n.is_u64() => {
            if let Some(big) = value
                .as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .filter(|&big| i64::try_from(big).is_err())
            {
                *value = Value::from(big);
            }
        }
        _ => {}
    }
}

/// The dotted path and value of the first integer in `value` above `i64::MAX`, if any (the
/// options recipe.toml records are refused above it: counts so large mean nothing).
pub(crate) fn first_too_large(value: &Value, at: &str) -> Option<(String, u64)> {
    let join = |key: &str| dotted(at, key);
    match value {
        Value::Number(n) => n
            .as_u64()
            .filter(|&n| i64::try_from(n).is_err())
            .map(|n| (at.to_string(), n)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| first_too_large(v, &join(&i.to_string()))),
        Value::Object(map) => map.iter().find_map(|(k, v)| first_too_large(v, &join(k))),
        _ => None,
    }
}

/// The dotted paths (from `section`) of the leaves of `value` named `key`, at any depth.
fn leaves_named(value: &Value, key: &str, section: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Value::Object(map) = value {
        for (k, v) in map {
            let path = format!("{section}.{k}");
            if k == key && !v.is_object() {
                found.push(path);
            } else {
                found.extend(leaves_named(v, key, &path));
            }
        }
    }
    found
}

/// A value of the command line: TOML's (`0.1`, `true`, `[0.2, 1.0]`, `"text"`), else the text
/// itself as a string.
fn parse_value(text: &str) -> toml::Value {
    format!("v = {text}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

/// The command-line arguments of option `key` (`batch_size` → `--batch-size VALUE`; a switch
/// that is true → `--switch`; a list → `--mean 0.5,0.4,0.3`).
fn as_flag(
    command: &clap::Command,
    key: &str,
    value: &toml::Value,
    origin: &str,
) -> Result<Vec<String>> {
    let long = key.replace('_', "-");
    let Some(arg) = command
        .get_arguments()
        .find(|a| a.get_long() == Some(long.as_str()) && !a.is_positional())
    else {
        let mut known: Vec<String> = command
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| !matches!(*l, "help" | "config"))
            .map(|l| l.replace('-', "_"))
            .collect();
        known.sort();
        return Err(usage(format!(
            "{origin}: `{key}` is not an option of the recipe (options: {})",
            known.join(", ")
        )));
    };
    // A list only for an option that takes one (`mean = [0.5, 0.25]`): `batch_size = [8]` was
    // read as 8, and `batch_size = [8, 16]` refused as the text "8,16".
    if matches!(value, toml::Value::Array(_)) && arg.get_value_delimiter().is_none() {
        return Err(usage(format!(
            "{origin}: `{key}` takes one value, not a list: {value}"
        )));
    }
    let text = match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(items) => items
            .iter()
            .map(|v| match v {
                toml::Value::String(s) => s.clone(),
                v => v.to_string(),
            })
            .collect::<Vec<_>>()
            .join(","),
        v => v.to_string(),
    };
    if !arg.get_action().takes_values() {
        return match value {
            toml::Value::Boolean(true) => Ok(vec![format!("--{long}")]),
            toml::Value::Boolean(false) => Ok(Vec::new()),
            _ => Err(usage(format!(
                "{origin}: `{key}` is a switch: true or false, not {text}"
            ))),
        };
    }
    // One token: a value that starts with a dash (`lr=-1`) is the option's value, not a flag.
    Ok(vec![format!("--{long}={text}")])
}

/// Sets `setting` inside the section's value: every key on the way must exist.
fn set(root: &mut Value, section: &str, setting: &Setting) -> Result<()> {
    let mut node = root;
    let mut walked = section.to_string();
    for (i, key) in setting.path.iter().enumerate() {
        let last = i + 1 == setting.path.len();
        let Value::Object(map) = node else {
            return Err(usage(format!(
                "{}: {walked} is a single value, it has no `{key}`",
                setting.origin
            )));
        };
        if !map.contains_key(key) {
            return Err(unknown(&setting.origin, &walked, key, map));
        }
        walked = format!("{walked}.{key}");
        let slot = map.get_mut(key).expect("checked");
        if last {
            // A number, switch or list for a setting of several fields (a schedule such as
            // `method.hard_share`): serde's "invalid type: integer, expected string or map" did
            // not say what the setting looks like.
            let scalar = matches!(
                setting.value,
                Value::Number(_) | Value::Bool(_) | Value::Array(_)
            );
            if slot.is_object() && scalar {
                let example = first_leaf(slot, &walked)
                    .map_or(String::new(), |(path, v)| format!(" (e.g. {path}={v})"));
                return Err(usage(format!(
                    "{}: {walked} is a setting of several fields, not a single value; it is now \
                     {}: set one of its fields{example}, or give the whole setting in a \
                     --config file",
                    setting.origin,
                    serde_json::to_string(slot).unwrap_or_default()
                )));
            }
            *slot = setting.value.clone();
            return Ok(());
        }
        if slot.is_null() {
            return Err(usage(format!(
                "{}: {walked} is off (none); give the whole setting in a --config file to turn \
                 it on",
                setting.origin
            )));
        }
        node = slot;
    }
    Ok(())
}

/// The first leaf below `value` that holds a number, with its `key=value` path from `path`.
fn first_leaf(value: &Value, path: &str) -> Option<(String, Value)> {
    match value {
        Value::Object(map) => map
            .iter()
            .find_map(|(k, v)| first_leaf(v, &format!("{path}.{k}"))),
        Value::Number(_) => Some((path.to_string(), value.clone())),
        _ => None,
    }
}

/// Merges a file's table into the configuration's value: keys must exist; tables merge into
/// tables, anything else replaces (a table turns on a setting that was off).
fn merge(base: &mut Value, overlay: &Value, origin: &str, walked: &str) -> Result<()> {
    let (Value::Object(map), Value::Object(over)) = (&mut *base, overlay) else {
        *base = overlay.clone();
        return Ok(());
    };
    for (key, value) in over {
        if !map.contains_key(key) {
            // One kind of a setting of several kinds (a loss: `{ NtXent = {…} }`) where the
            // options chose another (`--loss dcl`): said as such, not as an unknown key.
            let kind = |k: &str| k.starts_with(|c: char| c.is_ascii_uppercase());
            if let (1, 1, Some(have)) = (map.len(), over.len(), map.keys().next()) {
                if kind(key) && kind(have) {
                    return Err(usage(format!(
                        "{origin}: {walked} is `{key}` there, but the options chose `{have}` \
                         (e.g. --loss): leave that option out to keep `{key}` (a resumed run \
                         keeps its own), or take `{key}` out of the file"
                    )));
                }
            }
            return Err(unknown(origin, walked, key, map));
        }
        let slot = map.get_mut(key).expect("checked");
        if slot.is_object() && value.is_object() {
            merge(slot, value, origin, &format!("{walked}.{key}"))?;
        } else {
            *slot = value.clone();
        }
    }
    Ok(())
}

/// The error for a key the configuration does not have.
fn unknown(
    origin: &str,
    walked: &str,
    key: &str,
    map: &serde_json::Map<String, Value>,
) -> anyhow::Error {
    let known: Vec<&str> = map.keys().map(String::as_str).collect();
    usage(format!(
        "{origin}: {walked} has no setting `{key}` (it has: {})",
        known.join(", ")
    ))
}

/// A TOML value as JSON; the string "none" is `null` (a setting turned off).
fn from_toml(value: toml::Value) -> Value {
    match value {
        toml::Value::String(s) if s == "none" => Value::Null,
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(items.into_iter().map(from_toml).collect()),
        toml::Value::Table(t) => {
            Value::Object(t.into_iter().map(|(k, v)| (k, from_toml(v))).collect())
        }
    }
}

/// A JSON value as TOML, `null` as the string "none" (TOML has no null).
fn to_toml(value: &Value) -> toml::Value {
    match value {
        Value::Null => toml::Value::String("none".into()),
        Value::Bool(b) => toml::Value::Boolean(*b),
        // An integer above TOML's (64-bit signed) as its digits, which `apply` reads back.
        Value::Number(n) if n.is_u64() && n.as_i64().is_none() => {
            toml::Value::String(n.to_string())
        }
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => toml::Value::Integer(i),
            (None, Some(f)) => toml::Value::Float(f),
            _ => toml::Value::String(n.to_string()),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(items) => toml::Value::Array(items.iter().map(to_toml).collect()),
        Value::Object(map) => {
            toml::Value::Table(map.iter().map(|(k, v)| (k.clone(), to_toml(v))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Inner {
        p: f64,
        sigma: Vec<f64>,
    }

    #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Example {
        temperature: f64,
        queue_size: usize,
        blur: Option<Inner>,
        name: String,
    }

    fn example() -> Example {
        Example {
            temperature: 0.2,
            queue_size: 4096,
            blur: Some(Inner {
                p: 0.5,
                sigma: vec![0.1, 2.0],
            }),
            name: "x".into(),
        }
    }

    fn command() -> clap::Command {
        clap::Command::new("t")
            .no_binary_name(true)
            .arg(clap::Arg::new("epochs").long("epochs"))
            .arg(clap::Arg::new("batch").long("batch-size"))
            .arg(clap::Arg::new("mean").long("mean").value_delimiter(','))
            .arg(
                clap::Arg::new("resume")
                    .long("resume")
                    .action(clap::ArgAction::SetTrue),
            )
    }

    fn resolved(pairs: &[&str]) -> Result<(Vec<String>, Overrides)> {
        let pairs: Vec<String> = pairs.iter().map(|s| s.to_string()).collect();
        resolve(&command(), "r", None, &pairs, &pairs)
    }

    /// An integer above TOML's (a seed of 2^64 − 1) is written as its digits and read back as
    /// the integer, from the file and as KEY=VALUE: it was written as a float, and the resume
    /// refused "invalid type: floating point, expected u64". Text where the configuration holds
    /// text stays text.
    #[test]
    fn integers_above_tomls_are_written_and_read_back() {
        #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
        struct Seeded {
            seed: u64,
            seeds: Vec<u64>,
            name: String,
        }
        let seeded = |seed: u64| Seeded {
            seed,
            seeds: vec![1, seed],
            name: "18446744073709551615".into(),
        };
        let overrides = Overrides::default();
        let built = overrides.apply("augmentation", seeded(u64::MAX)).unwrap();
        assert_eq!(built, seeded(u64::MAX));
        let dir = std::env::temp_dir().join(format!("config-file-big-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        overrides.write(&dir, "r", toml::Table::new()).unwrap();
        let text = std::fs::read_to_string(dir.join(RECIPE_TOML)).unwrap();
        assert!(text.contains("seed = \"18446744073709551615\""), "{text}");
        let (_, back) = resolve(
            &command(),
            "r",
            Some((&dir.join(RECIPE_TOML), "recipe.toml")),
            &[],
            &[],
        )
        .unwrap();
        // The recipe's own default differs: the file's value wins, as an integer.
        assert_eq!(
            back.apply("augmentation", seeded(3)).unwrap(),
            seeded(u64::MAX)
        );
        let _ = std::fs::remove_dir_all(dir);
        let (_, given) = resolved(&["augmentation.seed=9223372036854775808"]).unwrap();
        assert_eq!(
            given.apply("augmentation", seeded(3)).unwrap().seed,
            9_223_372_036_854_775_808
        );
    }

    #[test]
    fn overrides_reach_nested_settings_and_turn_them_off() {
        let (args, overrides) = resolved(&[
            "method.temperature=0.1",
            "method.blur.sigma=[0.5, 1.5]",
            "method.queue_size=8192",
        ])
        .unwrap();
        assert!(args.is_empty());
        let got = overrides.apply("method", example()).unwrap();
        assert_eq!(got.temperature, 0.1);
        assert_eq!(got.queue_size, 8192);
        assert_eq!(got.blur.unwrap().sigma, vec![0.5, 1.5]);
        let (_, overrides) = resolved(&["method.blur=none"]).unwrap();
        assert_eq!(overrides.apply("method", example()).unwrap().blur, None);
    }

    #[test]
    fn an_unknown_key_lists_the_known_ones_and_a_wrong_kind_is_refused() {
        let (_, overrides) = resolved(&["method.temprature=0.1"]).unwrap();
        let e = overrides
            .apply("method", example())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("method has no setting `temprature`") && e.contains("temperature"),
            "{e}"
        );
        let (_, overrides) = resolved(&["method.queue_size=big"]).unwrap();
        let e = overrides
            .apply("method", example())
            .unwrap_err()
            .to_string();
        assert!(e.contains("do not make a valid configuration"), "{e}");
        assert!(resolved(&["epochs"]).is_err());
        assert!(resolved(&["model.depth=3"]).is_err());
        let (_, overrides) = resolved(&["optimizer.weight_decay=0"]).unwrap();
        assert!(overrides.check_used("r").is_err());
    }

    #[test]
    fn options_become_flags_with_the_command_line_last() {
        let (args, _) = resolved(&["epochs=3", "options.batch_size=16", "resume=true"]).unwrap();
        assert_eq!(args, ["--epochs=3", "--batch-size=16", "--resume"]);
        let e = resolved(&["epoch=3"]).unwrap_err().to_string();
        assert!(
            e.contains("`epoch` is not an option") && e.contains("batch_size"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("config-file-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.toml");
        std::fs::write(
            &file,
            "recipe = \"r\"\n[options]\nepochs = 7\nmean = [0.5, 0.25]\n[method]\ntemperature = \
             0.5\n[method.blur]\np = 0.0\n",
        )
        .unwrap();
        let args = vec!["--epochs".to_string(), "9".to_string()];
        let (resolved, overrides) =
            resolve(&command(), "r", Some((&file, "--config F")), &args, &[]).unwrap();
        assert_eq!(resolved, ["--epochs=7", "--mean=0.5,0.25", "--epochs", "9"]);
        let got = overrides.apply("method", example()).unwrap();
        assert_eq!((got.temperature, got.blur.unwrap().p), (0.5, 0.0));
        let e = resolve(&command(), "other", Some((&file, "--config F")), &args, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("written for recipe `r`"), "{e}");
        // A list for an option of one value is refused, not joined into it.
        std::fs::write(&file, "recipe = \"r\"\n[options]\nbatch_size = [8]\n").unwrap();
        let e = resolve(&command(), "r", Some((&file, "--config F")), &[], &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`batch_size` takes one value, not a list"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_written_file_reads_back_to_the_same_configuration() {
        let overrides = Overrides::default();
        let mut config = example();
        config.blur = None;
        config.temperature = 0.1 + 0.2; // not a short decimal
        let built = overrides.apply("method", config).unwrap();
        let dir = std::env::temp_dir().join(format!("config-file-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        overrides.write(&dir, "r", toml::Table::new()).unwrap();
        let file = ConfigFile::read_named(&dir.join(RECIPE_TOML), "recipe.toml").unwrap();
        assert_eq!(file.recipe.as_deref(), Some("r"));
        let (_, back) = resolve(
            &command(),
            "r",
            Some((&dir.join(RECIPE_TOML), "recipe.toml")),
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(
            back.apply("method", example()).unwrap().temperature,
            built.temperature
        );
        // `blur` was off: it reads "none" and turns the default's off again.
        assert!(back.apply("method", example()).unwrap().blur.is_none());
        let text = std::fs::read_to_string(dir.join(RECIPE_TOML)).unwrap();
        assert!(text.contains("blur = \"none\""), "{text}");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A setting given twice on the command line, or as an option and as KEY=VALUE, is refused
    /// (it used to be resolved silently, the last one winning).
    #[test]
    fn a_setting_given_twice_is_refused() {
        let e = resolved(&["method.temperature=0.1", "method.temperature=0.2"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`method.temperature=0.2`: method.temperature is given twice (also `method.temperature=0.1`)"),
            "{e}"
        );
        let e = resolved(&["epochs=2", "options.epochs=3"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("epochs is given twice"), "{e}");
        let args: Vec<String> = ["--epochs", "1", "epochs=2"].map(String::from).to_vec();
        let pairs = vec!["epochs=2".to_string()];
        let e = resolve(&command(), "r", None, &args, &pairs)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`epochs=2`: --epochs is given as well"), "{e}");
        let args: Vec<String> = ["--epochs=1", "epochs=2"].map(String::from).to_vec();
        assert!(resolve(&command(), "r", None, &args, &pairs).is_err());
    }

    /// `nan`, `inf` and `1e400` (which TOML reads as infinite, or not at all) are not settings:
    /// refused naming them, in a pair and in a file (they used to read as "invalid type: null",
    /// or turned an optional setting off).
    #[test]
    fn values_that_are_not_finite_numbers_are_refused() {
        for value in ["nan", "inf", "-inf", "1e400", "[0.1, nan]"] {
            let e = resolved(&[&format!("method.temperature={value}")])
                .err()
                .unwrap_or_else(|| panic!("{value} accepted"))
                .to_string();
            assert!(e.contains("is not a finite number"), "{value}: {e}");
        }
        let dir = std::env::temp_dir().join(format!("config-file-nan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.toml");
        std::fs::write(&file, "recipe = \"r\"\n[method.blur]\np = nan\n").unwrap();
        let e = ConfigFile::read_named(&file, "--config F")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("method.blur.p is not a finite number"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A settings file is read bounded: a file over the cap, bytes that are not UTF-8 (a run's
    /// `recipe.toml` written over by a binary table), a directory and a device are each named,
    /// never read without bound (`/dev/zero` grew by some 400 MB/s).
    /// A file's kind of a setting of several kinds (a loss) where the options chose another is
    /// named as such (it was "has no setting `NtXent` (it has: Dcl)").
    #[test]
    fn a_files_kind_of_a_setting_against_the_options_is_named() {
        let mut built = serde_json::json!({ "loss": { "Dcl": { "temperature": 0.1 } } });
        let file = serde_json::json!({ "loss": { "NtXent": { "temperature": 0.2 } } });
        let e = merge(&mut built, &file, "r.toml", "method")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("r.toml: method.loss is `NtXent` there, but the options chose `Dcl`"),
            "{e}"
        );
        // A key of a plain table is still an unknown key, listing the known ones.
        let mut plain = serde_json::json!({ "queue_size": 8 });
        let e = merge(
            &mut plain,
            &serde_json::json!({ "Queue": 1 }),
            "r.toml",
            "method",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("has no setting `Queue` (it has: queue_size)"),
            "{e}"
        );
    }

    /// A known key of a recipe file with a value of the wrong kind is named as such (it was
    /// called "not a setting of a recipe file", which it is).
    #[test]
    fn a_known_key_of_the_wrong_kind_is_named_as_such() {
        let dir = std::env::temp_dir().join(format!("config-file-kind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.toml");
        for (text, expected) in [
            (
                "recipe = 5",
                "r.toml: `recipe` must be a recipe's name in quotes (recipe = \"light_moco\"), not 5",
            ),
            (
                "options = 3",
                "r.toml: `options` must be a table of settings ([options] with KEY = VALUE lines \
                 under it), not 3",
            ),
            (
                "method = \"x\"",
                "r.toml: `method` must be a table of settings ([method] with KEY = VALUE lines \
                 under it), not \"x\"",
            ),
            ("model = 1", "r.toml: `model` is not a setting of a recipe file"),
        ] {
            std::fs::write(&file, text).unwrap();
            let err = ConfigFile::read_named(&file, "r.toml").err().unwrap().to_string();
            assert!(err.starts_with(expected), "{text}: {err}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn settings_files_are_read_bounded_and_regular() {
        let dir = std::env::temp_dir().join(format!("config-file-bounds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_SETTINGS_BYTES as usize + 1]).unwrap();
        let binary = dir.join("binary.toml");
        std::fs::write(&binary, [b'a', b'=', 0x93, 0x4e, 0x55]).unwrap();
        for (path, expected) in [
            (
                big.as_path(),
                "1048577 bytes; a settings file holds at most 1024 KiB",
            ),
            (
                binary.as_path(),
                "not a text file (invalid UTF-8 at byte 2)",
            ),
            (dir.as_path(), "is a directory, not a settings file"),
            (
                Path::new("/dev/zero"),
                "not a regular file (a pipe, socket or device); give the path of a TOML file",
            ),
            (&dir.join("absent.toml"), "No such file or directory"),
        ] {
            let e = ConfigFile::read_named(path, "F").err().unwrap().to_string();
            assert_eq!(e, format!("F: {expected}"), "{}", path.display());
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A negative value is the option's value, one token (`--lr=-1`), not a flag `-1`.
    #[test]
    fn a_negative_value_stays_the_options_value() {
        let (args, _) = resolved(&["epochs=-1"]).unwrap();
        assert_eq!(args, ["--epochs=-1"]);
    }

    /// A key that is not at the level given, but deeper in the section, is named: SimCLR's
    /// temperature is its loss's.
    #[test]
    fn a_key_found_deeper_in_the_section_is_suggested() {
        #[derive(Serialize, serde::Deserialize)]
        struct Loss {
            temperature: f64,
        }
        #[derive(Serialize, serde::Deserialize)]
        struct SimClrLike {
            hidden_dim: usize,
            loss: Loss,
        }
        let (_, overrides) = resolved(&["method.temperature=0.1"]).unwrap();
        let e = overrides
            .apply(
                "method",
                SimClrLike {
                    hidden_dim: 8,
                    loss: Loss { temperature: 0.5 },
                },
            )
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("method has no setting `temperature`")
                && e.contains("did you mean method.loss.temperature?"),
            "{e}"
        );
    }
}
