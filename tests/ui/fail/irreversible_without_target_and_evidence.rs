use toolgate::{Denied, tool};

/// Terminate an instance.
#[tool(risk = "HIGH_WRITE", irreversible)]
fn terminate(id: String) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn describe(id: &str) -> Result<String, String> {
    Ok(id.to_owned())
}

/// Terminate an instance, with evidence but no target.
#[tool(risk = "HIGH_WRITE", irreversible, evidence = describe)]
fn terminate_blind(id: String) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
