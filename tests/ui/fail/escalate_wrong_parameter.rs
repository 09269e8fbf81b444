use toolgate::{Denied, Risk, tool};

fn classify(count: &u32) -> Risk {
    if *count > 10 { Risk::HighWrite } else { Risk::LowWrite }
}

/// Run a command.
#[tool(risk = "LOW_WRITE", escalate = classify)]
fn shell(command: String) -> Result<String, Denied> {
    Ok(command)
}

fn main() {}
