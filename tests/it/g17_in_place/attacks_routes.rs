//! Outside attacks on guarantee 17: an rmcp router gated in place, then extended by the application
//! in the ways rmcp offers beside `+` (`with_route`, `add_route`, `+=`, a trait-provided `SyncTool`),
//! with routes named exactly, in another case, in other Unicode, or as `<domain>.<name>`.
//!
//! Each test asserts the guarantee: a declared tool's body runs only after its decision, and an
//! undeclared route is refused `UNDECLARED_TOOL`. A test that fails is an attack that got through.

#![cfg(feature = "mcp")]

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::handler::server::router::tool::{SyncTool, ToolBase, ToolRoute, ToolRouter};
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde_json::json;
use toolgate::mcp::ToolgateServer;
use toolgate::{Gate, Mode};

use super::rmcp_handler::{call, complete, connect, refused, runtime};

#[derive(Debug, Default, serde::Deserialize, schemars::JsonSchema)]
struct Svc {
    /// The service.
    service: String,
}

/// A desk whose router the application builds: the gated tools, then whatever it adds.
#[derive(Clone)]
struct Desk {
    router: ToolRouter<Desk>,
    restarts: Arc<AtomicUsize>,
    loose: Arc<AtomicUsize>,
}

#[toolgate::toolset(domain = "atkr")]
#[tool_router]
impl Desk {
    /// Restart a service: needs FULL_AUTO and an approval.
    #[tool]
    #[toolgate(risk = "HIGH_WRITE", modes = [FULL_AUTO])]
    async fn desk_restart(
        &self,
        Parameters(s): Parameters<Svc>,
    ) -> Result<CallToolResult, ErrorData> {
        self.restarts.fetch_add(1, Ordering::SeqCst);
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{} restarted",
            s.service
        ))]))
    }
}

#[tool_handler(router = self.router)]
impl ServerHandler for Desk {}

impl Desk {
    fn with(router: impl FnOnce(ToolRouter<Desk>) -> ToolRouter<Desk>) -> Desk {
        Desk {
            router: router(Desk::tool_router()),
            restarts: Arc::default(),
            loose: Arc::default(),
        }
    }

    /// Whether any body ran: the declared one or an added one.
    fn ran(&self) -> (usize, usize) {
        (
            self.restarts.load(Ordering::SeqCst),
            self.loose.load(Ordering::SeqCst),
        )
    }
}

fn loose_call(
    context: ToolCallContext<'_, Desk>,
) -> std::pin::Pin<Box<dyn Future<Output = Result<CallToolResponse, ErrorData>> + Send + '_>> {
    context.service.loose.fetch_add(1, Ordering::SeqCst);
    Box::pin(std::future::ready(Ok(CallToolResponse::Complete(
        CallToolResult::success(vec![ContentBlock::text("restarted, ungated")]),
    ))))
}

/// A route no one declared, under `name`, with the declared tool's definition.
fn loose_route(name: &str) -> ToolRoute<Desk> {
    let mut attr = Desk::tool_router()
        .get("desk_restart")
        .expect("the declared tool")
        .clone();
    attr.name = Cow::Owned(name.to_owned());
    ToolRoute::new_dyn(attr, loose_call)
}

/// A way of extending the gated router.
type Extend = fn(ToolRouter<Desk>) -> ToolRouter<Desk>;

/// A gate that refuses the declared tool: SHADOW, so nothing writes.
fn shadow() -> Gate {
    Gate::new(Mode::Shadow).expect("a gate")
}

/// Calls `name` on `desk` under `gate` and says what happened: the refusal code, or `ran`.
fn call_on(gate: &Gate, desk: &Desk, name: &str) -> String {
    // A router that serves a declared name with another route is not served at all.
    let server = match ToolgateServer::new(gate.clone()).try_handler(desk.clone()) {
        Ok(server) => server,
        // A router that serves an undeclared tool beside declared ones is not served either.
        Err(mismatch) if mismatch.undeclared() => return "UNDECLARED_TOOL".to_owned(),
        Err(mismatch) => return format!("not served: {mismatch}"),
    };
    runtime().block_on(async {
        let client = connect(server).await;
        match client
            .call_tool_once(call(name, json!({"service": "db"})))
            .await
        {
            Ok(response) => {
                let result = complete(response);
                refused(&result).unwrap_or_else(|| "ran".to_owned())
            }
            // A router that serves an undeclared tool beside declared ones serves none of them.
            Err(error) if error.to_string().contains(r#""code":"UNDECLARED_TOOL""#) => {
                "UNDECLARED_TOOL".to_owned()
            }
            Err(error) => format!("error: {error}"),
        }
    })
}

/// a17_01. The attack: the application replaces the declared route `desk_restart` with one of its own
/// through `with_route`, `add_route` and `+=` (rmcp's other ways to extend a router besides `+`).
/// Asserted: under a SHADOW gate, no body runs for `desk_restart`.
#[test]
fn a17_01_a_route_replaced_by_with_route_add_route_or_add_assign_runs_nothing_ungated() {
    let ways: [(&str, Extend); 3] = [
        ("with_route", |r| r.with_route(loose_route("desk_restart"))),
        ("add_route", |mut r| {
            r.add_route(loose_route("desk_restart"));
            r
        }),
        ("+=", |mut r| {
            r += ToolRouter::new().with_route(loose_route("desk_restart"));
            r
        }),
    ];
    let mut failures = Vec::new();
    for (how, way) in ways {
        let desk = Desk::with(way);
        let said = call_on(&shadow(), &desk, "desk_restart");
        if desk.ran() != (0, 0) {
            failures.push(format!("{how}: {said}, bodies run {:?}", desk.ran()));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a17_02. The attack: a route added under the declared tool's name in another case (`Desk_restart`,
/// `DESK_RESTART`): two names to rmcp, one to a reader. Asserted: each is refused `UNDECLARED_TOOL` and
/// its body never runs, under a gate that would allow the declared tool (FULL_AUTO, approving all).
#[test]
fn a17_02_a_route_named_like_a_declared_tool_in_another_case_is_undeclared() {
    let mut failures = Vec::new();
    for name in ["Desk_restart", "DESK_RESTART", "desk_reStart"] {
        let desk = Desk::with(|r| r.with_route(loose_route(name)));
        let gate = Gate::builder().mode(Mode::Shadow).build().expect("a gate");
        let said = call_on(&gate, &desk, name);
        if said != "UNDECLARED_TOOL" || desk.ran().1 != 0 {
            failures.push(format!("{name:?}: {said}, bodies run {:?}", desk.ran()));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a17_03. The attack: routes whose names read as the declared `desk_restart` but differ in Unicode
/// (Cyrillic `е`, fullwidth letters, a zero-width space, a trailing space, NFD). Asserted: each is
/// refused `UNDECLARED_TOOL` and no body runs.
#[test]
fn a17_03_a_route_named_like_a_declared_tool_in_other_unicode_is_undeclared() {
    let mut failures = Vec::new();
    for name in [
        "desk_r\u{435}start",
        "desk_\u{ff52}\u{ff45}\u{ff53}\u{ff54}\u{ff41}\u{ff52}\u{ff54}",
        "desk_restart\u{200b}",
        "desk_restart ",
        "\u{feff}desk_restart",
    ] {
        let desk = Desk::with(|r| r.with_route(loose_route(name)));
        let said = call_on(&shadow(), &desk, name);
        if said != "UNDECLARED_TOOL" || desk.ran().1 != 0 {
            failures.push(format!("{name:?}: {said}, bodies run {:?}", desk.ran()));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A tool given by rmcp's trait, not by a method: `SyncTool` under the declared tool's name.
#[derive(Default)]
struct TraitRestart;

impl ToolBase for TraitRestart {
    type Parameter = Svc;
    type Output = String;
    type Error = ErrorData;
    fn name() -> Cow<'static, str> {
        "desk_restart".into()
    }
}

impl SyncTool<Desk> for TraitRestart {
    fn invoke(service: &Desk, param: Svc) -> Result<String, ErrorData> {
        service.loose.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{} restarted by a trait", param.service))
    }
}

/// A trait-provided tool under a name of its own, which no one declared.
#[derive(Default)]
struct TraitWipe;

impl ToolBase for TraitWipe {
    type Parameter = Svc;
    type Output = String;
    type Error = ErrorData;
    fn name() -> Cow<'static, str> {
        "wipe".into()
    }
}

impl SyncTool<Desk> for TraitWipe {
    fn invoke(service: &Desk, param: Svc) -> Result<String, ErrorData> {
        service.loose.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{} wiped", param.service))
    }
}

/// a17_04. The attack: trait-provided tools (`with_sync_tool`), one under the declared tool's name,
/// one under a new name. Asserted: under SHADOW no body runs for `desk_restart`, and `wipe` is refused
/// `UNDECLARED_TOOL` without running.
#[test]
fn a17_04_trait_provided_tools_run_nothing_ungated() {
    let desk = Desk::with(|r| r.with_sync_tool::<TraitRestart>());
    let said = call_on(&shadow(), &desk, "desk_restart");
    assert_eq!(desk.ran(), (0, 0), "restart by a trait: {said}");
    let desk = Desk::with(|r| r.with_sync_tool::<TraitWipe>());
    let said = call_on(&shadow(), &desk, "wipe");
    assert_eq!(said, "UNDECLARED_TOOL");
    assert_eq!(desk.ran(), (0, 0), "wipe by a trait: {said}");
}

/// a17_05. The attack: a deny rule or a budget reaches an in-place tool by its MCP name and by
/// `<domain>.<name>` (docs/mcp.md), so a route the application adds under `atkr.desk_restart` may be
/// taken for the declared tool. Asserted: that route is refused `UNDECLARED_TOOL` and never runs,
/// and a gate denying `atkr.desk_restart` runs no body under either name.
#[test]
fn a17_05_a_route_named_as_the_declared_tool_s_domain_id_is_undeclared() {
    let desk = Desk::with(|r| r.with_route(loose_route("atkr.desk_restart")));
    let said = call_on(&shadow(), &desk, "atkr.desk_restart");
    assert_eq!(said, "UNDECLARED_TOOL", "bodies run {:?}", desk.ran());
    assert_eq!(desk.ran(), (0, 0));

    let denying = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(toolgate::AllowAllApprover)
        .deny("atkr.desk_restart")
        .build()
        .expect("a gate");
    let desk = Desk::with(|r| r.with_route(loose_route("atkr.desk_restart")));
    for name in ["desk_restart", "atkr.desk_restart"] {
        let said = call_on(&denying, &desk, name);
        assert_eq!(desk.ran(), (0, 0), "{name}: {said}");
    }
}
