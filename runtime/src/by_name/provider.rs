//! Tool definitions in the shapes model APIs take for function calling: OpenAI's chat completions
//! `tools` (plain and strict), Anthropic's `tools` and Gemini's `functionDeclarations`.
//!
//! Each is rendered from a `callable` tool's manifest and input schema, for the tools a gate would
//! allow now ([`Registry::definitions`]). A call the model makes goes back through
//! [`Registry::call`] with the id [`tool_id`] gives for the function's name, so the gate, its deny
//! list, approvals and audit decide it like any other; [`result_text`] is what to send the model back.
//!
//! # Names
//!
//! OpenAI and Anthropic accept function names of `[a-zA-Z0-9_-]`, at most 64 characters: no dot. A
//! tool's function name is its id with each `.` written `-` (`users.delete` is `users-delete`), for
//! every provider alike. Ids are lowercase dotted segments of `[a-z][a-z0-9_]*` and never hold a `-`,
//! so the mapping is one to one and [`tool_id`] reverses it.
//!
//! # What each provider is given
//!
//! | provider | one tool | the schema |
//! | --- | --- | --- |
//! | [`Provider::OpenAi`] | `{"type": "function", "function": {"name", "description", "parameters"}}` | the input schema |
//! | [`Provider::OpenAiStrict`] | the same, with `"strict": true` | every property `required`, an optional one typed with `null`, `additionalProperties: false` on every object, only the keywords strict mode accepts |
//! | [`Provider::Anthropic`] | `{"name", "description", "input_schema"}` | the input schema |
//! | [`Provider::Gemini`] | `{"name", "description", "parameters"}` (a `functionDeclarations` item) | OpenAPI 3.0's subset: uppercase `type`, `nullable` for an option, references inlined, no `additionalProperties`; no `parameters` for a tool without any |
//!
//! The input schema's `$schema` key is left out everywhere. A tool whose schema the provider's rules
//! cannot say (strict mode: a map or a free JSON value, an optional field that cannot be `null`;
//! Gemini: a recursive type, a map, a tuple, a union of several types) is left out of
//! [`Definitions::tools`] and listed in [`Definitions::left_out`] with the reason, rather than sent in a
//! form the API refuses or that says something else than the tool takes.

use std::borrow::Cow;
use std::fmt;

use serde_json::{Map, Value, json};

use crate::by_name::error::CallError;
use crate::by_name::instances::Instances;
use crate::gate::Gate;
use crate::registry::{Registry, Tool, manifests};
use toolgate_policy::Verdict;

/// The model API a definition is rendered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Provider {
    /// OpenAI chat completions `tools`, items `{"type": "function", "function": {..}}`.
    OpenAi,
    /// The same with `"strict": true` (Structured Outputs), whose schemas follow stricter rules.
    OpenAiStrict,
    /// Anthropic Messages `tools`, items `{"name", "description", "input_schema"}`.
    Anthropic,
    /// Gemini `functionDeclarations`, items `{"name", "description", "parameters"}`.
    Gemini,
}

/// The definitions of the tools a gate would allow now, for one provider.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Definitions {
    /// One definition per tool, sorted by id: the items of the request's `tools` (OpenAI, Anthropic)
    /// or of a tool's `functionDeclarations` (Gemini).
    pub tools: Vec<Value>,
    /// The tools the gate would allow but whose schema this provider's rules cannot say.
    pub left_out: Vec<LeftOut>,
}

/// A tool left out of [`Definitions::tools`], and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// The tool's id.
    pub id: &'static str,
    /// What in its schema the provider cannot take.
    pub reason: String,
}

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tool `{}` is left out: {}", self.id, self.reason)
    }
}

/// The function name of the tool `id`: the id with each `.` written `-`.
pub fn function_name(id: &str) -> String {
    id.replace('.', "-")
}

/// The id of the tool whose function name is `name` (see [`function_name`]).
pub fn tool_id(name: &str) -> Cow<'_, str> {
    if name.contains('-') {
        Cow::Owned(name.replace('-', "."))
    } else {
        Cow::Borrowed(name)
    }
}

/// The text to send the model as a call's result, as the MCP server does: a string result as it is,
/// another result as its JSON text, and an error (a refusal too) as `"<CODE>: <message>"`, so that the
/// model reads why.
pub fn result_text(result: &Result<Value, CallError>) -> String {
    match result {
        Ok(Value::String(text)) => text.clone(),
        Ok(value) => value.to_string(),
        Err(error) => format!("{}: {error}", error.code()),
    }
}

impl Registry {
    /// The definitions, for `provider`, of the `callable` functions `gate` would allow now: those its
    /// current mode allows or allows with an approval (which is asked for when the model calls it).
    /// A method's tool needs its instance: see [`definitions_with`](Registry::definitions_with).
    ///
    /// Listing is advice, as in MCP: a call of a tool the model was not shown is still decided by the
    /// gate.
    pub fn definitions(&self, gate: &Gate, provider: Provider) -> Definitions {
        static NONE: Instances = Instances::new();
        self.definitions_with(gate, &NONE, provider)
    }

    /// [`definitions`](Registry::definitions), with the `callable` methods whose instance is in
    /// `instances`.
    pub fn definitions_with(
        &self,
        gate: &Gate,
        instances: &Instances,
        provider: Provider,
    ) -> Definitions {
        let mut definitions = Definitions {
            tools: Vec::new(),
            left_out: Vec::new(),
        };
        for manifest in manifests() {
            let Some(tool) = self.get(manifest.id) else {
                continue;
            };
            if !tool.is_served_by(instances)
                || !matches!(
                    gate.verdict(manifest),
                    Some(Verdict::Allow | Verdict::NeedsApproval)
                )
            {
                continue;
            }
            match definition(tool, provider) {
                Some(Ok(value)) => definitions.tools.push(value),
                Some(Err(reason)) => definitions.left_out.push(LeftOut {
                    id: manifest.id,
                    reason,
                }),
                None => {}
            }
        }
        definitions
    }
}

/// The definition of `tool` for `provider`, whatever a gate would decide; `None` for a tool that is
/// not `callable`, `Some(Err(reason))` when the provider's rules cannot say its schema.
pub fn definition(tool: Tool, provider: Provider) -> Option<Result<Value, String>> {
    let mut schema = tool.input_schema()?;
    if let Value::Object(root) = &mut schema {
        root.remove("$schema");
    }
    let manifest = tool.manifest();
    let name = function_name(manifest.id);
    let description = manifest.description;
    Some(match provider {
        Provider::OpenAi => Ok(json!({
            "type": "function",
            "function": {"name": name, "description": description, "parameters": schema},
        })),
        Provider::OpenAiStrict => strict(&schema).map(|parameters| {
            json!({
                "type": "function",
                "function": {
                    "name": name,
                    "description": description,
                    "parameters": parameters,
                    "strict": true,
                },
            })
        }),
        Provider::Anthropic => Ok(json!({
            "name": name,
            "description": description,
            "input_schema": schema,
        })),
        Provider::Gemini => gemini(&schema).map(|parameters| {
            let mut declaration = json!({"name": name, "description": description});
            if let Some(parameters) = parameters {
                declaration["parameters"] = parameters;
            }
            declaration
        }),
    })
}

/// Keywords that only annotate a schema: dropped where a provider does not take them, which changes
/// nothing the call accepts (the arguments are parsed by the tool's own types).
const ANNOTATIONS: &[&str] = &[
    "title",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
    "$id",
    "$anchor",
];

/// Validation keywords that a provider not taking them may drop: the arguments are still parsed,
/// strictly, by the tool's own types, which refuse what the keyword would have.
const LOOSENABLE: &[&str] = &[
    "uniqueItems",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "contentEncoding",
    "contentMediaType",
];

/// The `format`s OpenAI's strict mode accepts on strings.
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

const STRICT_MAX_DEPTH: usize = 10;
const STRICT_MAX_PROPERTIES: usize = 5000;

/// The input schema under OpenAI's strict mode rules.
fn strict(schema: &Value) -> Result<Value, String> {
    let mut properties = 0;
    strict_node(schema, 0, &mut properties)
}

fn strict_node(schema: &Value, depth: usize, properties: &mut usize) -> Result<Value, String> {
    let Value::Object(node) = schema else {
        return Err("a value of any type, which strict mode cannot describe".to_owned());
    };
    if node.is_empty() {
        return Err("a value of any type, which strict mode cannot describe".to_owned());
    }
    if let Some(reference) = node.get("$ref") {
        // Strict mode refuses a `$ref` beside other keywords: its annotations go.
        return Ok(json!({ "$ref": reference }));
    }
    if depth > STRICT_MAX_DEPTH {
        return Err(format!(
            "objects nested more than {STRICT_MAX_DEPTH} deep, more than strict mode takes"
        ));
    }
    let mut out = Map::new();
    for (key, value) in node {
        match key.as_str() {
            "type" | "description" | "enum" | "pattern" | "multipleOf" | "maximum"
            | "exclusiveMaximum" | "minimum" | "exclusiveMinimum" | "minItems" | "maxItems" => {
                out.insert(key.clone(), value.clone());
            }
            "format" => {
                if value.as_str().is_some_and(|f| STRICT_FORMATS.contains(&f)) {
                    out.insert(key.clone(), value.clone());
                }
            }
            "const" => {
                out.insert("enum".to_owned(), Value::Array(vec![value.clone()]));
            }
            "items" => {
                out.insert(key.clone(), strict_node(value, depth, properties)?);
            }
            "anyOf" | "oneOf" => {
                let Value::Array(branches) = value else {
                    return Err(format!("a `{key}` that is not a list"));
                };
                let branches = branches
                    .iter()
                    .map(|branch| strict_node(branch, depth, properties))
                    .collect::<Result<Vec<_>, _>>()?;
                out.insert("anyOf".to_owned(), Value::Array(branches));
            }
            "$defs" => {
                let Value::Object(defs) = value else {
                    return Err("`$defs` that is not an object".to_owned());
                };
                let mut converted = Map::new();
                for (name, def) in defs {
                    converted.insert(name.clone(), strict_node(def, 0, properties)?);
                }
                out.insert(key.clone(), Value::Object(converted));
            }
            "properties" | "required" | "additionalProperties" => {}
            other if ANNOTATIONS.contains(&other) || LOOSENABLE.contains(&other) => {}
            other => return Err(format!("`{other}`, which strict mode does not accept")),
        }
    }
    let is_object = node.get("type").and_then(Value::as_str) == Some("object")
        || node.contains_key("properties");
    if is_object {
        if node.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Err(
                "an object with keys of its own choosing (a map), which strict mode cannot describe"
                    .to_owned(),
            );
        }
        let required: Vec<&str> = node
            .get("required")
            .and_then(Value::as_array)
            .map(|keys| keys.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut converted = Map::new();
        let empty = Map::new();
        let declared = node
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        *properties += declared.len();
        if *properties > STRICT_MAX_PROPERTIES {
            return Err(format!(
                "more than {STRICT_MAX_PROPERTIES} properties, more than strict mode takes"
            ));
        }
        for (name, property) in declared {
            if !required.contains(&name.as_str()) && !admits_null(property) {
                return Err(format!(
                    "the optional field `{name}`, which cannot be null: strict mode requires every \
                     field, and an optional one must admit null"
                ));
            }
            converted.insert(name.clone(), strict_node(property, depth + 1, properties)?);
        }
        let mut every: Vec<&String> = declared.keys().collect();
        every.sort_unstable();
        out.insert(
            "required".to_owned(),
            Value::Array(every.into_iter().cloned().map(Value::String).collect()),
        );
        out.insert("properties".to_owned(), Value::Object(converted));
        out.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    Ok(Value::Object(out))
}

/// Whether `schema` admits `null` (an `Option`'s schema does).
fn admits_null(schema: &Value) -> bool {
    let Value::Object(node) = schema else {
        return schema == &Value::Bool(true);
    };
    let is_null = |t: &Value| t.as_str() == Some("null");
    match node.get("type") {
        Some(Value::String(t)) if t == "null" => return true,
        Some(Value::Array(types)) if types.iter().any(is_null) => return true,
        _ => {}
    }
    if node
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|values| values.contains(&Value::Null))
        || node.get("const") == Some(&Value::Null)
    {
        return true;
    }
    ["anyOf", "oneOf"].iter().any(|key| {
        node.get(*key)
            .and_then(Value::as_array)
            .is_some_and(|branches| branches.iter().any(admits_null))
    })
}

/// The formats Gemini's `Schema` documents, by type.
fn gemini_format(kind: &str, format: &str) -> bool {
    matches!(
        (kind, format),
        ("NUMBER", "float" | "double") | ("INTEGER", "int32" | "int64") | ("STRING", "date-time")
    )
}

/// The input schema in Gemini's subset of OpenAPI 3.0; `None` for a tool without parameters, whose
/// declaration has none (Gemini refuses an `OBJECT` without properties).
fn gemini(schema: &Value) -> Result<Option<Value>, String> {
    let empty = Map::new();
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if schema
        .get("properties")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty)
    {
        return Ok(None);
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for name in properties.keys() {
            let valid = name.len() <= 64
                && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "the parameter name `{name}`, which is not of the letters, digits and \
                     underscores Gemini accepts"
                ));
            }
        }
    }
    let mut path = Vec::new();
    gemini_node(schema, defs, &mut path).map(Some)
}

fn gemini_node<'a>(
    schema: &'a Value,
    defs: &'a Map<String, Value>,
    path: &mut Vec<&'a str>,
) -> Result<Value, String> {
    let Value::Object(node) = schema else {
        return Err("a value of any type, which Gemini cannot describe".to_owned());
    };
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let name = reference
            .strip_prefix("#/$defs/")
            .ok_or_else(|| format!("the reference `{reference}`, which cannot be inlined"))?;
        if path.contains(&name) {
            return Err(format!(
                "the recursive type `{name}`, which Gemini cannot describe without references"
            ));
        }
        let target = defs
            .get(name)
            .ok_or_else(|| format!("the reference `{reference}` to nothing"))?;
        path.push(name);
        let mut inlined = gemini_node(target, defs, path)?;
        path.pop();
        if let (Some(description), Value::Object(out)) = (node.get("description"), &mut inlined) {
            out.insert("description".to_owned(), description.clone());
        }
        return Ok(inlined);
    }
    let mut out = Map::new();
    let mut nullable = false;
    // The type first: `format` and `enum` depend on it.
    let mut kind: Option<String> = match node.get("type") {
        None => None,
        Some(Value::String(t)) if t == "null" => {
            return Err("a value that is always null, which Gemini cannot describe".to_owned());
        }
        Some(Value::String(t)) => Some(t.to_ascii_uppercase()),
        Some(Value::Array(types)) => {
            let mut others = types.iter().filter_map(Value::as_str).filter(|t| {
                if *t == "null" {
                    nullable = true;
                    false
                } else {
                    true
                }
            });
            let first = others.next();
            if others.next().is_some() {
                return Err(format!(
                    "a value of several types ({}), which Gemini cannot describe",
                    Value::Array(types.clone())
                ));
            }
            first.map(str::to_ascii_uppercase)
        }
        Some(other) => return Err(format!("the type {other}")),
    };
    for (key, value) in node {
        match key.as_str() {
            "type" | "$defs" | "$schema" | "required" | "format" => {}
            "description" | "minimum" | "maximum" | "minItems" | "maxItems" | "minLength"
            | "maxLength" | "pattern" | "minProperties" | "maxProperties" => {
                out.insert(key.clone(), value.clone());
            }
            "enum" | "const" => {
                let values = match value {
                    Value::Array(values) if key == "enum" => values.clone(),
                    other => vec![other.clone()],
                };
                let mut strings = Vec::new();
                for value in values {
                    match value {
                        Value::String(text) => strings.push(Value::String(text)),
                        Value::Null => nullable = true,
                        other => {
                            return Err(format!(
                                "the value {other} in a list of values: Gemini lists strings only"
                            ));
                        }
                    }
                }
                kind = Some("STRING".to_owned());
                out.insert("format".to_owned(), Value::from("enum"));
                out.insert("enum".to_owned(), Value::Array(strings));
            }
            "items" => {
                out.insert(key.clone(), gemini_node(value, defs, path)?);
            }
            "anyOf" | "oneOf" => {
                let Value::Array(branches) = value else {
                    return Err(format!("a `{key}` that is not a list"));
                };
                let is_null = |b: &&Value| b.get("type").and_then(Value::as_str) == Some("null");
                if branches.iter().any(|b| is_null(&b)) {
                    nullable = true;
                }
                let rest: Vec<&Value> = branches.iter().filter(|b| !is_null(b)).collect();
                let converted = rest
                    .iter()
                    .map(|branch| gemini_node(branch, defs, path))
                    .collect::<Result<Vec<_>, _>>()?;
                if let Some(strings) = all_string_enums(&converted) {
                    kind = Some("STRING".to_owned());
                    out.insert("format".to_owned(), Value::from("enum"));
                    out.insert("enum".to_owned(), Value::Array(strings));
                } else if let [one] = &converted[..] {
                    let Value::Object(one) = one else {
                        unreachable!("converted schemas are objects")
                    };
                    for (key, value) in one {
                        if key == "type" {
                            kind = value.as_str().map(str::to_owned);
                        } else if key == "nullable" {
                            nullable = true;
                        } else {
                            out.entry(key.clone()).or_insert_with(|| value.clone());
                        }
                    }
                } else {
                    out.insert("anyOf".to_owned(), Value::Array(converted));
                }
            }
            "properties" => {
                let Value::Object(properties) = value else {
                    return Err("`properties` that is not an object".to_owned());
                };
                let mut converted = Map::new();
                for (name, property) in properties {
                    converted.insert(name.clone(), gemini_node(property, defs, path)?);
                }
                out.insert(key.clone(), Value::Object(converted));
            }
            "additionalProperties" => {
                if value != &Value::Bool(false) {
                    return Err(
                        "an object with keys of its own choosing (a map), which Gemini cannot \
                         describe"
                            .to_owned(),
                    );
                }
            }
            other
                if ANNOTATIONS.contains(&other)
                    || LOOSENABLE.contains(&other)
                    || matches!(
                        other,
                        "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf"
                    ) => {}
            other => return Err(format!("`{other}`, which Gemini does not accept")),
        }
    }
    if let Some(required) = node.get("required") {
        out.insert("required".to_owned(), required.clone());
    }
    if let Some(kind) = &kind {
        if kind == "OBJECT"
            && out
                .get("properties")
                .and_then(Value::as_object)
                .is_none_or(Map::is_empty)
        {
            return Err(
                "an object without properties (a map, or a struct without fields), which Gemini \
                 refuses"
                    .to_owned(),
            );
        }
        if let Some(format) = node.get("format").and_then(Value::as_str)
            && !out.contains_key("format")
            && gemini_format(kind, format)
        {
            out.insert("format".to_owned(), Value::from(format));
        }
        out.insert("type".to_owned(), Value::from(kind.clone()));
    } else if !out.contains_key("anyOf") {
        return Err("a value of any type, which Gemini cannot describe".to_owned());
    }
    if nullable {
        out.insert("nullable".to_owned(), Value::Bool(true));
    }
    Ok(Value::Object(out))
}

/// The strings of branches that are each an enumeration of strings, as serde's unit variants are
/// written (`oneOf` of `const`s, or of `enum`s).
fn all_string_enums(branches: &[Value]) -> Option<Vec<Value>> {
    let mut strings = Vec::new();
    for branch in branches {
        let Value::Object(branch) = branch else {
            return None;
        };
        if branch.get("format").and_then(Value::as_str) != Some("enum") || branch.len() > 4 {
            return None;
        }
        if branch
            .keys()
            .any(|k| !matches!(k.as_str(), "type" | "format" | "enum" | "description"))
        {
            return None;
        }
        strings.extend(branch.get("enum")?.as_array()?.iter().cloned());
    }
    (!strings.is_empty()).then_some(strings)
}
