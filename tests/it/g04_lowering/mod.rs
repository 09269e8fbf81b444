//! Guarantee 4 of SECURITY.md: The mode is only ever lowered, and a lowering reaches every call not
//! yet started.

mod approval_surfaces;
mod attacks_stateful;
mod by_name;
mod features_meeting;
mod handlers;
mod integrations;
mod mcp_in_band;
mod receivers;
mod regressions;
mod shared_stores;
mod user_code;
