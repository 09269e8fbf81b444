//! Strict arguments at every depth: a key that the parameter's type does not know, anywhere inside its
//! value, is refused, as at the top level.
//!
//! A derived `Deserialize` ignores unknown keys unless the type says `deny_unknown_fields`, which the tool's
//! author may not own. The parameter's JSON Schema (the one MCP clients are given) knows every key, so the
//! value is checked against it: once parsed, and only where the value has keys to check (an object or an
//! array). Each parameter type's schema is generated once.

use std::sync::{Arc, PoisonError, RwLock};

use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator};
use serde_json::{Map, Value};
use serde_path_to_error::{Path, Segment};

/// A parameter type's schema generator: also the type's identity here.
pub(crate) type SchemaOf = fn(&mut SchemaGenerator) -> Schema;

/// A parameter type's schema and the definitions its `$ref`s point into.
struct Compiled {
    schema: Value,
    defs: Map<String, Value>,
}

/// The path inside `value` (from the parameter `name`) of the first key its type does not know.
pub(crate) fn unknown_key(schema_of: SchemaOf, name: &str, value: &Value) -> Option<String> {
    let compiled = compiled(schema_of);
    let mut path = name.to_owned();
    Walk {
        defs: &compiled.defs,
    }
    .check(&compiled.schema, value, &mut path)
    .err()
}

fn compiled(schema_of: SchemaOf) -> Arc<Compiled> {
    static CACHE: RwLock<Vec<(usize, Arc<Compiled>)>> = RwLock::new(Vec::new());
    // One schema per parameter type: the generator function is the type's identity here.
    let key = schema_of as usize;
    let found = CACHE
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, c)| Arc::clone(c));
    if let Some(compiled) = found {
        return compiled;
    }
    let mut generator: SchemaGenerator = SchemaSettings::draft2020_12().into_generator();
    let schema = schema_of(&mut generator).to_value();
    let defs = generator.take_definitions(true);
    let compiled = Arc::new(Compiled { schema, defs });
    let mut cache = CACHE.write().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, existing)) = cache.iter().find(|(k, _)| *k == key) {
        return Arc::clone(existing);
    }
    cache.push((key, Arc::clone(&compiled)));
    compiled
}

/// The path of a value that did not parse, from the parameter `name`, as the log and the agent may see
/// it: a key its type lists (a struct's field) is named; a key it does not (a map's, the caller's data,
/// which may hold a secret) is `*`, as is every key below a schema this cannot follow.
pub(crate) fn shown_path(schema_of: Option<SchemaOf>, name: &str, inner: &Path) -> String {
    let compiled = schema_of.map(compiled);
    let walk = compiled.as_ref().map(|c| Walk { defs: &c.defs });
    let mut schema = compiled.as_ref().map(|c| &c.schema);
    let mut path = name.to_owned();
    for segment in inner {
        match segment {
            Segment::Seq { index } => {
                path.push_str(&format!("[{index}]"));
                schema = match (&walk, schema) {
                    (Some(walk), Some(s)) => walk.item(s, *index),
                    _ => None,
                };
            }
            Segment::Map { key } => {
                let field = match (&walk, schema) {
                    (Some(walk), Some(s)) => walk.property(s, key),
                    _ => Step::Unknown,
                };
                path.push('.');
                match field {
                    Step::Field(next) => {
                        path.push_str(&crate::terminal::escaped(key));
                        schema = Some(next);
                    }
                    Step::MapKey(next) => {
                        path.push('*');
                        schema = next;
                    }
                    Step::Unknown => {
                        path.push('*');
                        schema = None;
                    }
                }
            }
            // A variant's name is the type's, as a field's is.
            Segment::Enum { variant } => {
                path.push('.');
                path.push_str(&crate::terminal::escaped(variant));
                schema = None;
            }
            Segment::Unknown => path.push_str(".?"),
        }
    }
    path
}

/// Where a key leads in a schema.
enum Step<'a> {
    /// A property the schema lists.
    Field(&'a Value),
    /// A key of a map (`additionalProperties`), with the schema of its values if there is one.
    MapKey(Option<&'a Value>),
    /// Nothing the schema says.
    Unknown,
}

struct Walk<'a> {
    defs: &'a Map<String, Value>,
}

impl<'a> Walk<'a> {
    /// The schema `$ref` points to, followed to the end.
    fn resolve(&self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..32 {
            let Some(target) = schema.get("$ref").and_then(Value::as_str) else {
                return schema;
            };
            let name = target.rsplit('/').next().unwrap_or(target);
            match self.defs.get(name) {
                Some(next) => schema = next,
                None => return schema,
            }
        }
        schema
    }

    /// The parts of an object schema: itself, its `allOf` parts, and its `anyOf`/`oneOf` branches.
    fn parts(&self, schema: &'a Value) -> Vec<&'a Map<String, Value>> {
        let mut parts = Vec::new();
        let mut pending = vec![self.resolve(schema)];
        while let Some(next) = pending.pop() {
            let Value::Object(keywords) = next else {
                continue;
            };
            parts.push(keywords);
            for nested in ["allOf", "anyOf", "oneOf"] {
                if let Some(Value::Array(schemas)) = keywords.get(nested)
                    && parts.len() + pending.len() < 64
                {
                    pending.extend(schemas.iter().map(|s| self.resolve(s)));
                }
            }
        }
        parts
    }

    /// Where `key` leads from `schema`.
    fn property(&self, schema: &'a Value, key: &str) -> Step<'a> {
        let parts = self.parts(schema);
        if let Some(field) = parts
            .iter()
            .find_map(|part| part.get("properties")?.as_object()?.get(key))
        {
            return Step::Field(field);
        }
        match parts
            .iter()
            .find_map(|part| part.get("additionalProperties"))
        {
            Some(values @ Value::Object(_)) => Step::MapKey(Some(values)),
            Some(Value::Bool(true)) => Step::MapKey(None),
            _ => Step::Unknown,
        }
    }

    /// The schema of item `index` of an array schema.
    fn item(&self, schema: &'a Value, index: usize) -> Option<&'a Value> {
        self.parts(schema).iter().find_map(|part| {
            part.get("prefixItems")
                .and_then(Value::as_array)
                .and_then(|prefix| prefix.get(index))
                .or_else(|| part.get("items"))
        })
    }

    /// `Err(path)` at the first key of `value` that `schema` does not admit.
    fn check(&self, schema: &'a Value, value: &Value, path: &mut String) -> Result<(), String> {
        let schema = self.resolve(schema);
        let Value::Object(keywords) = schema else {
            return Ok(()); // `true`: anything
        };
        for alternatives in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = keywords.get(alternatives) {
                return self.first_branch(branches, value, path);
            }
        }
        match value {
            Value::Object(map) => self.check_object(keywords, map, path),
            Value::Array(items) => self.check_items(keywords, items, path),
            _ => Ok(()),
        }
    }

    /// A value that parsed matches some branch; it passes if a branch of its type admits every key.
    fn first_branch(&self, branches: &'a [Value], value: &Value, path: &str) -> Result<(), String> {
        let mut first_error = None;
        for branch in branches {
            let branch = self.resolve(branch);
            if !admits_type(branch, value) {
                continue;
            }
            let mut inner = path.to_owned();
            match self.check(branch, value, &mut inner) {
                Ok(()) => return Ok(()),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn check_object(
        &self,
        keywords: &'a Map<String, Value>,
        map: &Map<String, Value>,
        path: &mut String,
    ) -> Result<(), String> {
        let mut properties: Vec<&'a Map<String, Value>> = Vec::new();
        let mut extra: Option<&'a Value> = None;
        let mut open = false;
        let mut parts = vec![keywords];
        if let Some(Value::Array(all)) = keywords.get("allOf") {
            parts.extend(all.iter().filter_map(|s| self.resolve(s).as_object()));
        }
        let mut is_object = false;
        for part in &parts {
            if let Some(Value::Object(props)) = part.get("properties") {
                properties.push(props);
                is_object = true;
            }
            match part.get("additionalProperties") {
                Some(Value::Bool(false)) => is_object = true,
                Some(Value::Bool(true)) => open = true,
                Some(schema @ Value::Object(_)) => {
                    extra = Some(schema);
                    is_object = true;
                }
                _ => {}
            }
            if part.get("type").and_then(Value::as_str) == Some("object") {
                is_object = true;
            }
            if part.contains_key("patternProperties") {
                open = true;
            }
        }
        if !is_object || open {
            return Ok(());
        }
        let base = path.len();
        for (key, inner) in map {
            path.truncate(base);
            path.push('.');
            // A field's name is the type's; an unknown key is shown so that the caller can fix it,
            // with invisible and reordering characters made visible; a map's key is the caller's data,
            // which may hold a secret, and is `*`.
            match properties.iter().find_map(|props| props.get(key)) {
                Some(schema) => {
                    path.push_str(&crate::terminal::escaped(key));
                    self.check(schema, inner, path)?;
                }
                None => match extra {
                    Some(schema) => {
                        path.push('*');
                        self.check(schema, inner, path)?;
                    }
                    None => {
                        path.push_str(&crate::terminal::escaped(key));
                        return Err(path.clone());
                    }
                },
            }
        }
        path.truncate(base);
        Ok(())
    }

    fn check_items(
        &self,
        keywords: &'a Map<String, Value>,
        items: &[Value],
        path: &mut String,
    ) -> Result<(), String> {
        let prefix = keywords.get("prefixItems").and_then(Value::as_array);
        let rest = keywords.get("items");
        let base = path.len();
        for (i, item) in items.iter().enumerate() {
            let schema = prefix.and_then(|p| p.get(i)).or(rest);
            if let Some(schema) = schema {
                path.truncate(base);
                path.push_str(&format!("[{i}]"));
                self.check(schema, item, path)?;
            }
        }
        path.truncate(base);
        Ok(())
    }
}

/// Whether a branch of an `anyOf` can be the one `value` parsed as, by its declared type.
fn admits_type(schema: &Value, value: &Value) -> bool {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let admits = |t: &str| t == kind || (t == "number" && kind == "integer");
    match schema.get("type") {
        Some(Value::String(t)) => admits(t),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).any(admits),
        _ => match value {
            Value::Object(_) => {
                schema.get("properties").is_some()
                    || schema.get("additionalProperties").is_some()
                    || schema.get("const").is_none() && schema.get("enum").is_none()
            }
            _ => true,
        },
    }
}

/// Says `additionalProperties: false` on every object schema that lists its properties and says
/// nothing of others: the keys a strict call admits. Only schema positions are walked, so a property
/// that happens to be named `properties` is left as it is.
pub(crate) fn close_objects(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    if map.contains_key("properties") && !map.contains_key("additionalProperties") {
        map.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    for (keyword, value) in map.iter_mut() {
        match (keyword.as_str(), value) {
            (
                "properties" | "$defs" | "definitions" | "patternProperties",
                Value::Object(schemas),
            ) => {
                schemas.values_mut().for_each(close_objects);
            }
            ("anyOf" | "oneOf" | "allOf" | "prefixItems", Value::Array(schemas)) => {
                schemas.iter_mut().for_each(close_objects);
            }
            ("items" | "additionalProperties" | "not" | "if" | "then" | "else", schema) => {
                close_objects(schema);
            }
            _ => {}
        }
    }
}
