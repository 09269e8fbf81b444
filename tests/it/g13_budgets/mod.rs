//! Guarantee 13 of SECURITY.md: A budget is never exceeded, and counts the calls that run.

mod features_meeting;
mod handlers;
mod shared_stores;
mod windows;
