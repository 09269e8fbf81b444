//! Guarantee 15 of SECURITY.md: What is stored is honoured for its maker alone.

mod approval_surfaces;
mod attacks_names;
mod features_meeting;
mod handlers;
mod mcp_in_band;
mod principal;
mod shared_stores;
