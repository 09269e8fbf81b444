//! The integration tests that share one process and one registry of tools: a module per subject.
//! Binaries of their own hold only what needs a process, an allocator or a registry to itself
//! (`tests/*.rs` beside this folder).

#[path = "../common/mod.rs"]
mod common;

mod approvals;
mod attacks;
mod attacks_approvals;
mod attacks_audit_writer;
mod attacks_by_name;
#[cfg(feature = "rig")]
mod attacks_integrations;
mod attacks_stateful;
mod audit_checkpoints;
mod audit_cli;
mod audit_gate;
mod audit_log;
mod audit_sinks;
mod budgets;
mod by_name;
mod bypass;
mod cli_example;
mod devops_desk;
mod faults;
mod floor;
mod gate;
mod manifest;
mod mcp_defs;
mod mcp_e2e;
mod mcp_http;
mod mcp_in_place;
mod mcp_oauth;
mod mcp_taint;
mod mcp_tasks;
mod mutants;
mod otel;
mod pairs;
mod policy;
mod principal;
mod provider_defs;
mod regressions;
mod return_types;
mod rig;
mod stateful;
mod strict;
mod taint;
