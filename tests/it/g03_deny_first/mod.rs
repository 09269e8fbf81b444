//! Guarantee 3 of SECURITY.md: Deny first.

mod attacks_names;
mod features_meeting;
mod handlers;
mod integrations;
mod user_code;
