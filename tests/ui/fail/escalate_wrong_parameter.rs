use toolgate::{Denied, Risk, tool};

fn classify(command: &str) -> Risk {
    if command.contains("sudo") { Risk::HighWrite } else { Risk::LowWrite }
}

/// Delete old records.
#[tool(risk = "LOW_WRITE", escalate = classify)]
fn prune(count: u64) -> Result<u64, Denied> {
    Ok(count)
}

fn main() {}
