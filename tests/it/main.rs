//! The integration tests that share one process and one registry of tools.
//!
//! - `gNN_*`: a module per guarantee of SECURITY.md ("What toolgate guarantees"), numbered as there;
//!   each holds every test of its guarantee, the attacks on it and the regressions of it included.
//!   Guarantees 11 and 12 (fleets, the PostgreSQL trail) are tested by the `postgres` binary.
//! - the other modules: a module per subject that is not a guarantee (the manifests, the policy table,
//!   MCP, the examples run as programs, the integrations, ...).
//! - `fixtures`: the tools and helpers that tests of several guarantees share; `common`
//!   (`tests/common`): the fixtures of every test binary.
//!
//! Binaries of their own hold only what needs a process, an allocator or a registry to itself
//! (`tests/*.rs` beside this folder).

#[path = "../common/mod.rs"]
mod common;
mod fixtures;

mod g01_every_path;
mod g02_fails_closed;
mod g03_deny_first;
mod g04_lowering;
mod g05_nested_gates;
mod g06_escalation;
mod g07_approvals;
mod g08_enter_before_body;
mod g09_jsonl_chain;
mod g10_signed_checkpoints;
mod g13_budgets;
mod g14_taint_latch;
mod g15_bound_to_maker;
mod g16_oauth;
mod g17_in_place;
#[cfg(feature = "policy-file")]
mod g18_policy_only_narrows;
mod g19_irreversible;
mod g21_attacks_in_place;
mod g22_attacks_round;
#[cfg(feature = "policy-file")]
mod g23_attacks_replay;
#[cfg(feature = "policy-file")]
mod g24_attacks_history;
#[cfg(all(feature = "policy-file", feature = "clap"))]
mod g25_attacks_promote;

mod audit_cli;
mod by_name;
mod cli_example;
mod conformance;
mod devops_desk;
mod env_mode;
mod faults;
mod floor;
mod gate;
mod manifest;
mod manifest_reports;
mod mcp_annotations;
mod mcp_defs;
mod mcp_e2e;
mod mcp_http;
mod mcp_param_docs;
mod mcp_stdio;
mod mcp_tasks;
mod mutants;
mod names;
mod otel;
mod policy_table;
mod provider_defs;
mod readme;
mod return_types;
mod rig;
mod stateful;
