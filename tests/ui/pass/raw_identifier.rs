use toolgate::{Denied, Gate, Mode, tool};

#[tool(risk = "READ_ONLY", domain = "schema")]
fn r#type(name: &str) -> Result<String, Denied> {
    Ok(format!("type of {name}"))
}

fn main() {
    let gate = Gate::new(Mode::Shadow).unwrap();
    assert_eq!(gate.run(|| r#type("x")).unwrap(), "type of x");
    assert!(toolgate::registry().manifest("schema.type").is_some());
}
