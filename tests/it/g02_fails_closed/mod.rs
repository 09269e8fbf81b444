//! Guarantee 2 of SECURITY.md: It fails closed.

mod approval_surfaces;
mod integrations;
mod receivers;
mod strict_arguments;
mod user_code;
