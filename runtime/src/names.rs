//! Names that a person reads: principals, agents, operators, writers, fleets, targets, tool ids, the
//! policy file's tables. Two such names are one name when they read alike: [`reading`] is the key they
//! are compared by, and [`refusal`] says why a name cannot stand for one name at all. The rule is
//! written out once, in SECURITY.md ("Names that read alike").
//!
//! The sites that take a name [`refusal`] allows (a fleet, a writer of the trail, an operator, an
//! OAuth subject) store and compare its bytes, so the rule lets through at most one spelling of a
//! reading it can tell apart: scripts mixed only as UTS #39's highly restrictive level allows, and no
//! name with a plainer spelling that reads alike and is allowed (some of its characters beyond ASCII
//! written as the ASCII they read as). A name in ASCII is never refused for its reading, though the
//! confusables read `I` as `l`: that is the one spelling kept.
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
//! // An Armenian `օ`, a dotless `ı`, an en dash: each reads as a name in ASCII, and is refused.
//! assert!(same("prod", "pr\u{585}d") && refusal("pr\u{585}d").is_some());
//! assert!(refusal("l\u{131}nk").is_some());
//! assert!(refusal("desk\u{2013}a").is_some());
//! // A path reads as what it names.
//! assert_eq!(reading("/tmp/.."), "/");
//! assert_eq!(reading("a/b/../.."), ".");
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
/// `/`, the path read as what it names (`./.`, `.//`, `./` and `x/..` read as `.`, `../`
/// as `..`, `~/` as `~`, `/tmp/..` as `/`). Case is kept: `Olga` and `olga` are two names.
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

/// How a name whose case does not matter (a URI's host) reads: its compatibility forms folded
/// (`ᴬᴸᴸ` as `ALL`), then without its case, then [`reading`], so that `ALL`, `all` and `ａｌｌ` are
/// one name.
pub(crate) fn reading_without_case(name: &str) -> String {
    reading(&name.nfkc().collect::<String>().to_lowercase())
}

/// A path read lexically, as what it names: empty and `.` segments dropped; `..` takes back the named
/// segment before it, stays at the root `/`, and is kept at the head of a path that climbs above
/// where it starts (a relative one, or one from the home `~`). So `a/b/../..` and `./` read as `.`,
/// `/tmp/..` and `/..` as `/`, `x/../..` as `..`, `~/x/..` as `~`, `~/..` as itself.
pub(crate) fn path(read: &str) -> String {
    let (root, rest) = match read.strip_prefix('/') {
        Some(rest) => ("/", rest),
        None if read == "~" => ("~", ""),
        None => match read.strip_prefix("~/") {
            Some(rest) => ("~", rest),
            None => ("", read),
        },
    };
    let mut kept: Vec<&str> = Vec::new();
    for segment in rest.split('/') {
        match segment {
            "" | "." => {}
            ".." => match kept.last() {
                Some(named) if *named != ".." => {
                    kept.pop();
                }
                _ if root != "/" => kept.push(".."),
                _ => {}
            },
            named => kept.push(named),
        }
    }
    let joined = kept.join("/");
    match (root, joined.is_empty()) {
        ("", true) => ".".to_owned(),
        ("", false) => joined,
        ("/", _) => format!("/{joined}"),
        (root, true) => root.to_owned(),
        (root, false) => format!("{root}/{joined}"),
    }
}

/// Whether `a` and `b` read alike: the same [`reading`].
pub fn same(a: &str, b: &str) -> bool {
    a == b || reading(a) == reading(b)
}

/// Why `name` cannot be one name a person reads, if it cannot: it is empty; it begins or ends with a
/// space; it holds a character a reader cannot see or that reorders text; it is written with
/// Unicode's compatibility forms (it is not its own NFKC: `ｏｌｇａ`, `𝐚𝐥𝐥`); it mixes scripts
/// beyond UTS #39's highly restrictive level (Latin, Han, Hiragana and Katakana together; Han with
/// Bopomofo; Han with Hangul: so `оlga` with a Cyrillic `о`, `prօd` with an Armenian `օ` or `oוga`
/// with a Hebrew `ו` are refused, `tanaka-田中` is not); or it has a plainer spelling that reads
/// alike and that this rule allows, some of its characters beyond ASCII written as the ASCII they
/// read as (`lınk` with a dotless `ı`, `desk–a` with an en dash, `o’brien` with a typographic
/// quote, an all-Cyrillic `оса`: each reads as a name written in ASCII, which is the one spelling
/// of it kept). A name in ASCII is never refused for its reading, whatever the confusables make of
/// it (`I` reads as `l`). A sentence naming the cause, the name escaped.
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
    if !scripts_allowed(name) {
        return Some(format!(
            "the name `{shown}` mixes scripts that a reader takes one for another"
        ));
    }
    plainer(name).map(|plain| {
        format!(
            "the name `{shown}` reads as `{}`, the same name in plainer characters",
            escaped(&plain)
        )
    })
}

/// Whether the letters and digits of `name` keep to UTS #39's highly restrictive level: one script,
/// or Latin with Han and the Japanese kana, with Han and Bopomofo, or with Han and Hangul.
fn scripts_allowed(name: &str) -> bool {
    let letters: String = name.chars().filter(|c| c.is_alphanumeric()).collect();
    letters
        .as_str()
        .check_restriction_level(RestrictionLevel::HighlyRestrictive)
}

/// A spelling of `name` that reads as it, allowed by the rule of scripts, with some of its characters
/// beyond ASCII written as the ASCII they read as; `None` where there is none.
///
/// Written as ASCII, a character either keeps the name's scripts (it is punctuation, a space, a digit
/// or a Latin letter such as `ı`, or the name already mixes Latin with Han), and then that one
/// character written so is such a spelling; or it brings Latin into a name of one other script, which
/// the rule of scripts allows only once none of that script is left, and then writing every such
/// character as ASCII is such a spelling if any is. So the spellings tried are each character alone,
/// then all of them at once.
fn plainer(name: &str) -> Option<String> {
    let plain_of = |c: char| -> Option<String> {
        if c.is_ascii() {
            return None;
        }
        let read: String = if c.is_whitespace() {
            " ".to_owned()
        } else {
            skeleton(c.encode_utf8(&mut [0; 4])).collect()
        };
        read.is_ascii().then_some(read)
    };
    let chars: Vec<char> = name.chars().collect();
    let spelled = |at: Option<usize>| -> String {
        let mut spelling = String::with_capacity(name.len());
        for (i, c) in chars.iter().enumerate() {
            match plain_of(*c) {
                Some(plain) if at.is_none_or(|at| at == i) => spelling.push_str(&plain),
                _ => spelling.push(*c),
            }
        }
        spelling
    };
    let plain: Vec<usize> = (0..chars.len())
        .filter(|i| plain_of(chars[*i]).is_some())
        .collect();
    plain
        .iter()
        .map(|i| spelled(Some(*i)))
        .chain((!plain.is_empty()).then(|| spelled(None)))
        .find(|spelling| scripts_allowed(spelling))
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
            ("pr\u{585}d", "mixes scripts"),
            ("o\u{5d5}ga", "mixes scripts"),
            ("l\u{131}nk", "reads as `link`"),
            ("desk\u{2013}a", "reads as `desk-a`"),
            ("o\u{2019}brien", "reads as `o'brien`"),
            ("\u{43e}\u{441}\u{430}", "reads as `oca`"),
            ("\u{585}\u{57d}", "reads as `ou`"),
            (
                "\u{41e}\u{43b}\u{44c}\u{433}\u{430}\u{2013}1",
                "reads as `Ольга-1`",
            ),
            ("\u{7530}\u{4e2d}\u{131}", "reads as `田中i`"),
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
            "Ольга-1",
            "김-kim",
            "かな-kana",
            "Müller",
            "I0",
            "rn",
        ] {
            assert_eq!(refusal(fine), None, "{fine:?}");
        }
    }

    // Every character beyond ASCII of the Basic Multilingual Plane that reads as ASCII, put after
    // a name of each script the rule allows with Latin or alone: that name and the one with the
    // character written as the ASCII it reads as are never both allowed.
    #[test]
    fn no_two_names_allowed_read_alike_through_a_character_that_reads_as_ascii() {
        let mut tried = 0;
        for c in (0x80..=0xFFFF).filter_map(char::from_u32) {
            let read: String = skeleton(c.encode_utf8(&mut [0; 4])).collect();
            if !read.is_ascii() || read.is_empty() || c.to_string().nfkc().ne([c]) {
                continue;
            }
            for before in [
                "",
                "a",
                "7",
                "田中",
                "かな",
                "김",
                "ㄅ",
                "Ольга",
                "Ολγα",
                "שלום",
            ] {
                let alike = format!("{before}{c}");
                let plain = format!("{before}{read}");
                if refusal(&alike).is_none() {
                    assert!(refusal(&plain).is_some(), "{alike:?} and {plain:?}");
                }
                tried += 1;
            }
        }
        assert!(tried > 5_000, "{tried}");
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

    /// The folders from the root that `path` leads to, walking a tree from the working folder `cwd`,
    /// with `~` leading it the home folder `home`.
    fn walked(path: &str, cwd: &[String], home: &[String]) -> Vec<String> {
        let (mut at, rest) = if let Some(rest) = path.strip_prefix('/') {
            (Vec::new(), rest)
        } else if path == "~" {
            (home.to_vec(), "")
        } else if let Some(rest) = path.strip_prefix("~/") {
            (home.to_vec(), rest)
        } else {
            (cwd.to_vec(), path)
        };
        for segment in rest.split('/') {
            match segment {
                "" | "." => {}
                ".." => {
                    at.pop();
                }
                named => at.push(named.to_owned()),
            }
        }
        at
    }

    /// Every path of up to `n` segments of `alphabet`, after each of `roots`.
    fn every_path(roots: &[&str], alphabet: &[&str], n: usize) -> Vec<String> {
        let mut paths: Vec<Vec<&str>> = vec![Vec::new()];
        let mut all = Vec::new();
        for _ in 0..n {
            paths = paths
                .iter()
                .flat_map(|p| {
                    alphabet.iter().map(move |s| {
                        let mut p = p.clone();
                        p.push(s);
                        p
                    })
                })
                .collect();
            all.extend(paths.iter().map(|p| p.join("/")));
        }
        roots
            .iter()
            .flat_map(|root| all.iter().map(move |p| format!("{root}{p}")))
            .collect()
    }

    // Over every path of up to five segments of `a`, `b`, `.`, `..` and empty, relative, from the
    // root or from the home: its reading leads where it leads, from any working folder and home,
    // and two paths that lead to the same place from two of them read alike (the reading is one
    // spelling per place: no `.` or empty segment, `..` only at its head and never after `/`).
    #[test]
    fn a_path_reads_as_where_it_leads_over_every_spelling_of_a_few_segments() {
        let tree = |name: &str| -> Vec<String> { (0..8).map(|i| format!("{name}{i}")).collect() };
        let (cwd, home, cwd2, home2) = (tree("c"), tree("h"), tree("d"), tree("g"));
        let mut by_place: std::collections::HashMap<_, String> = std::collections::HashMap::new();
        let paths = every_path(&["", "/", "~/"], &["a", "b", ".", "..", ""], 5);
        assert!(paths.len() > 10_000);
        for p in paths {
            let read = path(&p);
            assert_eq!(path(&read), read, "{p:?}");
            let place = (walked(&p, &cwd, &home), walked(&p, &cwd2, &home2));
            assert_eq!(
                (walked(&read, &cwd, &home), walked(&read, &cwd2, &home2)),
                place,
                "{p:?} read as {read:?}"
            );
            let body = read
                .strip_prefix('/')
                .or_else(|| read.strip_prefix('~'))
                .map_or(read.as_str(), |rest| rest.trim_start_matches('/'));
            let segments: Vec<&str> = body
                .split('/')
                .filter(|s| !s.is_empty() && read != ".")
                .collect();
            assert!(
                segments
                    .iter()
                    .skip_while(|s| **s == "..")
                    .all(|s| *s != ".." && *s != "."),
                "{p:?} read as {read:?}"
            );
            assert!(!read.starts_with("/.."), "{p:?} read as {read:?}");
            if let Some(before) = by_place.insert(place, read.clone()) {
                assert_eq!(before, read, "{p:?}: two readings of one place");
            }
        }
        for (p, read) in [
            ("x/..", "."),
            ("a/b/../..", "."),
            ("/..", "/"),
            ("/tmp/..", "/"),
            ("x/../..", ".."),
            ("../x/..", ".."),
            ("~/x/..", "~"),
            ("~/..", "~/.."),
            ("a/../../b", "../b"),
        ] {
            assert_eq!(reading(p), read, "{p:?}");
        }
    }

    proptest! {
        // A path, and the same path through a folder and back (`p/x/..`, or `x/..` put anywhere
        // among its segments), read alike.
        #[test]
        fn a_path_and_the_same_path_through_a_folder_and_back_read_alike(
            root in prop::sample::select(vec!["", "/", "~/"]),
            first in prop::sample::select(vec![".", "..", "a", "b"]),
            more in prop::collection::vec(
                prop::sample::select(vec!["", ".", "..", "a", "b", "~"]),
                0..8,
            ),
            folder in "[a-z]{1,3}",
            at in any::<prop::sample::Index>(),
        ) {
            // The first segment is named or a dot: an empty one would make the path start at the root,
            // and `~` at its head is the home, not a folder named `~`.
            let segments: Vec<&str> = std::iter::once(first).chain(more).collect();
            let p = format!("{root}{}", segments.join("/"));
            let at = at.index(segments.len() + 1);
            let mut through = segments.clone();
            through.splice(at..at, [folder.as_str(), ".."]);
            let through = format!("{root}{}", through.join("/"));
            prop_assert_eq!(path(&p), path(&through), "{:?} and {:?}", p, through);
            prop_assert_eq!(path(&p), path(&format!("{p}/{folder}/..")));
            if p.contains('/') {
                prop_assert!(same(&p, &through), "{:?} and {:?}", p, through);
            }
        }

        // A name written in ASCII, spaces only inside it, is never refused, whatever it reads as.
        #[test]
        fn an_ascii_name_is_never_refused(name in "[!-~]([ -~]{0,30}[!-~])?") {
            prop_assert_eq!(refusal(&name), None);
        }

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
