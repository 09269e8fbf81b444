//! Guarantee 13: a budget kept in PostgreSQL is never exceeded by the processes sharing it, and
//! counts the calls that run.

mod attacks;
mod attacks_hold;
mod attacks_reset;
mod attacks_stateful;
pub(crate) mod history;
mod over_mcp;
mod processes;
