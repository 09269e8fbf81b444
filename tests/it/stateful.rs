//! Tools with state: `callable` methods of a `#[toolset]` impl, called by name (and over MCP) on the
//! instance the application gives, through the same gate as a direct call.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolgate::registry::Instances;
use toolgate::{Approval, ApprovalRequest, Denied, Gate, Mode, registry, toolset};

use crate::common::gates;

/// A warehouse: what a real toolset holds (a pool, a client), here a counter and a name.
pub struct Stock {
    site: &'static str,
    items: AtomicUsize,
    /// How many bodies ran, of any tool of this instance.
    ran: AtomicUsize,
}

impl Stock {
    fn new(site: &'static str, items: usize) -> Stock {
        Stock {
            site,
            items: AtomicUsize::new(items),
            ran: AtomicUsize::new(0),
        }
    }

    fn ran(&self) -> usize {
        self.ran.load(Ordering::SeqCst)
    }
}

#[toolset(domain = "stock")]
impl Stock {
    /// How many items are in stock.
    #[tool(risk = "READ_ONLY", callable)]
    pub fn count(&self) -> Result<String, Denied> {
        self.ran.fetch_add(1, Ordering::SeqCst);
        Ok(format!(
            "{}: {}",
            self.site,
            self.items.load(Ordering::SeqCst)
        ))
    }

    /// Take items out of stock.
    #[tool(risk = "LOW_WRITE", callable)]
    pub async fn take(&self, items: usize) -> Result<usize, Denied> {
        tokio::task::yield_now().await;
        self.ran.fetch_add(1, Ordering::SeqCst);
        Ok(self.items.fetch_sub(items, Ordering::SeqCst) - items)
    }

    /// Empty the stock.
    #[tool(risk = "HIGH_WRITE", callable)]
    pub fn clear(&self) -> Result<usize, Denied> {
        self.ran.fetch_add(1, Ordering::SeqCst);
        Ok(self.items.swap(0, Ordering::SeqCst))
    }

    /// How many bodies ran: a tool, but not callable.
    #[tool(risk = "READ_ONLY")]
    pub fn runs(&self) -> Result<usize, Denied> {
        Ok(self.ran())
    }

    /// The sites there are: an associated function, with no instance.
    #[tool(risk = "READ_ONLY", callable)]
    pub fn sites() -> Result<Vec<&'static str>, Denied> {
        Ok(vec!["north", "south"])
    }
}

fn gate(mode: Mode) -> Gate {
    Gate::new(mode).unwrap()
}

#[test]
fn a_method_runs_on_the_instance_the_call_is_given() {
    let north = Arc::new(Stock::new("north", 7));
    let south = Arc::new(Stock::new("south", 2));
    let on_north = Instances::new().with_shared(Arc::clone(&north));
    let on_south = Instances::new().with_shared(Arc::clone(&south));
    let gate = gate(Mode::Shadow);
    let count = |instances: &Instances| {
        registry()
            .call_with(&gate, instances, "stock.count", json!({}))
            .now()
            .unwrap()
            .unwrap()
    };
    assert_eq!(count(&on_north), "north: 7");
    assert_eq!(count(&on_south), "south: 2");
    assert_eq!((north.ran(), south.ran()), (1, 1));
}

#[test]
fn a_method_called_without_its_instance_is_no_instance_and_runs_nothing() {
    let gate = gate(Mode::FullAuto);
    for instances in [
        Instances::new(),
        Instances::new().with(String::from("other")),
    ] {
        let error = registry()
            .call_with(&gate, &instances, "stock.count", json!({}))
            .now()
            .unwrap()
            .unwrap_err();
        assert_eq!(error.code(), "NO_INSTANCE");
        assert_eq!(
            error.to_string(),
            format!(
                "tool `stock.count` is a method of `{}`, and this call has no instance of it to run \
                 on: give one to the registry or the server (`Instances::with`)",
                std::any::type_name::<Stock>()
            )
        );
    }
    // `Registry::call` has no instances at all.
    let error = registry()
        .call(&gate, "stock.count", json!({}))
        .now()
        .unwrap()
        .unwrap_err();
    assert_eq!(error.code(), "NO_INSTANCE");
    let tool = registry().get("stock.count").unwrap();
    assert_eq!(tool.instance_type(), Some(std::any::type_name::<Stock>()));
    assert!(!tool.is_served_by(&Instances::new()));
    assert!(tool.is_served_by(&Instances::new().with(Stock::new("x", 0))));
}

#[test]
fn the_gate_refuses_before_the_instance_is_looked_up() {
    let stock = Arc::new(Stock::new("north", 5));
    let instances = Instances::new().with_shared(Arc::clone(&stock));
    for given in [&Instances::new(), &instances] {
        let refused = complete(registry().call_with(
            &gate(Mode::Shadow),
            given,
            "stock.take",
            json!({"items": 1}),
        ))
        .unwrap_err();
        assert_eq!(refused.code(), "MODE_NOT_ALLOWED");
        // Whatever the arguments: a refused tool says nothing of its parameters.
        let refused = complete(registry().call_with(
            &gate(Mode::Shadow),
            given,
            "stock.take",
            json!({"nothing": "here"}),
        ))
        .unwrap_err();
        assert_eq!(refused.code(), "MODE_NOT_ALLOWED");
    }
    assert_eq!(stock.ran(), 0);
    assert_eq!(stock.items.load(Ordering::SeqCst), 5);
}

/// Polls a call by name to completion on a current-thread runtime.
fn complete(
    call: toolgate::registry::CallFuture,
) -> Result<serde_json::Value, toolgate::CallError> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(call)
}

#[test]
fn an_async_method_runs_on_the_shared_instance_that_the_application_sees() {
    let stock = Arc::new(Stock::new("north", 10));
    let instances = Instances::new().with_shared(Arc::clone(&stock));
    let gate = gate(Mode::PartialAuto);
    let left = complete(registry().call_with(&gate, &instances, "stock.take", json!({"items": 3})));
    assert_eq!(left.unwrap(), json!(7));
    assert_eq!(stock.items.load(Ordering::SeqCst), 7);
    // Strict arguments, as for a free function.
    let invalid = complete(registry().call_with(
        &gate,
        &instances,
        "stock.take",
        json!({"items": 1, "force": true}),
    ))
    .unwrap_err();
    assert_eq!(invalid.code(), "INVALID_PARAMS");
    assert_eq!(stock.ran(), 1);
}

#[test]
fn a_high_write_method_asks_the_approver_with_its_instance_in_place() {
    let stock = Arc::new(Stock::new("north", 4));
    let instances = Instances::new().with_shared(Arc::clone(&stock));
    let asked = Arc::new(AtomicUsize::new(0));
    let build = |approve: bool| {
        let asked = Arc::clone(&asked);
        gates::approved(Mode::FullAuto, move |request: &ApprovalRequest<'_>| {
            assert_eq!(request.tool.id, "stock.clear");
            asked.fetch_add(1, Ordering::SeqCst);
            if approve {
                Approval::Approve
            } else {
                Approval::Reject("not today".into())
            }
        })
    };
    let clear = |gate: &Gate| {
        registry()
            .call_with(gate, &instances, "stock.clear", json!({}))
            .now()
            .unwrap()
    };
    let rejected = clear(&build(false)).unwrap_err();
    assert_eq!(rejected.code(), "APPROVAL_REJECTED");
    assert_eq!((stock.ran(), stock.items.load(Ordering::SeqCst)), (0, 4));
    assert_eq!(clear(&build(true)).unwrap(), json!(4));
    assert_eq!((stock.ran(), stock.items.load(Ordering::SeqCst)), (1, 0));
    assert_eq!(asked.load(Ordering::SeqCst), 2, "asked once per call");
    // No approver: refused in the table, before the instance or the arguments.
    let refused = registry()
        .call(&gate(Mode::FullAuto), "stock.clear", json!({}))
        .now()
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.code(), "APPROVAL_REQUIRED");
}

#[test]
fn an_associated_function_without_self_needs_no_instance() {
    let sites = registry()
        .call(&gate(Mode::Shadow), "stock.sites", json!({}))
        .now()
        .unwrap();
    assert_eq!(sites.unwrap(), json!(["north", "south"]));
    assert_eq!(registry().get("stock.sites").unwrap().instance_type(), None);
}

#[test]
fn the_direct_call_of_a_stateful_tool_is_gated_as_before() {
    let stock = Stock::new("north", 1);
    assert_eq!(stock.count().unwrap_err().code().as_str(), "NO_GATE");
    assert_eq!(
        gate(Mode::Shadow).run(|| stock.count()).unwrap(),
        "north: 1"
    );
    assert_eq!(
        gate(Mode::PartialAuto)
            .run(|| stock.clear())
            .unwrap_err()
            .code()
            .as_str(),
        "MODE_NOT_ALLOWED"
    );
    assert_eq!(stock.ran(), 1);
    assert_eq!(gate(Mode::Shadow).run(|| stock.runs()).unwrap(), 1);
}

#[test]
fn every_call_by_name_stopped_at_the_door_leaves_a_record_without_the_callers_raw_text() {
    use toolgate::audit::{Decision, MemorySink, Stage};

    let sink = MemorySink::new();
    let gate = gates::audited(Mode::PartialAuto, sink.clone());
    let stock = Instances::new().with(Stock::new("north", 3));
    let call = |instances: &Instances, id: &str, arguments| {
        complete(registry().call_with(&gate, instances, id, arguments)).unwrap_err()
    };
    let secret_id = "stock.count sk_live_0000";
    assert_eq!(call(&stock, secret_id, json!({})).code(), "UNKNOWN_TOOL");
    assert_eq!(call(&stock, "stock.runs", json!({})).code(), "NOT_CALLABLE");
    assert_eq!(
        call(&Instances::new(), "stock.count", json!({})).code(),
        "NO_INSTANCE"
    );
    assert_eq!(
        call(&stock, "stock.take", json!({"items": "sk_live_1111"})).code(),
        "INVALID_PARAMS"
    );
    let records = sink.records();
    let seen: Vec<(&str, Option<&str>)> = records
        .iter()
        .map(|r| (r.tool.as_ref(), r.code.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("(unknown)", Some("UNKNOWN_TOOL")),
            ("stock.runs", Some("NOT_CALLABLE")),
            ("stock.count", Some("NO_INSTANCE")),
            ("stock.take", Some("INVALID_PARAMS")),
        ]
    );
    for record in &records {
        assert_eq!(
            (record.stage, record.decision),
            (Stage::Refused, Some(Decision::Refused))
        );
    }
    let digest = crate::fixtures::regressions::sha256_hex(secret_id.as_bytes());
    assert_eq!(
        records[0].message.as_deref(),
        Some(format!("no tool has this id (SHA-256 of the id: {digest})").as_str())
    );
    assert_eq!(
        records[3].message.as_deref(),
        Some("invalid arguments at `items`")
    );
    let text = format!("{records:?}");
    assert!(!text.contains("sk_live"), "{text}");
    // Each record has its own call number, as every decision does.
    let calls: std::collections::BTreeSet<u64> = records.iter().map(|r| r.call).collect();
    assert_eq!(calls.len(), records.len());
}

#[cfg(feature = "mcp")]
#[test]
fn an_mcp_server_serves_the_methods_of_the_instances_it_holds() {
    use toolgate::mcp::ToolgateServer;

    let ours = |m: &toolgate::ToolManifest| m.domain == Some("stock");
    let names = |server: &ToolgateServer| -> Vec<String> {
        server.tools().iter().map(|t| t.name.to_string()).collect()
    };
    let without = ToolgateServer::new(gate(Mode::PartialAuto)).only(ours);
    assert_eq!(names(&without), ["stock.sites"]);
    assert!(!without.serves("stock.count"));

    let stock = Arc::new(Stock::new("north", 3));
    let with = ToolgateServer::new(gate(Mode::PartialAuto))
        .only(ours)
        .instances(Instances::new().with_shared(Arc::clone(&stock)));
    assert_eq!(names(&with), ["stock.count", "stock.sites", "stock.take"]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let result = runtime
        .block_on(with.call("stock.take", json!({"items": 2}).as_object().cloned()))
        .unwrap();
    assert_eq!(result.is_error, Some(false));
    assert_eq!(stock.items.load(Ordering::SeqCst), 1);
    // Without the instance, the method is no tool of that server: a protocol error, as for any name.
    let unknown = runtime
        .block_on(without.call("stock.count", None))
        .unwrap_err();
    assert_eq!(unknown.data, Some(json!({"code": "UNKNOWN_TOOL"})));
}

#[cfg(feature = "mcp")]
#[test]
fn an_mcp_call_of_a_name_the_server_does_not_serve_leaves_a_record() {
    use toolgate::audit::MemorySink;
    use toolgate::mcp::ToolgateServer;

    let sink = MemorySink::new();
    let gate = gates::audited(Mode::PartialAuto, sink.clone());
    // `stock.count` is a tool, but this server holds no `Stock`: to the agent it is no tool.
    let server = ToolgateServer::new(gate).only(|m| m.domain == Some("stock"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for name in ["stock.count", "ghost sk_live_2222"] {
        assert!(runtime.block_on(server.call(name, None)).is_err());
    }
    let records = sink.records();
    assert_eq!(records.len(), 2);
    assert!(
        records
            .iter()
            .all(|r| r.tool == "(unknown)" && r.code.as_deref() == Some("UNKNOWN_TOOL"))
    );
    assert!(!format!("{records:?}").contains("sk_live"));
}
