use toolgate::{Denied, tool};

fn describe(id: &str) -> Result<String, String> {
    Ok(id.to_owned())
}

/// Terminate an instance.
#[tool(risk = "HIGH_WRITE", irreversible, out_of_band, target = id, evidence = describe)]
fn terminate(id: String) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
