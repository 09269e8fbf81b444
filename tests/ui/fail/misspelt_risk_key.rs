use toolgate::{Denied, tool};

#[tool(rsik = "READ_ONLY")]
fn get_user(id: u64) -> Result<String, Denied> {
    Ok(format!("user {id}"))
}

fn main() {}
