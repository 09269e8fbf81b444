//! Guarantee 7 of SECURITY.md: Approvals are single-use, bound and expiring.

mod approval_surfaces;
mod approvers;
mod attacks_shown_text;
mod attacks_stateful;
mod by_name;
pub(crate) mod checks;
mod features_meeting;
mod handlers;
mod integrations;
mod mcp_in_band;
pub(crate) mod meeting;
mod receivers;
mod regressions;
pub(crate) mod rounds;
pub(crate) mod served_ops;
mod shared_stores;
mod stored_answers;
mod user_code;
