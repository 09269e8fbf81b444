use toolgate::{Denied, tool};

#[tool(risk = "READ_ONLY", domain = "User-Accounts")]
fn get_user(id: u64) -> Result<String, Denied> {
    Ok(format!("user {id}"))
}

fn main() {}
