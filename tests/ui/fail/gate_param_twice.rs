use toolgate::{Denied, Gate, tool};

#[tool(risk = "READ_ONLY")]
fn get_user(gate: &Gate, other: &Gate, id: u64) -> Result<String, Denied> {
    let _ = (gate, other);
    Ok(format!("user {id}"))
}

fn main() {}
