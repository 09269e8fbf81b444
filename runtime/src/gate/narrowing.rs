//! What an operator's policy takes away from one gate: compiled from a policy file
//! (`toolgate::policy_file`) for the gate's principal and agent, folded into the gate's table when it
//! is built and each time the policy changes.
//!
//! Nothing here can allow. A part either refuses (a deny rule, an argument rule, the taint latch set
//! to refuse), asks (a tool or a risk that always asks), or lowers (a mode ceiling): each one applied
//! to a verdict the code's own policy gave, never in place of it.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering as Atomic;

use std::cmp::Ordering;

use serde_json::{Number, Value};

use crate::gate::budget::{BudgetSpec, HistorySpec};
use crate::gate::denylist::glob_match;
use crate::gate::reads::ReadRules;
use crate::registry::{ToolEntry, ToolManifest};
use toolgate_policy::{DenialCode, Facts, Mode, Risk, TaintPolicy, Verdict};

/// What an operator's policy takes away from one gate, compiled against the linked tools.
///
/// Made by a policy file (`toolgate::policy_file::PolicyFile::narrowing`); [`Narrowing::none`]
/// takes nothing away.
#[derive(Clone, Default)]
pub struct Narrowing {
    pub(crate) digest: Option<Arc<str>>,
    pub(crate) ceiling: Option<Limit<Mode>>,
    pub(crate) ask_at: Option<Limit<Risk>>,
    /// The risk from which a call is approved by an operator only, never in band.
    pub(crate) out_of_band_at: Option<Limit<Risk>>,
    pub(crate) taint_refuses: Option<Arc<str>>,
    /// Per registry slot (empty where no rule names any tool).
    pub(crate) tools: Vec<ToolRules>,
    /// The budgets of every table that applies, each with its table and place.
    pub(crate) budgets: Vec<BudgetSpec>,
    /// The rules over history of every table that applies, each with its table and place.
    pub(crate) history: Vec<HistorySpec>,
    /// What it denies or records of an MCP server's resources and prompts.
    pub(crate) reads: ReadRules,
    /// The same with the rules that are logged only (a policy file's `[shadow]` tables) enforced
    /// too; `None` where no such rule applies. Never decides a call: a gate records what it would
    /// have ruled ([`Narrowing::shadow_ruling`]).
    pub(crate) shadow: Option<Box<Narrowing>>,
}

/// What a call comes to under a policy, before any approver answers: the three outcomes a policy
/// chooses between, from the least strict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ruling {
    /// It runs without asking.
    Allowed,
    /// It asks for an approval first.
    Asks,
    /// It is refused.
    Refused,
}

impl Ruling {
    /// `allowed`, `asks` or `refused`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Ruling::Allowed => "allowed",
            Ruling::Asks => "asks",
            Ruling::Refused => "refused",
        }
    }
}

impl fmt::Display for Ruling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a gate narrowed by a [`Narrowing`] rules on a call of the tool in `slot` judged at `risk`, in
/// `mode` (before the narrowing's ceiling), with `arguments` (JSON) where the argument rules need
/// them, assuming an approver can be asked: the code's verdict, the narrowed one, the mode it is
/// decided in, and an argument rule's refusal. One function for `explain`, policy tests, replay and
/// the rules logged only, so that they cannot disagree.
pub(crate) struct Judged {
    #[cfg_attr(
        not(feature = "policy-file"),
        expect(
            dead_code,
            reason = "read by explain, policy tests and replay (policy-file)"
        )
    )]
    pub(crate) code_verdict: Verdict,
    pub(crate) verdict: Verdict,
    #[cfg_attr(
        not(feature = "policy-file"),
        expect(
            dead_code,
            reason = "read by explain, policy tests and replay (policy-file)"
        )
    )]
    pub(crate) mode: Mode,
    pub(crate) argument: Option<String>,
}

impl Judged {
    pub(crate) fn new(
        narrowing: &Narrowing,
        manifest: &ToolManifest,
        slot: usize,
        mode: Mode,
        risk: Risk,
        read: impl FnMut(&str) -> Option<Value>,
    ) -> Judged {
        let mode = mode.min(narrowing.ceiling());
        let rules = narrowing.tool(slot);
        let code_verdict = toolgate_policy::decide(Facts {
            risk,
            allowed_modes: manifest.allowed_modes,
            mode,
            deny_listed: rules.is_some_and(|r| r.deny.is_some()),
            can_approve: true,
        });
        let verdict = narrowing.narrow(slot, risk, code_verdict, true);
        let argument = match verdict {
            Verdict::Refuse(_) => None,
            _ => narrowing.refuses_arguments(slot, read),
        };
        Judged {
            code_verdict,
            verdict,
            mode,
            argument,
        }
    }

    #[cfg_attr(
        not(feature = "policy-file"),
        expect(
            dead_code,
            reason = "read by explain, policy tests and replay (policy-file)"
        )
    )]
    pub(crate) fn ruling(&self) -> Ruling {
        match self.verdict {
            Verdict::Refuse(_) => Ruling::Refused,
            _ if self.argument.is_some() => Ruling::Refused,
            Verdict::NeedsApproval => Ruling::Asks,
            _ => Ruling::Allowed,
        }
    }

    /// The code of a refusal.
    pub(crate) fn code(&self) -> Option<DenialCode> {
        match self.verdict {
            Verdict::Refuse(code) => Some(code),
            _ => self.argument.as_ref().map(|_| DenialCode::ArgumentRefused),
        }
    }
}

/// A limit and the rule that sets it, as the rule is shown (`file:line:column`).
#[derive(Debug, Clone)]
pub(crate) struct Limit<T> {
    pub(crate) value: T,
    pub(crate) rule: Arc<str>,
}

/// The rules that name one tool.
#[derive(Debug, Clone, Default)]
pub(crate) struct ToolRules {
    pub(crate) deny: Option<Arc<str>>,
    pub(crate) ask: Option<Arc<str>>,
    /// The rule that keeps its calls for an operator's approval, never a client's form.
    pub(crate) out_of_band: Option<Arc<str>>,
    pub(crate) arguments: Vec<ArgumentRule>,
}

impl ToolRules {
    /// Whether any rule names the tool.
    pub(crate) fn names_the_tool(&self) -> bool {
        self.deny.is_some()
            || self.ask.is_some()
            || self.out_of_band.is_some()
            || !self.arguments.is_empty()
    }
}

/// A rule on one named argument: the call is refused when the value fails the test.
#[derive(Debug, Clone)]
pub(crate) struct ArgumentRule {
    pub(crate) parameter: Arc<str>,
    pub(crate) test: ArgumentTest,
    pub(crate) rule: Arc<str>,
}

/// What an argument rule asks of a value.
#[derive(Debug, Clone)]
#[cfg_attr(
    not(feature = "policy-file"),
    expect(
        dead_code,
        reason = "only an operator's policy file writes rules on arguments"
    )
)]
pub(crate) enum ArgumentTest {
    /// Refused when the string (or any string of a list) matches one of the globs.
    Refuse(Vec<Box<str>>),
    /// Refused unless the value is one of these.
    OneOf(Vec<Value>),
    /// Refused unless the value is a number within the bounds (inclusive), compared exactly (an
    /// integer past 2^53 is not rounded to a float).
    Range {
        min: Option<Number>,
        max: Option<Number>,
    },
}

impl Narrowing {
    /// Takes nothing away.
    pub fn none() -> Narrowing {
        Narrowing::default()
    }

    /// The digest (sha256, hex) of the policy file this was compiled from; `None` for
    /// [`Narrowing::none`].
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// The mode this policy holds the gate under (FULL_AUTO where it sets no ceiling).
    pub(crate) fn ceiling(&self) -> Mode {
        self.ceiling.as_ref().map_or(Mode::FullAuto, |c| c.value)
    }

    pub(crate) fn tool(&self, slot: usize) -> Option<&ToolRules> {
        self.tools.get(slot)
    }

    /// Refuses every tool, `why` the rule each refusal names.
    pub(crate) fn deny_all(&mut self, why: &str) {
        let why: Arc<str> = why.into();
        self.tools = (0..crate::registry::registry().entries.len())
            .map(|_| ToolRules {
                deny: Some(why.clone()),
                ..ToolRules::default()
            })
            .collect();
    }

    pub(crate) fn has_argument_rules(&self, slot: usize) -> bool {
        self.tool(slot).is_some_and(|t| !t.arguments.is_empty())
    }

    /// The taint policy once this policy narrows the code's: `Refuse` stays `Refuse`.
    pub(crate) fn taint_policy(&self, code: TaintPolicy) -> TaintPolicy {
        if self.taint_refuses.is_some() {
            TaintPolicy::Refuse
        } else {
            code
        }
    }

    /// The rule that makes the tool in `slot` ask at `risk`, if one does.
    pub(crate) fn asks(&self, slot: usize, risk: Risk) -> Option<&Arc<str>> {
        self.tool(slot).and_then(|t| t.ask.as_ref()).or_else(|| {
            self.ask_at
                .as_ref()
                .filter(|at| risk >= at.value)
                .map(|at| &at.rule)
        })
    }

    /// The rule that keeps a call of the tool in `slot`, judged at `risk` (its effective risk,
    /// escalation included), for an operator's approval, if one does. It only ever adds to what the
    /// tool's manifest says ([`ToolManifest::approved_out_of_band`]): nothing here takes it away.
    ///
    /// [`ToolManifest::approved_out_of_band`]: crate::registry::ToolManifest::approved_out_of_band
    pub(crate) fn out_of_band(&self, slot: usize, risk: Risk) -> Option<&Arc<str>> {
        self.tool(slot)
            .and_then(|t| t.out_of_band.as_ref())
            .or_else(|| {
                self.out_of_band_at
                    .as_ref()
                    .filter(|at| risk >= at.value)
                    .map(|at| &at.rule)
            })
    }

    /// `verdict`, the code's, narrowed: a call it allows asks where a rule says so (and is refused
    /// where the gate cannot ask anyone). A refusal or a question stays what it is.
    pub(crate) fn narrow(
        &self,
        slot: usize,
        risk: Risk,
        verdict: Verdict,
        can_approve: bool,
    ) -> Verdict {
        match verdict {
            Verdict::Allow if self.asks(slot, risk).is_some() => {
                if can_approve {
                    Verdict::NeedsApproval
                } else {
                    Verdict::Refuse(DenialCode::ApprovalRequired)
                }
            }
            verdict => verdict,
        }
    }

    /// What the rules logged only would have made of a call this narrowing's gate ruled `actual`:
    /// `Some` with the ruling and the rule that makes it (`refused (DENY_LISTED) by payments.*
    /// (ops.toml:9:9)`) where it is stricter, else `None`. `mode` is the gate's, `latched` whether
    /// the session's taint latch applies to the call, `read` its arguments as an argument rule reads
    /// them.
    pub(crate) fn shadow_ruling(
        &self,
        entry: &ToolEntry,
        mode: Mode,
        risk: Risk,
        latched: bool,
        actual: Ruling,
        read: impl FnMut(&str) -> Option<Value>,
    ) -> Option<String> {
        let shadow = self.shadow.as_deref()?;
        if actual == Ruling::Refused {
            return None;
        }
        let (manifest, slot) = (&entry.manifest, entry.slot.load(Atomic::Relaxed) as usize);
        let judged = Judged::new(shadow, manifest, slot, mode, risk, read);
        let (ruling, rule) = match (judged.verdict, &judged.argument) {
            (Verdict::Refuse(DenialCode::DenyListed), _) => (
                Ruling::Refused,
                shadow
                    .tool(slot)
                    .and_then(|r| r.deny.as_deref())
                    .map(str::to_owned),
            ),
            (Verdict::Refuse(_), _) => (
                Ruling::Refused,
                shadow.ceiling.as_ref().map(|c| c.rule.to_string()),
            ),
            (_, Some(why)) => (Ruling::Refused, Some(why.clone())),
            _ if latched && self.taint_refuses.is_none() && shadow.taint_refuses.is_some() => (
                Ruling::Refused,
                shadow.taint_refuses.as_deref().map(str::to_owned),
            ),
            (Verdict::NeedsApproval, None) => (
                Ruling::Asks,
                shadow
                    .asks(slot, risk)
                    .map(|r| r.to_string())
                    .or_else(|| shadow.ceiling.as_ref().map(|c| c.rule.to_string())),
            ),
            _ => return None,
        };
        if ruling <= actual {
            return None;
        }
        let code = match ruling {
            Ruling::Refused if latched && judged.code().is_none() => {
                Some(DenialCode::TaintedSession)
            }
            Ruling::Refused => judged.code(),
            _ => None,
        };
        let rule = rule.unwrap_or_else(|| "the code, in the mode of a shadow ceiling".to_owned());
        Some(match code {
            Some(code) => format!("{ruling} ({code}) by {rule}"),
            None => format!("{ruling} by {rule}"),
        })
    }

    /// The first argument rule of the tool in `slot` that refuses the call, and why. `read` gives the
    /// value of a named argument as the log writes it (`null` where the call has none), `None` where it
    /// cannot be read, which refuses.
    pub(crate) fn refuses_arguments(
        &self,
        slot: usize,
        mut read: impl FnMut(&str) -> Option<Value>,
    ) -> Option<String> {
        for rule in &self.tool(slot)?.arguments {
            match read(&rule.parameter) {
                Some(value) if rule.passes(&value) => {}
                value => return Some(rule.refusal(value.as_ref())),
            }
        }
        None
    }

    /// [`refuses_arguments`](Narrowing::refuses_arguments) for arguments written as a JSON object.
    #[cfg(test)]
    pub(crate) fn refuses_json(&self, slot: usize, arguments: Option<&str>) -> Option<String> {
        let parsed = arguments.and_then(|json| serde_json::from_str::<Value>(json).ok());
        let values = match &parsed {
            Some(Value::Object(values)) => Some(values),
            _ => None,
        };
        self.refuses_arguments(slot, |name| {
            Some(values?.get(name).cloned().unwrap_or(Value::Null))
        })
    }
}

impl ArgumentRule {
    /// Whether `value` passes. A value the rule cannot judge does not.
    #[inline]
    fn passes(&self, value: &Value) -> bool {
        match &self.test {
            ArgumentTest::Refuse(globs) => {
                let refused =
                    |s: &str| globs.iter().any(|g| glob_match(g.as_bytes(), s.as_bytes()));
                match value {
                    _ if is_placeholder(value) => false,
                    Value::String(s) => !refused(s),
                    Value::Array(items) => items
                        .iter()
                        .all(|item| item.as_str().is_some_and(|s| !refused(s))),
                    _ => false,
                }
            }
            ArgumentTest::OneOf(allowed) => allowed.iter().any(|a| same_value(a, value)),
            ArgumentTest::Range { min, max } => match value {
                Value::Number(n) => {
                    let at_least = |m: &Number| compare(n, m).is_some_and(Ordering::is_ge);
                    let at_most = |m: &Number| compare(n, m).is_some_and(Ordering::is_le);
                    min.as_ref().is_none_or(at_least) && max.as_ref().is_none_or(at_most)
                }
                _ => false,
            },
        }
    }

    /// The refusal of a value that does not pass (`None`: it cannot be read), as the rule's place in
    /// the file, the parameter and why.
    #[cold]
    fn refusal(&self, value: Option<&Value>) -> String {
        let (rule, parameter) = (&self.rule, &self.parameter);
        match value {
            Some(value) => format!("rule {rule}: `{parameter}` {}", self.why(value)),
            None => format!("rule {rule}: the arguments cannot be read to check `{parameter}`"),
        }
    }

    /// Why `value` does not pass.
    fn why(&self, value: &Value) -> String {
        match &self.test {
            ArgumentTest::Refuse(globs) => {
                if is_placeholder(value) {
                    return "cannot be read (it is redacted or not serializable)".to_owned();
                }
                let strings: Vec<&str> = match value {
                    Value::Null => return "is missing".to_owned(),
                    Value::String(s) => vec![s],
                    Value::Array(items) => {
                        let mut strings = Vec::with_capacity(items.len());
                        for item in items {
                            match item {
                                Value::String(s) => strings.push(s.as_str()),
                                _ => return "holds a value that is not text".to_owned(),
                            }
                        }
                        strings
                    }
                    _ => return "is not text".to_owned(),
                };
                strings
                    .iter()
                    .find_map(|s| {
                        globs
                            .iter()
                            .find(|g| glob_match(g.as_bytes(), s.as_bytes()))
                            .map(|g| format!("{} matches the refused pattern {:?}", Shown(s), &**g))
                    })
                    .unwrap_or_else(|| "is refused".to_owned())
            }
            ArgumentTest::OneOf(_) => {
                format!("{} is not one of the allowed values", shown(value))
            }
            ArgumentTest::Range { min, max } => match value {
                Value::Number(n) => {
                    let (min, max) = (Bound(min.as_ref()), Bound(max.as_ref()));
                    format!("{n} is outside {min}..={max}")
                }
                _ => format!("{} is not a number", shown(value)),
            },
        }
    }
}

/// Whether `value` is `allowed`: numbers by their value (`40` is `40.0`, exactly), the rest exactly.
fn same_value(allowed: &Value, value: &Value) -> bool {
    match (allowed, value) {
        (Value::Number(a), Value::Number(v)) => compare(v, a) == Some(Ordering::Equal),
        _ => allowed == value,
    }
}

/// Two numbers compared exactly, integers as integers (an `i64` or `u64` past 2^53 is not rounded);
/// `None` where one is NaN (which JSON cannot hold, but a bound read from TOML can).
#[inline]
pub(crate) fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    match (a.as_i64(), b.as_i64()) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        _ => compare_wide(a, b),
    }
}

/// [`compare`] past `i64`, or with a float.
fn compare_wide(a: &Number, b: &Number) -> Option<Ordering> {
    match (integer(a), integer(b)) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        (Some(a), None) => compare_integer(a, b.as_f64()?),
        (None, Some(b)) => compare_integer(b, a.as_f64()?).map(Ordering::reverse),
        (None, None) => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

fn integer(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// An integer against a float, exactly.
fn compare_integer(i: i128, f: f64) -> Option<Ordering> {
    // 2^127: every integral float below it in magnitude is an `i128`.
    const LIMIT: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;
    if f.is_nan() {
        return None;
    }
    if f >= LIMIT {
        return Some(Ordering::Less);
    }
    if f < -LIMIT {
        return Some(Ordering::Greater);
    }
    let floor = f.floor();
    Some(match i.cmp(&(floor as i128)) {
        Ordering::Equal if f > floor => Ordering::Less,
        other => other,
    })
}

/// A value as a refusal shows it: a number as it is, anything holding text through [`Shown`].
fn shown(value: &Value) -> String {
    match value {
        Value::Number(_) | Value::Bool(_) | Value::Null => value.to_string(),
        Value::String(text) => Shown(text).to_string(),
        _ => Shown(&value.to_string()).to_string(),
    }
}

/// The log's placeholder for a value it does not write.
fn is_placeholder(value: &Value) -> bool {
    matches!(value.as_str(), Some("[REDACTED]" | "[NOT SERIALIZABLE]"))
}

/// A value in a refusal's detail, cut short: the agent wrote it.
struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX: usize = 80;
        match self.0.char_indices().nth(MAX) {
            Some((cut, _)) => write!(f, "{:?}…", &self.0[..cut]),
            None => write!(f, "{:?}", self.0),
        }
    }
}

struct Bound<'a>(Option<&'a Number>);

impl fmt::Display for Bound<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n}"),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for Narrowing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Narrowing")
            .field("digest", &self.digest)
            .field("ceiling", &self.ceiling)
            .field("ask_at", &self.ask_at)
            .field("out_of_band_at", &self.out_of_band_at)
            .field("taint_refuses", &self.taint_refuses)
            .field(
                "tools",
                &self.tools.iter().filter(|t| t.names_the_tool()).count(),
            )
            .field(
                "read_rules",
                &(self.reads.deny.len() + self.reads.record.len()),
            )
            .finish()
    }
}

/// Reads the arguments of a call written as a JSON object, as an argument rule reads them: `null`
/// for one the call does not have, `None` (which refuses) where `parsed` is no object.
#[cfg(feature = "policy-file")]
pub(crate) fn json_arguments(parsed: &Option<Value>) -> impl FnMut(&str) -> Option<Value> + '_ {
    move |name| match parsed {
        Some(Value::Object(values)) => Some(values.get(name).cloned().unwrap_or(Value::Null)),
        _ => None,
    }
}
