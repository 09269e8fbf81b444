//! Guarantee 12: the PostgreSQL trail holds every body's `enter` before the body runs, one chain per
//! writer; `verify` reports an `enter` without its `exit` as interrupted, not tampered, and with
//! checkpoints a rewrite shows per writer.

mod attacks_split;
mod attacks_stateful;
mod outages;
mod processes;
pub(crate) mod replay;
mod signed;
mod tampering;
