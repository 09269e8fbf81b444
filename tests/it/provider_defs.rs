//! Tool definitions for model APIs (`toolgate::provider`): which tools are listed under a gate, and
//! every definition checked against the provider's documented constraints, written down below as
//! fixtures with the documentation they come from.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use toolgate::provider::{self, Definitions, Provider};
use toolgate::schemars::JsonSchema;
use toolgate::serde::Deserialize;
use toolgate::{AllowAllApprover, Denied, Gate, Mode, registry, tool};

use crate::common::gates;
use crate::fixtures::support::counted_tools;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "toolgate::serde", rename_all = "snake_case")]
#[schemars(crate = "toolgate::schemars")]
enum Order {
    Newest,
    Oldest,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
struct Filter {
    /// The most results to return.
    limit: u32,
    tags: Vec<String>,
    since: Option<String>,
    order: Order,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "toolgate::serde")]
#[schemars(crate = "toolgate::schemars")]
struct Node {
    name: String,
    children: Vec<Node>,
}

static LOOKUPS: AtomicUsize = AtomicUsize::new(0);
static PURGES: AtomicUsize = AtomicUsize::new(0);

/// Look a record up.
#[tool(risk = "READ_ONLY", domain = "pdefs", callable)]
fn lookup(id: u64, verbose: Option<bool>) -> Result<String, Denied> {
    LOOKUPS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("record {id}, verbose {verbose:?}"))
}

/// Search the records.
#[tool(risk = "READ_ONLY", domain = "pdefs", callable)]
fn search(filter: Filter) -> Result<usize, Denied> {
    let newest = matches!(filter.order, Order::Newest);
    Ok(filter.limit as usize
        + filter.tags.len()
        + usize::from(filter.since.is_some()) * usize::from(newest))
}

/// Answer pong.
#[tool(risk = "READ_ONLY", domain = "pdefs", callable)]
fn ping() -> Result<String, Denied> {
    Ok("pong".to_owned())
}

/// Walk a tree.
#[tool(risk = "READ_ONLY", domain = "pdefs", callable)]
fn tree(node: Node) -> Result<String, Denied> {
    Ok(format!("{} ({} children)", node.name, node.children.len()))
}

/// Label a record.
#[tool(risk = "LOW_WRITE", domain = "pdefs", callable)]
fn label(labels: HashMap<String, String>) -> Result<usize, Denied> {
    Ok(labels.len())
}

counted_tools! {
    /// Purge every record.
    #[tool(risk = "HIGH_WRITE", domain = "pdefs", modes = [FULL_AUTO], callable)]
    fn purge() -> PURGES += 1;
}

/// Not callable: never listed.
#[tool(risk = "READ_ONLY", domain = "pdefs")]
fn hidden() -> Result<(), Denied> {
    Ok(())
}

// ---------------------------------------------------------------------------------------------------
// The providers' documented constraints.

/// OpenAI, Chat Completions `tools`: https://platform.openai.com/docs/api-reference/chat/create
/// ("function.name: Must be a-z, A-Z, 0-9, or contain underscores and dashes, with a maximum length
/// of 64"), and https://platform.openai.com/docs/guides/function-calling (a tool is
/// `{"type": "function", "function": {"name", "description", "parameters", "strict"}}`).
const OPENAI_NAME: fn(&str) -> bool = |name| {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
};

/// OpenAI Structured Outputs, "Supported schemas":
/// https://platform.openai.com/docs/guides/structured-outputs#supported-schemas
/// - types: string, number, boolean, integer, object, array, enum, anyOf (null in a type list or an
///   anyOf branch, for an optional field);
/// - string keywords: `pattern`, `format` (date-time, time, date, duration, email, hostname, ipv4,
///   ipv6, uuid); number keywords: `multipleOf`, `maximum`, `exclusiveMaximum`, `minimum`,
///   `exclusiveMinimum`; array keywords: `minItems`, `maxItems`;
/// - "All fields must be required" (optional ones as a union with null);
/// - "additionalProperties: false must always be set in objects";
/// - "Root objects must not be anyOf"; definitions (`$defs`) and `$ref`, recursion included;
/// - at most 5000 object properties in all, at most 10 levels of nesting.
///
/// A `$ref` stands alone: the API refuses other keywords beside it.
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "description",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "anyOf",
    "$ref",
    "$defs",
    "pattern",
    "format",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "minItems",
    "maxItems",
];
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];
const STRICT_TYPES: &[&str] = &[
    "string", "number", "boolean", "integer", "object", "array", "null",
];

/// Anthropic Messages `tools`: https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use
/// ("name: The name of the tool. Must match the regex `^[a-zA-Z0-9_-]{1,64}$`"; "input_schema: A JSON
/// Schema object defining the expected parameters"), https://docs.anthropic.com/en/api/messages
/// (`input_schema.type` is `"object"`).
const ANTHROPIC_NAME: fn(&str) -> bool = OPENAI_NAME;

/// Gemini `FunctionDeclaration` and `Schema`: https://ai.google.dev/api/caching#FunctionDeclaration,
/// https://ai.google.dev/api/caching#Schema and
/// https://cloud.google.com/vertex-ai/docs/reference/rest/v1beta1/FunctionDeclaration
/// - name: "Must start with a letter or an underscore. Must be a-z, A-Z, 0-9, or contain underscores,
///   dots and dashes [colons in the Gemini API], with a maximum length of 64";
/// - parameter names: "must start with a letter or an underscore and must only contain chars a-z,
///   A-Z, 0-9, or underscores with a maximum length of 64";
/// - "For function with no parameters, this can be left unset"; an `OBJECT` needs properties;
/// - `Schema`'s fields: type, format, title, description, nullable, enum, maxItems, minItems,
///   properties, required, minProperties, maxProperties, minLength, maxLength, pattern, example,
///   anyOf, propertyOrdering, default, items, minimum, maximum (no `$ref`, `$defs`,
///   `additionalProperties`, `oneOf`, `const`, type lists);
/// - `type`: TYPE_UNSPECIFIED, STRING, NUMBER, INTEGER, BOOLEAN, ARRAY, OBJECT, NULL;
/// - `format`: "NUMBER type: float, double; INTEGER type: int32, int64; STRING type: enum,
///   date-time"; `enum`: "Possible values of the element of Type.STRING with enum format".
const GEMINI_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];
const GEMINI_TYPES: &[&str] = &["STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"];
const GEMINI_FORMATS: &[(&str, &str)] = &[
    ("NUMBER", "float"),
    ("NUMBER", "double"),
    ("INTEGER", "int32"),
    ("INTEGER", "int64"),
    ("STRING", "enum"),
    ("STRING", "date-time"),
];

fn gemini_function_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
}

fn gemini_parameter_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// Every violation of OpenAI's function shape (and of strict mode's rules, when `strict`).
fn openai_violations(definition: &Value, strict: bool) -> Vec<String> {
    let mut problems = Vec::new();
    if definition["type"] != "function" {
        problems.push("type is not `function`".to_owned());
    }
    let function = &definition["function"];
    let name = function["name"].as_str().unwrap_or("");
    if !OPENAI_NAME(name) {
        problems.push(format!("name `{name}`"));
    }
    if !function["description"].is_string() {
        problems.push("no description".to_owned());
    }
    let parameters = &function["parameters"];
    if parameters["type"] != "object" {
        problems.push("parameters are not an object".to_owned());
    }
    if strict {
        if function["strict"] != true {
            problems.push("strict is not true".to_owned());
        }
        if parameters.get("anyOf").is_some() {
            problems.push("the root is anyOf".to_owned());
        }
        let mut count = 0;
        strict_walk(parameters, "", 0, &mut count, &mut problems);
        if count > 5000 {
            problems.push(format!("{count} properties"));
        }
    }
    problems
}

fn strict_walk(
    schema: &Value,
    at: &str,
    depth: usize,
    count: &mut usize,
    problems: &mut Vec<String>,
) {
    let Some(node) = schema.as_object() else {
        problems.push(format!("{at}: a schema that is not an object"));
        return;
    };
    if node.contains_key("$ref") && node.len() > 1 {
        problems.push(format!("{at}: `$ref` beside {:?}", keys(schema)));
    }
    for key in node.keys() {
        if !STRICT_KEYWORDS.contains(&key.as_str()) {
            problems.push(format!("{at}: keyword `{key}`"));
        }
    }
    if let Some(format) = node.get("format").and_then(Value::as_str)
        && !STRICT_FORMATS.contains(&format)
    {
        problems.push(format!("{at}: format `{format}`"));
    }
    let types: Vec<&str> = match node.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    for t in &types {
        if !STRICT_TYPES.contains(t) {
            problems.push(format!("{at}: type `{t}`"));
        }
    }
    if types.contains(&"object") {
        if depth > 10 {
            problems.push(format!("{at}: nested {depth} deep"));
        }
        if node.get("additionalProperties") != Some(&Value::Bool(false)) {
            problems.push(format!("{at}: additionalProperties is not false"));
        }
        let properties = node.get("properties").cloned().unwrap_or(json!({}));
        let declared: BTreeSet<&str> = keys(&properties);
        let required: BTreeSet<&str> = node
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if declared != required {
            problems.push(format!(
                "{at}: required {required:?} is not every property {declared:?}"
            ));
        }
        *count += declared.len();
        for (name, property) in properties.as_object().into_iter().flatten() {
            strict_walk(
                property,
                &format!("{at}.{name}"),
                depth + 1,
                count,
                problems,
            );
        }
    }
    if let Some(items) = node.get("items") {
        strict_walk(items, &format!("{at}[]"), depth, count, problems);
    }
    for branch in node
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        strict_walk(branch, &format!("{at}|"), depth, count, problems);
    }
    for (name, def) in node
        .get("$defs")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        strict_walk(def, &format!("$defs.{name}"), 0, count, problems);
    }
}

fn anthropic_violations(definition: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if keys(definition) != BTreeSet::from(["name", "description", "input_schema"]) {
        problems.push(format!("keys {:?}", keys(definition)));
    }
    let name = definition["name"].as_str().unwrap_or("");
    if !ANTHROPIC_NAME(name) {
        problems.push(format!("name `{name}`"));
    }
    if definition["input_schema"]["type"] != "object" {
        problems.push("input_schema is not an object schema".to_owned());
    }
    problems
}

fn gemini_violations(definition: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for key in keys(definition) {
        if !["name", "description", "parameters"].contains(&key) {
            problems.push(format!("declaration key `{key}`"));
        }
    }
    let name = definition["name"].as_str().unwrap_or("");
    if !gemini_function_name(name) {
        problems.push(format!("name `{name}`"));
    }
    if let Some(parameters) = definition.get("parameters") {
        if parameters["type"] != "OBJECT" {
            problems.push("parameters are not an OBJECT".to_owned());
        }
        for name in keys(&parameters["properties"]) {
            if !gemini_parameter_name(name) {
                problems.push(format!("parameter name `{name}`"));
            }
        }
        gemini_walk(parameters, "", &mut problems);
    }
    problems
}

fn gemini_walk(schema: &Value, at: &str, problems: &mut Vec<String>) {
    let Some(node) = schema.as_object() else {
        problems.push(format!("{at}: a schema that is not an object"));
        return;
    };
    for key in node.keys() {
        if !GEMINI_KEYWORDS.contains(&key.as_str()) {
            problems.push(format!("{at}: keyword `{key}`"));
        }
    }
    let kind = node.get("type").and_then(Value::as_str);
    match kind {
        Some(kind) if GEMINI_TYPES.contains(&kind) => {}
        None if node.contains_key("anyOf") => {}
        other => problems.push(format!("{at}: type {other:?}")),
    }
    if let Some(format) = node.get("format").and_then(Value::as_str)
        && !GEMINI_FORMATS.contains(&(kind.unwrap_or(""), format))
    {
        problems.push(format!("{at}: format `{format}` on {kind:?}"));
    }
    if let Some(values) = node.get("enum")
        && (kind != Some("STRING")
            || !values
                .as_array()
                .is_some_and(|v| v.iter().all(Value::is_string)))
    {
        problems.push(format!("{at}: enum {values} on {kind:?}"));
    }

    if kind == Some("OBJECT") {
        let properties = node.get("properties").map(keys).unwrap_or_default();
        if properties.is_empty() {
            problems.push(format!("{at}: an OBJECT without properties"));
        }
        for required in node
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !required.as_str().is_some_and(|r| properties.contains(r)) {
                problems.push(format!("{at}: required {required} is no property"));
            }
        }
    }
    if let Some(nullable) = node.get("nullable")
        && !nullable.is_boolean()
    {
        problems.push(format!("{at}: nullable {nullable}"));
    }
    for (name, property) in node
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        gemini_walk(property, &format!("{at}.{name}"), problems);
    }
    if let Some(items) = node.get("items") {
        gemini_walk(items, &format!("{at}[]"), problems);
    }
    for branch in node
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        gemini_walk(branch, &format!("{at}|"), problems);
    }
}

fn violations(provider: Provider, definition: &Value) -> Vec<String> {
    match provider {
        Provider::OpenAi => openai_violations(definition, false),
        Provider::OpenAiStrict => openai_violations(definition, true),
        Provider::Anthropic => anthropic_violations(definition),
        Provider::Gemini => gemini_violations(definition),
        other => panic!("no fixture for {other:?}"),
    }
}

const PROVIDERS: [Provider; 4] = [
    Provider::OpenAi,
    Provider::OpenAiStrict,
    Provider::Anthropic,
    Provider::Gemini,
];

fn name_of(provider: Provider, definition: &Value) -> String {
    let name = match provider {
        Provider::OpenAi | Provider::OpenAiStrict => &definition["function"]["name"],
        _ => &definition["name"],
    };
    name.as_str().expect("a name").to_owned()
}

/// The ids of the `pdefs` tools listed, and of those left out.
fn listed(definitions: &Definitions, provider: Provider) -> (Vec<String>, Vec<&'static str>) {
    let tools = definitions
        .tools
        .iter()
        .map(|d| provider::tool_id(&name_of(provider, d)).into_owned())
        .filter(|id| id.starts_with("pdefs."))
        .collect();
    let left_out = definitions
        .left_out
        .iter()
        .map(|l| l.id)
        .filter(|id| id.starts_with("pdefs."))
        .collect();
    (tools, left_out)
}

fn definition_of(provider: Provider, gate: &Gate, id: &str) -> Value {
    registry()
        .definitions(gate, provider)
        .tools
        .into_iter()
        .find(|d| name_of(provider, d) == provider::function_name(id))
        .unwrap_or_else(|| panic!("{id} is not listed for {provider:?}"))
}

// ---------------------------------------------------------------------------------------------------

#[test]
fn names_are_ids_with_dashes_and_back() {
    assert_eq!(provider::function_name("pdefs.lookup"), "pdefs-lookup");
    assert_eq!(provider::tool_id("pdefs-lookup"), "pdefs.lookup");
    assert_eq!(provider::tool_id("ping"), "ping");
    // A function name is a `callable` tool's: an rmcp tool gated in place is no function of a
    // provider, and its MCP name may hold `-`.
    let callable = toolgate::manifests().filter(|m| {
        toolgate::registry()
            .get(m.id)
            .is_some_and(|t| t.is_callable())
    });
    for manifest in callable {
        let name = provider::function_name(manifest.id);
        assert!(OPENAI_NAME(&name) && gemini_function_name(&name), "{name}");
        assert_eq!(provider::tool_id(&name), manifest.id);
    }
}

#[test]
fn only_what_the_gate_allows_now_is_listed() {
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let partial = Gate::new(Mode::PartialAuto).unwrap();
    let full_without_approver = Gate::new(Mode::FullAuto).unwrap();
    let full = gates::approved(Mode::FullAuto, AllowAllApprover);
    let denying = crate::fixtures::support::denying_approving("pdefs.look*");
    let read = ["pdefs.lookup", "pdefs.ping", "pdefs.search", "pdefs.tree"];
    let cases: [(&Gate, &[&str]); 5] = [
        (&shadow, &read),
        (
            &partial,
            &[
                "pdefs.label",
                "pdefs.lookup",
                "pdefs.ping",
                "pdefs.search",
                "pdefs.tree",
            ],
        ),
        (
            &full_without_approver,
            &[
                "pdefs.label",
                "pdefs.lookup",
                "pdefs.ping",
                "pdefs.search",
                "pdefs.tree",
            ],
        ),
        (
            &full,
            &[
                "pdefs.label",
                "pdefs.lookup",
                "pdefs.ping",
                "pdefs.purge",
                "pdefs.search",
                "pdefs.tree",
            ],
        ),
        (
            &denying,
            &[
                "pdefs.label",
                "pdefs.ping",
                "pdefs.purge",
                "pdefs.search",
                "pdefs.tree",
            ],
        ),
    ];
    for (gate, expected) in cases {
        for provider in [Provider::OpenAi, Provider::Anthropic] {
            let (tools, left_out) = listed(&registry().definitions(gate, provider), provider);
            assert_eq!(tools, expected, "{provider:?} in {}", gate.mode());
            assert!(left_out.is_empty(), "{left_out:?}");
        }
        // The map parameter of `label` is what strict mode and Gemini cannot say; Gemini cannot say
        // the recursive `tree` either.
        let (tools, left_out) = listed(
            &registry().definitions(gate, Provider::OpenAiStrict),
            Provider::OpenAiStrict,
        );
        let wanted: Vec<&str> = expected
            .iter()
            .copied()
            .filter(|&id| id != "pdefs.label")
            .collect();
        assert_eq!(tools, wanted);
        assert_eq!(
            left_out,
            expected
                .iter()
                .copied()
                .filter(|&id| id == "pdefs.label")
                .collect::<Vec<_>>()
        );
        let (tools, left_out) = listed(
            &registry().definitions(gate, Provider::Gemini),
            Provider::Gemini,
        );
        let wanted: Vec<&str> = expected
            .iter()
            .copied()
            .filter(|&id| id != "pdefs.label" && id != "pdefs.tree")
            .collect();
        assert_eq!(tools, wanted);
        let mut out: Vec<&str> = expected
            .iter()
            .copied()
            .filter(|&id| id == "pdefs.label" || id == "pdefs.tree")
            .collect();
        out.sort_unstable();
        assert_eq!(left_out, out);
    }
    assert!(
        registry()
            .definitions(&full, Provider::OpenAi)
            .tools
            .iter()
            .all(|d| { d["function"]["name"] != "pdefs-hidden" }),
        "a tool that is not callable is never listed"
    );
    let _ = hidden;
}

#[test]
fn every_definition_meets_its_providers_constraints() {
    // Every callable tool linked into this test binary, in the widest gate: dozens of schemas.
    let gate = gates::approved(Mode::FullAuto, AllowAllApprover);
    for provider in PROVIDERS {
        let definitions = registry().definitions(&gate, provider);
        assert!(
            definitions.tools.len() >= 20,
            "{provider:?}: {}",
            definitions.tools.len()
        );
        for definition in &definitions.tools {
            let problems = violations(provider, definition);
            assert!(
                problems.is_empty(),
                "{provider:?} {definition:#}: {problems:#?}"
            );
        }
        for left_out in &definitions.left_out {
            assert!(!left_out.reason.is_empty());
            assert!(
                matches!(provider, Provider::OpenAiStrict | Provider::Gemini),
                "{provider:?} takes any JSON Schema, yet left out {left_out}"
            );
        }
    }
}

#[test]
fn the_fixtures_catch_what_the_providers_refuse() {
    // The checkers are the test: each must reject what its documentation forbids.
    let plain = definition_of(
        Provider::OpenAi,
        &Gate::new(Mode::Shadow).unwrap(),
        "pdefs.lookup",
    );
    assert!(
        !openai_violations(&plain, true).is_empty(),
        "a non-strict schema passed as strict"
    );
    let mut renamed = plain.clone();
    renamed["function"]["name"] = json!("pdefs.lookup");
    assert!(
        !openai_violations(&renamed, false).is_empty(),
        "a dotted name passed"
    );
    let gemini = json!({"name": "x", "parameters": {"type": "object", "properties": {"a": {"type": ["string", "null"]}}, "additionalProperties": false}});
    assert!(
        gemini_violations(&gemini).len() >= 3,
        "{:?}",
        gemini_violations(&gemini)
    );
    let empty = json!({"name": "x", "parameters": {"type": "OBJECT", "properties": {}}});
    assert!(!gemini_violations(&empty).is_empty());
    let anthropic = json!({"name": "a.b", "description": "", "input_schema": {"type": "object"}});
    assert!(!anthropic_violations(&anthropic).is_empty());
}

#[test]
fn strict_mode_requires_every_field_and_types_the_optional_with_null() {
    let gate = Gate::new(Mode::Shadow).unwrap();
    let lookup = definition_of(Provider::OpenAiStrict, &gate, "pdefs.lookup");
    assert_eq!(
        lookup,
        json!({
            "type": "function",
            "function": {
                "name": "pdefs-lookup",
                "description": "Look a record up.",
                "strict": true,
                "parameters": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer", "minimum": 0},
                        "verbose": {"type": ["boolean", "null"]},
                    },
                    "required": ["id", "verbose"],
                    "additionalProperties": false,
                },
            },
        })
    );
    let search = definition_of(Provider::OpenAiStrict, &gate, "pdefs.search");
    let parameters = &search["function"]["parameters"];
    assert_eq!(
        parameters["properties"]["filter"],
        json!({"$ref": "#/$defs/Filter"})
    );
    let filter = &parameters["$defs"]["Filter"];
    assert_eq!(
        filter["required"],
        json!(["limit", "order", "since", "tags"])
    );
    assert_eq!(
        filter["properties"]["since"]["type"],
        json!(["string", "null"])
    );
    assert_eq!(filter["additionalProperties"], false);
    // The plain definition keeps the schema the registry gives.
    let plain = definition_of(Provider::OpenAi, &gate, "pdefs.lookup");
    let mut schema = registry()
        .get("pdefs.lookup")
        .unwrap()
        .input_schema()
        .unwrap();
    schema.as_object_mut().unwrap().remove("$schema");
    assert_eq!(plain["function"]["parameters"], schema);
    assert_eq!(plain["function"].get("strict"), None);
}

#[test]
fn gemini_gets_openapi_types_inlined_references_and_nullable() {
    let gate = Gate::new(Mode::Shadow).unwrap();
    let lookup = definition_of(Provider::Gemini, &gate, "pdefs.lookup");
    assert_eq!(
        lookup,
        json!({
            "name": "pdefs-lookup",
            "description": "Look a record up.",
            "parameters": {
                "type": "OBJECT",
                "properties": {
                    "id": {"type": "INTEGER", "minimum": 0},
                    "verbose": {"type": "BOOLEAN", "nullable": true},
                },
                "required": ["id"],
            },
        })
    );
    let search = definition_of(Provider::Gemini, &gate, "pdefs.search");
    let filter = &search["parameters"]["properties"]["filter"];
    assert_eq!(filter["type"], "OBJECT");
    assert_eq!(
        filter["properties"]["order"],
        json!({"type": "STRING", "format": "enum", "enum": ["newest", "oldest"]})
    );
    assert_eq!(
        filter["properties"]["limit"]["description"],
        "The most results to return."
    );
    assert_eq!(
        filter["properties"]["tags"],
        json!({"type": "ARRAY", "items": {"type": "STRING"}})
    );
    assert_eq!(
        filter["properties"]["since"],
        json!({"type": "STRING", "nullable": true})
    );
    assert_eq!(filter["required"], json!(["limit", "tags", "order"]));
    let ping = definition_of(Provider::Gemini, &gate, "pdefs.ping");
    assert_eq!(
        ping,
        json!({"name": "pdefs-ping", "description": "Answer pong."})
    );
    let left_out = registry().definitions(&gate, Provider::Gemini).left_out;
    let tree = left_out.iter().find(|l| l.id == "pdefs.tree").unwrap();
    assert!(
        tree.reason.contains("recursive type `Node`"),
        "{}",
        tree.reason
    );
}

#[test]
fn anthropic_gets_name_description_and_input_schema() {
    let gate = Gate::new(Mode::Shadow).unwrap();
    let tree = definition_of(Provider::Anthropic, &gate, "pdefs.tree");
    let mut schema = registry()
        .get("pdefs.tree")
        .unwrap()
        .input_schema()
        .unwrap();
    schema.as_object_mut().unwrap().remove("$schema");
    assert_eq!(
        tree,
        json!({"name": "pdefs-tree", "description": "Walk a tree.", "input_schema": schema})
    );
}

#[tokio::test]
async fn a_models_call_goes_back_through_the_gate() {
    let gate = Gate::new(Mode::Shadow).unwrap();
    let before = LOOKUPS.load(Ordering::SeqCst);
    // What a strict-mode model sends: every field, the optional one null.
    let result = registry()
        .call(
            &gate,
            &provider::tool_id("pdefs-lookup"),
            json!({"id": 4, "verbose": null}),
        )
        .await;
    assert_eq!(provider::result_text(&result), "record 4, verbose None");
    assert_eq!(LOOKUPS.load(Ordering::SeqCst), before + 1);

    let count = registry()
        .call(
            &gate,
            &provider::tool_id("pdefs-search"),
            json!({"filter": {"limit": 2, "tags": ["a"], "since": null, "order": "newest"}}),
        )
        .await;
    assert_eq!(provider::result_text(&count), "3");

    // A tool the model was not shown is still decided by the gate, and refused.
    let refused = registry()
        .call(&gate, &provider::tool_id("pdefs-purge"), json!({}))
        .await;
    assert_eq!(
        provider::result_text(&refused),
        "MODE_NOT_ALLOWED: tool `pdefs.purge` (HIGH_WRITE) is not allowed in mode SHADOW; it is \
         allowed in FULL_AUTO"
    );
    assert_eq!(PURGES.load(Ordering::SeqCst), 0, "the refused body ran");

    let invalid = registry()
        .call(
            &gate,
            &provider::tool_id("pdefs-lookup"),
            json!({"id": "x"}),
        )
        .await;
    assert!(
        provider::result_text(&invalid).starts_with("INVALID_PARAMS: "),
        "{invalid:?}"
    );
}
