//! What an approver of a call with lasting effects is shown besides the call: how the call would be
//! undone ([`Rollback`], from the tool's `rollback` function) and what its target looks like now (the
//! evidence its `evidence` probe reads).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical;
use crate::registry::registry;

/// How a call is undone, as a tool's `rollback` function says for one call: another tool's call, or
/// steps a person takes.
///
/// The approver sees it, the `enter` record keeps it, and a plan that is a call can be run later,
/// through a gate like any other call ([`Registry::rollback`](crate::Registry::rollback)).
///
/// ```
/// # extern crate toolgate_runtime as toolgate;
/// use toolgate::Rollback;
/// use serde_json::json;
///
/// let plan = Rollback::call("infra.restore_snapshot", json!({"snapshot": "snap-0a1b"}));
/// assert_eq!(plan.to_string(), r#"call `infra.restore_snapshot` with {"snapshot":"snap-0a1b"}"#);
/// let by_hand = Rollback::steps("restore the volume from last night's backup");
/// assert_eq!(by_hand.to_string(), "by hand: restore the volume from last night's backup");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Rollback {
    /// Undone by calling `tool`, by name, with `arguments` (a JSON object).
    Call {
        /// The id of a `callable` tool.
        tool: String,
        /// Its arguments.
        arguments: Value,
    },
    /// Undone by hand, as `text` says.
    Steps {
        /// What to do.
        text: String,
    },
}

impl Rollback {
    /// A plan that calls the `callable` tool `tool` with `arguments`, a JSON object.
    pub fn call(tool: impl Into<String>, arguments: Value) -> Rollback {
        Rollback::Call {
            tool: tool.into(),
            arguments,
        }
    }

    /// A plan a person carries out.
    pub fn steps(text: impl Into<String>) -> Rollback {
        Rollback::Steps { text: text.into() }
    }

    /// Why this plan cannot be carried out, if it cannot: a call of a tool that is not linked or
    /// cannot be called by name, arguments that are not a JSON object, or steps that say nothing.
    pub fn problem(&self) -> Option<String> {
        match self {
            Rollback::Call { tool, arguments } => {
                match registry().entry(tool) {
                    None => return Some(format!("it calls `{tool}`, which is no linked tool")),
                    Some(entry) if entry.callable.is_none() => {
                        return Some(format!(
                            "it calls `{tool}`, which cannot be called by name (not `callable`)"
                        ));
                    }
                    Some(_) => {}
                }
                (!arguments.is_object())
                    .then(|| format!("its arguments for `{tool}` are not a JSON object"))
            }
            Rollback::Steps { text } => text
                .trim()
                .is_empty()
                .then(|| "its steps are empty".to_owned()),
        }
    }

    /// The plan as canonical JSON (keys sorted), as records and stores keep it.
    pub fn to_json(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or(Value::Null);
        canonical::to_string(&value)
    }
}

/// The plan as a person reads it: what the agent may have written into it (the arguments it was made
/// from) is shown with invisible and reordering characters made visible
/// ([`terminal::escaped`](crate::terminal::escaped)).
impl fmt::Display for Rollback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |text: &str| crate::terminal::escaped(text).into_owned();
        match self {
            Rollback::Call { tool, arguments } => write!(
                f,
                "call `{}` with {}",
                shown(tool),
                shown(&canonical::to_string(arguments))
            ),
            Rollback::Steps { text } => write!(f, "by hand: {}", shown(text)),
        }
    }
}

/// What a tool's `evidence` probe read of its target, once: canonical JSON and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Evidence {
    pub(crate) json: String,
    pub(crate) digest: String,
}

impl Evidence {
    pub(crate) fn of(value: &Value) -> Evidence {
        let json = canonical::to_string(value);
        let digest = canonical::sha256_hex(json.as_bytes());
        Evidence { json, digest }
    }
}

/// Why a call's target is not one target: `None` where it is. Read from the target's JSON: a string
/// must name something (not empty, no glob or wildcard, no list, nothing a reader cannot see), a number
/// is one; anything else (a list, an object, `null`, a boolean) is not.
pub(crate) fn not_single(target: &Value) -> Option<String> {
    let text = match target {
        Value::Number(_) => return None,
        Value::String(text) => text,
        Value::Array(items) => {
            return Some(format!("its target is a list of {} values", items.len()));
        }
        Value::Null => return Some("its target is empty (null)".to_owned()),
        Value::Object(_) => return Some("its target is an object, not one name".to_owned()),
        Value::Bool(_) => return Some("its target is a boolean, not one name".to_owned()),
    };
    let shown = format!("`{}`", crate::terminal::escaped(text));
    if text.trim().is_empty() {
        return Some("its target is empty".to_owned());
    }
    if let Some(c) = text.chars().find(|c| "*?[]{}%".contains(*c)) {
        return Some(format!("its target {shown} is a pattern (it has `{c}`)"));
    }
    if let Some(c) = text.chars().find(|c| ",;|".contains(*c)) {
        return Some(format!("its target {shown} is a list (it has `{c}`)"));
    }
    if text
        .chars()
        .any(|c| c.is_whitespace() || crate::terminal::hides(c))
    {
        return Some(format!(
            "its target {shown} has spaces or characters a reader cannot see"
        ));
    }
    // A sign beyond ASCII may be a comma, a star or a dot of another script, or one a back end folds
    // into one (Unicode's compatibility forms): when in doubt, it is not one name.
    if let Some(c) = text.chars().find(|c| !c.is_ascii() && !c.is_alphanumeric()) {
        return Some(format!(
            "its target {shown} has `{}` (U+{:04X}), which may stand for a separator or a wildcard",
            crate::terminal::escaped(&c.to_string()),
            u32::from(c)
        ));
    }
    if let Some(expansion) = shell_expansion(text) {
        return Some(format!(
            "its target {shown} has `{expansion}`, which a shell expands to what it holds"
        ));
    }
    // Compared by its reading (crate::names), and by what it names read as a path: `./`, `x/..`,
    // `~/`, `C:\`, `\\host\share\`, `𝐚𝐥𝐥` and `ⓐⓛⓛ` are the wildcards a back end reads them as,
    // whatever their case.
    let read = crate::names::reading(text).to_lowercase();
    let path = crate::names::path(&crate::names::reading(&as_path(text)));
    if let Some(w) = WILDCARDS.iter().find(|w| {
        let w = crate::names::reading(w).to_lowercase();
        w == read || w == path.to_lowercase()
    }) {
        return Some(format!("its target {shown} reads as `{w}`, a wildcard"));
    }
    let from_root = path
        .strip_prefix('/')
        .or_else(|| path.strip_prefix('~'))
        .unwrap_or(&path);
    if from_root
        .split('/')
        .all(|segment| matches!(segment, "" | "." | ".."))
    {
        return Some(format!(
            "its target {shown} reads as the path `{}`, a root, the current folder or one above it",
            crate::terminal::escaped(&path)
        ));
    }
    // A target a reader takes for another (compatibility forms, mixed scripts) is not the one they
    // confirm.
    if let Some(why) = crate::names::refusal(text) {
        return Some(format!(
            "its target is not one name a reader can tell: {why}"
        ));
    }
    None
}

/// What a shell would expand in `text`: a variable (`$HOME`, `${PWD}`, `$1`) or a command in
/// backquotes. A `$` that ends the text or a segment (`\\host\C$\`) is a character like another.
fn shell_expansion(text: &str) -> Option<&str> {
    if let Some(at) = text.find('`') {
        return Some(&text[at..=at]);
    }
    text.match_indices('$').find_map(|(at, _)| {
        let next = text[at + 1..].chars().next()?;
        (!matches!(next, '/' | '\\')).then(|| &text[at..at + 1 + next.len_utf8()])
    })
}

/// The target as a path a back end may read it as, for [`names::path`](crate::names::path) to read
/// lexically: a backslash as a slash; a `file:` URL as its path, and another URL as what follows its
/// scheme; a network or device path (`\\host\share\x`, `\\.\C:\x`, `\\?\UNC\host\share\x`)
/// and a drive's (`C:\x`) as the path from their root, `/x`; a drive's relative path (`C:x`) as
/// relative; a home or working folder a shell names (`~user`, `~-`) as `~`, and `~+` as `.`.
fn as_path(text: &str) -> String {
    let mut path = text.replace('\\', "/");
    if let Some((scheme, rest)) = path.split_once("://")
        && !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        path = if scheme.eq_ignore_ascii_case("file") {
            // `file://host/x`: no host, or the local one, is this machine's root; another is a
            // network path.
            let (host, rest) = rest.split_once('/').unwrap_or((rest, ""));
            if host.is_empty() || host.eq_ignore_ascii_case("localhost") {
                format!("/{rest}")
            } else {
                format!("//{host}/{rest}")
            }
        } else {
            rest.to_owned()
        };
    } else if let Some(rest) = path
        .get(..5)
        .filter(|scheme| scheme.eq_ignore_ascii_case("file:"))
        .and_then(|_| path.get(5..))
    {
        path = rest.to_owned();
    }
    if let Some(network) = path.strip_prefix("//")
        && !network.starts_with('/')
    {
        let mut segments = network.split('/');
        let first = segments.next().unwrap_or_default();
        let rest: Vec<&str> = segments.collect();
        path = if first == "." || first == "?" {
            match rest.split_first() {
                // `\\?\UNC\host\share\x` is `\\host\share\x`; the device (a drive, a volume) is
                // the root of what follows it.
                Some((unc, rest)) if unc.eq_ignore_ascii_case("UNC") => {
                    format!("/{}", rest.get(2..).unwrap_or_default().join("/"))
                }
                _ => format!("/{}", rest.get(1..).unwrap_or_default().join("/")),
            }
        } else {
            // `\\host\share\x`: the share is the root.
            format!("/{}", rest.get(1..).unwrap_or_default().join("/"))
        };
    }
    let bytes = path.as_bytes();
    if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        path = path[2..].to_owned();
    }
    if let Some(home) = path.strip_prefix('~') {
        let (user, rest) = home.split_once('/').unwrap_or((home, ""));
        let root = if user == "+" { "." } else { "~" };
        path = format!("{root}/{rest}");
    }
    path
}

/// The names that stand for more than one target.
const WILDCARDS: [&str; 10] = [
    "all",
    "any",
    "every",
    "everything",
    "none",
    ".",
    "..",
    "-",
    "~",
    "/",
];

/// The target as an operator types it back to confirm: a string as it is, a number as JSON writes it.
pub(crate) fn typed(target: &Value) -> String {
    match target {
        Value::String(text) => text.clone(),
        other => canonical::to_string(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    proptest! {
        // One name is one target; any pattern, list, space or hidden character in it makes it not one,
        // wherever it stands.
        #[test]
        fn a_name_is_one_target_and_anything_that_could_be_more_is_not(
            name in "[A-Za-z0-9][A-Za-z0-9._:/-]{0,30}",
            marker in prop::sample::select(vec![
                "*", "?", "[", "]", "{", "}", "%", ",", ";", "|", " ", "\t", "\n", "\u{200b}",
                "\u{202e}", "\u{2066}", "\u{feff}", "\u{00a0}",
            ]),
            at in 0usize..32,
        ) {
            let read = crate::names::reading(&name).to_lowercase();
            let after_scheme = name.split_once("://").map_or(name.as_str(), |(_, after)| after);
            let wildcard = WILDCARDS.iter().any(|w| {
                w.eq_ignore_ascii_case(&name)
                    || w.eq_ignore_ascii_case(after_scheme)
                    || crate::names::reading(w) == read
            });
            let folder = names_a_folder(&name);
            prop_assert_eq!(
                not_single(&Value::from(name.clone())).is_none(),
                !wildcard && !folder,
                "{:?}: a wildcard {}, a folder {}", name, wildcard, folder
            );
            let at = (0..=name.len()).filter(|i| name.is_char_boundary(*i)).nth(at).unwrap_or(name.len());
            let marked = format!("{}{marker}{}", &name[..at], &name[at..]);
            prop_assert!(not_single(&Value::from(marked.clone())).is_some(), "{:?}", marked);
            prop_assert!(not_single(&json!([name])).is_some());
        }
    }

    /// Whether a back end that takes `name` as a path (a URL's scheme, a drive's letter and the root
    /// of a network or device path taken off) reaches, from a working folder deep below the root,
    /// that folder, one above it or a root: found by walking a tree, not by reading the spelling.
    fn names_a_folder(name: &str) -> bool {
        let mut rest = name.replace('\\', "/");
        if let Some((scheme, after)) = rest.clone().split_once("://")
            && !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            rest = match (scheme.eq_ignore_ascii_case("file"), after.split_once('/')) {
                (true, Some(("" | "localhost", path))) => format!("/{path}"),
                (true, None) if after.is_empty() || after == "localhost" => "/".to_owned(),
                (true, _) => format!("//{after}"),
                (false, _) => after.to_owned(),
            };
        }
        if let Some(after) = rest
            .get(..5)
            .filter(|scheme| scheme.eq_ignore_ascii_case("file:"))
            .and_then(|_| rest.get(5..))
        {
            rest = after.to_owned();
        }
        if let Some(network) = rest.strip_prefix("//").filter(|n| !n.starts_with('/')) {
            let parts: Vec<&str> = network.split('/').collect();
            let root = match parts.as_slice() {
                ["." | "?", unc, ..] if unc.eq_ignore_ascii_case("unc") => 4,
                _ => 2,
            };
            rest = format!("/{}", parts.get(root..).unwrap_or_default().join("/"));
        }
        if rest.len() >= 2 && rest.as_bytes()[0].is_ascii_alphabetic() && rest.as_bytes()[1] == b':'
        {
            rest = rest[2..].to_owned();
        }
        let cwd: Vec<String> = (0..64).map(|i| format!("c{i}")).collect();
        let mut at = if rest.starts_with('/') {
            Vec::new()
        } else {
            cwd.clone()
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
        cwd.starts_with(&at)
    }

    // Over every path of up to four segments of `a`, `.`, `..` and empty, joined by `/` or `\`, after
    // each spelling of a root a back end takes (a drive, a network share, a device, a `file:` URL,
    // another URL): it is one target exactly when, walked from a working folder deep below the
    // root, it leads neither to that folder, nor above it, nor to a root.
    #[test]
    fn a_path_is_one_target_exactly_when_it_leads_below_where_it_starts() {
        let roots = [
            "",
            "/",
            "\\",
            "C:",
            "C:/",
            "c:\\",
            "\\\\host\\share\\",
            "//host/share/",
            "\\\\.\\C:\\",
            "//./UNC/host/share/",
            "file:///",
            "file://localhost/",
            "FILE://host/share/",
            "file:/",
            "s3://",
            "https://host/",
        ];
        let mut paths: Vec<Vec<&str>> = vec![Vec::new()];
        let mut every = vec![Vec::new()];
        for _ in 0..4 {
            paths = paths
                .iter()
                .flat_map(|p| {
                    ["a", ".", "..", ""].into_iter().map(move |s| {
                        let mut p = p.clone();
                        p.push(s);
                        p
                    })
                })
                .collect();
            every.extend(paths.iter().cloned());
        }
        let mut tried = 0;
        for root in roots {
            for separator in ["/", "\\"] {
                for segments in &every {
                    let target = format!("{root}{}", segments.join(separator));
                    let refused = not_single(&Value::from(target.clone()));
                    assert_eq!(
                        refused.is_some(),
                        names_a_folder(&target),
                        "{target:?}: {refused:?}"
                    );
                    tried += 1;
                }
            }
        }
        assert!(tried > 10_000, "{tried}");
    }

    #[test]
    fn one_target_and_what_is_not() {
        for single in [
            json!("i-0abc123"),
            json!(42),
            json!("org/repo"),
            json!("é.txt"),
            json!("/tmp/x"),
            json!("../x"),
            json!("a/b/../c"),
            json!("~/notes.txt"),
            json!("~root/notes.txt"),
            json!("~+/x"),
            json!("C:\\Users\\x"),
            json!("\\\\host\\share\\x"),
            json!("\\\\host\\C$\\x"),
            json!("file:///tmp/x"),
            json!("file://localhost/tmp/x"),
            json!("C$"),
        ] {
            assert_eq!(not_single(&single), None, "{single}");
        }
        for many in [
            json!(""),
            json!("  "),
            json!(null),
            json!(["i-1"]),
            json!({"id": 1}),
            json!(true),
            json!("i-*"),
            json!("i-?"),
            json!("i-[12]"),
            json!("db-{a,b}"),
            json!("%"),
            json!("i-1,i-2"),
            json!("i-1;i-2"),
            json!("i-1 i-2"),
            json!("i-1\ni-2"),
            json!("ALL"),
            json!("*"),
            json!("."),
            json!("i-1\u{200b}"),
            json!("i-1\u{202e}"),
            json!("a，b"),
            json!("a、b"),
            json!("a；b"),
            json!("a،b"),
            json!("a﹐b"),
            json!("ＡＬＬ"),
            json!("ａｌｌ"),
            json!("＊"),
            json!("﹡"),
            json!("．"),
            json!("i-？"),
            json!("i-1\u{2800}"),
            json!("e\u{301}"),
            json!("x/.."),
            json!("x\\.."),
            json!("a/b/../.."),
            json!("../.."),
            json!("x/../../.."),
            json!("/.."),
            json!("/tmp/.."),
            json!("C:/.."),
            json!("C:"),
            json!("C:.."),
            json!("\\\\.\\C:\\"),
            json!("\\\\localhost\\C$\\"),
            json!("\\\\host\\share"),
            json!("\\\\host\\share\\x\\.."),
            json!("//./UNC/host/share/"),
            json!("file://localhost/"),
            json!("file://host/share/"),
            json!("file:/.."),
            json!("~/.."),
            json!("~/x/.."),
            json!("~+"),
            json!("~-"),
            json!("~root"),
            json!("~root/"),
            json!("~root/x/.."),
            json!("$HOME"),
            json!("$PWD/"),
            json!("a/$X/b"),
            json!("$1"),
            json!("`id`"),
            json!("x$(id)"),
            json!("pr\u{585}d"),
            json!("desk\u{2013}a"),
            json!("l\u{131}nk"),
            json!("s3://all"),
        ] {
            assert!(not_single(&many).is_some(), "{many}");
        }
    }

    #[test]
    fn a_plan_is_checked_and_written_canonically() {
        assert!(
            Rollback::steps(" ")
                .problem()
                .unwrap()
                .contains("steps are empty")
        );
        assert!(
            Rollback::call("no.such_tool", json!({}))
                .problem()
                .unwrap()
                .contains("no linked tool")
        );
        let plan = Rollback::call("x", json!({"b": 1, "a": 2}));
        assert_eq!(
            plan.to_json(),
            r#"{"arguments":{"a":2,"b":1},"kind":"call","tool":"x"}"#
        );
        let back: Rollback = serde_json::from_str(&plan.to_json()).unwrap();
        assert_eq!(back, plan);
        assert_eq!(typed(&json!("i-1")), "i-1");
        assert_eq!(typed(&json!(7)), "7");
    }
}
