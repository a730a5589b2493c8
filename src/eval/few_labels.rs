//! The few-label protocol (documented on `few_label_indices`).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::base::error::ConfigError;

/// The indices of a class-balanced `fraction` of `labels`: of every class, `⌈fraction · n_c⌉`
/// of its `n_c` images (at least one), drawn without replacement by a generator seeded with
/// `seed`, returned in ascending order. The same `(labels, fraction, seed)` always gives the
/// same indices, on every machine (`StdRng` is ChaCha12, specified by `rand`).
///
/// This is the few-label protocol: a linear probe trained on a small labelled fraction of the
/// training split (SimCLR's and BYOL's 1 % and 10 % ImageNet evaluations; here per class, so
/// that each class keeps its share), scored on the whole test split.
///
/// # Errors
/// If `fraction` is not in `(0, 1]`.
pub fn few_label_indices(
    labels: &[u16],
    fraction: f64,
    seed: u64,
) -> Result<Vec<usize>, ConfigError> {
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(ConfigError::new(
            "label_fraction",
            format!("{fraction}: must lie in (0, 1]"),
        ));
    }
    let classes = labels
        .iter()
        .map(|&l| usize::from(l) + 1)
        .max()
        .unwrap_or(0);
    let mut by_class: Vec<Vec<usize>> = vec![Vec::new(); classes];
    for (i, &l) in labels.iter().enumerate() {
        by_class[usize::from(l)].push(i);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut chosen = Vec::new();
    for members in &mut by_class {
        if members.is_empty() {
            continue;
        }
        // The product is rounded first so that 0.01 · 6000 gives 60, not ⌈60.000000000000004⌉.
        let exact = (fraction * members.len() as f64 * 1e9).round() / 1e9;
        let take = (exact.ceil() as usize).clamp(1, members.len());
        members.shuffle(&mut rng);
        chosen.extend_from_slice(&members[..take]);
    }
    chosen.sort_unstable();
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<u16> {
        // 10 classes of 600 images each, and an eleventh class of 7.
        let mut l: Vec<u16> = (0..6000).map(|i| (i % 10) as u16).collect();
        l.extend([10u16; 7]);
        l
    }

    #[test]
    fn one_percent_takes_six_of_each_class_and_one_of_a_small_class() {
        let l = labels();
        let chosen = few_label_indices(&l, 0.01, 3).unwrap();
        let mut counts = [0usize; 11];
        for &i in &chosen {
            counts[usize::from(l[i])] += 1;
        }
        // ⌈0.01 · 600⌉ = 6 per class; ⌈0.07⌉ = 1 of the class of 7.
        assert_eq!(counts, [6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 1]);
        assert!(
            chosen.windows(2).all(|w| w[0] < w[1]),
            "ascending, no repeats"
        );
    }

    #[test]
    fn the_seed_decides_the_subset_and_the_whole_is_everything() {
        let l = labels();
        let a = few_label_indices(&l, 0.1, 0).unwrap();
        assert_eq!(a, few_label_indices(&l, 0.1, 0).unwrap());
        assert_ne!(a, few_label_indices(&l, 0.1, 1).unwrap());
        let all = few_label_indices(&l, 1.0, 5).unwrap();
        assert_eq!(all, (0..l.len()).collect::<Vec<_>>());
    }

    #[test]
    fn a_fraction_outside_the_unit_interval_is_refused() {
        for f in [0.0, -0.1, 1.5, f64::NAN] {
            let e = few_label_indices(&[0, 1], f, 0).unwrap_err();
            assert!(e.to_string().contains("label_fraction"), "{e}");
        }
    }
}
