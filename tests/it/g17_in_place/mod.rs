//! Guarantee 17 of SECURITY.md: A tool of an rmcp handler gated in place is decided before rmcp's
//! router runs it.

mod attacks_keys;
mod attacks_routes;
mod factory;
mod handlers;
mod out_of_band;
mod reads;
pub(crate) mod rmcp_handler;
mod routes;
