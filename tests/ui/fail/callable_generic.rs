use toolgate::{Denied, tool};

/// Echo a value back.
#[tool(risk = "READ_ONLY", callable)]
fn echo<T: Clone>(value: T) -> Result<T, Denied> {
    Ok(value)
}

fn main() {}
