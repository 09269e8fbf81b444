use toolgate::{Denied, tool};

#[tool(risk = "DELETE")]
fn delete_user(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {
    delete_user(7).unwrap();
}
