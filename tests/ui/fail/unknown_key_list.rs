use toolgate::{Denied, tool};

#[tool(risk = "READ_ONLY", timeout = 30)]
fn get_user(id: u64) -> Result<String, Denied> {
    Ok(format!("user {id}"))
}

fn main() {}
