//! The crate's training hooks ([`Hook`](crate::train::hook::Hook)): each a curriculum,
//! selection or monitor piece that the training loop calls without knowing it.
//!
//! | hook | what it does | `curricula.json` |
//! |---|---|---|
//! | [`FrechetCurationHook`] | Fréchet batch curation: redraws batches whose views are too far apart | `curation` |
//! | [`ObjectBoxesHook`] | crop-and-rotate's object boxes from the backbone's heat maps | `object_boxes` |
//! | [`KnnHook`] | the kNN monitor every few epochs | — |
//! | [`SelfPacedAutoAugmentHook`] | the losses fed back to MICO's self-paced AutoAugment | — (the augmenter's own, under `augmenter`) |

pub mod frechet_curation;
pub mod knn;
pub mod object_boxes;
pub mod self_paced_auto_augment;

pub use frechet_curation::FrechetCurationHook;
pub use knn::KnnHook;
pub use object_boxes::ObjectBoxesHook;
pub use self_paced_auto_augment::SelfPacedAutoAugmentHook;

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
