//! One module per recipe (or per family of recipes), each with its typed defaults, the short
//! function that builds its method and extensions, and its `RECIPES` entries; `common` holds
//! what the training recipes share (arguments, data, backbones, the run).
//!
//! A new recipe module is registered by one name in the list below: it becomes a module, and
//! its `RECIPES` join `recipe list` in this order.

pub mod common;

macro_rules! recipe_modules {
    ($($module:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every recipe of every module, in the order of the list.
        pub fn all() -> Vec<crate::registry::RecipeEntry> {
            [$($module::RECIPES),*].concat()
        }
    };
}

recipe_modules!(
    light_moco,
    moco_v2,
    moco_v1,
    moco_v3,
    simclr,
    rotnet,
    byol,
    simsiam,
    redundancy,
    multi_crop,
    nnclr,
    tico,
    mico,
    spl_advise,
    eval,
    export,
    compare,
    worked_values,
);
