//! Guarantee 5 of SECURITY.md: Nested gates intersect.

mod by_name;
mod features_meeting;
mod integrations;
mod receivers;
mod regressions;
mod user_code;
