use toolgate::{Denied, tool};

#[tool(risk = "HIGH_WRITE", id = "users.delete-user")]
fn delete_user(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
