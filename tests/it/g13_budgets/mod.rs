//! Guarantee 13 of SECURITY.md: A budget is never exceeded, and counts the calls that run.

mod attacks;
mod attacks_alike;
mod attacks_async;
mod attacks_hold;
mod features_meeting;
mod handlers;
mod mcp_in_band;
mod shared_stores;
mod windows;
