use toolgate::{Denied, tool};

#[tool(risk = "LOW_WRITE", domain = "users", risk = "HIGH_WRITE")]
fn rename_user(id: u64, name: &str) -> Result<(), Denied> {
    let _ = (id, name);
    Ok(())
}

fn main() {}
