//! Guarantee 9 of SECURITY.md: The JSONL audit log is tamper-evident.

mod log;
mod one_writer;
mod user_code;
