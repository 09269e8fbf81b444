use toolgate::{Denied, Risk, tool};

fn classify(count: &u64, limit: &u64) -> Risk {
    let _ = (count, limit);
    Risk::HighWrite
}

/// Delete old records.
#[tool(risk = "LOW_WRITE", escalate = classify)]
fn prune(count: u64) -> Result<u64, Denied> {
    Ok(count)
}

fn main() {}
