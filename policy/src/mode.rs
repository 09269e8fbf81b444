//! Agent modes, ordered from most to least restrictive (ADR-005), and sets of them.

use std::fmt;
use std::str::FromStr;

use crate::risk::{ParseError, parse_name};

/// How much autonomy an agent has, ordered `SHADOW < ADVISORY < PARTIAL_AUTO < FULL_AUTO`.
///
/// The ceiling of each mode lives in [`ceiling`](crate::ceiling). `Display` and `Serialize` use the exact
/// names; `FromStr` and `Deserialize` also accept lower case and `-` (`"full-auto"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Mode {
    /// The agent only watches: nothing is applied.
    Shadow = 0,
    /// The agent advises a human, who applies.
    Advisory = 1,
    /// The agent applies low-risk changes itself.
    PartialAuto = 2,
    /// The agent applies any change, critical ones with an approval.
    FullAuto = 3,
}

/// The environment variable [`Mode::from_env`] reads.
pub const MODE_ENV_VAR: &str = "TOOLGATE_MODE";

impl Mode {
    /// Every mode, most restrictive first.
    pub const ALL: [Mode; 4] = [
        Mode::Shadow,
        Mode::Advisory,
        Mode::PartialAuto,
        Mode::FullAuto,
    ];

    /// The exact names, most restrictive first: the only place they are written.
    pub const NAMES: [&'static str; 4] = ["SHADOW", "ADVISORY", "PARTIAL_AUTO", "FULL_AUTO"];

    /// The exact name, e.g. `"FULL_AUTO"`.
    pub const fn as_str(self) -> &'static str {
        Mode::NAMES[self as usize]
    }

    /// The mode of `index` (`mode as u8`); only its two low bits are read.
    pub const fn from_index(index: u8) -> Mode {
        match index & 3 {
            0 => Mode::Shadow,
            1 => Mode::Advisory,
            2 => Mode::PartialAuto,
            _ => Mode::FullAuto,
        }
    }

    /// Reads the mode from `TOOLGATE_MODE`.
    ///
    /// Unset means [`Mode::Shadow`], the most restrictive mode. A value that is set but is not a mode
    /// (empty, misspelt, not Unicode) is an error, never a silent default.
    pub fn from_env() -> Result<Mode, ModeEnvError> {
        Mode::from_env_var(MODE_ENV_VAR)
    }

    /// [`Mode::from_env`] with another variable name.
    pub fn from_env_var(name: &str) -> Result<Mode, ModeEnvError> {
        match std::env::var(name) {
            Err(std::env::VarError::NotPresent) => Ok(Mode::Shadow),
            Err(std::env::VarError::NotUnicode(value)) => Err(ModeEnvError {
                var: name.to_owned(),
                error: ParseError {
                    kind: "mode",
                    input: value.to_string_lossy().into_owned(),
                    expected: &Mode::NAMES,
                },
            }),
            Ok(value) => value.parse().map_err(|error| ModeEnvError {
                var: name.to_owned(),
                error,
            }),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let table = Mode::ALL.map(|m| (m.as_str(), m));
        parse_name(s, &table, "mode", &Mode::NAMES)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Mode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Mode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// `TOOLGATE_MODE` (or another variable) is set to something that is not a mode.
///
/// Its `Debug` form is its message, the sentence users read: `main` returning
/// `Result<_, Box<dyn Error>>` prints an error with `Debug`. `{:#?}` shows its fields.
#[derive(Clone, PartialEq, Eq)]
pub struct ModeEnvError {
    var: String,
    error: ParseError,
}

impl fmt::Display for ModeEnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "environment variable {}: {}", self.var, self.error)
    }
}

impl fmt::Debug for ModeEnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            f.debug_struct("ModeEnvError")
                .field("var", &self.var)
                .field("error", &self.error)
                .finish()
        } else {
            fmt::Display::fmt(self, f)
        }
    }
}

impl std::error::Error for ModeEnvError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// A set of [`Mode`]s, iterated and serialized in the order SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ModeSet(u8);

impl ModeSet {
    /// No mode.
    pub const EMPTY: ModeSet = ModeSet(0);
    /// Every mode.
    pub const ALL: ModeSet = ModeSet(0b1111);

    /// The set of the given modes.
    pub const fn of(modes: &[Mode]) -> ModeSet {
        let mut set = ModeSet::EMPTY;
        let mut i = 0;
        while i < modes.len() {
            set = set.with(modes[i]);
            i += 1;
        }
        set
    }

    /// The set whose bit `1 << mode as u8` is set for each mode in it; other bits are ignored.
    #[doc(hidden)]
    pub const fn __from_bits(bits: u8) -> ModeSet {
        ModeSet(bits & ModeSet::ALL.0)
    }

    /// The bits [`ModeSet::__from_bits`] takes.
    #[doc(hidden)]
    pub const fn __bits(self) -> u8 {
        self.0
    }

    /// This set with `mode` added.
    #[must_use]
    pub const fn with(self, mode: Mode) -> ModeSet {
        ModeSet(self.0 | 1 << mode as u8)
    }

    /// Whether `mode` is in the set.
    pub const fn contains(self, mode: Mode) -> bool {
        self.0 & (1 << mode as u8) != 0
    }

    /// Whether the set has no mode.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many modes the set has.
    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Every subset of the four modes (16 sets), for exhaustive tests.
    pub fn every_subset() -> impl Iterator<Item = ModeSet> {
        (0..16).map(ModeSet)
    }

    /// The modes in the set, most restrictive first.
    pub fn iter(self) -> impl DoubleEndedIterator<Item = Mode> + Clone {
        Mode::ALL.into_iter().filter(move |&m| self.contains(m))
    }
}

impl FromIterator<Mode> for ModeSet {
    fn from_iter<I: IntoIterator<Item = Mode>>(iter: I) -> Self {
        iter.into_iter().fold(ModeSet::EMPTY, ModeSet::with)
    }
}

impl fmt::Debug for ModeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl fmt::Display for ModeSet {
    /// `SHADOW, ADVISORY`, or `none` for the empty set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, mode) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(mode.as_str())?;
        }
        Ok(())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for ModeSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for mode in self.iter() {
            seq.serialize_element(&mode)?;
        }
        seq.end()
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for ModeSet {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let modes = <Vec<Mode> as serde::Deserialize>::deserialize(deserializer)?;
        Ok(modes.into_iter().collect())
    }
}
