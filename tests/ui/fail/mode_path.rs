use toolgate::{Denied, Mode, tool};

#[tool(risk = "HIGH_WRITE", modes = [Mode::FullAuto])]
fn delete_user(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {
    let _ = Mode::FullAuto;
}
