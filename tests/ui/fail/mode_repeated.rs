use toolgate::{Denied, tool};

#[tool(risk = "LOW_WRITE", modes = [PARTIAL_AUTO, FULL_AUTO, PARTIAL_AUTO])]
fn tag_ticket(ticket: u64) -> Result<(), Denied> {
    let _ = ticket;
    Ok(())
}

fn main() {}
