use toolgate::{Denied, tool};

#[tool(risk = "READ_ONLY")]
pub fn count() -> Result<usize, Denied> {
    Ok(3)
}
