use toolgate::{Denied, tool};

/// Label a ticket.
#[tool(risk = "LOW_WRITE")]
fn label(ticket: u64) -> Result<(), Denied> {
    let _ = ticket;
}

/// Count the tickets.
#[tool(risk = "READ_ONLY")]
async fn count() -> Result<usize, Denied> {
    let _ = 3;
}

fn main() {}
