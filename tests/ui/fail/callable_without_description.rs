use toolgate::{Denied, tool};

#[tool(risk = "READ_ONLY", callable)]
fn undocumented(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

/// Described.
#[tool(risk = "READ_ONLY", callable, description = "  ")]
fn blank_description(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

///
#[tool(risk = "READ_ONLY", callable)]
fn empty_doc(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

// Not callable: no description needed.
#[tool(risk = "READ_ONLY")]
fn internal(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

fn main() {
    let _ = (undocumented(1), blank_description(1), empty_doc(1), internal(1));
}
