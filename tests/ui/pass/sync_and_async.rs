use toolgate::{Denied, Gate, Mode, tool};

#[tool(risk = "READ_ONLY")]
fn ping() -> Result<&'static str, Denied> {
    Ok("pong")
}

#[tool(risk = "LOW_WRITE", domain = "mail")]
async fn send_draft(to: String) -> Result<String, Denied> {
    tokio::task::yield_now().await;
    Ok(format!("draft to {to}"))
}

#[tokio::main]
async fn main() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    assert_eq!(gate.run(ping).unwrap(), "pong");

    let sent = gate.scope(send_draft("ada".to_owned())).await.unwrap();
    assert_eq!(sent, "draft to ada");

    // The future is gated when it is polled, not when it is created.
    let outside = send_draft("bob".to_owned()).await.unwrap_err();
    assert_eq!(outside.code(), "NO_GATE");

    let shadow = Gate::new(Mode::Shadow).unwrap();
    let refused = shadow
        .scope(send_draft("eve".to_owned()))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "MODE_NOT_ALLOWED");

    let spawned = tokio::spawn(gate.scope(send_draft("joe".to_owned())));
    assert_eq!(spawned.await.unwrap().unwrap(), "draft to joe");
}
