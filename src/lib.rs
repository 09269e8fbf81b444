//! toolgate placeholder
#![forbid(unsafe_code)]
pub use toolgate_macros::{tool, toolset};
pub use toolgate_runtime::*;
