//! Guarantee 5 (Nested gates intersect), against stateful tools: `callable` methods called on an
//! instance, by name and over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::Arc;

use serde_json::json;
use toolgate::{AllowAllApprover, Gate, Mode, registry};

use crate::common::gates;
use crate::fixtures::receivers::*;

/// ATTACKS guarantee 5 (a `&Gate` parameter and every ambient gate decide): the same gate parameter written
/// as a renamed import, a type alias, a full path and with a named lifetime. Inside a wide FULL_AUTO gate
/// that approves everything, each is given a SHADOW gate: every form must be refused.
#[test]
fn s21_every_spelling_of_a_gate_parameter_is_the_gate_of_the_call() {
    let vault = Vault::new("staging");
    let narrow = Gate::new(Mode::Shadow).unwrap();
    let wide = gates::approved(Mode::FullAuto, AllowAllApprover);
    let results = wide.run(|| {
        [
            ("plain", vault.gp_plain(&narrow)),
            ("renamed import", vault.gp_alias(&narrow)),
            ("type alias", vault.gp_type_alias(&narrow)),
            ("full path", vault.gp_path(&narrow)),
            ("lifetime", vault.gp_life(&narrow)),
        ]
    });
    let through: Vec<_> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(f, _)| *f)
        .collect();
    // Without an ambient gate, the parameter alone decides (and allows with an approver).
    let alone = [
        (
            "renamed import",
            vault.gp_alias(&wide).map_err(|e| e.code().as_str()),
        ),
        (
            "full path",
            vault.gp_path(&wide).map_err(|e| e.code().as_str()),
        ),
    ];
    assert!(
        through.is_empty(),
        "ran despite a SHADOW gate parameter: {through:?}, bodies {:?}; the wide gate given alone: {alone:?}",
        vault.ran()
    );
}

/// ATTACKS guarantee 5 (nested gates intersect) from inside a body: a method running under a PARTIAL_AUTO
/// gate calls a HIGH_WRITE tool by name through a FULL_AUTO gate of its own that approves everything, sync
/// and async. The ambient gate still refuses it.
#[test]
fn s23_a_body_calling_a_tool_by_name_through_a_wider_gate_is_refused() {
    for id in ["atk_vault.relay", "atk_vault.arelay"] {
        let vault = Vault::new("front");
        let peer = Vault::new("production");
        *lock(&vault.peer) = Some(Arc::clone(&peer));
        let gate = Gate::new(Mode::PartialAuto).unwrap();
        let answer = block_on(registry().call_with(
            &gate,
            &shared(&vault),
            id,
            json!({"id": "atk_vault.wipe"}),
        ));
        assert_eq!(
            peer.ran(),
            Vec::<String>::new(),
            "{id}: the peer was wiped: {answer:?}"
        );
        assert!(
            answer
                .as_ref()
                .is_ok_and(|a| a.as_str().is_some_and(|s| !s.starts_with("ran"))),
            "{id}: {answer:?}"
        );
    }
}
