use toolgate::{Denied, tool};

#[tool(risk = "HIGH_WRITE", id = "")]
fn delete_user(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
