//! The policy of [toolgate](https://docs.rs/toolgate): risk levels, agent modes, the stable codes of
//! refusals, and the table that decides a call from them (ADR-005).
//!
//! This crate is the bottom of toolgate: it depends on nothing (serde and clap only behind features), and
//! the attribute macros and the runtime both read the policy from here, so it is written once. Depend on
//! `toolgate`, which re-exports it.
//!
//! | mode | ceiling |
//! | --- | --- |
//! | SHADOW, ADVISORY | PROPOSE_ONLY |
//! | PARTIAL_AUTO | LOW_WRITE |
//! | FULL_AUTO | HIGH_WRITE, with an approval |
//!
//! ```
//! use toolgate_policy::{DenialCode, Facts, Mode, ModeSet, Risk, Verdict, decide};
//!
//! let verdict = decide(Facts {
//!     risk: Risk::LowWrite,
//!     allowed_modes: ModeSet::ALL,
//!     mode: Mode::Advisory,
//!     deny_listed: false,
//!     can_approve: false,
//! });
//! assert_eq!(verdict, Verdict::Refuse(DenialCode::AboveCeiling));
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "clap")]
mod clap;
mod denial;
mod mode;
mod risk;
#[doc(hidden)]
pub mod suggest;
mod table;

pub use denial::DenialCode;
pub use mode::{MODE_ENV_VAR, Mode, ModeEnvError, ModeSet};
pub use risk::{ParseError, Risk};
pub use table::{
    Facts, POLICY_VERSION, TaintPolicy, Verdict, admits, ceiling, decide, decide_tainted, latched,
    lowest_mode_admitting, modes_admitting, requires_approval,
};
