//! Guarantee 10 of SECURITY.md: A signed JSONL log shows a rewrite of the whole log.

mod attacks_files;
mod attacks_size_limit;
mod checkpoints;
#[cfg(unix)]
mod planted_links;
