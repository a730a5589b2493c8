pub fn x() {}

pub mod augment;
pub mod data;
pub mod error;
