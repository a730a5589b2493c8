//! One module per recipe.

pub mod worked_values;
