use toolgate::{Denied, tool};

/// Only the service knows how to make one.
pub struct Ticket {
    pub id: u64,
}

/// Close a ticket.
#[tool(risk = "LOW_WRITE", callable)]
fn close(ticket: Ticket, reason: String) -> Result<(), Denied> {
    let _ = (ticket.id, reason);
    Ok(())
}

fn main() {}
