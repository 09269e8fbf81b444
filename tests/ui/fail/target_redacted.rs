use toolgate::{Denied, tool};

/// Revoke an API key.
#[tool(risk = "HIGH_WRITE", target = key, redact = [key])]
fn revoke(key: String) -> Result<(), Denied> {
    let _ = key;
    Ok(())
}

fn main() {}
