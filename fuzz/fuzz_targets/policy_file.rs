//! Reads fuzzed text as an operator's policy file, against two linked tools, and checks what a file
//! that checks must give.
//!
//! Checked for every input:
//! - no panic, whatever the text (deep nesting, huge numbers, any Unicode);
//! - a file that checks compares equal to itself (`diff` finds no change), explains a call of each
//!   tool, and narrows a gate that then decides a call of each tool;
//! - a call the gate allows with the file is allowed without it: no file widens.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::{AllowAllApprover, Denied, Gate, Mode, registry, tool};

/// Look a host up.
#[tool(risk = "READ_ONLY", domain = "fz", callable)]
fn look(host: String) -> Result<String, Denied> {
    Ok(host)
}

/// Pay an amount.
#[tool(risk = "HIGH_WRITE", domain = "fz", callable)]
fn pay(amount: u32, to: Vec<String>) -> Result<u32, Denied> {
    Ok(amount + to.len() as u32)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = PolicyFile::check_shape("fuzz.toml", text);
    let Ok(file) = PolicyFile::parse("fuzz.toml", text) else {
        return;
    };
    assert!(
        file.diff(&file).changes.is_empty(),
        "a file differs from itself"
    );
    let calls = [
        ("fz.look", json!({"host": "prod-db"})),
        ("fz.pay", json!({"amount": 51, "to": ["a", "b"]})),
    ];
    for (id, arguments) in &calls {
        file.explain(Some("alice"), Some("bot"), Mode::FullAuto, id, arguments)
            .expect("a linked tool is explained");
    }
    let live = LivePolicy::new(file);
    for mode in Mode::ALL {
        let build = |policy: bool| {
            let builder = Gate::builder()
                .mode(mode)
                .principal("alice")
                .agent("bot")
                .approver(AllowAllApprover);
            let builder = if policy {
                builder.policy(live.clone())
            } else {
                builder
            };
            builder.build().expect("a gate builds")
        };
        let (with, without) = (build(true), build(false));
        for (id, arguments) in &calls {
            let ran = |gate: &Gate| {
                registry()
                    .call(gate, id, arguments.clone())
                    .now()
                    .expect("sync tools answer at once")
                    .is_ok()
            };
            assert!(
                !ran(&with) || ran(&without),
                "the file widened {id} in {mode}"
            );
        }
    }
});
