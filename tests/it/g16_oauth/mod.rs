//! Guarantee 16 of SECURITY.md: Over OAuth, a request is a principal only through a token that
//! verifies.

mod handlers;
mod resource_server;
