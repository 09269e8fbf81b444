use toolgate::{Denied, tool};

#[tool(risk = "HIGH_WRITE", modes = ["FULL_AUTO", SHADOW])]
fn delete_user(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
