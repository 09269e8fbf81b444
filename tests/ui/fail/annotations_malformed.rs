// `annotations` takes rmcp's hints in parentheses, each once, by their rmcp names.
use toolgate::{Denied, tool};

/// Look.
#[tool(risk = "READ_ONLY", annotations(title = "Look", readonly_hint = true))]
fn look() -> Result<(), Denied> {
    Ok(())
}

/// Peek.
#[tool(risk = "READ_ONLY", annotations = "Peek")]
fn peek() -> Result<(), Denied> {
    Ok(())
}

/// Glance.
#[tool(risk = "READ_ONLY", annotations(title = "Glance", title = "Twice", open_world_hint = 1))]
fn glance() -> Result<(), Denied> {
    Ok(())
}

fn main() {}
