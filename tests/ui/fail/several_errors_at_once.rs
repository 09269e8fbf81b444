use toolgate::{Denied, tool};

#[tool(
    risk = "HIGH_WRITE",
    sideeffects,
    modes = [PARTIAL_AUTO, FULL_AUTO],
    id = "Users.Delete",
)]
fn delete_user(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
