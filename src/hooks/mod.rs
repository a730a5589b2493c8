//! The crate's training hooks ([`Hook`](crate::train::Hook)): each a curriculum,
//! selection or monitor piece that the training loop calls without knowing it.
//!
//! | hook | what it does | `curricula.json` |
//! |---|---|---|
//! | [`FrechetCurationHook`] | Fréchet batch curation: redraws batches whose views are too far apart | `curation` |
//! | [`ObjectBoxesHook`] | crop-and-rotate's object boxes from the backbone's heat maps | `object_boxes` |
//! | [`KnnHook`] | the kNN monitor every few epochs | — |
//! | [`SelfPacedAutoAugmentHook`] | the losses fed back to MICO's self-paced AutoAugment | — (the augmenter's own, under `augmenter`) |

mod curriculum_states;
mod frechet_curation;
mod knn;
mod object_boxes;
mod self_paced_auto_augment;

pub use curriculum_states::CurriculumStates;
pub use frechet_curation::FrechetCurationHook;
pub use knn::KnnHook;
pub use object_boxes::ObjectBoxesHook;
pub use self_paced_auto_augment::SelfPacedAutoAugmentHook;
