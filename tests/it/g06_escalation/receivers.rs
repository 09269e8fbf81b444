//! Guarantee 6 (Escalation only raises), against stateful tools: `callable` methods called on an
//! instance, by name and over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.

use serde_json::json;
use toolgate::{Gate, Mode, Risk};

use crate::fixtures::receivers::*;

/// ATTACKS escalation on a method called by name (`escalate` with a borrowed `&str` parameter): the gate
/// lets the declared LOW_WRITE through before the arguments are read, then the arguments raise the call to
/// HIGH_WRITE: refused in PARTIAL_AUTO, by name and directly; in FULL_AUTO the approver is asked at the raised
/// risk.
#[test]
fn s28_an_escalated_method_by_name_is_judged_at_its_raised_risk() {
    let vault = Vault::new("staging");
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let sudo = run_command(&gate, &vault, "sudo rm -rf /");
    assert_eq!(sudo.map_err(|e| e.code()), Err("ABOVE_CEILING"));
    assert_eq!(
        gate.run(|| vault.run("sudo ls".into()))
            .unwrap_err()
            .code()
            .as_str(),
        "ABOVE_CEILING"
    );
    assert!(run_command(&gate, &vault, "ls").is_ok());
    let sink = HookSink::default();
    let (full, asked) = approving(&sink, |_| false);
    let rejected = run_command(&full, &vault, "sudo ls");
    assert_eq!(rejected.map_err(|e| e.code()), Err("APPROVAL_REJECTED"));
    assert_eq!(lock(&asked)[0].3, Risk::HighWrite);
    assert_eq!(vault.ran(), ["run@staging"]);
}

/// `atk_vault.run` of `command`, called by name on `vault`.
fn run_command(
    gate: &Gate,
    vault: &std::sync::Arc<Vault>,
    command: &str,
) -> Result<serde_json::Value, toolgate::CallError> {
    call_now(
        gate,
        &shared(vault),
        "atk_vault.run",
        json!({"command": command}),
    )
}
