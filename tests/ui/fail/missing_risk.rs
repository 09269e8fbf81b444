use toolgate::{Denied, tool};

#[tool(side_effects, domain = "users")]
fn delete_user(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
