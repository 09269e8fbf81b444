use toolgate::{Denied, tool};

#[tool(
    risk = "HIGH_WRITE",
    id = "users.accounts.administration.permanently_delete_user_and_all_their_data"
)]
fn delete_user(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
