use serde::Serialize;
use toolgate::{Denied, tool};

#[derive(Serialize)]
struct Instance(String);

fn describe(instance: &Instance) -> Result<String, String> {
    Ok(instance.0.clone())
}

/// Stop an instance.
#[tool(risk = "LOW_WRITE", target = instance, evidence = describe)]
fn stop(instance: Instance) -> Result<(), Denied> {
    let _ = instance;
    Ok(())
}

fn main() {}
