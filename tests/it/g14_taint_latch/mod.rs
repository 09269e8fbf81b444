//! Guarantee 14 of SECURITY.md: After untrusted input, no write runs unasked.

mod every_path;
mod features_meeting;
mod handlers;
mod latch;
mod over_mcp;
