use toolgate::{Denied, tool};

#[tool(risk = "HIGH_WRITE", modes = [SHADOW, FULL_AUTO])]
fn delete_user(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
