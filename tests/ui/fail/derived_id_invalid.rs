use toolgate::{Denied, tool};

#[allow(non_snake_case)]
#[tool(risk = "HIGH_WRITE", domain = "users")]
fn DeleteUser(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
