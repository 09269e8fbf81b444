use toolgate::{Denied, Gate, Mode, tool};

#[tool(risk = "LOW_WRITE", domain = "tickets")]
fn close_ticket(gate: &Gate, id: u64) -> Result<String, Denied> {
    Ok(format!("closed {id} in {}", gate.mode()))
}

#[tool(risk = "READ_ONLY", domain = "tickets")]
fn count_tickets<'g>(queue: &str, gate: &'g toolgate::Gate) -> Result<usize, Denied> {
    let _ = gate;
    Ok(queue.len())
}

fn main() {
    let partial = Gate::new(Mode::PartialAuto).unwrap();
    // The `&Gate` argument decides the call without any ambient gate.
    assert_eq!(
        close_ticket(&partial, 4).unwrap(),
        "closed 4 in PARTIAL_AUTO"
    );
    assert_eq!(count_tickets("abc", &partial).unwrap(), 3);

    let shadow = Gate::new(Mode::Shadow).unwrap();
    assert_eq!(
        close_ticket(&shadow, 4).unwrap_err().code(),
        "MODE_NOT_ALLOWED"
    );

    // Ambient gates still apply on top of the argument: an inner gate never allows what an outer one refuses.
    let refused = shadow.run(|| close_ticket(&partial, 4)).unwrap_err();
    assert_eq!(refused.code(), "MODE_NOT_ALLOWED");
    assert_eq!(refused.mode(), Some(Mode::Shadow));
}
