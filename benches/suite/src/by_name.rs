//! One tool called by name with the JSON arguments `{"a":2,"b":40}`, five ways, each ending in the result
//! serialized to a JSON string:
//!
//! - the serde floor: clone the arguments, `serde_json::from_value`, call, `to_string`;
//! - toolgate: `toolgate::registry().call(&gate, "add", args)`, with a gate that does not audit;
//! - toolgate with the hash-chained JSONL audit sink on (an `enter` and an `exit` record per call);
//! - rmcp's `ServerHandler::call_tool` with the router built once and kept in a field
//!   (`#[tool_handler(router = self.tool_router)]`): rmcp's best case;
//! - rmcp's bare `#[tool_handler]`, which builds its router again on every call.
//!
//! Every way starts from the same `serde_json::Map` and clones it per call, as a server that owns each
//! request's arguments would have them.

use std::io;
use std::path::{Path, PathBuf};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolRequestParams, CallToolResponse, JsonObject, RequestId};
use rmcp::service::{RequestContext, RunningService, serve_directly};
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::io::DuplexStream;
use tokio::runtime::{EnterGuard, Runtime};
use toolgate::audit::JsonlSink;
use toolgate::{Denied, Gate, Mode};

/// The tool, for toolgate.
#[toolgate::tool(risk = "READ_ONLY", callable)]
pub fn add(a: i64, b: i64) -> Result<i64, Denied> {
    Ok(a + b)
}

/// The arguments, for rmcp and for the serde floor.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct AddArgs {
    /// The first term.
    pub a: i64,
    /// The second term.
    pub b: i64,
}

/// rmcp's best case: the router is built once, when the server is, and kept in a field.
#[derive(Debug, Clone)]
pub struct StoredRouter {
    tool_router: ToolRouter<StoredRouter>,
}

#[tool_router]
impl StoredRouter {
    /// A server whose router is built now.
    pub fn new() -> StoredRouter {
        StoredRouter {
            tool_router: Self::tool_router(),
        }
    }

    /// Adds two numbers.
    #[tool]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }
}

impl Default for StoredRouter {
    fn default() -> StoredRouter {
        StoredRouter::new()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for StoredRouter {}

/// rmcp's bare `#[tool_handler]`: `Self::tool_router()` is called on every call.
#[derive(Debug, Clone, Default)]
pub struct RebuiltRouter;

#[tool_router]
impl RebuiltRouter {
    /// Adds two numbers.
    #[tool]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }
}

#[tool_handler]
impl ServerHandler for RebuiltRouter {}

/// Everything the five ways need, set up once.
pub struct CallByName {
    /// The arguments every way starts from: `{"a":2,"b":40}`.
    pub args: Map<String, Value>,
    gate: Gate,
    audited: Gate,
    audit_path: PathBuf,
    stored: StoredRouter,
    stored_context: RequestContext<RoleServer>,
    rebuilt: RebuiltRouter,
    rebuilt_context: RequestContext<RoleServer>,
    _services: Services,
    runtime: Runtime,
}

/// The rmcp services whose peers the request contexts name, and the other ends of their transports:
/// kept alive for as long as the contexts are used.
struct Services {
    _stored: (RunningService<RoleServer, StoredRouter>, DuplexStream),
    _rebuilt: (RunningService<RoleServer, RebuiltRouter>, DuplexStream),
}

impl CallByName {
    /// Sets up the gates, the audit log (a new file `call-by-name.jsonl` in `dir`) and the rmcp servers.
    ///
    /// rmcp's `RequestContext` comes from a real service: `serve_directly` (no handshake) over an
    /// in-process `tokio::io::duplex`, on a current-thread runtime that is never driven, so nothing runs
    /// in the background while calls are measured.
    ///
    /// # Errors
    ///
    /// When the runtime or the audit log cannot be made.
    ///
    /// # Panics
    ///
    /// If two linked tools share an id.
    pub fn new(dir: &Path) -> io::Result<CallByName> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let audit_path = dir.join("call-by-name.jsonl");
        match std::fs::remove_file(&audit_path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let sink = JsonlSink::open(&audit_path)?;
        let gate = Gate::new(Mode::PartialAuto).expect("distinct tool ids");
        let audited = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(sink)
            .build()
            .expect("distinct tool ids");

        let stored_server = StoredRouter::new();
        let (services, stored_context, rebuilt_context) = {
            let _entered = runtime.enter();
            let stored = serve(stored_server.clone());
            let rebuilt = serve(RebuiltRouter);
            let stored_context = context(&stored.0, 1);
            let rebuilt_context = context(&rebuilt.0, 2);
            (
                Services {
                    _stored: stored,
                    _rebuilt: rebuilt,
                },
                stored_context,
                rebuilt_context,
            )
        };
        let args = match serde_json::json!({"a": 2, "b": 40}) {
            Value::Object(map) => map,
            _ => unreachable!("an object literal"),
        };
        Ok(CallByName {
            args,
            gate,
            audited,
            audit_path,
            stored: stored_server,
            stored_context,
            rebuilt: RebuiltRouter,
            rebuilt_context,
            _services: services,
            runtime,
        })
    }

    /// Enters the runtime the rmcp services were started on, for code that expects one.
    pub fn enter(&self) -> EnterGuard<'_> {
        self.runtime.enter()
    }

    /// The audit log of [`CallByName::toolgate_audited`].
    pub fn audit_path(&self) -> &Path {
        &self.audit_path
    }

    /// The serde floor: clone, deserialize, call, serialize.
    #[inline(never)]
    pub fn floor(&self, args: &Map<String, Value>) -> String {
        let AddArgs { a, b } =
            serde_json::from_value(Value::Object(args.clone())).expect("valid arguments");
        let sum = add_plain(a, b);
        serde_json::to_string(&sum).expect("an integer serializes")
    }

    /// toolgate, through a gate that does not audit.
    #[inline(never)]
    pub fn toolgate(&self, args: &Map<String, Value>) -> String {
        call_toolgate(&self.gate, args)
    }

    /// toolgate, through a gate that writes every call to the JSONL audit log.
    #[inline(never)]
    pub fn toolgate_audited(&self, args: &Map<String, Value>) -> String {
        call_toolgate(&self.audited, args)
    }

    /// toolgate, through `gate` (one built by the caller, e.g. following a policy file).
    #[inline(never)]
    pub fn toolgate_through(&self, gate: &Gate, args: &Map<String, Value>) -> String {
        call_toolgate(gate, args)
    }

    /// rmcp, router kept in a field.
    #[inline(never)]
    pub fn rmcp_stored(&self, args: &Map<String, Value>) -> String {
        call_rmcp(&self.stored, &self.stored_context, args)
    }

    /// rmcp, router built on every call.
    #[inline(never)]
    pub fn rmcp_rebuilt(&self, args: &Map<String, Value>) -> String {
        call_rmcp(&self.rebuilt, &self.rebuilt_context, args)
    }
}

#[inline(never)]
fn add_plain(a: i64, b: i64) -> i64 {
    a + b
}

fn call_toolgate(gate: &Gate, args: &Map<String, Value>) -> String {
    let result = crate::ready(toolgate::registry().call(gate, "add", Value::Object(args.clone())));
    serde_json::to_string(&result.expect("the gate allows `add`")).expect("JSON serializes")
}

fn call_rmcp<S: ServerHandler>(
    server: &S,
    context: &RequestContext<RoleServer>,
    args: &JsonObject,
) -> String {
    let request = CallToolRequestParams::new("add").with_arguments(args.clone());
    let response = crate::ready(server.call_tool(request, context.clone()));
    match response.expect("rmcp calls `add`") {
        CallToolResponse::Complete(result) => {
            serde_json::to_string(&result).expect("a result serializes")
        }
        other => panic!("rmcp did not complete the call: {other:?}"),
    }
}

fn serve<S: ServerHandler>(server: S) -> (RunningService<RoleServer, S>, DuplexStream) {
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    (
        serve_directly::<RoleServer, _, _, _, _>(server, ours, None),
        theirs,
    )
}

fn context<S: ServerHandler>(
    service: &RunningService<RoleServer, S>,
    id: i64,
) -> RequestContext<RoleServer> {
    RequestContext::new(RequestId::Number(id), service.peer().clone())
}
