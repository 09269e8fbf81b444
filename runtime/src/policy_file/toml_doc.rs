//! The TOML shape of a policy file, as serde reads it, every value with its place in the text.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileDoc {
    pub(super) format: Spanned<i64>,
    pub(super) defaults: Option<Spanned<RulesDoc>>,
    #[serde(default)]
    pub(super) principals: BTreeMap<Spanned<String>, Spanned<RulesDoc>>,
    #[serde(default)]
    pub(super) agents: BTreeMap<Spanned<String>, Spanned<RulesDoc>>,
    pub(super) shadow: Option<Spanned<ShadowDoc>>,
}

/// The rules logged only: the same tables, under `[shadow]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ShadowDoc {
    pub(super) defaults: Option<Spanned<RulesDoc>>,
    #[serde(default)]
    pub(super) principals: BTreeMap<Spanned<String>, Spanned<RulesDoc>>,
    #[serde(default)]
    pub(super) agents: BTreeMap<Spanned<String>, Spanned<RulesDoc>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RulesDoc {
    pub(super) ceiling: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) deny: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) ask: Vec<Spanned<String>>,
    pub(super) ask_at: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) out_of_band: Vec<Spanned<String>>,
    pub(super) out_of_band_at: Option<Spanned<String>>,
    pub(super) taint: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) arguments: Vec<Spanned<ArgumentDoc>>,
    #[serde(default)]
    pub(super) budgets: Vec<Spanned<BudgetDoc>>,
    #[serde(default)]
    pub(super) history: Vec<Spanned<HistoryDoc>>,
    #[serde(default)]
    pub(super) deny_resources: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) deny_prompts: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) record_resources: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) record_prompts: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BudgetDoc {
    pub(super) tool: Option<Spanned<String>>,
    pub(super) risk: Option<Spanned<String>>,
    pub(super) agent: Option<Spanned<bool>>,
    pub(super) calls: Spanned<i64>,
    pub(super) per: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HistoryDoc {
    pub(super) tool: Spanned<String>,
    pub(super) after: Option<Spanned<String>>,
    pub(super) not_after: Option<Spanned<String>>,
    pub(super) within: Spanned<String>,
    pub(super) per: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ArgumentDoc {
    pub(super) tool: Spanned<String>,
    pub(super) parameter: Spanned<String>,
    #[serde(default)]
    pub(super) refuse: Vec<Spanned<String>>,
    pub(super) one_of: Option<Spanned<Vec<toml::Value>>>,
    pub(super) min: Option<Spanned<toml::Value>>,
    pub(super) max: Option<Spanned<toml::Value>>,
}

const FILE_KEYS: &[&str] = &["format", "defaults", "principals", "agents", "shadow"];
const SHADOW_KEYS: &[&str] = &["defaults", "principals", "agents"];
const RULES_KEYS: &[&str] = &[
    "ceiling",
    "deny",
    "ask",
    "ask_at",
    "out_of_band",
    "out_of_band_at",
    "taint",
    "arguments",
    "budgets",
    "history",
    "deny_resources",
    "deny_prompts",
    "record_resources",
    "record_prompts",
];
const ARGUMENT_KEYS: &[&str] = &["tool", "parameter", "refuse", "one_of", "min", "max"];
const BUDGET_KEYS: &[&str] = &["tool", "risk", "agent", "calls", "per"];
const HISTORY_KEYS: &[&str] = &["tool", "after", "not_after", "within", "per"];

/// Every key of `text` that the file's shape does not have, each with its place and the keys its
/// table may hold: serde stops at the first, and an operator should see them all at once. Empty where
/// the text is not TOML, or every key is known.
pub(super) fn unknown_keys(text: &str) -> Vec<(usize, String, &'static [&'static str])> {
    let Ok(file) = DeTable::parse(text) else {
        return Vec::new();
    };
    let mut unknown = Vec::new();
    let rules = |table: &DeTable<'_>, unknown: &mut Vec<_>| {
        keys(table, RULES_KEYS, unknown);
        for (key, list) in [
            ("arguments", ARGUMENT_KEYS),
            ("budgets", BUDGET_KEYS),
            ("history", HISTORY_KEYS),
        ] {
            if let Some(DeValue::Array(items)) = table.get(key).map(|v| v.get_ref()) {
                for item in items.iter() {
                    if let DeValue::Table(item) = item.get_ref() {
                        keys(item, list, unknown);
                    }
                }
            }
        }
    };
    let file = file.get_ref();
    keys(file, FILE_KEYS, &mut unknown);
    let tables = |file: &DeTable<'_>, unknown: &mut Vec<_>| {
        if let Some(DeValue::Table(defaults)) = file.get("defaults").map(|v| v.get_ref()) {
            rules(defaults, unknown);
        }
        for scope in ["principals", "agents"] {
            if let Some(DeValue::Table(named)) = file.get(scope).map(|v| v.get_ref()) {
                for table in named.values() {
                    if let DeValue::Table(table) = table.get_ref() {
                        rules(table, unknown);
                    }
                }
            }
        }
    };
    tables(file, &mut unknown);
    if let Some(DeValue::Table(shadow)) = file.get("shadow").map(|v| v.get_ref()) {
        keys(shadow, SHADOW_KEYS, &mut unknown);
        tables(shadow, &mut unknown);
    }
    unknown.sort_by_key(|(at, _, _)| *at);
    unknown
}

fn keys(
    table: &DeTable<'_>,
    known: &'static [&'static str],
    unknown: &mut Vec<(usize, String, &'static [&'static str])>,
) {
    for key in table.keys() {
        if !known.contains(&key.get_ref().as_ref()) {
            unknown.push((key.span().start, key.get_ref().to_string(), known));
        }
    }
}
