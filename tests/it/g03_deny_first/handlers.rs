//! Guarantee 3 (Deny first), against rmcp handlers gated in place, `#[toolset]` methods on
//! registered instances, OAuth over `HttpService` and request states.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use crate::common::gates;
use crate::fixtures::handlers::*;
use rmcp::handler::server::wrapper::Parameters;
use serde_json::json;
use toolgate::mcp::ToolgateServer;
use toolgate::{Gate, Mode};

/// a02. Guarantee 1 and 3: "a `#[toolset]` gives its domain to every tool among them (a deny rule
/// written for the domain reaches them all)", and a deny rule refuses its tools in every mode. The
/// in-place tools of `#[toolgate::toolset(domain = "ops23")]` have manifests of domain `ops23`, and the
/// registry holds a callable tool `ops23.zap` of that domain, so `deny("ops23.*")` builds. Broken: a
/// handler tool of the domain runs (over MCP, or directly) under that deny rule.
#[test]
fn a02_a_domain_deny_rule_reaches_the_handlers_tools() {
    runtime().block_on(async {
        let manifest = toolgate::registry()
            .manifest("ops_restart")
            .expect("a manifest");
        assert_eq!(manifest.domain, Some("ops23"));
        let gate = gates::denying(Mode::PartialAuto, "ops23.*");
        let ops = Ops::default();
        let client = connect(ToolgateServer::new(gate.clone()).handler(ops.clone())).await;
        let said = call(&client, "ops_restart", json!({"target": "web"})).await;
        let direct = gate
            .scope(ops.ops_restart(Parameters(Target {
                target: "web".into(),
            })))
            .await;
        assert_eq!(
            ops.restarted(),
            0,
            "a tool of domain ops23 ran under deny(\"ops23.*\"): over MCP {}, directly {:?}",
            code_of(&said),
            direct.map(|_| "OK").map_err(|e| e.data)
        );
        assert_eq!(code_of(&said), "DENY_LISTED");
    });
}

/// a02b. A deny rule naming an in-place tool by its rmcp name refuses it, a rule written for a domain
/// whose only tools are gated in place is live, and one for a domain with no tool fails the build
/// (fail closed). Broken: a rule lets the tool run, or a dead rule builds a gate.
#[test]
fn a02b_a_deny_rule_by_rmcp_name_refuses_and_a_dead_domain_rule_fails_closed() {
    runtime().block_on(async {
        let gate = gates::denying(Mode::PartialAuto, "ops_restart");
        let (ops, client) = ops_client(gate).await;
        assert_eq!(
            code_of(&call(&client, "ops_restart", json!({"target": "x"})).await),
            "DENY_LISTED"
        );
        assert_eq!(ops.restarted(), 0);
        // A domain rule reaches the domain's tools gated in place (here those of `lazy23`), so it is
        // live; one for a domain with no tool at all fails the build.
        let live = Gate::builder()
            .mode(Mode::PartialAuto)
            .deny("lazy23.*")
            .build();
        assert!(live.is_ok(), "{live:?}");
        let dead = Gate::builder()
            .mode(Mode::PartialAuto)
            .deny("nowhere23.*")
            .build();
        assert!(
            dead.is_err(),
            "a domain rule that reaches nothing built a gate"
        );
    });
}
