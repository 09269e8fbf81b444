// rmcp's hints in `annotations(..)` are checked against the declaration: the listed hints are made from
// the risk, and `idempotent_hint` is the key `idempotent`.
use toolgate::{Denied, tool};

/// Restart a service.
#[tool(risk = "LOW_WRITE", annotations(read_only_hint = true, destructive_hint = true))]
fn restart(name: String) -> Result<(), Denied> {
    let _ = name;
    Ok(())
}

/// Delete a user.
#[tool(risk = "HIGH_WRITE", idempotent = false, annotations(idempotent_hint = true))]
fn delete(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
