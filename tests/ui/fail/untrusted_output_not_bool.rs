use toolgate::{Denied, tool};

/// Read the inbox.
#[tool(risk = "READ_ONLY", untrusted_output = "email")]
fn inbox() -> Result<Vec<String>, Denied> {
    Ok(Vec::new())
}

fn main() {}
