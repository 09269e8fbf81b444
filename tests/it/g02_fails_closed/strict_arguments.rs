//! Strict arguments at every depth: an unknown key anywhere in a call by name's arguments is
//! `INVALID_PARAMS` with its path, and the input schema closes every object it describes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::common::serial;
use toolgate::{Denied, Gate, Mode, registry, tool};

/// A page of results.
#[derive(Debug, toolgate::serde::Deserialize, toolgate::schemars::JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
pub struct Page {
    /// How many.
    pub size: u32,
    /// Where to start, if anywhere.
    pub cursor: Option<Cursor>,
}

/// A position in the results.
#[derive(Debug, toolgate::serde::Deserialize, toolgate::schemars::JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
pub struct Cursor {
    /// The last id seen.
    pub after: u64,
}

/// What to do with a match.
#[derive(Debug, toolgate::serde::Deserialize, toolgate::schemars::JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
pub enum Action {
    /// Tag it.
    Tag {
        /// The tag.
        name: String,
    },
    /// Leave it.
    Skip,
}

static RUNS: AtomicUsize = AtomicUsize::new(0);

/// Find records.
#[tool(risk = "READ_ONLY", domain = "strict", callable)]
fn find(
    page: Page,
    pages: Vec<Page>,
    labels: BTreeMap<String, Cursor>,
    actions: Vec<Action>,
    extra: Option<Page>,
    raw: Value,
) -> Result<u32, Denied> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    let after = page.cursor.map_or(0, |c| c.after);
    let tagged = actions
        .iter()
        .filter(|a| matches!(a, Action::Tag { name } if !name.is_empty()))
        .count();
    let _ = (pages, labels, extra, raw, after, tagged);
    Ok(page.size)
}

fn base() -> Value {
    json!({
        "page": {"size": 1, "cursor": {"after": 7}},
        "pages": [{"size": 2, "cursor": null}],
        "labels": {"any key": {"after": 1}},
        "actions": [{"Tag": {"name": "x"}}, "Skip"],
        "extra": {"size": 3, "cursor": null},
        "raw": {"anything": {"goes": true}}
    })
}

fn call(arguments: Value) -> Result<Value, toolgate::CallError> {
    let gate = Gate::new(Mode::Shadow).unwrap();
    registry()
        .call(&gate, "strict.find", arguments)
        .now()
        .unwrap()
}

#[test]
fn a_known_shape_passes_at_every_depth_maps_and_free_values_included() {
    let _serial = serial();
    assert_eq!(call(base()).unwrap(), json!(1));
}

#[test]
fn an_unknown_key_at_any_depth_is_refused_with_its_path() {
    let _serial = serial();
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &str); 6] = [
        (
            "page.apiKey",
            |v| v["page"]["apiKey"] = json!("x"),
            "apiKey",
        ),
        (
            "page.cursor.before",
            |v| v["page"]["cursor"]["before"] = json!(1),
            "before",
        ),
        ("pages[0].zzz", |v| v["pages"][0]["zzz"] = json!(1), "zzz"),
        // A map's key is the caller's data, which may hold a secret: the path says where, not which.
        (
            "labels.*.x",
            |v| v["labels"]["any key"]["x"] = json!(1),
            "x",
        ),
        (
            "actions[0].Tag.color",
            |v| v["actions"][0]["Tag"]["color"] = json!("red"),
            "color",
        ),
        (
            "extra.secret",
            |v| v["extra"]["secret"] = json!("sk_live"),
            "secret",
        ),
    ];
    for (path, edit, key) in cases {
        let before = RUNS.load(Ordering::SeqCst);
        let mut arguments = base();
        edit(&mut arguments);
        let error = call(arguments).unwrap_err();
        match &error {
            toolgate::CallError::InvalidParams { path: at, message } => {
                assert_eq!(at, path);
                assert_eq!(message, &format!("unknown field `{key}`"));
            }
            other => panic!("{path}: expected INVALID_PARAMS, got {other}"),
        }
        assert_eq!(
            RUNS.load(Ordering::SeqCst),
            before,
            "{path}: the body did not run"
        );
    }
}

#[test]
fn the_schema_closes_every_object_it_lists_the_properties_of() {
    let schema = registry()
        .get("strict.find")
        .unwrap()
        .input_schema()
        .unwrap();
    assert_eq!(schema["additionalProperties"], json!(false));
    for name in ["Page", "Cursor"] {
        assert_eq!(
            schema["$defs"][name]["additionalProperties"],
            json!(false),
            "{name}: {schema}"
        );
    }
    // A map keeps its value schema for any key; a free value stays free.
    let labels = &schema["properties"]["labels"];
    assert!(labels["additionalProperties"].is_object(), "{labels}");
    assert_eq!(schema["properties"]["raw"], json!(true));
}
