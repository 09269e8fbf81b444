//! [`Mode`] and [`Risk`] as [`clap::ValueEnum`]s (feature `clap`).

use clap::ValueEnum;
use clap::builder::PossibleValue;

use crate::mode::Mode;
use crate::risk::Risk;

/// The exact name (shown in help), with hidden aliases in lower case and with `-` for `_`, so that
/// `FULL_AUTO`, `full_auto`, `full-auto` and `FULL-AUTO` parse even where the argument does not set
/// `ignore_case`.
fn name_with_aliases(name: &'static str, aliases: &[&'static str]) -> PossibleValue {
    PossibleValue::new(name).aliases(aliases.iter().copied())
}

impl ValueEnum for Mode {
    fn value_variants<'a>() -> &'a [Self] {
        &Mode::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            Mode::Shadow => "the agent only watches: nothing is applied",
            Mode::Advisory => "the agent advises a human, who applies",
            Mode::PartialAuto => "the agent applies low-risk changes itself",
            Mode::FullAuto => "the agent applies any change, critical ones with an approval",
        };
        let aliases: &[&'static str] = match self {
            Mode::Shadow => &["shadow"],
            Mode::Advisory => &["advisory"],
            Mode::PartialAuto => &["partial_auto", "partial-auto", "PARTIAL-AUTO"],
            Mode::FullAuto => &["full_auto", "full-auto", "FULL-AUTO"],
        };
        Some(name_with_aliases(self.as_str(), aliases).help(help))
    }
}

impl ValueEnum for Risk {
    fn value_variants<'a>() -> &'a [Self] {
        &Risk::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let aliases: &[&'static str] = match self {
            Risk::ReadOnly => &["read_only", "read-only", "READ-ONLY"],
            Risk::ProposeOnly => &["propose_only", "propose-only", "PROPOSE-ONLY"],
            Risk::LowWrite => &["low_write", "low-write", "LOW-WRITE"],
            Risk::HighWrite => &["high_write", "high-write", "HIGH-WRITE"],
        };
        Some(name_with_aliases(self.as_str(), aliases))
    }
}
