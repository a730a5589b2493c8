mod global;
pub use global::*;

mod config;
pub use config::*;

mod api;
pub use api::*;

mod local;

#[cfg(test)]
mod tests;
