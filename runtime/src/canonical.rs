//! Canonical JSON: no whitespace, and the keys of every object sorted, at every depth. Equal values write
//! equal bytes whatever order their maps keep: a `HashMap` in its hasher's order, or serde_json's own map
//! when a dependency anywhere in the build enables its `preserve_order` feature.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Writes `value` canonically to `out`.
pub(crate) fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                scalar(&Value::String(key.clone()), out);
                out.push(b':');
                write(item, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        other => scalar(other, out),
    }
}

/// `value` as canonical JSON text.
pub(crate) fn to_string(value: &Value) -> String {
    let mut out = Vec::new();
    write(value, &mut out);
    String::from_utf8(out).expect("JSON text is UTF-8")
}

fn scalar(value: &Value, out: &mut Vec<u8>) {
    serde_json::to_writer(out, value).expect("a JSON value writes to memory");
}

/// The lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut hex = String::with_capacity(64);
    for byte in Sha256::digest(bytes) {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}
