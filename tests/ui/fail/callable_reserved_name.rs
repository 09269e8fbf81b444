use toolgate::{Denied, tool};

/// A name the generated code uses for itself.
#[tool(risk = "READ_ONLY", id = "reserved.invoke", callable)]
fn __toolgate_invoke(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

fn main() {}
