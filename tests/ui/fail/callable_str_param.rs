use toolgate::{Denied, tool};

/// Greet someone.
#[tool(risk = "READ_ONLY", callable)]
fn greet(name: &str) -> Result<String, Denied> {
    Ok(format!("hello {name}"))
}

fn main() {}
