//! Guarantee 3 of SECURITY.md: Deny first.

mod features_meeting;
mod handlers;
mod integrations;
mod user_code;
