use toolgate::{Denied, tool};

fn describe(id: &str) -> Result<String, String> {
    Ok(id.to_owned())
}

/// Stop an instance.
#[tool(risk = "LOW_WRITE", irreversible, target = id, evidence = describe)]
fn stop(id: String) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
