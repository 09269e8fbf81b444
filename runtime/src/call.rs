//! What a call brings to its decision besides the tool: an escalated risk, and its arguments as JSON.
//!
//! The arguments are written only when something needs them (an audit sink, an approver, a two-step
//! approval), so an unaudited call that needs no approval never serializes anything.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::risk::Risk;

/// The per-call facts generated code passes to the gate.
#[doc(hidden)]
#[derive(Clone, Copy, Default)]
pub struct CallInfo<'a> {
    /// What the tool's `escalate` function returned for these arguments.
    pub escalated: Option<Risk>,
    /// Writes the arguments as a JSON object; absent when the tool has no arguments to write.
    pub arguments: Option<&'a dyn Fn(&mut ArgumentsWriter)>,
    /// The tool opted in to recording its arguments in the audit log.
    pub record_arguments: bool,
}

/// The risk a call is judged at. The only way to make one takes the maximum, so an escalation can raise
/// a tool's declared risk and never lower it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EffectiveRisk(Risk);

impl EffectiveRisk {
    pub(crate) fn new(declared: Risk, escalated: Option<Risk>) -> EffectiveRisk {
        EffectiveRisk(escalated.map_or(declared, |e| declared.max(e)))
    }

    pub(crate) fn get(self) -> Risk {
        self.0
    }
}

/// The arguments of one call, as canonical-enough JSON and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Arguments {
    pub(crate) json: String,
    pub(crate) digest: String,
}

impl CallInfo<'_> {
    /// The call's arguments, or `None` when one of them is not serializable.
    pub(crate) fn arguments(&self) -> Option<Arguments> {
        let mut writer = ArgumentsWriter {
            buf: Vec::with_capacity(64),
            serializable: true,
        };
        writer.buf.push(b'{');
        if let Some(write) = self.arguments {
            write(&mut writer);
        }
        writer.buf.push(b'}');
        if !writer.serializable {
            return None;
        }
        let json = String::from_utf8(writer.buf).ok()?;
        let digest = sha256_hex(json.as_bytes());
        Some(Arguments { json, digest })
    }
}

/// Receives a call's arguments one by one, in the order of their names.
#[doc(hidden)]
pub struct ArgumentsWriter {
    buf: Vec<u8>,
    serializable: bool,
}

impl ArgumentsWriter {
    /// An argument bound by a pattern, which generated code cannot name: the arguments cannot be written.
    pub fn __toolgate_unnamed(&mut self) {
        self.serializable = false;
    }

    fn key(&mut self, name: &str) {
        if self.buf.len() > 1 {
            self.buf.push(b',');
        }
        self.buf.push(b'"');
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b"\":");
    }

    fn redacted(&mut self, name: &str) {
        self.key(name);
        self.buf.extend_from_slice(b"\"[REDACTED]\"");
    }

    fn value<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) {
        self.key(name);
        if serde_json::to_writer(&mut self.buf, value).is_err() {
            self.serializable = false;
        }
    }
}

/// Wraps a value so that generated code can ask whether it is serializable, without a bound on it.
#[doc(hidden)]
pub struct Arg<'a, T: ?Sized>(pub &'a T);

/// Picked for `(&&Arg(x))` when `x: Serialize`.
#[doc(hidden)]
pub trait SerializableArg {
    fn __toolgate_write(&self, writer: &mut ArgumentsWriter, name: &str, redact: bool);
    fn __toolgate_digest(&self) -> Option<String>;
}

impl<T: Serialize + ?Sized> SerializableArg for &Arg<'_, T> {
    fn __toolgate_write(&self, writer: &mut ArgumentsWriter, name: &str, redact: bool) {
        if redact {
            writer.redacted(name);
        } else {
            writer.value(name, self.0);
        }
    }

    fn __toolgate_digest(&self) -> Option<String> {
        let json = serde_json::to_vec(self.0).ok()?;
        Some(sha256_hex(&json))
    }
}

/// Picked for `(&&Arg(x))` when `x` is not serializable.
#[doc(hidden)]
pub trait OpaqueArg {
    fn __toolgate_write(&self, writer: &mut ArgumentsWriter, name: &str, redact: bool);
    fn __toolgate_digest(&self) -> Option<String>;
}

impl<T: ?Sized> OpaqueArg for Arg<'_, T> {
    fn __toolgate_write(&self, writer: &mut ArgumentsWriter, name: &str, redact: bool) {
        if redact {
            writer.redacted(name);
        } else {
            writer.serializable = false;
        }
    }

    fn __toolgate_digest(&self) -> Option<String> {
        None
    }
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        use std::fmt::Write;
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

// The double reference is what picks the serializable or the opaque path: it is the thing under test.
#[cfg(test)]
#[allow(clippy::needless_borrow)]
mod tests {
    use super::*;

    struct Opaque;

    #[test]
    fn arguments_json_and_digest() {
        let (a, b) = (3u64, "x".to_owned());
        let write = |w: &mut ArgumentsWriter| {
            (&&Arg(&a)).__toolgate_write(w, "a", false);
            (&&Arg(&b)).__toolgate_write(w, "b", false);
        };
        let call = CallInfo {
            arguments: Some(&write),
            ..CallInfo::default()
        };
        let args = call.arguments().unwrap();
        assert_eq!(args.json, r#"{"a":3,"b":"x"}"#);
        assert_eq!(args.digest, sha256_hex(br#"{"a":3,"b":"x"}"#));
        assert_eq!(args.digest.len(), 64);
    }

    #[test]
    fn opaque_and_redacted_arguments() {
        let (a, secret) = (Opaque, "hunter2".to_owned());
        let opaque = |w: &mut ArgumentsWriter| (&&Arg(&a)).__toolgate_write(w, "a", false);
        let call = CallInfo {
            arguments: Some(&opaque),
            ..CallInfo::default()
        };
        assert_eq!(call.arguments(), None);
        let redacted = |w: &mut ArgumentsWriter| {
            (&&Arg(&a)).__toolgate_write(w, "a", true);
            (&&Arg(&secret)).__toolgate_write(w, "secret", true);
        };
        let call = CallInfo {
            arguments: Some(&redacted),
            ..CallInfo::default()
        };
        let json = call.arguments().unwrap().json;
        assert_eq!(json, r#"{"a":"[REDACTED]","secret":"[REDACTED]"}"#);
        assert!(!json.contains("hunter2"));
    }

    #[test]
    fn escalation_never_lowers() {
        for declared in Risk::ALL {
            for escalated in Risk::ALL {
                let effective = EffectiveRisk::new(declared, Some(escalated)).get();
                assert!(effective >= declared && effective >= escalated);
                assert!(effective == declared || effective == escalated);
            }
            assert_eq!(EffectiveRisk::new(declared, None).get(), declared);
        }
    }
}
