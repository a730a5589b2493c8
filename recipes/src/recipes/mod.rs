//! One module per recipe; `common` holds what the training recipes share.

pub mod byol;
pub mod common;
pub mod eval;
pub mod light_moco;
pub mod mico;
pub mod moco_v1;
pub mod moco_v2;
pub mod rotnet;
pub mod simclr;
pub mod simsiam;
pub mod spl_advise;
pub mod worked_values;
