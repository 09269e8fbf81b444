//! Guarantee 7: approvals are single-use, bound and expiring, across processes sharing a PostgreSQL
//! store. An approval runs one call, the one it was asked for, before it expires by the database's
//! clock; only hashes of tokens are stored; a store that fails, times out or answers what it should not
//! refuses the call; the `toolgate` command escapes what it shows an operator.

mod across_processes;
mod attacks_stateful;
mod over_mcp;
mod store;
