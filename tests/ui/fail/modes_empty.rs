use toolgate::{Denied, tool};

#[tool(risk = "LOW_WRITE", modes = [])]
fn tag_ticket(ticket: u64) -> Result<(), Denied> {
    let _ = ticket;
    Ok(())
}

fn main() {}
