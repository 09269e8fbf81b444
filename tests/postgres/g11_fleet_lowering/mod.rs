//! Guarantee 11: a fleet's lowering reaches every joined process, and never raises one. A partition
//! longer than the grace period holds every joined gate at SHADOW.

mod attacks_names;
mod over_mcp;
mod partitions;
mod processes;
