//! The ImageNet layouts beside its class folders: a class list that selects a subset of the
//! classes (ImageNet-100's 100 synsets, as CMC and solo-learn list them) and a validation split
//! kept in one folder with its labels in a file (the ILSVRC 2012 download's `val/`).
//!
//! - [`read_class_list`]: one class folder name per line (the first word; `#` comments and blank
//!   lines left out), labelled by their order sorted, as torchvision's `ImageFolder` labels the
//!   folders of a tree holding only those classes;
//! - [`read_val_labels`]: which class each validation file belongs to, in either common form:
//!   Kaggle's `LOC_val_solution.csv` (`ImageId,PredictionString`, the synset first in the
//!   prediction) or lines of `FILE SYNSET`. Files are matched by their name without extension.
//!   The devkit's own `ILSVRC2012_validation_ground_truth.txt` numbers the classes by the
//!   devkit's `meta.mat` (a MATLAB file, not by sorted synset), so it is refused with a word on
//!   the two forms that name the synsets.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use super::error::DataError;

/// The class folder names a class list file names, sorted (their labels are their positions).
///
/// # Errors
/// An unreadable file, a name that is not a plain folder name, a name given twice, or no name.
pub fn read_class_list(path: &Path) -> Result<Vec<String>, DataError> {
    let text = std::fs::read_to_string(path).map_err(|e| DataError::io(path, e))?;
    let mut names = BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        if name == "." || name == ".." || name.contains(['/', '\\']) {
            return Err(DataError::Request {
                path: path.to_path_buf(),
                reason: format!("line {}: `{name}` is not a class folder's name", n + 1),
            });
        }
        if !names.insert(name.to_string()) {
            return Err(DataError::Request {
                path: path.to_path_buf(),
                reason: format!("line {}: class `{name}` is listed twice", n + 1),
            });
        }
    }
    if names.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
            what: "no class name (one class folder name per line)".into(),
        });
    }
    Ok(names.into_iter().collect())
}

/// The class (synset) of every validation file, keyed by the file's name without extension.
///
/// # Errors
/// An unreadable file, a line of neither form, a file named twice, the devkit's numbered
/// ground truth, or no line.
pub fn read_val_labels(path: &Path) -> Result<HashMap<String, String>, DataError> {
    let text = std::fs::read_to_string(path).map_err(|e| DataError::io(path, e))?;
    let bad = |n: usize, reason: String| DataError::Request {
        path: path.to_path_buf(),
        reason: format!("line {}: {reason}", n + 1),
    };
    let mut labels = HashMap::new();
    let mut lines = text.lines().enumerate().peekable();
    let csv = lines
        .peek()
        .is_some_and(|(_, l)| l.trim().starts_with("ImageId,"));
    if csv {
        lines.next();
    }
    for (n, line) in lines {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (file, class) = if csv {
            let (id, prediction) = line
                .split_once(',')
                .ok_or_else(|| bad(n, "not `ImageId,PredictionString`".into()))?;
            let synset = prediction
                .split_whitespace()
                .next()
                .ok_or_else(|| bad(n, format!("`{id}` has no prediction")))?;
            (id.trim(), synset)
        } else {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(file), Some(class), None) => (file, class),
                (Some(number), None, None) if number.bytes().all(|b| b.is_ascii_digit()) => {
                    return Err(bad(
                        n,
                        "a class number, as the devkit's ILSVRC2012_validation_ground_truth.txt \
                         gives them (numbered by its meta.mat, not by the sorted synsets): give \
                         Kaggle's LOC_val_solution.csv or lines of `FILE SYNSET`"
                            .into(),
                    ))
                }
                _ => return Err(bad(n, "not `FILE SYNSET`".into())),
            }
        };
        let stem = Path::new(file)
            .file_stem()
            .map_or_else(|| file.to_string(), |s| s.to_string_lossy().into_owned());
        if labels.insert(stem.clone(), class.to_string()).is_some() {
            return Err(bad(n, format!("`{stem}` is labelled twice")));
        }
    }
    if labels.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
            what: "no label (Kaggle's LOC_val_solution.csv, or lines of `FILE SYNSET`)".into(),
        });
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("curriculum-ssl-layouts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_class_list_is_sorted_and_refuses_repeats_and_paths() {
        let list = file(
            "in100.txt",
            "# ImageNet-100\nn02869837 bonnet\n\nn01558993\nn01749939 # green mamba\n",
        );
        assert_eq!(
            read_class_list(&list).unwrap(),
            ["n01558993", "n01749939", "n02869837"]
        );
        let twice = file("twice.txt", "n01558993\nn01558993\n");
        let err = read_class_list(&twice).unwrap_err().to_string();
        assert!(
            err.contains("line 2: class `n01558993` is listed twice"),
            "{err}"
        );
        let path = file("path.txt", "../n01558993\n");
        let err = read_class_list(&path).unwrap_err().to_string();
        assert!(err.contains("is not a class folder's name"), "{err}");
        let empty = file("empty.txt", "# nothing\n\n");
        assert!(read_class_list(&empty).is_err());
    }

    #[test]
    fn val_labels_read_kaggles_csv_and_file_synset_lines_and_refuse_the_devkit_numbers() {
        let csv = file(
            "LOC_val_solution.csv",
            "ImageId,PredictionString\nILSVRC2012_val_00008726,n02119789 255 142 454 329 \
             n02119789 44 21 322 295\nILSVRC2012_val_00000001,n01751748 10 20 30 40\n",
        );
        let labels = read_val_labels(&csv).unwrap();
        assert_eq!(labels.len(), 2);
        assert_eq!(labels["ILSVRC2012_val_00008726"], "n02119789");
        assert_eq!(labels["ILSVRC2012_val_00000001"], "n01751748");
        let lines = file(
            "val.txt",
            "ILSVRC2012_val_00000001.JPEG n01751748\nILSVRC2012_val_00000002.JPEG n09193705\n",
        );
        let labels = read_val_labels(&lines).unwrap();
        assert_eq!(labels["ILSVRC2012_val_00000002"], "n09193705");
        let devkit = file("ILSVRC2012_validation_ground_truth.txt", "490\n361\n171\n");
        let err = read_val_labels(&devkit).unwrap_err().to_string();
        assert!(
            err.contains("line 1: a class number") && err.contains("meta.mat"),
            "{err}"
        );
        let twice = file("twice.txt", "a.JPEG n1\na.png n2\n");
        let err = read_val_labels(&twice).unwrap_err().to_string();
        assert!(err.contains("line 2: `a` is labelled twice"), "{err}");
    }
}
