//! Guarantee 1 of SECURITY.md: Every path into a tool's body passes the gate.

mod by_name;
mod bypass;
mod integrations;
mod receivers;
mod regressions;
mod user_code;
