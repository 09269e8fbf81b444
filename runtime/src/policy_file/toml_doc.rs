//! The TOML shape of a policy file, as serde reads it, every value with its place in the text.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileDoc {
    pub(super) format: Spanned<i64>,
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
    pub(super) taint: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) arguments: Vec<Spanned<ArgumentDoc>>,
    #[serde(default)]
    pub(super) budgets: Vec<Spanned<BudgetDoc>>,
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
pub(super) struct ArgumentDoc {
    pub(super) tool: Spanned<String>,
    pub(super) parameter: Spanned<String>,
    #[serde(default)]
    pub(super) refuse: Vec<Spanned<String>>,
    pub(super) one_of: Option<Spanned<Vec<toml::Value>>>,
    pub(super) min: Option<Spanned<toml::Value>>,
    pub(super) max: Option<Spanned<toml::Value>>,
}
