//! Safe-by-construction tools for AI agents.
//!
//! An agent calls tools; some only read, some delete, send or pay. toolgate makes every tool declare its
//! risk, turns a missing or contradictory declaration into a compile error, and decides every call against
//! the agent's mode **before the tool's body runs**, on every path into it. When in doubt it refuses.
//!
//! ```
//! use toolgate::{Denied, Gate, Mode, tool};
//!
//! #[derive(Debug)]
//! enum AppError {
//!     Refused(Denied),
//! }
//!
//! impl From<Denied> for AppError {
//!     fn from(denied: Denied) -> Self {
//!         AppError::Refused(denied)
//!     }
//! }
//!
//! /// Look a user up.
//! #[tool(risk = "READ_ONLY", domain = "users")]
//! fn get_user(id: u64) -> Result<String, AppError> {
//!     Ok(format!("user {id}"))
//! }
//!
//! /// Delete a user account.
//! #[tool(risk = "HIGH_WRITE", side_effects, modes = [FULL_AUTO], domain = "users")]
//! fn delete_user(id: u64) -> Result<(), AppError> {
//!     unreachable!("not in this example: {id}")
//! }
//!
//! let gate = Gate::new(Mode::PartialAuto)?;
//! gate.run(|| {
//!     assert_eq!(get_user(7).unwrap(), "user 7");
//!     let AppError::Refused(denied) = delete_user(7).unwrap_err();
//!     assert_eq!(denied.code(), "MODE_NOT_ALLOWED");
//!     assert_eq!(
//!         denied.to_string(),
//!         "tool `users.delete_user` (HIGH_WRITE) is not allowed in mode PARTIAL_AUTO; \
//!          it is allowed in FULL_AUTO"
//!     );
//! });
//!
//! // Outside any gate, nothing runs.
//! assert_eq!(get_user(7).map_err(|AppError::Refused(d)| d.code()).unwrap_err(), "NO_GATE");
//! # Ok::<(), toolgate::GateError>(())
//! ```
//!
//! # The guide
//!
//! The [`guide`] has a page per subject, each an empty module whose documentation is the page:
//!
//! - [`guide::attribute`]: `#[tool]` and `#[toolset]`, manifests, reports and the lockfile, and the
//!   grammar of every key;
//! - [`guide::policy`]: risks, modes and their ceilings, the order of the checks ([`policy::decide`]),
//!   the gate and its kill switch ([`Gate::lower`]);
//! - [`guide::approvals`]: approvers ([`GateBuilder::approver`]), two-step approvals
//!   ([`GateBuilder::two_step_approvals`]), session grants, `escalate`, approvals across processes;
//! - [`guide::budgets`]: budgets, and the taint latch ([`GateBuilder::taint_policy`]);
//! - [`guide::audit`]: the audit log ([`GateBuilder::audit`], [`audit`]), signed checkpoints, the
//!   principal, OpenTelemetry spans ([`audit::TracingSink`]);
//! - [`guide::policy_file`]: the operator's policy file, which narrows every gate and is replaced
//!   while they run;
//! - [`guide::fleets`]: one kill switch and one audit trail for every process (PostgreSQL);
//! - [`guide::console`]: the operator console in the browser: approvals, fleets, the trail;
//! - [`guide::call_by_name`]: [`registry()`]`.call(&gate, id, arguments)`, definitions for model APIs
//!   ([`provider`]), the command line;
//! - [`guide::mcp`]: MCP servers, toolgate's own and rmcp's gated in place;
//! - [`guide::rig`]: callable tools handed to a rig agent;
//! - [`guide::testing`]: the tests of each guarantee, and what a decision costs.
//!
//! # Feature flags
//!
//! Each feature adds what its line says; add them to the dependency, `toolgate = { version = "0.1",
//! features = ["mcp-http", "postgres"] }`. On docs.rs every feature is built, and each item that needs
//! one says which.
//!
#![doc = document_features::document_features!()]
//!
//! Nothing is on by default: the attribute, the gate, call by name, the audit log, the reports, tool
//! definitions for model APIs ([`provider`]) and the tracing sink's OpenTelemetry spans need no feature.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[doc(hidden)]
pub use toolgate_macros::__toolset_member;
pub use toolgate_macros::{tool, toolset};

// What users write every day; the rest lives in the modules below.
pub use toolgate_runtime::{
    AllowAllApprover, Approval, ApprovalRequest, Approver, CallError, DenialCode, Denied, Gate,
    GateBuilder, GateError, Mode, Risk, Rollback, ToolManifest, check_registry, manifests,
    registry,
};

/// The JSON Schema generator of callable tools' arguments: derive `schemars::JsonSchema` on argument
/// types with `#[schemars(crate = "toolgate::schemars")]`.
pub use toolgate_runtime::__private::schemars;
/// The serialization framework of callable tools' arguments, for deriving on argument types.
pub use toolgate_runtime::__private::serde;

/// The policy: risk levels, modes, refusal codes and the table between them (the `toolgate-policy` crate).
pub use toolgate_runtime::policy;

/// The gate: building one, entering it around calls, lowering its mode, its budgets, and its refusals.
pub mod gate {
    pub use toolgate_runtime::{
        BudgetScope, Denied, DenyRuleError, Gate, GateBuilder, GateError, Narrowing, PolicySource,
        RaiseRefused, Scoped, Taint, TaintPolicy, budget,
    };
}

/// Approvals: the [`Approver`] (or [`AsyncApprover`](approval::AsyncApprover)) a gate asks, session
/// grants, and two-step approvals by token, kept in a [`store`](approval::store).
pub mod approval {
    pub use toolgate_runtime::approval::{
        ApprovalFuture, AsyncApprover, DEFAULT_SESSION_TTL, Grant, SessionGrant, store, two_step,
    };
    pub use toolgate_runtime::{
        AllowAllApprover, Approval, ApprovalRequest, ApproveError, Approver, DEFAULT_APPROVAL_TTL,
        Rollback, Taint,
    };
}

/// Every linked tool: [`registry()`](crate::registry()) to call one by name, [`manifests()`] to list
/// them, [`check_registry()`] to catch a duplicated id.
pub mod registry {
    pub use toolgate_runtime::{
        CallError, CallFuture, Duplicate, Instances, Manifests, Registry, RegistryError, Source,
        Tool, ToolManifest, check_registry, manifests,
    };
}

pub use toolgate_runtime::audit;
#[cfg(feature = "clap")]
pub use toolgate_runtime::cli;
#[cfg(feature = "console")]
pub use toolgate_runtime::console;
// With `console` alone, `mcp` holds the access tokens' verifier (`mcp::oauth`) and no server.
#[cfg(any(feature = "mcp", feature = "console"))]
pub use toolgate_runtime::mcp;
pub use toolgate_runtime::names;
#[cfg(feature = "policy-file")]
pub use toolgate_runtime::policy_file;
#[cfg(feature = "postgres")]
pub use toolgate_runtime::postgres;
#[cfg(feature = "rig")]
pub use toolgate_runtime::rig;
pub use toolgate_runtime::terminal;
pub use toolgate_runtime::{lockfile, provider, report};

// A page links to another as to its file (`budgets.md#budgets`), for readers of the repository.
// Rustdoc reads these definitions first, and the first definition of a link wins: here each label
// points at the page's module, or at the repository.
macro_rules! guide_links {
    () => {
        "[grammar]: crate::guide::attribute#the-grammar\n\
         [grammar-file]: macro@crate::tool\n\
         [approvals]: crate::guide::approvals\n\
         [irreversible]: crate::guide::irreversible\n\
         [budgets]: crate::guide::budgets#budgets\n\
         [taint-latch]: crate::guide::budgets#the-taint-latch\n\
         [policy-file]: crate::guide::policy_file\n\
         [history-rules]: crate::guide::policy_file#rules-over-history\n\
         [replay-guide]: crate::guide::policy_file#before-it-binds-policy-tests-and-replay\n\
         [fleets]: crate::guide::fleets\n\
         [mcp-guide]: crate::guide::mcp\n\
         [audit-guide]: crate::guide::audit\n\
         [testing-guide]: crate::guide::testing\n\
         [console-guide]: crate::guide::console\n\
         [function-calling]: crate::guide::call_by_name#function-calling-with-a-models-api\n\
         [benchmarks]: https://github.com/toolgate/toolgate/blob/main/BENCHMARKS.md\n\
         [security]: https://github.com/toolgate/toolgate/blob/main/SECURITY.md\n\
         [set-up]: https://github.com/toolgate/toolgate#set-up-and-run\n\
         [in-place]: https://github.com/toolgate/toolgate#an-rmcp-server-gated-in-place\n\n"
    };
}

/// The guide: a page per subject, each an empty module whose documentation is the page. The pages are
/// the repository's `docs/` folder; `cargo test --doc` compiles their examples, and runs those it can.
pub mod guide {
    // Under `cargo test --doc`, a page whose examples need a feature is left out without it.

    // The lockfile's example is a test for the reader's crate: compiled here, as a doctest, not run.
    #[allow(clippy::test_attr_in_doctest)]
    #[doc = guide_links!()]
    #[doc = include_str!("../docs/attribute.md")]
    #[doc = "\n"]
    #[doc = toolgate_macros::__grammar!()]
    pub mod attribute {}

    #[doc = guide_links!()]
    #[doc = include_str!("../docs/policy.md")]
    pub mod policy {}

    #[cfg(any(not(doctest), feature = "postgres"))]
    #[doc = guide_links!()]
    #[doc = include_str!("../docs/approvals.md")]
    pub mod approvals {}

    #[doc = guide_links!()]
    #[doc = include_str!("../docs/irreversible.md")]
    pub mod irreversible {}

    #[doc = guide_links!()]
    #[doc = include_str!("../docs/budgets.md")]
    pub mod budgets {}

    #[cfg(any(not(doctest), feature = "checkpoints"))]
    #[doc = guide_links!()]
    #[doc = include_str!("../docs/audit.md")]
    pub mod audit {}

    #[cfg(any(not(doctest), all(feature = "postgres", feature = "checkpoints")))]
    #[doc = guide_links!()]
    #[doc = include_str!("../docs/fleets.md")]
    pub mod fleets {}

    #[doc = guide_links!()]
    #[doc = include_str!("../docs/call_by_name.md")]
    pub mod call_by_name {}

    #[cfg(any(not(doctest), feature = "console"))]
    #[doc = guide_links!()]
    #[doc = include_str!("../docs/console.md")]
    pub mod console {}

    #[cfg(any(not(doctest), feature = "policy-file"))]
    #[doc = guide_links!()]
    #[doc = include_str!("../docs/policy_file.md")]
    pub mod policy_file {}

    #[cfg(any(not(doctest), feature = "mcp-oauth"))]
    #[doc = guide_links!()]
    #[doc = include_str!("../docs/mcp.md")]
    pub mod mcp {}

    #[cfg(any(not(doctest), feature = "rig"))]
    #[doc = guide_links!()]
    #[doc = include_str!("../docs/rig.md")]
    pub mod rig {}

    #[doc = guide_links!()]
    #[doc = include_str!("../docs/testing.md")]
    pub mod testing {}
}

/// Every link of a guide page to a file has a rustdoc target in `guide_links!`.
#[cfg(test)]
mod guide_links {
    const PAGES: &[&str] = &[
        include_str!("../docs/attribute.md"),
        include_str!("../docs/policy.md"),
        include_str!("../docs/approvals.md"),
        include_str!("../docs/irreversible.md"),
        include_str!("../docs/budgets.md"),
        include_str!("../docs/audit.md"),
        include_str!("../docs/fleets.md"),
        include_str!("../docs/call_by_name.md"),
        include_str!("../docs/console.md"),
        include_str!("../docs/policy_file.md"),
        include_str!("../docs/mcp.md"),
        include_str!("../docs/rig.md"),
        include_str!("../docs/testing.md"),
    ];

    #[test]
    fn every_link_definition_of_a_page_has_a_rustdoc_target() {
        let rustdoc = guide_links!();
        for page in PAGES {
            for line in page.lines().filter(|line| line.starts_with('[')) {
                let Some((label, _)) = line.split_once("]: ") else {
                    continue;
                };
                assert!(
                    rustdoc.contains(&format!("{label}]: ")),
                    "guide_links! has no target for {label}], which a page defines: {line}"
                );
            }
        }
    }
}

/// What the code `#[tool]` generates refers to. Not a public API: it changes without notice.
#[doc(hidden)]
pub mod __private {
    pub use toolgate_runtime::__private::*;
}

/// Every Rust block of README.md, compiled (and run, where it can be) by `cargo test`.
#[cfg(all(
    doctest,
    feature = "mcp",
    feature = "mcp-oauth",
    feature = "clap",
    feature = "postgres",
    feature = "checkpoints",
    feature = "rig"
))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
