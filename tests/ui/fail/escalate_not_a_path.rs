use toolgate::{Denied, tool};

/// Run a shell command.
#[tool(risk = "LOW_WRITE", escalate = "classify")]
fn shell(command: String) -> Result<String, Denied> {
    Ok(command)
}

fn main() {}
