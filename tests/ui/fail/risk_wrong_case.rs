use toolgate::{Denied, tool};

#[tool(risk = "high_write")]
fn delete_user(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
