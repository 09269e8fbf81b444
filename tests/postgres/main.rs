//! Everything toolgate does with PostgreSQL, against a real server: a throwaway cluster (or the one
//! `TOOLGATE_TEST_POSTGRES` names), several processes (this binary run again in a child role), the
//! `toolgate` command, and proxies that cut or hold a process's link to the server. A module per
//! guarantee of SECURITY.md ("What toolgate guarantees", `gNN_`), and one per other subject.

#[path = "../common/mod.rs"]
mod common;
mod support;

mod g07_approvals;
mod g11_fleet_lowering;
mod g12_postgres_trail;
mod g13_budgets;
mod g14_attacks;
mod g14_taint_latch;
mod g15_attacks_names;
mod g15_bound_to_maker;
mod g18_fleet_attacks;
mod g18_fleet_policy;
mod g19_attacks;
mod g19_irreversible;
#[cfg(feature = "console")]
mod g20_attacks;
#[cfg(feature = "console")]
mod g20_console;
#[cfg(feature = "console")]
mod g20_console_replay;
#[cfg(feature = "console")]
mod g20_more;
mod g23_attacks_replay;
#[cfg(feature = "policy-file")]
mod g24_attacks_history;
#[cfg(feature = "policy-file")]
mod g25_attacks_promote;

mod a5_reconnects;
mod approvals_cli;
mod budgets_cli;
mod connections;
#[cfg(feature = "console")]
mod console;
mod fleet_cli;
mod mcp_example;
mod restarts;
mod schema_and_roles;
mod sql_semantics;
mod tls;
