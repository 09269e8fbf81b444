//! Risk levels, ordered from harmless to critical (ADR-005).

use std::fmt;
use std::str::FromStr;

/// How much damage a tool can do, ordered `READ_ONLY < PROPOSE_ONLY < LOW_WRITE < HIGH_WRITE`.
///
/// `Display` and `Serialize` use the exact names (`"HIGH_WRITE"`); `FromStr` and `Deserialize` also
/// accept lower case and `-` (`"high-write"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Risk {
    /// Reads only; no state changes (`get_user`, `search_docs`).
    ReadOnly = 0,
    /// Produces drafts or plans and applies nothing (`draft_email`, `plan_migration`).
    ProposeOnly = 1,
    /// A non-critical update (`log_comment`, `update_label`).
    LowWrite = 2,
    /// A critical state change (`delete_resource`, `transfer_funds`); always needs an approval.
    HighWrite = 3,
}

impl Risk {
    /// Every risk level, lowest first.
    pub const ALL: [Risk; 4] = [
        Risk::ReadOnly,
        Risk::ProposeOnly,
        Risk::LowWrite,
        Risk::HighWrite,
    ];

    /// The exact names, lowest first: the only place they are written.
    pub const NAMES: [&'static str; 4] = ["READ_ONLY", "PROPOSE_ONLY", "LOW_WRITE", "HIGH_WRITE"];

    /// The exact name, e.g. `"HIGH_WRITE"`.
    pub const fn as_str(self) -> &'static str {
        Risk::NAMES[self as usize]
    }

    /// Whether a tool of this risk changes state (LOW_WRITE and HIGH_WRITE).
    pub const fn is_write(self) -> bool {
        matches!(self, Risk::LowWrite | Risk::HighWrite)
    }
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing a [`Risk`] or a [`Mode`](crate::Mode) from text.
///
/// Its `Debug` form is its message, which `main` returning `Result<_, Box<dyn Error>>` prints;
/// `{:#?}` shows its fields.
#[derive(Clone, PartialEq, Eq)]
pub struct ParseError {
    pub(crate) kind: &'static str,
    pub(crate) input: String,
    pub(crate) expected: &'static [&'static str],
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a {}; expected one of ",
            self.input, self.kind
        )?;
        for (i, name) in self.expected.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

impl fmt::Debug for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            f.debug_struct("ParseError")
                .field("kind", &self.kind)
                .field("input", &self.input)
                .field("expected", &self.expected)
                .finish()
        } else {
            fmt::Display::fmt(self, f)
        }
    }
}

impl std::error::Error for ParseError {}

/// Matches `input` against exact names, ignoring ASCII case and reading `-` as `_`.
pub(crate) fn parse_name<T: Copy>(
    input: &str,
    names: &[(&'static str, T)],
    kind: &'static str,
    expected: &'static [&'static str],
) -> Result<T, ParseError> {
    let found = names.iter().find(|(name, _)| {
        name.len() == input.len()
            && name
                .bytes()
                .zip(input.bytes())
                .all(|(n, i)| n == i.to_ascii_uppercase() || (n == b'_' && i == b'-'))
    });
    match found {
        Some(&(_, value)) => Ok(value),
        None => Err(ParseError {
            kind,
            input: input.to_owned(),
            expected,
        }),
    }
}

impl FromStr for Risk {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let table = Risk::ALL.map(|r| (r.as_str(), r));
        parse_name(s, &table, "risk level", &Risk::NAMES)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Risk {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Risk {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
