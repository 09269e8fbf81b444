//! Guarantee 6 of SECURITY.md: Escalation only raises.

mod by_name;
mod receivers;
mod user_code;
