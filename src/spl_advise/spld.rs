//! Self-paced learning with diversity, SPLD (documented on `Spld`).

use burn::config::Config;
use serde::{Deserialize, Serialize};

use super::checks::{finite_f64, same_length};
use crate::base::error::{non_negative, ConfigError};
use crate::error::SplAdviseError;

/// Configuration of [`Spld`]: the initial pace parameters and their growth per epoch.
///
/// The paper sets `λ` and `γ` from statistics of the ranked losses rather than as absolute values
/// (§3.2), so scale them to the loss in use. The defaults are a starting point for a
/// cross-entropy loss: `γ = 0.5` and a growth of 10 % per epoch (`μ = 1.1`) are the values of the
/// authors' public code; `λ = 0.1` admits, before diversity, only examples that are already
/// classified with confidence above `e^{−0.1} ≈ 0.9`.
#[derive(Config, Debug)]
pub struct SpldConfig {
    /// Easiness pace `λ >= 0`: every example with a loss below it is selected.
    #[config(default = 0.1)]
    pub lambda: f64,
    /// Diversity pace `γ >= 0`: the extra allowance of a group's rank-`r` example is
    /// `γ / (√r + √(r − 1))`.
    #[config(default = 0.5)]
    pub gamma: f64,
    /// Growth `μ > 1` of both pace parameters after each epoch.
    #[config(default = 1.1)]
    pub mu: f64,
}

impl SpldConfig {
    /// Validates the pace parameters (`λ, γ >= 0`, `μ > 1`, all finite) and builds the selector.
    pub fn init(&self) -> Result<Spld, ConfigError> {
        non_negative("lambda", self.lambda)?;
        non_negative("gamma", self.gamma)?;
        if !(self.mu.is_finite() && self.mu > 1.0) {
            return Err(ConfigError::new(
                "mu",
                format!("must be a finite number > 1, got {}", self.mu),
            ));
        }
        Ok(Spld {
            lambda: self.lambda,
            gamma: self.gamma,
            mu: self.mu,
        })
    }
}

/// The saved state of an [`Spld`]: the current pace parameters (`μ` is configuration).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpldState {
    /// Current easiness pace `λ`.
    pub lambda: f64,
    /// Current diversity pace `γ`.
    pub gamma: f64,
}

/// SPLD selection with its pace parameters. Build it with [`SpldConfig::init`].
///
/// Self-paced learning with diversity (SPLD): Jiang, Meng, Yu, Lan, Shan & Hauptmann,
/// "Self-Paced Learning with Diversity", NeurIPS 2014 — the selection step of SPL-ADVisE
/// (Thangarasa & Taylor, "Self-Paced Learning with Adaptive Deep Visual Embeddings",
/// <https://arxiv.org/abs/1807.09200>, §3.2), where the groups are the k-means clusters of the
/// embedding network ([`ClusterIndex`](super::ClusterIndex), K per class).
///
/// # The rule
/// Within each group the examples are ranked by loss, smallest first: `r = 1, 2, …`. The example
/// of rank `r` is selected when
///
/// ```text
/// L < λ + γ / (√r + √(r − 1))
/// ```
///
/// `λ` admits easy examples anywhere (plain self-paced learning); the `γ` term is the gain
/// `γ(√r − √(r − 1))` of the diversity regulariser `−γ Σ_groups ‖v_group‖₂` from selecting one more
/// example of the same group, so it shrinks with the rank and spreads the selection over groups.
/// The rule is the exact minimiser of SPLD's objective over `v ∈ {0, 1}ⁿ`. The comparison is
/// strict: a loss equal to its threshold is left out. Equal losses within a group are ranked by
/// example index, the earlier example first. After each epoch both pace parameters grow,
/// `λ ← μλ` and `γ ← μγ` with `μ > 1`, so harder and more examples per group come in.
///
/// The authors' public code keeps the first K examples of each cluster instead of applying this
/// threshold; this implementation follows the paper.
///
/// # Worked example
/// With `λ = 0.1` and `γ = 0.5` the thresholds of ranks 1 to 5 are 0.6, 0.307107, 0.258919,
/// 0.233975 and 0.218034. A group with losses 0.05, 0.9, 0.2, 0.3, 0.5 keeps 0.05 (rank 1) and
/// 0.2 (rank 2, below 0.307) and drops 0.3 (rank 3, above 0.259); a second group with losses
/// 0.25, 0.7, 0.1 keeps 0.1 and 0.25. With `γ = 0` only losses below `λ = 0.1` survive: just 0.05.
/// The unit tests check these numbers.
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#spld`.
#[derive(Debug, Clone, PartialEq)]
pub struct Spld {
    lambda: f64,
    gamma: f64,
    mu: f64,
}

impl Spld {
    /// Current easiness pace `λ`.
    pub fn lambda(&self) -> f64 {
        self.lambda
    }

    /// Current diversity pace `γ`.
    pub fn gamma(&self) -> f64 {
        self.gamma
    }

    /// Growth `μ` of the pace parameters per epoch.
    pub fn mu(&self) -> f64 {
        self.mu
    }

    /// The loss below which the example of rank `rank` (1 = smallest loss) of a group is selected:
    /// `λ + γ / (√rank + √(rank − 1))`.
    ///
    /// # Panics
    /// If `rank == 0` (ranks start at 1).
    pub fn threshold(&self, rank: usize) -> f64 {
        assert!(rank >= 1, "SPLD ranks start at 1, got rank 0");
        let r = rank as f64;
        self.lambda + self.gamma / (r.sqrt() + (r - 1.0).sqrt())
    }

    /// Which examples SPLD selects: `losses[i]` is example `i`'s loss under the current model and
    /// `groups[i]` its group (any ids; in SPL-ADVisE the cluster of
    /// [`ClusterIndex::assignments`](super::ClusterIndex::assignments)). `O(n log n)`.
    ///
    /// # Errors
    /// If the lengths differ or a loss is NaN or infinite.
    pub fn select<T: Copy + Into<f64>>(
        &self,
        losses: &[T],
        groups: &[usize],
    ) -> Result<Vec<bool>, SplAdviseError> {
        same_length("groups", losses.len(), groups.len())?;
        let losses = finite_f64("losses", losses)?;
        let mut order: Vec<usize> = (0..losses.len()).collect();
        order.sort_by(|&a, &b| {
            groups[a]
                .cmp(&groups[b])
                .then(losses[a].total_cmp(&losses[b]))
                .then(a.cmp(&b))
        });
        let mut selected = vec![false; losses.len()];
        let mut rank = 0;
        for (position, &i) in order.iter().enumerate() {
            let new_group = position == 0 || groups[order[position - 1]] != groups[i];
            rank = if new_group { 1 } else { rank + 1 };
            selected[i] = losses[i] < self.threshold(rank);
        }
        Ok(selected)
    }

    /// The indices of the examples [`Spld::select`] selects, ascending.
    ///
    /// # Errors
    /// As [`Spld::select`].
    pub fn selected_indices<T: Copy + Into<f64>>(
        &self,
        losses: &[T],
        groups: &[usize],
    ) -> Result<Vec<usize>, SplAdviseError> {
        Ok(self
            .select(losses, groups)?
            .into_iter()
            .enumerate()
            .filter_map(|(i, keep)| keep.then_some(i))
            .collect())
    }

    /// The end-of-epoch pace update: `λ ← μλ`, `γ ← μγ`.
    pub fn advance_epoch(&mut self) {
        self.lambda *= self.mu;
        self.gamma *= self.mu;
    }

    /// The current pace parameters, for a checkpoint.
    pub fn state(&self) -> SpldState {
        SpldState {
            lambda: self.lambda,
            gamma: self.gamma,
        }
    }

    /// Restores the pace parameters of a checkpoint.
    ///
    /// # Errors
    /// If `λ` or `γ` is negative or not finite (the state is left unchanged).
    pub fn load_state(&mut self, state: SpldState) -> Result<(), ConfigError> {
        non_negative("lambda", state.lambda)?;
        non_negative("gamma", state.gamma)?;
        self.lambda = state.lambda;
        self.gamma = state.gamma;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOSSES: [f64; 8] = [0.05, 0.9, 0.2, 0.3, 0.5, 0.25, 0.7, 0.1];
    const GROUPS: [usize; 8] = [0, 0, 0, 0, 0, 1, 1, 1];

    fn worked() -> Spld {
        SpldConfig::new()
            .with_lambda(0.1)
            .with_gamma(0.5)
            .init()
            .unwrap()
    }

    #[test]
    fn spld_worked_thresholds() {
        let spld = worked();
        let expected = [0.6, 0.307107, 0.258919, 0.233975, 0.218034];
        for (rank, want) in (1..=5).zip(expected) {
            let got = spld.threshold(rank);
            assert!((got - want).abs() < 1e-6, "rank {rank}: {got} vs {want}");
        }
    }

    #[test]
    fn spld_worked_selection() {
        let selected = worked().select(&LOSSES, &GROUPS).unwrap();
        let as_bits: Vec<u8> = selected.iter().map(|&s| s as u8).collect();
        assert_eq!(as_bits, [1, 0, 1, 0, 0, 1, 0, 1]);
        assert_eq!(
            worked().selected_indices(&LOSSES, &GROUPS).unwrap(),
            [0, 2, 5, 7]
        );
    }

    #[test]
    fn spld_without_diversity_is_plain_self_paced_learning() {
        let spld = SpldConfig::new()
            .with_lambda(0.1)
            .with_gamma(0.0)
            .init()
            .unwrap();
        let selected = spld.select(&LOSSES, &GROUPS).unwrap();
        let as_bits: Vec<u8> = selected.iter().map(|&s| s as u8).collect();
        // 0.1 itself (example 7) is not below λ = 0.1: the comparison is strict.
        assert_eq!(as_bits, [1, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn spld_groups_are_ids_not_positions() {
        // The same two groups, interleaved and with arbitrary ids, select the same examples.
        let losses = [0.25, 0.05, 0.7, 0.9, 0.1, 0.2, 0.3, 0.5];
        let groups = [42, 7, 42, 7, 42, 7, 7, 7];
        let selected = worked().select(&losses, &groups).unwrap();
        let as_bits: Vec<u8> = selected.iter().map(|&s| s as u8).collect();
        assert_eq!(as_bits, [1, 1, 0, 0, 1, 1, 0, 0]);
    }

    #[test]
    fn spld_equal_losses_are_ranked_by_index() {
        // Three equal losses of 0.3 in one group: thresholds 0.6, 0.307107, 0.258919 keep the
        // first two only.
        let selected = worked().select(&[0.3f32, 0.3, 0.3], &[0, 0, 0]).unwrap();
        assert_eq!(selected, [true, true, false]);
    }

    #[test]
    fn spld_epoch_update_multiplies_both_paces() {
        let mut spld = worked();
        spld.advance_epoch();
        assert!((spld.lambda() - 0.11).abs() < 1e-15);
        assert!((spld.gamma() - 0.55).abs() < 1e-15);
        // 0.11 + 0.55 / (√2 + 1) = 0.11 + 0.55 · (√2 − 1)
        assert!((spld.threshold(2) - 0.337_817_459_305_202).abs() < 1e-12);
        spld.advance_epoch();
        assert!((spld.lambda() - 0.121).abs() < 1e-15);
        assert!((spld.gamma() - 0.605).abs() < 1e-15);
        // After two epochs the rank-3 threshold 0.121 + 0.605 / (√3 + √2) = 0.313292 admits the
        // loss 0.3 of the first group as well.
        assert!((spld.threshold(3) - 0.313_291_533_343_448).abs() < 1e-12);
        let selected = spld.select(&LOSSES, &GROUPS).unwrap();
        assert_eq!(
            selected,
            [true, false, true, true, false, true, false, true]
        );
    }

    #[test]
    fn spld_state_round_trips_through_serde() {
        let mut spld = worked();
        spld.advance_epoch();
        // λ = 0.1 · 1.1 is the double just above 0.11.
        assert_eq!(spld.lambda().to_bits(), 0.11f64.to_bits() + 1);
        let value = serde_json::to_value(spld.state()).unwrap();
        let state: SpldState = serde_json::from_value(value).unwrap();
        assert_eq!(state, spld.state());
        // Through JSON text the state comes back to within one unit in the last place:
        // serde_json's parser is not exact unless its `float_roundtrip` feature is on.
        let json = serde_json::to_string(&spld.state()).unwrap();
        let text: SpldState = serde_json::from_str(&json).unwrap();
        assert!(text.lambda.to_bits().abs_diff(state.lambda.to_bits()) <= 1);
        assert!(text.gamma.to_bits().abs_diff(state.gamma.to_bits()) <= 1);
        let mut restored = SpldConfig::new().init().unwrap();
        restored.load_state(state).unwrap();
        assert_eq!(restored, spld);
        let bad = SpldState {
            lambda: -1.0,
            gamma: 0.5,
        };
        assert_eq!(restored.load_state(bad).unwrap_err().field, "lambda");
        assert_eq!(restored, spld);
    }

    #[test]
    fn spld_config_rejects_impossible_paces_by_name() {
        let err = SpldConfig::new().with_mu(1.0).init().unwrap_err();
        assert_eq!(err.field, "mu");
        assert_eq!(
            SpldConfig::new()
                .with_mu(f64::NAN)
                .init()
                .unwrap_err()
                .field,
            "mu"
        );
        assert_eq!(
            SpldConfig::new()
                .with_lambda(-0.1)
                .init()
                .unwrap_err()
                .field,
            "lambda"
        );
        assert_eq!(
            SpldConfig::new()
                .with_gamma(f64::INFINITY)
                .init()
                .unwrap_err()
                .field,
            "gamma"
        );
        let defaults = SpldConfig::new().init().unwrap();
        assert_eq!(
            (defaults.lambda(), defaults.gamma(), defaults.mu()),
            (0.1, 0.5, 1.1)
        );
    }

    #[test]
    fn spld_rejects_mismatched_or_non_finite_input() {
        assert_eq!(
            worked().select(&[0.1, 0.2], &[0]).unwrap_err(),
            SplAdviseError::Length {
                what: "groups",
                expected: 2,
                got: 1
            }
        );
        match worked().select(&[0.1, f64::NAN], &[0, 0]).unwrap_err() {
            SplAdviseError::NonFinite { what, index, .. } => {
                assert_eq!((what, index), ("losses", 1))
            }
            other => panic!("unexpected error {other}"),
        }
        assert!(worked().select::<f64>(&[], &[]).unwrap().is_empty());
    }
}
