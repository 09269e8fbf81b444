//! The parameters of a callable tool: its JSON arguments parsed one parameter at a time, and its input
//! schema put together from the parameters' own schemas.
//!
//! Each parameter is parsed and described by code generic over its type alone, so tools that share
//! parameter types share that code: a tool adds a table of its parameters, not a parser of its own.

use std::cell::Cell;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde_json::{Map, Value};

use crate::by_name::error::CallError;
use crate::by_name::strict;

/// One parameter of a callable tool, as the generated table lists it.
#[doc(hidden)]
pub struct Param {
    name: &'static str,
    schema: fn(&mut SchemaGenerator) -> Schema,
    optional: fn() -> bool,
    /// What the tool's doc comment says of the parameter (its `# Arguments` list).
    description: Option<&'static str>,
}

impl Param {
    /// The parameter `name` of type `T`.
    pub const fn of<T: DeserializeOwned + JsonSchema>(name: &'static str) -> Param {
        Param {
            name,
            schema: SchemaGenerator::subschema_for::<T>,
            optional: accepts_missing::<T>,
            description: None,
        }
    }

    /// The parameter, with what the tool's doc comment says of it.
    pub const fn described(self, description: &'static str) -> Param {
        Param {
            description: Some(description),
            ..self
        }
    }
}

/// Whether `T` parses from an absent key, as `Option` does (to `None`): then it is not required.
fn accepts_missing<T: DeserializeOwned>() -> bool {
    T::deserialize(Missing).is_ok()
}

/// An absent key: `None` for what takes an option, an error for everything else.
struct Missing;

impl<'de> Deserializer<'de> for Missing {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("missing"))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_none()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// The arguments of one call by name, read one parameter at a time.
///
/// A key that names no parameter is refused. It is found by counting, not by a search of every key:
/// the call's parameters are read first, and the arguments then hold an unknown key exactly when they
/// have more keys than were read. Any refusal names an unknown key first, as a strict parser meets it
/// before what it would have read.
#[doc(hidden)]
pub struct JsonArguments<'a> {
    object: &'a Map<String, Value>,
    params: &'static [Param],
    read: Cell<usize>,
}

impl<'a> JsonArguments<'a> {
    /// Reads `arguments` if they are a JSON object.
    pub fn new(
        arguments: &'a Value,
        params: &'static [Param],
    ) -> Result<JsonArguments<'a>, CallError> {
        // A sequence would be read positionally by a derived parser: arguments are named, or refused.
        let Value::Object(object) = arguments else {
            return Err(CallError::InvalidParams {
                path: ".".to_owned(),
                message: format!(
                    "the arguments must be a JSON object of the tool's parameters, not {}",
                    kind_of(arguments)
                ),
            });
        };
        Ok(JsonArguments {
            object,
            params,
            read: Cell::new(0),
        })
    }

    /// Parses the parameter `name` (an absent key is `None` for an `Option`, and refused otherwise).
    pub fn take<T: DeserializeOwned>(&self, name: &'static str) -> Result<T, CallError> {
        let Some(value) = self.object.get(name) else {
            return T::deserialize(Missing).map_err(|_| {
                self.unknown_key()
                    .unwrap_or_else(|| CallError::InvalidParams {
                        path: ".".to_owned(),
                        message: format!("missing field `{name}`"),
                    })
            });
        };
        self.read.set(self.read.get() + 1);
        match T::deserialize(value) {
            Ok(parsed) if matches!(value, Value::Object(_) | Value::Array(_)) => {
                self.strict(name, value).map(|()| parsed)
            }
            Ok(parsed) => Ok(parsed),
            Err(_) => Err(self.unknown_key().unwrap_or_else(|| {
                let schema = self
                    .params
                    .iter()
                    .find(|p| p.name == name)
                    .map(|p| p.schema);
                bad_value::<T>(name, schema, value)
            })),
        }
    }

    /// [`take`](JsonArguments::take) for a parameter the tool redacts: a value that does not parse is
    /// refused at the parameter itself, without the parser's message or the path inside the value,
    /// either of which may quote it (a map's key, an unknown field's name).
    pub fn take_redacted<T: DeserializeOwned>(&self, name: &'static str) -> Result<T, CallError> {
        self.take(name).map_err(|error| match error {
            CallError::InvalidParams { path, .. } if within(&path, name) => {
                CallError::InvalidParams {
                    path: name.to_owned(),
                    message: "not a valid value for this parameter (its value is redacted)"
                        .to_owned(),
                }
            }
            other => other,
        })
    }

    /// Refuses the arguments if they have a key that no parameter read.
    pub fn finish(&self) -> Result<(), CallError> {
        if self.read.get() == self.object.len() {
            return Ok(());
        }
        self.unknown_key().map_or(Ok(()), Err)
    }

    /// Refuses a parsed value with a key its type does not know, at any depth.
    fn strict(&self, name: &'static str, value: &Value) -> Result<(), CallError> {
        let Some(param) = self.params.iter().find(|p| p.name == name) else {
            return Ok(());
        };
        match strict::unknown_key(param.schema, name, value) {
            None => Ok(()),
            Some(path) => {
                let key = path.rsplit('.').next().unwrap_or(&path).to_owned();
                Err(CallError::InvalidParams {
                    message: format!("unknown field `{key}`"),
                    path,
                })
            }
        }
    }

    #[cold]
    fn unknown_key(&self) -> Option<CallError> {
        let params = self.params;
        let unknown = self
            .object
            .keys()
            .find(|key| !params.iter().any(|param| param.name == key.as_str()))?;
        // The caller's text, with invisible and reordering characters made visible.
        let unknown = crate::terminal::escaped(unknown);
        Some(CallError::InvalidParams {
            path: unknown.to_string(),
            message: format!("unknown field `{unknown}`, {}", expected(params)),
        })
    }
}

/// Whether `path` is the parameter `name` or inside it.
fn within(path: &str, name: &str) -> bool {
    path.strip_prefix(name)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// The refusal of a value that does not parse as `T`, at its path. Tracking the path costs more than
/// the parse itself, so it is only done here, again, once the parse has failed.
#[cold]
fn bad_value<T: DeserializeOwned>(
    name: &str,
    schema: Option<strict::SchemaOf>,
    value: &Value,
) -> CallError {
    let error = match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(_) => {
            return CallError::InvalidParams {
                path: name.to_owned(),
                message: "the value parses only on a second try".to_owned(),
            };
        }
        Err(error) => error,
    };
    // The parser's message may quote the value: an unknown variant's name, a character, a string.
    CallError::InvalidParams {
        path: strict::shown_path(schema, name, error.path()),
        message: crate::terminal::escaped(&error.into_inner().to_string()).into_owned(),
    }
}

fn expected(params: &[Param]) -> String {
    let names: Vec<String> = params.iter().map(|p| format!("`{}`", p.name)).collect();
    match names.as_slice() {
        [] => "there are no parameters".to_owned(),
        [one] => format!("expected {one}"),
        [first, second] => format!("expected {first} or {second}"),
        many => format!("expected one of {}", many.join(", ")),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The input schema (JSON Schema draft 2020-12) of a tool with `params`: an object of exactly these
/// properties, each required unless it accepts an absent key.
pub(crate) fn input_schema(params: &[Param]) -> Value {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut root = Map::new();
    if let Some(uri) = &generator.settings().meta_schema {
        root.insert("$schema".to_owned(), Value::from(uri.as_ref()));
    }
    root.insert("type".to_owned(), Value::from("object"));
    let mut properties = Map::new();
    let mut required = Vec::new();
    for param in params {
        let mut schema = (param.schema)(&mut generator).to_value();
        // The tool's own word on the parameter comes before its type's doc comment.
        if let (Some(description), Value::Object(schema)) = (param.description, &mut schema) {
            schema.insert("description".to_owned(), Value::from(description));
        }
        properties.insert(param.name.to_owned(), schema);
        if !(param.optional)() {
            required.push(Value::from(param.name));
        }
    }
    if !properties.is_empty() {
        root.insert("properties".to_owned(), Value::Object(properties));
    }
    if !required.is_empty() {
        root.insert("required".to_owned(), Value::Array(required));
    }
    root.insert("additionalProperties".to_owned(), Value::Bool(false));
    let definitions = generator.take_definitions(true);
    if !definitions.is_empty() {
        root.insert("$defs".to_owned(), Value::Object(definitions));
    }
    let mut root = Value::Object(root);
    strict::close_objects(&mut root);
    root
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    static NONE: [Param; 0] = [];
    static ONE: [Param; 1] = [Param::of::<u8>("a")];
    static TWO: [Param; 2] = [Param::of::<u8>("a"), Param::of::<Option<u8>>("b")];
    static THREE: [Param; 3] = [
        Param::of::<u8>("a"),
        Param::of::<Vec<u8>>("b"),
        Param::of::<Value>("c"),
    ];

    fn refusal(result: Result<impl Sized, CallError>) -> (String, String) {
        match result {
            Err(CallError::InvalidParams { path, message }) => (path, message),
            Err(other) => panic!("expected INVALID_PARAMS, got {other:?}"),
            Ok(_) => panic!("expected INVALID_PARAMS, got a parse"),
        }
    }

    #[test]
    fn an_unknown_key_names_the_parameters_there_are() {
        for (params, expected) in [
            (&NONE[..], "unknown field `x`, there are no parameters"),
            (&ONE[..], "unknown field `x`, expected `a`"),
            (&TWO[..], "unknown field `x`, expected `a` or `b`"),
            (
                &THREE[..],
                "unknown field `x`, expected one of `a`, `b`, `c`",
            ),
        ] {
            let params: &'static [Param] = params;
            let arguments = json!({"x": 2});
            let (path, message) = refusal(JsonArguments::new(&arguments, params).unwrap().finish());
            assert_eq!((path.as_str(), message.as_str()), ("x", expected));
        }
    }

    #[test]
    fn only_an_option_may_be_absent() {
        assert!(accepts_missing::<Option<u8>>());
        assert!(accepts_missing::<Option<Value>>());
        assert!(!accepts_missing::<u8>());
        assert!(
            !accepts_missing::<Value>(),
            "a Value takes null, not an absent key"
        );
        assert!(!accepts_missing::<()>());
        assert!(!accepts_missing::<Vec<u8>>());

        let empty = json!({});
        let arguments = JsonArguments::new(&empty, &TWO).unwrap();
        assert_eq!(arguments.take::<Option<u8>>("b").unwrap(), None);
        let (path, message) = refusal(arguments.take::<u8>("a"));
        assert_eq!(
            (path.as_str(), message.as_str()),
            (".", "missing field `a`")
        );
        let arguments = JsonArguments::new(&empty, &THREE).unwrap();
        assert_eq!(refusal(arguments.take::<Value>("c")).1, "missing field `c`");
    }

    #[test]
    fn a_bad_value_is_refused_at_its_path_within_the_parameter() {
        let bad = json!({"a": "1", "b": [1, "2"]});
        let arguments = JsonArguments::new(&bad, &THREE).unwrap();
        assert_eq!(refusal(arguments.take::<u8>("a")).0, "a");
        assert_eq!(refusal(arguments.take::<Vec<u8>>("b")).0, "b[1]");
        #[derive(Debug, serde::Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Inner {
            n: u8,
            tags: std::collections::BTreeMap<String, Vec<u8>>,
        }
        static INNER: [Param; 1] = [Param::of::<Inner>("c")];
        let nested = json!({"c": {"n": -1, "tags": {}}});
        let arguments = JsonArguments::new(&nested, &INNER).unwrap();
        assert_eq!(refusal(arguments.take::<Inner>("c")).0, "c.n");
        // A map's key is the caller's data: the path shows where, not which.
        let keyed = json!({"c": {"n": 1, "tags": {"sk-live-1": [1, "x"]}}});
        let arguments = JsonArguments::new(&keyed, &INNER).unwrap();
        assert_eq!(refusal(arguments.take::<Inner>("c")).0, "c.tags.*[1]");
        // A type whose schema says nothing of its keys shows none of them.
        let arguments = JsonArguments::new(&nested, &THREE).unwrap();
        assert_eq!(refusal(arguments.take::<Inner>("c")).0, "c.*");
    }

    #[test]
    fn the_input_schema_requires_what_the_parser_requires() {
        let schema = input_schema(&TWO);
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["required"], json!(["a"]));
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        let empty = input_schema(&NONE);
        assert!(empty.get("properties").is_none() && empty.get("required").is_none());
    }
}
