use toolgate::{Gate, Mode, tool};

/// Restart a service; its error is a plain `String`.
#[tool(risk = "LOW_WRITE", callable)]
fn restart(service: String) -> Result<String, String> {
    if service.is_empty() {
        return Err("no service named".to_owned());
    }
    Ok(format!("{service} restarted"))
}

fn main() {
    let refused = restart("web".into()).unwrap_err();
    assert!(refused.contains("outside any gate"), "{refused}");
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let refused = shadow.run(|| restart("web".into())).unwrap_err();
    assert!(refused.contains("is not allowed in mode SHADOW"), "{refused}");
    let partial = Gate::new(Mode::PartialAuto).unwrap();
    assert_eq!(partial.run(|| restart("web".into())).unwrap(), "web restarted");
    let failed = toolgate::registry()
        .call(&partial, "restart", serde_json::json!({"service": ""}))
        .now()
        .unwrap()
        .unwrap_err();
    assert_eq!(failed.code(), "HANDLER_ERROR");
    assert_eq!(failed.to_string(), "no service named");
}
