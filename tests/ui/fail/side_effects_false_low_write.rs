use toolgate::{Denied, tool};

#[tool(risk = "LOW_WRITE", side_effects = false)]
fn tag_ticket(ticket: u64, tag: &str) -> Result<(), Denied> {
    let _ = (ticket, tag);
    Ok(())
}

fn main() {}
