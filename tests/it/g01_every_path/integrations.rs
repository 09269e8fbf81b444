//! Guarantee 1 (Every path into a tool's body passes the gate), against tools handed to a rig
//! agent, tool definitions for model APIs, and the tracing sink's spans.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(feature = "rig")]

use opentelemetry_sdk::trace::SpanData;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use toolgate::audit::TracingSink;
use toolgate::provider::{self, Provider};
use toolgate::registry::Instances;
use toolgate::rig::RigTools;
use toolgate::{
    AllowAllApprover, Approval, ApprovalRequest, Denied, Gate, Mode, registry, toolset,
};

use crate::common::gates;
use crate::fixtures::integrations::*;

/// Tries: two tools whose ids differ only where `.` and `_` change places (`iatk.x_y.z` READ_ONLY,
/// `iatk.x.y_z` HIGH_WRITE), so that their function names could collide or `tool_id` map one to
/// the other; and every linked tool's function name. Guarantee: the `.`→`-` mapping is one to one,
/// `tool_id` reverses it, and the rig tool named for one id runs that tool and no other.
#[tokio::test]
async fn i02_function_names_are_one_to_one_and_map_back_to_the_tool_listed() {
    let mut names = BTreeMap::new();
    // A function name is a `callable` tool's: an rmcp tool gated in place is no function of a
    // provider, and its MCP name may hold `-`.
    let callable = toolgate::manifests().filter(|m| {
        toolgate::registry()
            .get(m.id)
            .is_some_and(|t| t.is_callable())
    });
    for manifest in callable {
        let name = provider::function_name(manifest.id);
        assert_eq!(provider::tool_id(&name), manifest.id);
        if let Some(other) = names.insert(name.clone(), manifest.id) {
            panic!("{other} and {} share the function name {name}", manifest.id);
        }
    }
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let every = toolgate::rig::tools(&shadow);
    let unique: BTreeSet<String> = every.iter().map(|t| t.name().to_string()).collect();
    assert_eq!(unique.len(), every.len(), "two rig tools share a name");

    let low = every
        .iter()
        .find(|t| t.name().as_str() == "iatk-x_y-z")
        .expect("iatk.x_y.z offered");
    assert_eq!(
        low.execute(json!({"id": 201})).await.unwrap().as_text(),
        Some("low")
    );
    let high = every
        .iter()
        .find(|t| t.name().as_str() == "iatk-x-y_z")
        .expect("iatk.x.y_z offered");
    let refused = high.execute(json!({"id": 202})).await.unwrap_err();
    assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"));
    assert_eq!(ran("x_y.z", 201), 1);
    assert_eq!(
        ran("x.y_z", 201) + ran("x.y_z", 202),
        0,
        "the HIGH_WRITE twin ran"
    );

    // Every definition, for every provider, names the tool whose description it carries.
    let full = full_allow();
    for provider in PROVIDERS {
        for definition in registry().definitions(&full, provider).tools {
            let name = name_of(provider, &definition);
            let id = provider::tool_id(&name);
            let tool = registry()
                .get(&id)
                .unwrap_or_else(|| panic!("{name} maps to no tool"));
            let description = match provider {
                Provider::OpenAi | Provider::OpenAiStrict => &definition["function"]["description"],
                _ => &definition["description"],
            };
            assert_eq!(
                description.as_str(),
                Some(tool.manifest().description),
                "{provider:?} {name}"
            );
        }
    }
}

/// Tries: the `callable` methods of a toolset, by name, without their instance: in `definitions`
/// (no instances), rig's `RigTools` (no instance), `registry().call`; then with the instance, a
/// refused method. Guarantee: a method's tool needs its instance (`NO_INSTANCE`; not listed without
/// it); with it, the gate decides first and a refused method is not listed and does not run.
#[tokio::test]
async fn i10_a_toolset_method_without_its_instance() {
    let full = full_allow();
    let shadow = Gate::new(Mode::Shadow).unwrap();
    for provider in PROVIDERS {
        let names = listed(&full, None, provider);
        assert!(
            !names.iter().any(|n| n.starts_with("iatks-")),
            "{provider:?} lists a method without its instance: {names:?}"
        );
        let instances = Instances::new().with(Safe { label: "a" });
        let with = listed(&shadow, Some(&instances), provider);
        assert!(with.contains("iatks-look"), "{provider:?}: {with:?}");
        assert!(
            !with.contains("iatks-open"),
            "{provider:?} lists a refused method"
        );
    }
    assert!(
        !toolgate::rig::tools(&full)
            .iter()
            .any(|t| t.name().as_str().starts_with("iatks-"))
    );
    assert!(RigTools::new(full.clone()).tool("iatks.open").is_none());
    let no_instance = registry()
        .call(&full, &provider::tool_id("iatks-open"), json!({"id": 1001}))
        .await;
    assert_eq!(no_instance.unwrap_err().code(), "NO_INSTANCE");

    let with_safe = RigTools::new(shadow.clone()).instance(Safe { label: "b" });
    let refused = refusal(run(&with_safe, "iatks.open", json!({"id": 1002})).await);
    assert_eq!(refused.code(), Some("MODE_NOT_ALLOWED"));
    assert!(with_safe.clone().allowed_now().tool("iatks.open").is_none());
    let looked = run(&with_safe, "iatks.look", json!({"id": 1003}))
        .await
        .unwrap();
    assert_eq!(looked.as_text(), Some("safe b"));
    assert_eq!(ran("open", 1001) + ran("open", 1002), 0, "a method ran");
}

/// Tries: definitions under a gate whose approver is async, for a sync HIGH_WRITE tool: that tool's
/// every call is refused (`APPROVAL_REQUIRED`, a sync tool cannot wait), yet it may be listed as
/// "allowed with an approval". Guarantee: definitions list the tools the gate would allow now.
#[test]
fn i11_definitions_under_an_async_approver_leave_out_what_can_never_run() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(CountingAsync::approving())
        .build()
        .unwrap();
    let names = listed(&gate, None, Provider::Anthropic);
    assert!(names.contains("iatk-wipe_async"), "{names:?}");
    assert!(
        !names.contains("iatk-wipe"),
        "a sync HIGH_WRITE tool is listed under an async approver, which refuses its every call"
    );
    let allowed = rig_names(&iatk(&gate).allowed_now());
    assert!(!allowed.contains("iatk-wipe"), "rig: {allowed:?}");
}

/// Tries: every refusal code a rig call can meet, with a tracing sink: `error.type` missing on one
/// (a refusal at the door: `INVALID_PARAMS`; the gate's: `MODE_NOT_ALLOWED`, `DENY_LISTED`,
/// `APPROVAL_REQUIRED` for a sync tool under an async approver, `APPROVAL_REJECTED`), or the span
/// count not one per call. Guarantee: one `execute_tool` span per call, `error.type` = the refusal's
/// code.
#[test]
fn i18_every_refusal_through_rig_has_its_error_type() {
    let sink = TracingSink::new();
    let shadow = gates::audited(Mode::Shadow, sink.clone());
    let denying = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .deny("iatk.x.y_z")
        .audit(sink.clone())
        .build()
        .unwrap();
    let asyncly = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(CountingAsync::approving())
        .audit(sink.clone())
        .build()
        .unwrap();
    let rejecting = gates::approved_audited(
        Mode::FullAuto,
        |_: &ApprovalRequest<'_>| Approval::Reject("no".into()),
        sink,
    );
    let cases: [(&Gate, &str, Value, &str); 5] = [
        (&shadow, "iatk.peek", json!({"id": "x"}), "INVALID_PARAMS"),
        (
            &shadow,
            "iatk.edit",
            json!({"id": 1801, "text": "x"}),
            "MODE_NOT_ALLOWED",
        ),
        (&denying, "iatk.x.y_z", json!({"id": 1802}), "DENY_LISTED"),
        (
            &asyncly,
            "iatk.wipe",
            json!({"id": 1803}),
            "APPROVAL_REQUIRED",
        ),
        (
            &rejecting,
            "iatk.wipe",
            json!({"id": 1804}),
            "APPROVAL_REJECTED",
        ),
    ];
    let spans = exported(|| {
        runtime().block_on(async {
            for (gate, id, arguments, code) in &cases {
                let refused = refusal(run(&iatk(gate), id, arguments.clone()).await);
                assert_eq!(refused.code(), Some(*code), "{id}");
            }
        });
    });
    for (_, id, _, code) in &cases {
        let found: Vec<&SpanData> = tool_spans(&spans, id)
            .into_iter()
            .filter(|s| attributes(s).get("error.type").map(String::as_str) == Some(*code))
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{id}: {code} spans: {:#?}",
            tool_spans(&spans, id)
                .iter()
                .map(|s| attributes(s))
                .collect::<Vec<_>>()
        );
    }
    let all: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name.starts_with("execute_tool "))
        .collect();
    assert_eq!(all.len(), cases.len(), "one span per call");
    assert_eq!(
        ran("wipe", 1803) + ran("wipe", 1804) + ran("x.y_z", 1802),
        0
    );
}

/// Tries: two `#[toolset]` types of one name, declared in two blocks of one function (so
/// `std::any::type_name` gives both the same name), one instance given to rig and to
/// `definitions_with`: the other type's HIGH_WRITE method offered on it, or run on an instance of
/// the wrong type. Guarantee: a method runs on the instance of its own type; without it,
/// `NO_INSTANCE` and not listed.
#[tokio::test]
async fn i23_two_toolset_types_of_one_name_are_not_confused() {
    let first = {
        pub struct Twin(u64);
        #[toolset(domain = "iatkt")]
        impl Twin {
            /// Read the first twin.
            #[tool(risk = "READ_ONLY", callable)]
            pub fn read_first(&self) -> Result<u64, Denied> {
                note("read_first", self.0);
                Ok(self.0)
            }
        }
        Twin(2301)
    };
    {
        pub struct Twin(String);
        #[toolset(domain = "iatkt")]
        impl Twin {
            /// Write with the second twin.
            #[tool(risk = "READ_ONLY", callable)]
            pub fn write_second(&self) -> Result<String, Denied> {
                note("write_second", self.0.len() as u64);
                Ok(self.0.clone())
            }
        }
        let _ = Twin(String::new());
    }
    let gate = full_allow();
    let tools = RigTools::new(gate.clone()).instance(first);
    let names = rig_names(&tools);
    assert!(names.contains("iatkt-read_first"), "{names:?}");
    if let Some(second) = tools.tool("iatkt.write_second") {
        let result = second.execute(json!({})).await;
        assert!(
            result.is_err(),
            "the second twin's method ran on the first twin's instance"
        );
    }
    assert!(
        !names.contains("iatkt-write_second"),
        "offered without its instance: {names:?}"
    );
    let read = run(&tools, "iatkt.read_first", json!({})).await.unwrap();
    assert_eq!(read.as_json(), Some(&json!(2301)));
    assert_eq!(
        RAN.lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| *t == "write_second")
            .count(),
        0
    );
}
