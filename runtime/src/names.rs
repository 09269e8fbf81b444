//! Names that a person reads: principals, agents, operators, writers, fleets, targets, tool ids, the
//! policy file's tables. Two such names are one name when they read alike: [`reading`] is the key they
//! are compared by, and [`refusal`] says why a name cannot stand for one name at all. The rule is
//! written out once, in SECURITY.md ("Names that read alike").
//!
//! ```
//! # extern crate toolgate_runtime as toolgate;
//! use toolgate::names::{reading, refusal, same};
//!
//! // Cyrillic `о`, fullwidth letters, a trailing space: all read as `olga`.
//! assert!(same("olga", "\u{43e}lga"));
//! assert!(same("olga", "ｏｌｇａ"));
//! assert!(same("olga", "olga "));
//! // Path spellings of `.`, `..` and `~` read as the directory they name.
//! assert_eq!(reading("./."), ".");
//! assert_eq!(reading("../"), "..");
//! assert!(same("all", "𝐚𝐥𝐥"));
//! // Plain names stay apart, and are not refused.
//! assert!(!same("olga", "ravi"));
//! assert_eq!(refusal("olga"), None);
//! assert!(refusal("olga ").is_some());
//! ```

use unicode_normalization::UnicodeNormalization;
use unicode_security::{RestrictionLevel, RestrictionLevelDetection, skeleton};

use crate::terminal::{escaped, hides};

/// The key a name is compared by: two names that a person reads alike have the same reading.
///
/// In order: Unicode's compatibility forms folded (NFKC: fullwidth, mathematical, circled and
/// modifier letters as the letters they are); every character a reader cannot see or that reorders
/// text dropped ([`hides`], except spaces); each run of spaces made one space,
/// and the spaces around the name dropped; each character replaced by its prototype among Unicode's
/// confusables (the skeleton of UTS #39: Cyrillic `о` as `o`, `I` as `l`); then, in a name with a
/// `/`, the spellings of one path made one (empty and `.` segments dropped, a trailing `/` too:
/// `./.`, `.//` and `./` read as `.`, `../` as `..`, `~/` as `~`). Case is kept: `Olga` and `olga`
/// are two names.
///
/// The reading is a key, not a name to show: `m` reads as `rn`, as the confusables have it.
pub fn reading(name: &str) -> String {
    let folded: String = name.nfkc().collect();
    let mut seen = String::with_capacity(folded.len());
    for c in folded.chars() {
        if c.is_whitespace() {
            if !seen.is_empty() && !seen.ends_with(' ') {
                seen.push(' ');
            }
        } else if !hides(c) {
            seen.push(c);
        }
    }
    let seen = seen.trim_end();
    let read: String = skeleton(seen).collect();
    if read.contains('/') {
        path(&read)
    } else {
        read
    }
}

/// A path's spellings made one: empty and `.` segments dropped, `.` for a relative path left empty.
fn path(read: &str) -> String {
    let absolute = read.starts_with('/');
    let kept: Vec<&str> = read
        .split('/')
        .filter(|segment| !segment.is_empty() && *segment != ".")
        .collect();
    let joined = kept.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// Whether `a` and `b` read alike: the same [`reading`].
pub fn same(a: &str, b: &str) -> bool {
    a == b || reading(a) == reading(b)
}

/// Why `name` cannot be one name a person reads, if it cannot: it is empty; it begins or ends with a
/// space; it holds a character a reader cannot see or that reorders text; it is written with
/// Unicode's compatibility forms (it is not its own NFKC: `ｏｌｇａ`, `𝐚𝐥𝐥`); or it mixes scripts
/// that a reader takes one for another (Latin with Cyrillic or Greek, as `оlga` with a Cyrillic `о`:
/// UTS #39's moderately restrictive level is the most allowed, so Latin with Han, Hiragana, Katakana
/// or Hangul passes). A sentence naming the cause, the name escaped.
pub fn refusal(name: &str) -> Option<String> {
    let shown = escaped(name);
    if name.trim().is_empty() {
        return Some(format!("the name `{shown}` is empty"));
    }
    if name.trim() != name {
        return Some(format!(
            "the name `{shown}` begins or ends with a space, which a reader cannot see"
        ));
    }
    if let Some(c) = name.chars().find(|c| hides(*c)) {
        return Some(format!(
            "the name `{shown}` holds U+{:04X}, a character a reader cannot see or that reorders text",
            u32::from(c)
        ));
    }
    let folded: String = name.nfkc().collect();
    if folded != name {
        return Some(format!(
            "the name `{shown}` is written with compatibility forms and reads as `{}`",
            escaped(&folded)
        ));
    }
    let letters: String = name.chars().filter(|c| c.is_alphanumeric()).collect();
    if !letters
        .as_str()
        .check_restriction_level(RestrictionLevel::ModeratelyRestrictive)
    {
        return Some(format!(
            "the name `{shown}` mixes scripts that a reader takes one for another"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[allow(dead_code)]
    mod corpus {
        include!("../../tests/common/lookalikes.rs");
    }
    use corpus::*;

    #[test]
    fn every_look_alike_of_the_corpus_reads_as_its_name_and_plain_names_stay_apart() {
        for (name, alikes) in LOOK_ALIKES {
            assert_eq!(refusal(name), None, "{name:?}");
            for alike in *alikes {
                assert_eq!(reading(alike), reading(name), "{alike:?} against {name:?}");
                assert!(same(name, alike), "{alike:?} against {name:?}");
            }
        }
        for (i, a) in DISTINCT.iter().enumerate() {
            for b in &DISTINCT[i + 1..] {
                assert!(!same(a, b), "{a:?} and {b:?}");
            }
        }
    }

    #[test]
    fn every_look_alike_of_a_person_s_name_is_refused_as_a_name() {
        for (name, alikes) in LOOK_ALIKES {
            if name.contains(['.', '~', '/']) {
                continue;
            }
            for alike in *alikes {
                if alike != name {
                    assert!(refusal(alike).is_some(), "{alike:?}");
                }
            }
        }
    }

    #[test]
    fn look_alikes_are_refused_each_for_its_cause() {
        for (name, cause) in [
            ("", "empty"),
            ("  ", "empty"),
            ("olga ", "begins or ends with a space"),
            (" olga", "begins or ends with a space"),
            ("ol\u{200b}ga", "cannot see"),
            ("ol\u{202e}ga", "reorders"),
            ("ｏｌｇａ", "reads as `olga`"),
            ("𝐚𝐥𝐥", "reads as `all`"),
            ("\u{43e}lga", "mixes scripts"),
            ("\u{3b1}lice", "mixes scripts"),
        ] {
            let why = refusal(name).unwrap_or_default();
            assert!(why.contains(cause), "{name:?}: {why}");
        }
        for fine in [
            "olga",
            "olga k",
            "Ольга",
            "Όλγα",
            "日本",
            "tanaka-田中",
            "é.txt",
            "org/repo",
        ] {
            assert_eq!(refusal(fine), None, "{fine:?}");
        }
    }

    #[test]
    fn an_ascii_name_reads_as_itself_unless_a_confusable_or_a_path_spelling() {
        for name in [
            "olga",
            "ravi",
            "desk",
            "fleet-a",
            "writer_a",
            "org/repo",
            "ops:alice",
        ] {
            assert_eq!(reading(name), name);
        }
        assert_eq!(reading("a//b/./c/"), "a/b/c");
        assert_eq!(reading("/"), "/");
        assert_eq!(reading("//./"), "/");
    }

    proptest! {
        // A name, its characters each swapped for a look-alike of the corpus or kept, a hidden
        // character put among them and spaces around them, reads as the name, and is refused as a
        // name.
        #[test]
        fn a_name_and_any_look_alike_built_from_the_corpus_read_alike(
            name in "[a-z][a-z0-9_-]{0,15}",
            picks in prop::collection::vec(any::<prop::sample::Index>(), 16),
            hidden in prop::sample::select(HIDDEN.to_vec()),
            at in any::<prop::sample::Index>(),
            around in prop::sample::select(vec!["", " ", "\u{a0}", "\u{3000}"]),
        ) {
            let mut alike = String::new();
            for (i, c) in name.chars().enumerate() {
                let forms = look_alikes_of(c);
                match picks[i].index(forms.len() + 1) {
                    0 => alike.push(c),
                    n => alike.push_str(&forms[n - 1]),
                }
            }
            let cut = at.index(alike.chars().count() + 1);
            let cut = alike.char_indices().nth(cut).map_or(alike.len(), |(i, _)| i);
            alike.insert_str(cut, hidden);
            let alike = format!("{around}{alike}{around}");
            prop_assert_eq!(reading(&alike), reading(&name));
            prop_assert!(same(&name, &alike));
            prop_assert!(refusal(&alike).is_some(), "{:?}", alike);
        }
    }
}
