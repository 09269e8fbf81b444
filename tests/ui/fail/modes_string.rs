use toolgate::{Denied, tool};

#[tool(risk = "READ_ONLY", modes = ["SHADOW"])]
fn get_user(id: u64) -> Result<String, Denied> {
    Ok(format!("user {id}"))
}

fn main() {}
