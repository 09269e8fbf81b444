//! The gate's global deny list: glob patterns over tool ids, checked first in every mode.

use std::fmt;

/// A deny rule: a tool id, or a glob where `*` matches any run of characters (dots too) and `?` one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DenyRule {
    pattern: Box<str>,
}

impl DenyRule {
    pub(crate) fn parse(pattern: &str) -> Result<DenyRule, DenyRuleError> {
        let invalid = |reason| DenyRuleError::Invalid {
            pattern: pattern.to_owned(),
            reason,
        };
        if pattern.is_empty() {
            return Err(invalid("it is empty"));
        }
        if pattern
            .chars()
            .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/' | '*' | '?')))
        {
            // toolgate's ids are lowercase dotted; an rmcp tool gated in place keeps its MCP name.
            return Err(invalid(
                "tool ids are `[a-z0-9_.]`, and the names of rmcp tools gated in place \
                 `[A-Za-z0-9_.-/]`; a pattern may add `*` and `?`",
            ));
        }
        Ok(DenyRule {
            pattern: pattern.into(),
        })
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether the rule reaches the tool: by its id, and for an rmcp tool gated in place, whose id is
    /// its MCP name, by `<domain>.<name>` too, so that a rule written for a domain (`ops.*`) reaches
    /// every tool of its `#[toolset]`.
    pub(crate) fn matches_entry(&self, entry: &crate::registry::ToolEntry) -> bool {
        let manifest = &entry.manifest;
        if self.matches(manifest.id) {
            return true;
        }
        match (entry.in_place, manifest.domain) {
            (Some(_), Some(domain)) => self.matches(&format!("{domain}.{}", manifest.id)),
            _ => false,
        }
    }

    pub(crate) fn matches(&self, id: &str) -> bool {
        glob_match(self.pattern.as_bytes(), id.as_bytes())
    }
}

/// Wildcard matching with one backtrack point: linear in practice, never exponential.
pub(crate) fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// A deny rule the gate cannot use.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DenyRuleError {
    /// The pattern is not a tool-id glob.
    Invalid {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The pattern matches no linked tool: a dead rule is a bug (a renamed tool, a typo), not a no-op.
    MatchesNothing {
        /// The pattern as given.
        pattern: String,
    },
}

impl fmt::Display for DenyRuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyRuleError::Invalid { pattern, reason } => {
                write!(f, "deny rule `{pattern}` is not valid: {reason}")
            }
            DenyRuleError::MatchesNothing { pattern } => {
                let ids: Vec<&str> = crate::registry::manifests().map(|m| m.id).collect();
                match toolgate_policy::suggest::closest(pattern, &ids) {
                    Some(id) if !pattern.contains('*') => write!(
                        f,
                        "deny rule `{pattern}` matches no registered tool; did you mean `{id}`?"
                    ),
                    _ => write!(
                        f,
                        "deny rule `{pattern}` matches no registered tool (was the tool renamed or \
                         removed?)"
                    ),
                }
            }
        }
    }
}

impl std::error::Error for DenyRuleError {}

#[cfg(test)]
mod tests {
    use super::{DenyRule, glob_match};

    #[test]
    fn rules_name_toolgate_ids_and_the_names_of_rmcp_tools_gated_in_place() {
        for pattern in [
            "users.delete",
            "users.*",
            "getWeather",
            "ops/restart-all",
            "ops/*",
        ] {
            assert!(DenyRule::parse(pattern).is_ok(), "{pattern}");
        }
        for pattern in ["", "users delete", "users.dé", "ops;*", "a\u{202e}b"] {
            assert!(DenyRule::parse(pattern).is_err(), "{pattern:?}");
        }
        assert!(DenyRule::parse("ops/*").unwrap().matches("ops/restart-all"));
        assert!(!DenyRule::parse("ops/*").unwrap().matches("opsx/restart"));
    }

    #[test]
    fn globs() {
        let cases = [
            ("users.delete", "users.delete", true),
            ("users.delete", "users.deletex", false),
            ("users.*", "users.delete", true),
            ("users.*", "users", false),
            ("users*", "users", true),
            ("*", "anything.at.all", true),
            ("*.delete", "users.delete", true),
            ("*.delete", "users.delete_all", false),
            ("*delete*", "users.delete_all", true),
            ("u?ers.*", "users.get", true),
            ("u?ers.*", "uers.get", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("", "", true),
            ("", "a", false),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(
                glob_match(pattern.as_bytes(), text.as_bytes()),
                expected,
                "{pattern} ~ {text}"
            );
        }
    }
}
