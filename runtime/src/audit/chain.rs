//! The one encoding of a hash-chained log line, shared by the JSONL writer and the verifier.
//!
//! The format is specified on [`JsonlSink`](crate::audit::JsonlSink).

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::audit::record::{AuditRecord, Decision, Outcome};
use toolgate_policy::Risk;

/// A sha256 as 64 lowercase hex ASCII bytes: the form that is written, and the form that is hashed.
pub(crate) type HashHex = [u8; 64];

/// The `prev_hash` of the first line of a log.
pub(crate) const GENESIS: HashHex = [b'0'; 64];

const SEQ: &[u8] = b"seq";
const PREV_HASH: &[u8] = b"prev_hash";
const HASH: &[u8] = b"hash";
/// The length of `"hash":"<64 hex digits>"`.
const HASH_MEMBER_LEN: usize = 8 + 64 + 1;

/// Why fields could not be encoded as a line.
#[derive(Debug)]
pub(crate) enum EncodeError {
    Json(serde_json::Error),
    NotAnObject,
    /// Keys out of order or repeated: the fields' serialization is not canonical.
    Unsorted(String),
    /// The fields already have a member the chain adds.
    Reserved(String),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::Json(e) => write!(f, "cannot serialize the record: {e}"),
            EncodeError::NotAnObject => {
                f.write_str("the record does not serialize as a JSON object")
            }
            EncodeError::Unsorted(key) => write!(f, "key `{key}` is out of order or repeated"),
            EncodeError::Reserved(key) => write!(f, "the record has a member `{key}` of its own"),
        }
    }
}

/// Encodes lines, reusing its buffers from one line to the next.
#[derive(Default)]
pub(crate) struct Encoder {
    fields: Vec<u8>,
    members: Vec<Member>,
}

/// One top-level member `"key":value` of the serialized fields, as byte offsets.
#[derive(Clone, Copy)]
struct Member {
    start: usize,
    /// Just past the key's closing quote.
    key_end: usize,
    end: usize,
    /// The key has an escape, so its raw bytes are not its text.
    escaped: bool,
}

impl Member {
    fn key<'a>(&self, json: &'a [u8]) -> Cow<'a, [u8]> {
        let raw = &json[self.start + 1..self.key_end - 1];
        if self.escaped {
            unescape(raw)
        } else {
            Cow::Borrowed(raw)
        }
    }
}

impl Encoder {
    /// Appends to `out` the canonical line (no trailing newline) of `fields` with `seq` and `prev_hash`
    /// merged in, hashed and with its `hash` merged in; returns that hash.
    ///
    /// `fields` must serialize (with `serde_json`, compact) as an object whose keys are sorted and
    /// distinct, and have none of `seq`, `prev_hash`, `hash`; that is checked, so that a line is never
    /// written or accepted in a non-canonical order. On error `out` is left as it was.
    pub(crate) fn encode<T: Serialize + ?Sized>(
        &mut self,
        fields: &T,
        seq: u64,
        prev_hash: &HashHex,
        out: &mut Vec<u8>,
    ) -> Result<HashHex, EncodeError> {
        self.fields.clear();
        serde_json::to_writer(&mut self.fields, fields).map_err(EncodeError::Json)?;
        self.encode_fields(seq, prev_hash, out)
    }

    /// [`encode`](Encoder::encode) of an [`AuditRecord`], the sink's every line, written member by
    /// member in sorted order with the chain's members in their places: no serializer, no scan of the
    /// text for where they go, no second copy of the line. Strings are escaped as `serde_json` escapes
    /// them. Gives the same bytes as `encode` (tested).
    pub(crate) fn encode_record(
        &mut self,
        record: &AuditRecord,
        seq: u64,
        prev_hash: &HashHex,
        out: &mut Vec<u8>,
    ) -> Result<HashHex, EncodeError> {
        // Every field named: a field added to the record does not compile until it is written here.
        let AuditRecord {
            agent,
            arguments,
            arguments_digest,
            by,
            call,
            code,
            decision,
            declared_risk,
            duration_us,
            effective_risk,
            evidence,
            evidence_after,
            evidence_before,
            gate,
            manifest_digest,
            message,
            mode,
            outcome,
            output_digest,
            policy_digest,
            policy_version,
            principal,
            rollback,
            rollback_of,
            rule_in_shadow,
            stage,
            timestamp,
            tool,
        } = record;
        let base = out.len();
        out.reserve(512);
        out.push(b'{');
        let mut line = Line { out, first: true };
        line.string("agent", agent.as_deref());
        line.string("arguments", arguments.as_deref());
        line.string("arguments_digest", arguments_digest.as_deref());
        line.string("by", by.as_deref());
        line.number("call", *call);
        line.string("code", code.as_deref());
        line.string("decision", decision.map(Decision::as_str));
        line.string("declared_risk", declared_risk.map(Risk::as_str));
        if let Some(duration) = duration_us {
            line.number("duration_us", *duration);
        }
        line.string("effective_risk", effective_risk.map(Risk::as_str));
        line.string("evidence", evidence.as_deref());
        line.string("evidence_after", evidence_after.as_deref());
        line.string("evidence_before", evidence_before.as_deref());
        line.number("gate", *gate);
        // `"hash":"…",` after the comma that `gate` ends with; left out of what is hashed.
        let out = line.out;
        out.push(b',');
        let cut_start = out.len();
        out.extend_from_slice(b"\"hash\":\"");
        out.extend_from_slice(&GENESIS);
        out.extend_from_slice(b"\",");
        let cut_end = out.len();
        let mut line = Line { out, first: true };
        line.string("manifest_digest", Some(manifest_digest));
        line.string("message", message.as_deref());
        line.string("mode", Some(mode.as_str()));
        line.string("outcome", outcome.map(Outcome::as_str));
        line.string("output_digest", output_digest.as_deref());
        line.string("policy_digest", policy_digest.as_deref());
        line.number("policy_version", u64::from(*policy_version));
        line.hash("prev_hash", prev_hash);
        line.string("principal", principal.as_deref());
        line.string("rollback", rollback.as_deref());
        line.string("rollback_of", rollback_of.as_deref());
        line.string("rule_in_shadow", rule_in_shadow.as_deref());
        line.number("seq", seq);
        line.string("stage", Some(stage.as_str()));
        line.string("timestamp", Some(timestamp));
        line.string("tool", Some(tool));
        let out = line.out;
        out.push(b'}');
        let hash = chain_hash(prev_hash, &[&out[base..cut_start], &out[cut_end..]]);
        out[cut_start + 8..cut_start + 72].copy_from_slice(&hash);
        Ok(hash)
    }

    /// [`encode_record`](Encoder::encode_record)'s line from an [`AuditRecord`] serialized in
    /// `self.fields` (compact JSON, as `serde_json` writes it): its fields are declared in sorted
    /// order and hold no object, so the chain's members go before `manifest_digest` (`hash`), right
    /// after `policy_version`'s number (`prev_hash`), and before `stage` (`seq`); every record has
    /// `manifest_digest`, `policy_version` and `stage`, in that order, after `call` and `gate`. A key
    /// such as `,"stage":` cannot stand inside a string value, whose quotes are escaped, so it is found
    /// from either end. Falls back to `encode_fields` otherwise.
    #[cfg(feature = "postgres")]
    fn encode_record_fields(
        &mut self,
        seq: u64,
        prev_hash: &HashHex,
        out: &mut Vec<u8>,
    ) -> Result<HashHex, EncodeError> {
        let fields = &self.fields;
        let text = std::str::from_utf8(fields).unwrap_or_default();
        let (Some(digest_at), Some(stage_at)) = (
            text.find(",\"manifest_digest\":"),
            text.rfind(",\"stage\":"),
        ) else {
            return self.encode_fields(seq, prev_hash, out);
        };
        if digest_at >= stage_at {
            return self.encode_fields(seq, prev_hash, out);
        }
        // `policy_version` < `prev_hash` < every key after it (`principal`, `rollback`, `rollback_of`,
        // `stage`): `prev_hash` goes right after `policy_version`, which every record has, and whose
        // value is digits.
        const VERSION: &str = ",\"policy_version\":";
        // Searched from the end: only `principal` and a rollback's fields stand between it and `stage`.
        let Some(version_at) = text[digest_at..stage_at].rfind(VERSION) else {
            return self.encode_fields(seq, prev_hash, out);
        };
        let value_at = digest_at + version_at + VERSION.len();
        let prev_at = value_at
            + fields[value_at..stage_at]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
        if fields.get(prev_at) != Some(&b',') {
            return self.encode_fields(seq, prev_hash, out);
        }
        let mut seq_buf = [0u8; 20];
        let seq_text = format_u64(seq, &mut seq_buf);
        // What is hashed: the line without its `hash` member.
        let base = out.len();
        out.extend_from_slice(&fields[..prev_at]);
        out.extend_from_slice(b",\"prev_hash\":\"");
        out.extend_from_slice(prev_hash);
        out.extend_from_slice(b"\"");
        out.extend_from_slice(&fields[prev_at..stage_at]);
        out.extend_from_slice(b",\"seq\":");
        out.extend_from_slice(seq_text);
        out.extend_from_slice(&fields[stage_at..]);
        let hash = chain_hash(prev_hash, &[&out[base..]]);
        // Then `"hash":"…",` goes in after the comma before `manifest_digest`.
        let at = base + digest_at + 1;
        let mut member = [0u8; HASH_MEMBER_LEN + 1];
        member[..8].copy_from_slice(b"\"hash\":\"");
        member[8..72].copy_from_slice(&hash);
        member[72..].copy_from_slice(b"\",");
        out.splice(at..at, member);
        Ok(hash)
    }

    #[cfg(feature = "postgres")]
    /// [`encode_record`](Encoder::encode_record) of an [`AuditRecord`] already serialized (compact JSON,
    /// as `serde_json` writes it), on another thread.
    pub(crate) fn encode_json(
        &mut self,
        json: &[u8],
        seq: u64,
        prev_hash: &HashHex,
        out: &mut Vec<u8>,
    ) -> Result<HashHex, EncodeError> {
        self.fields.clear();
        self.fields.extend_from_slice(json);
        self.encode_record_fields(seq, prev_hash, out)
    }

    fn encode_fields(
        &mut self,
        seq: u64,
        prev_hash: &HashHex,
        out: &mut Vec<u8>,
    ) -> Result<HashHex, EncodeError> {
        split_members(&self.fields, &mut self.members).ok_or(EncodeError::NotAnObject)?;
        check_order(&self.fields, &self.members)?;

        let base = out.len();
        let mut seq_buf = [0u8; 20];
        let seq_text = format_u64(seq, &mut seq_buf);
        // The members the chain adds, in sorted order. `hash` is written with a placeholder value, left
        // out of what is hashed, then filled in.
        let added: [(&[u8], &[u8], bool); 3] = [
            (HASH, &GENESIS, true),
            (PREV_HASH, prev_hash, true),
            (SEQ, seq_text, false),
        ];
        let mut next_added = 0;
        let mut first = true;
        // Where the `hash` member starts, and the comma before it if it has one.
        let mut hash_at = (0, 0);
        out.push(b'{');
        let mut emit =
            |out: &mut Vec<u8>, first: &mut bool, (name, value, quoted): (&[u8], &[u8], bool)| {
                let comma_at = out.len();
                if !*first {
                    out.push(b',');
                }
                if name == HASH {
                    hash_at = (comma_at, out.len());
                }
                let quote: &[u8] = if quoted { b"\"" } else { b"" };
                for part in [b"\"", name, b"\":", quote, value, quote] {
                    out.extend_from_slice(part);
                }
                *first = false;
            };
        for member in &self.members {
            let key = member.key(&self.fields);
            while let Some(&item) = added.get(next_added) {
                if item.0 >= &*key {
                    break;
                }
                emit(out, &mut first, item);
                next_added += 1;
            }
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(&self.fields[member.start..member.end]);
            first = false;
        }
        for &item in &added[next_added..] {
            emit(out, &mut first, item);
        }
        out.push(b'}');

        // What is hashed is the line without the `hash` member and one comma next to it: the one before
        // it, or the one after it when it comes first (`prev_hash` and `seq` always follow it).
        let (comma_at, member_at) = hash_at;
        let member_end = member_at + HASH_MEMBER_LEN;
        let cut = if comma_at < member_at {
            comma_at..member_end
        } else {
            member_at..member_end + 1
        };
        let hash = chain_hash(prev_hash, &[&out[base..cut.start], &out[cut.end..]]);
        let value_at = member_at + HASH_MEMBER_LEN - 65;
        out[value_at..value_at + 64].copy_from_slice(&hash);
        Ok(hash)
    }
}

/// Members written one after another into a line being encoded.
struct Line<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl Line<'_> {
    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// A string member, left out when absent.
    fn string(&mut self, key: &str, value: Option<&str>) {
        let Some(value) = value else {
            return;
        };
        self.key(key);
        write_json_string(self.out, value);
    }

    fn number(&mut self, key: &str, value: u64) {
        self.key(key);
        let mut buf = [0u8; 20];
        self.out.extend_from_slice(format_u64(value, &mut buf));
    }

    fn hash(&mut self, key: &str, value: &HashHex) {
        self.key(key);
        self.out.push(b'"');
        self.out.extend_from_slice(value);
        self.out.push(b'"');
    }
}

/// `text` as a JSON string, escaped as `serde_json` escapes it: `"`, `\` and control characters, and
/// nothing else.
fn write_json_string(out: &mut Vec<u8>, text: &str) {
    if !needs_escape(text.as_bytes()) {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        // Writing into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut *out, text);
    }
}

/// `sha256(prev_hash ‖ body)` as lowercase hex, where `body` is the concatenation of `parts`.
pub(crate) fn chain_hash(prev_hash: &HashHex, parts: &[&[u8]]) -> HashHex {
    let mut hasher = Sha256::new();
    hasher.update(prev_hash);
    for part in parts {
        hasher.update(part);
    }
    let digest = hasher.finalize();
    let mut hex = [0u8; 64];
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in digest.iter().enumerate() {
        hex[2 * i] = DIGITS[usize::from(byte >> 4)];
        hex[2 * i + 1] = DIGITS[usize::from(byte & 15)];
    }
    hex
}

/// Whether `text` is 64 lowercase hex digits, the only form a hash is written in.
pub(crate) fn parse_hash(text: &str) -> Option<HashHex> {
    let bytes: &[u8; 64] = text.as_bytes().try_into().ok()?;
    bytes
        .iter()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        .then_some(*bytes)
}

fn format_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// The text of an escaped key, as UTF-8 bytes.
fn unescape(raw: &[u8]) -> Cow<'_, [u8]> {
    let mut quoted = Vec::with_capacity(raw.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(raw);
    quoted.push(b'"');
    match serde_json::from_slice::<String>(&quoted) {
        Ok(text) => Cow::Owned(text.into_bytes()),
        Err(_) => Cow::Borrowed(raw),
    }
}

fn check_order(fields: &[u8], members: &[Member]) -> Result<(), EncodeError> {
    let mut previous: Option<Cow<'_, [u8]>> = None;
    for member in members {
        let key = member.key(fields);
        let name = || String::from_utf8_lossy(&key).into_owned();
        if [SEQ, PREV_HASH, HASH].contains(&&*key) {
            return Err(EncodeError::Reserved(name()));
        }
        if previous.as_ref().is_some_and(|p| *p >= key) {
            return Err(EncodeError::Unsorted(name()));
        }
        previous = Some(key);
    }
    Ok(())
}

/// Splits compact JSON text that is one object into its top-level members; `None` if it is not an
/// object. Expects serde_json's compact output, so there is no whitespace to skip.
// Kept out of line: inlined into the encoder, its scanning loop compiles about 20% slower.
#[inline(never)]
fn split_members(json: &[u8], members: &mut Vec<Member>) -> Option<()> {
    members.clear();
    if json.first() != Some(&b'{') || json.last() != Some(&b'}') {
        return None;
    }
    let close = json.len() - 1;
    let mut i = 1;
    if i == close {
        return Some(());
    }
    loop {
        let start = i;
        if json.get(i) != Some(&b'"') {
            return None;
        }
        let (key_end, escaped) = string_end(json, i)?;
        if json.get(key_end) != Some(&b':') {
            return None;
        }
        i = value_end(json, key_end + 1)?;
        members.push(Member {
            start,
            key_end,
            end: i,
            escaped,
        });
        match json.get(i)? {
            b',' => i += 1,
            b'}' if i == close => return Some(()),
            _ => return None,
        }
    }
}

/// The index just past the string that starts with the quote at `start`, and whether it has escapes.
fn string_end(json: &[u8], start: usize) -> Option<(usize, bool)> {
    let mut i = start + 1;
    let mut escaped = false;
    loop {
        // Eight bytes at a time while none is a quote or a backslash: strings are most of a record.
        while let Some(chunk) = json.get(i..i + 8) {
            let word = u64::from_le_bytes(chunk.try_into().ok()?);
            if has_byte(word, b'"') || has_byte(word, b'\\') {
                break;
            }
            i += 8;
        }
        match json.get(i)? {
            b'"' => return Some((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                i += 2;
            }
            _ => i += 1,
        }
    }
}

/// Whether `bytes` has a byte JSON escapes: `"`, `\` or a control character (below 0x20). Eight bytes
/// at a time: most of a line is its strings.
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        // Some byte below 0x20 (exact for a bound up to 0x80).
        let control = word.wrapping_sub(ONES * 0x20) & !word & (ONES << 7) != 0;
        if control || has_byte(word, b'"') || has_byte(word, b'\\') {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// Whether any byte of `word` is `byte`.
fn has_byte(word: u64, byte: u8) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let x = word ^ (u64::from(byte) * ONES);
    x.wrapping_sub(ONES) & !x & (ONES << 7) != 0
}

/// The index just past the value that starts at `start`: at the `,` or `}` that ends its member.
fn value_end(json: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = start;
    loop {
        match json.get(i)? {
            b'"' => {
                i = string_end(json, i)?.0;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth == 0 => return Some(i),
            b'}' | b']' => depth -= 1,
            b',' if depth == 0 => return Some(i),
            _ => {}
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn line(fields: &impl Serialize, seq: u64, prev: &HashHex) -> (String, String) {
        let mut out = b"junk before".to_vec();
        let hash = Encoder::default()
            .encode(fields, seq, prev, &mut out)
            .unwrap();
        let text = String::from_utf8(out.split_off(11)).unwrap();
        (text, String::from_utf8(hash.to_vec()).unwrap())
    }

    #[test]
    fn merges_the_chain_members_in_sorted_position() {
        let fields: BTreeMap<&str, serde_json::Value> = [
            ("agent", "a".into()),
            ("gate", 7.into()),
            ("manifest_digest", "m".into()),
            ("policy_version", 1.into()),
            ("stage", "enter".into()),
            ("tool", "t".into()),
        ]
        .into();
        let (text, hash) = line(&fields, 12, &GENESIS);
        let zeros = "0".repeat(64);
        let body = format!(
            r#"{{"agent":"a","gate":7,"manifest_digest":"m","policy_version":1,"prev_hash":"{zeros}","seq":12,"stage":"enter","tool":"t"}}"#
        );
        // Computed independently (Python hashlib): sha256 of the 64 zeros followed by `body`.
        assert_eq!(
            hash,
            "484d7dd995f730c40304a243e122de2c3c49bbe175d3c4f1ee79de66359b9068"
        );
        assert_eq!(hash.as_bytes(), chain_hash(&GENESIS, &[body.as_bytes()]));
        let expected = body.replace(
            r#","manifest_digest""#,
            &format!(r#","hash":"{hash}","manifest_digest""#),
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn places_members_at_either_end() {
        let empty: BTreeMap<&str, u8> = BTreeMap::new();
        let (text, hash) = line(&empty, 1, &GENESIS);
        assert_eq!(
            text,
            format!(
                r#"{{"hash":"{hash}","prev_hash":"{}","seq":1}}"#,
                "0".repeat(64)
            )
        );
        let last: BTreeMap<&str, u8> = [("a", 1), ("zz", 2)].into();
        let (text, hash) = line(&last, u64::MAX, &GENESIS);
        assert_eq!(
            text,
            format!(
                r#"{{"a":1,"hash":"{hash}","prev_hash":"{}","seq":18446744073709551615,"zz":2}}"#,
                "0".repeat(64)
            )
        );
        let nested: BTreeMap<&str, serde_json::Value> = [
            ("h", serde_json::json!({"x": [1, "}", {"y": ","}]})),
            ("t", 1.into()),
        ]
        .into();
        let (text, _) = line(&nested, 2, &GENESIS);
        assert!(
            text.starts_with(r#"{"h":{"x":[1,"}",{"y":","}]},"hash":""#),
            "{text}"
        );
    }

    #[test]
    fn refuses_unsorted_or_reserved_members() {
        #[derive(Serialize)]
        struct Unsorted {
            b: u8,
            a: u8,
        }
        let mut out = b"kept".to_vec();
        let mut encoder = Encoder::default();
        let err = encoder.encode(&Unsorted { b: 1, a: 2 }, 1, &GENESIS, &mut out);
        assert!(matches!(err, Err(EncodeError::Unsorted(k)) if k == "a"));
        let reserved: BTreeMap<&str, u8> = [("seq", 1)].into();
        let err = encoder.encode(&reserved, 1, &GENESIS, &mut out);
        assert!(matches!(err, Err(EncodeError::Reserved(k)) if k == "seq"));
        let err = encoder.encode(&[1, 2], 1, &GENESIS, &mut out);
        assert!(matches!(err, Err(EncodeError::NotAnObject)));
        assert_eq!(out, b"kept");
    }

    #[test]
    fn a_full_audit_record_is_canonical() {
        use crate::audit::record::{AuditRecord, Decision, Outcome, Stage};
        use crate::{Mode, Risk};

        let mut record = AuditRecord::new(Stage::Exit, "users.delete", Mode::FullAuto, 3);
        // Naming every field, so that a new one fails to compile here until it is covered.
        let AuditRecord {
            agent,
            arguments,
            arguments_digest,
            by,
            call: _,
            code,
            decision,
            declared_risk,
            duration_us,
            effective_risk,
            evidence,
            evidence_after,
            evidence_before,
            gate: _,
            manifest_digest: _,
            message,
            mode: _,
            outcome,
            output_digest,
            policy_digest,
            policy_version: _,
            principal,
            rollback,
            rollback_of,
            rule_in_shadow,
            stage: _,
            timestamp: _,
            tool: _,
        } = &mut record;
        *agent = Some("a".into());
        *arguments = Some("{}".into());
        *arguments_digest = Some("d".into());
        *by = Some("b".into());
        *code = Some("c".into());
        *decision = Some(Decision::Approved);
        *declared_risk = Some(Risk::HighWrite);
        *duration_us = Some(5);
        *effective_risk = Some(Risk::HighWrite);
        *message = Some("m".into());
        *outcome = Some(Outcome::Ok);
        *output_digest = Some("o".into());
        *policy_digest = Some("pd".into());
        *principal = Some("p".into());
        *evidence = Some("{}".into());
        *evidence_after = Some("ea".into());
        *evidence_before = Some("eb".into());
        *rollback = Some("{}".into());
        *rollback_of = Some("1/2".into());
        *rule_in_shadow = Some("refused (DENY_LISTED) by x (f:1:1)".into());
        let mut out = Vec::new();
        Encoder::default()
            .encode(&record, 1, &GENESIS, &mut out)
            .expect("AuditRecord's fields must be declared in sorted order");
        let parsed: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&out).unwrap();
        assert_eq!(parsed.len(), 31);
        assert_eq!(serde_json::to_vec(&parsed).unwrap(), out);
    }

    #[test]
    fn a_record_encodes_alike_through_either_path() {
        use crate::audit::record::{AuditRecord, Decision, Stage};
        use crate::{Mode, Risk};

        let hostile = [
            "plain",
            ",\"stage\":\"enter\"",
            ",\"manifest_digest\":\"x\",\"stage\":1",
            "\\\",\"stage\":",
            "é\u{0}\n\"}{",
            ",\"principal\":\"x\"",
            "\\\",\"principal\":",
            ",\"rollback\":\"x\"",
            "\\\",\"rollback_of\":",
            ",\"rule_in_shadow\":\"x\",\"seq\":1",
        ];
        let mut fast = Encoder::default();
        let mut slow = Encoder::default();
        let mut prev = GENESIS;
        for (i, text) in hostile.iter().enumerate() {
            for stage in [
                Stage::Enter,
                Stage::Exit,
                Stage::ModeLowered,
                Stage::FleetLost,
            ] {
                let mut record =
                    AuditRecord::new(stage, format!("t{text}"), Mode::PartialAuto, i as u64);
                record.agent = Some((*text).to_owned().into());
                record.arguments = Some((*text).to_owned());
                record.message = Some((*text).to_owned());
                record.by = Some((*text).to_owned());
                // Every other record names a principal, which sorts between `prev_hash` and `seq`.
                if i % 2 == 0 {
                    record.principal = Some((*text).to_owned().into());
                }
                // So do a plan and the call a rollback undoes, with or without a principal.
                if stage == Stage::Enter || i % 3 == 0 {
                    record.rollback = Some((*text).to_owned());
                }
                if stage == Stage::Exit || i % 3 == 1 {
                    record.rollback_of = Some((*text).to_owned());
                }
                if stage == Stage::Enter || i % 4 == 1 {
                    record.rule_in_shadow = Some((*text).to_owned());
                }
                record.decision = Some(Decision::Allowed);
                record.declared_risk = Some(Risk::LowWrite);
                let (mut a, mut b) = (b"kept".to_vec(), b"kept".to_vec());
                let seq = 1 + i as u64 * 1_000_000_007;
                let ha = fast.encode_record(&record, seq, &prev, &mut a).unwrap();
                let hb = slow.encode(&record, seq, &prev, &mut b).unwrap();
                assert_eq!(ha, hb);
                assert_eq!(String::from_utf8_lossy(&a), String::from_utf8_lossy(&b));
                prev = ha;
            }
        }
    }

    #[test]
    fn every_name_and_field_encodes_alike_through_either_path() {
        use crate::audit::record::{AuditRecord, Decision, Outcome, Stage};
        use crate::{Mode, Risk};

        let stages = Stage::ALL;
        let decisions = [
            Decision::Allowed,
            Decision::Approved,
            Decision::Granted,
            Decision::Refused,
        ];
        let outcomes = [
            Outcome::Ok,
            Outcome::Error,
            Outcome::Panic,
            Outcome::Cancelled,
            Outcome::Refused,
        ];
        let texts = ["", "x", "\u{7f}\u{1f}\t\"\\/é", "日本"];
        let (mut fast, mut slow) = (Encoder::default(), Encoder::default());
        let mut prev = GENESIS;
        for (i, stage) in stages.into_iter().enumerate() {
            let text = texts[i % texts.len()];
            let mut record = AuditRecord::new(
                stage,
                text.to_owned(),
                Mode::ALL[i % 4],
                u64::MAX - i as u64,
            );
            record.gate = i as u64;
            record.policy_version = u32::MAX - i as u32;
            record.timestamp = text.to_owned();
            record.manifest_digest = text.to_owned().into();
            if i % 2 == 0 {
                record.agent = Some(text.to_owned().into());
                record.arguments = Some(text.to_owned());
                record.arguments_digest = Some(text.to_owned());
                record.by = Some(text.to_owned());
                record.code = Some(text.to_owned().into());
                record.decision = Some(decisions[i % 4]);
                record.declared_risk = Some(Risk::ALL[i % 4]);
                record.duration_us = Some(i as u64 * 999);
                record.effective_risk = Some(Risk::ALL[(i + 1) % 4]);
                record.evidence = Some(text.to_owned());
                record.evidence_after = Some(text.to_owned());
                record.evidence_before = Some(text.to_owned());
                record.message = Some(text.to_owned());
                record.outcome = Some(outcomes[i % 5]);
                record.output_digest = Some(text.to_owned());
                record.policy_digest = Some(text.to_owned());
                record.principal = Some(text.to_owned().into());
                record.rollback = Some(text.to_owned());
                record.rollback_of = Some(text.to_owned());
                record.rule_in_shadow = Some(text.to_owned());
            } else {
                record.outcome = Some(outcomes[i % 5]);
                record.decision = Some(decisions[i % 4]);
            }
            let (mut a, mut b) = (b"kept".to_vec(), b"kept".to_vec());
            let ha = fast
                .encode_record(&record, i as u64 + 1, &prev, &mut a)
                .unwrap();
            let hb = slow.encode(&record, i as u64 + 1, &prev, &mut b).unwrap();
            assert_eq!(String::from_utf8_lossy(&a), String::from_utf8_lossy(&b));
            assert_eq!(ha, hb);
            prev = ha;
        }
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        // Every ASCII byte, and a multi-byte character, at each place in and around an 8-byte chunk.
        let specials: Vec<String> = (0u8..0x80)
            .map(|b| char::from(b).to_string())
            .chain(["é".to_owned(), "\u{7f}".to_owned(), "日".to_owned()])
            .collect();
        for special in &specials {
            for at in 0..20 {
                for len in [at, at + 1, at + 7, 24] {
                    let mut text = "a".repeat(at);
                    text.push_str(special);
                    text.push_str(&"b".repeat(len.saturating_sub(at)));
                    let mut out = Vec::new();
                    write_json_string(&mut out, &text);
                    assert_eq!(out, serde_json::to_vec(&text).unwrap(), "{text:?}");
                    assert_eq!(
                        needs_escape(text.as_bytes()),
                        serde_json::to_string(&text).unwrap() != format!("\"{text}\""),
                        "{text:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn hashes_are_lowercase_hex_only() {
        assert!(parse_hash(&"a".repeat(64)).is_some());
        assert!(parse_hash(&"A".repeat(64)).is_none());
        assert!(parse_hash(&"a".repeat(63)).is_none());
        assert!(parse_hash(&"é".repeat(32)).is_none());
    }
}
