use toolgate::{Denied, tool};

/// Mark a message read.
#[tool(risk = "LOW_WRITE", untrusted_output)]
fn mark_read(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

/// Archive a message: `untrusted_output = false` says nothing, so it may return nothing.
#[tool(risk = "LOW_WRITE", untrusted_output = false)]
fn archive(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

/// Several errors at once: each on its own token.
#[tool(risk = "READ_ONLY", side_effects, untrusted_output)]
async fn mark_seen(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {
    // The items are still emitted: calling them type-checks.
    let _ = mark_read(1);
    let _ = archive(1);
    let _ = mark_seen(1);
}
