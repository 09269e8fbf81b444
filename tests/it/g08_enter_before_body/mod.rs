//! Guarantee 8 of SECURITY.md: The audit `enter` record is written before the body runs.

mod approval_surfaces;
mod attacks_size_limit;
mod by_name;
mod features_meeting;
mod gate_records;
mod handlers;
mod integrations;
mod misbehaving_sinks;
mod receivers;
mod regressions;
mod several_sinks;
mod user_code;
