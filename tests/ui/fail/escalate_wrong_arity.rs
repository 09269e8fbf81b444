use toolgate::{Denied, Risk, tool};

fn classify(command: &str, user: &str) -> Risk {
    let _ = (command, user);
    Risk::HighWrite
}

/// Run a shell command.
#[tool(risk = "LOW_WRITE", escalate = classify)]
fn shell(command: String) -> Result<String, Denied> {
    Ok(command)
}

fn main() {}
