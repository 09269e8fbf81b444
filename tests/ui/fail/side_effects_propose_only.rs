use toolgate::{Denied, tool};

#[tool(risk = "PROPOSE_ONLY", side_effects = true)]
fn propose_refund(order: u64) -> Result<String, Denied> {
    Ok(format!("refund order {order}?"))
}

fn main() {}
