use toolgate::{Denied, tool};

fn classify(command: &str) -> bool {
    command.contains("sudo")
}

/// Run a shell command.
#[tool(risk = "LOW_WRITE", escalate = classify)]
fn shell(command: String) -> Result<String, Denied> {
    Ok(command)
}

fn main() {}
