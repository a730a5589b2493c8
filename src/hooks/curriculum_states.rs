//! `curricula.json` of a checkpoint written with this crate's hooks, typed: [`CurriculumStates`].

use crate::curation::CurationState;
use crate::curriculum::rotation::ObjectBoxes;
use crate::pipeline::AugmenterState;

/// `curricula.json` of a checkpoint of a run with this crate's hooks, typed: the augmenter's
/// adaptive state, Fréchet batch curation's and crop-and-rotate's boxes when the run has those
/// hooks (layouts up to 5 wrote `null` for the pieces a run did not use; layout 3 had no boxes).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CurriculumStates {
    /// The augmenter's state (the self-paced AutoAugment).
    pub augmenter: AugmenterState,
    /// Fréchet batch curation's state, when the run has the hook.
    #[serde(default)]
    pub curation: Option<CurationState>,
    /// The object boxes in use and the epoch they were computed at, when the run has the hook.
    #[serde(default)]
    pub object_boxes: Option<ObjectBoxes>,
}
