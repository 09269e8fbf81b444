use toolgate::{Denied, tool};

/// Print anything.
#[tool(risk = "READ_ONLY", callable)]
fn show(value: impl std::fmt::Display) -> Result<String, Denied> {
    Ok(value.to_string())
}

fn main() {}
