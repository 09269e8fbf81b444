//! Policy tests: calls an operator writes down with the decision a policy file must make of each,
//! checked as unit tests are, in CI before the file binds a gate.
//!
//! ```toml
//! [[case]]
//! name = "the support bot never refunds"   # shown in the report; `case N` where absent
//! principal = "support-bot"                # the gate's principal and agent label, if any
//! agent = "triage"
//! mode = "FULL_AUTO"                       # the gate's mode before the file's ceiling (FULL_AUTO)
//! risk = "LOW_WRITE"                       # for a tool that escalates: the risk it is judged at
//! tool = "payments.refund"
//! arguments = { amount = 20 }              # the call's arguments (none where absent)
//! expect = "refused"                       # allowed, asks, refused, or a refusal's code
//! ```

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use toml::Spanned;

use super::check::place;
use super::explain::Explanation;
use super::file::{MAX_POLICY_BYTES, PolicyFile, read_limited};
use super::model::{PolicyError, PolicyErrors};
use crate::gate::narrowing::Ruling;
use crate::registry::registry;
use crate::terminal::escaped;
use toolgate_policy::{DenialCode, Mode, Risk};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesDoc {
    #[serde(default)]
    case: Vec<Spanned<CaseDoc>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseDoc {
    name: Option<String>,
    principal: Option<String>,
    agent: Option<String>,
    mode: Option<Spanned<String>>,
    risk: Option<Spanned<String>>,
    tool: Spanned<String>,
    #[serde(default)]
    arguments: toml::Table,
    expect: Spanned<String>,
}

/// The decision a case expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// `allowed`, `asks` or `refused`, whatever the refusal's code.
    Ruling(Ruling),
    /// A refusal with this code.
    Code(DenialCode),
}

impl Expected {
    fn parse(text: &str) -> Option<Expected> {
        for ruling in [Ruling::Allowed, Ruling::Asks, Ruling::Refused] {
            if text == ruling.as_str() {
                return Some(Expected::Ruling(ruling));
            }
        }
        DenialCode::ALL
            .iter()
            .find(|code| code.as_str() == text)
            .map(|&code| Expected::Code(code))
    }

    /// Whether `explanation` is what was expected.
    pub fn holds(self, explanation: &Explanation) -> bool {
        match self {
            Expected::Ruling(ruling) => explanation.ruling == ruling,
            Expected::Code(code) => explanation.code == Some(code),
        }
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::Ruling(ruling) => f.write_str(ruling.as_str()),
            Expected::Code(code) => write!(f, "refused ({code})"),
        }
    }
}

/// One case: a call and the decision expected of it.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyCase {
    /// Its name, or `case N` (counted from 1).
    pub name: String,
    /// Where it is written: `file:line:column`.
    pub place: String,
    /// The gate's principal.
    pub principal: Option<String>,
    /// The gate's agent label.
    pub agent: Option<String>,
    /// The gate's mode before the policy's ceiling.
    pub mode: Mode,
    /// The risk the call is judged at, for a tool whose `escalate` raises it by the arguments (which
    /// a policy test does not run); its declared risk where `None`.
    pub risk: Option<Risk>,
    /// The tool's id.
    pub tool: String,
    /// The call's arguments, a JSON object.
    pub arguments: Value,
    /// The decision expected.
    pub expect: Expected,
}

/// The cases of a file, each checked against the linked tools when read ([`PolicyCases::load`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyCases {
    cases: Vec<PolicyCase>,
}

/// A case and what the policy made of it.
#[derive(Debug, Clone)]
pub struct CaseResult<'a> {
    /// The case.
    pub case: &'a PolicyCase,
    /// The decision and the rule that made it.
    pub explanation: Explanation,
}

impl CaseResult<'_> {
    /// Whether the decision is the one expected.
    pub fn passed(&self) -> bool {
        self.case.expect.holds(&self.explanation)
    }
}

impl PolicyCases {
    /// Reads the cases at `path`; errors name it as given, with each case's line and column.
    pub fn load(path: impl AsRef<Path>) -> Result<PolicyCases, PolicyErrors> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = read_limited(path).map_err(|message| PolicyErrors::one(&name, 1, 1, message))?;
        PolicyCases::parse(&name, &text)
    }

    /// Reads cases from `text`, named `name` in errors: every case names a linked tool, a mode,
    /// and an expected decision that exist; every error is reported, with its place.
    pub fn parse(name: &str, text: &str) -> Result<PolicyCases, PolicyErrors> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(PolicyErrors::one(
                name,
                1,
                1,
                format!("the file is larger than {MAX_POLICY_BYTES} bytes"),
            ));
        }
        let error = |offset: usize, message: String| {
            let (line, column) = place(text, offset);
            PolicyError {
                file: name.to_owned(),
                line,
                column,
                message: escaped(&message).into_owned(),
            }
        };
        let doc: CasesDoc = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            PolicyErrors(vec![error(offset, e.message().trim_end().to_owned())])
        })?;
        if doc.case.is_empty() {
            return Err(PolicyErrors(vec![error(
                0,
                "no case: write each as a `[[case]]` table with `tool` and `expect`".to_owned(),
            )]));
        }
        let registry = registry();
        let mut errors = Vec::new();
        let mut cases = Vec::new();
        for (n, spanned) in doc.case.into_iter().enumerate() {
            let start = spanned.span().start;
            let case = spanned.into_inner();
            let tool = case.tool.get_ref();
            let found = registry.get(tool);
            if found.is_none() {
                errors.push(error(
                    case.tool.span().start,
                    format!("no linked tool has the id `{tool}`"),
                ));
            }
            let declared = found.as_ref().map(|t| t.manifest().risk_level);
            let risk = match &case.risk {
                None => None,
                Some(risk) => match risk.get_ref().parse::<Risk>() {
                    Ok(r) if declared.is_some_and(|d| r < d) => {
                        errors.push(error(
                            risk.span().start,
                            format!(
                                "`{tool}` declares {}: a call of it is judged at that risk or above",
                                declared.unwrap_or(r)
                            ),
                        ));
                        None
                    }
                    Ok(r) => Some(r),
                    Err(_) => {
                        errors.push(error(
                            risk.span().start,
                            format!(
                                "`{}` is no risk: write READ_ONLY, PROPOSE_ONLY, LOW_WRITE or HIGH_WRITE",
                                risk.get_ref()
                            ),
                        ));
                        None
                    }
                },
            };
            // The tool's `escalate` judges the arguments in the code, which a policy test does not
            // run: the case says at which risk its call is judged.
            if case.risk.is_none()
                && found
                    .as_ref()
                    .is_some_and(|t| t.entry.behaviour.escalate.is_some())
            {
                errors.push(error(
                    case.tool.span().start,
                    format!(
                        "`{tool}` escalates its risk by its arguments, which a policy test does not \
                         judge: give the risk this call is judged at (`risk = \"HIGH_WRITE\"`)"
                    ),
                ));
            }
            let mode = match &case.mode {
                None => Some(Mode::FullAuto),
                Some(mode) => {
                    let parsed = mode.get_ref().parse::<Mode>().ok();
                    if parsed.is_none() {
                        errors.push(error(
                            mode.span().start,
                            format!(
                                "`{}` is no mode: write SHADOW, ADVISORY, PARTIAL_AUTO or FULL_AUTO",
                                mode.get_ref()
                            ),
                        ));
                    }
                    parsed
                }
            };
            let expect = Expected::parse(case.expect.get_ref());
            if expect.is_none() {
                errors.push(error(
                    case.expect.span().start,
                    format!(
                        "`{}` is no decision: write allowed, asks, refused, or a refusal's code \
                         (DENY_LISTED, ARGUMENT_REFUSED, ...)",
                        case.expect.get_ref()
                    ),
                ));
            }
            let arguments = serde_json::to_value(&case.arguments).unwrap_or(Value::Null);
            if let (Some(mode), Some(expect)) = (mode, expect) {
                let (line, column) = place(text, start);
                cases.push(PolicyCase {
                    name: case.name.unwrap_or_else(|| format!("case {}", n + 1)),
                    place: format!("{name}:{line}:{column}"),
                    principal: case.principal,
                    agent: case.agent,
                    mode,
                    risk,
                    tool: case.tool.into_inner(),
                    arguments,
                    expect,
                });
            }
        }
        if errors.is_empty() {
            Ok(PolicyCases { cases })
        } else {
            errors.sort_by_key(|e| (e.line, e.column));
            Err(PolicyErrors(errors))
        }
    }

    /// The cases, in the order of the file.
    pub fn cases(&self) -> &[PolicyCase] {
        &self.cases
    }

    /// Decides every case under `policy`, as [`PolicyFile::explain`] does.
    pub fn run<'a>(&'a self, policy: &PolicyFile) -> Vec<CaseResult<'a>> {
        self.cases
            .iter()
            .map(|case| {
                let explanation = policy
                    .explain_at(
                        case.principal.as_deref(),
                        case.agent.as_deref(),
                        case.mode,
                        &case.tool,
                        &case.arguments,
                        case.risk,
                    )
                    .expect("a case's tool and risk are checked when read");
                CaseResult { case, explanation }
            })
            .collect()
    }
}

impl fmt::Display for CaseResult<'_> {
    /// `ok      NAME`, or `FAILED  NAME (PLACE)` with what was expected, what was decided, and by
    /// which rule.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = escaped(&self.case.name);
        if self.passed() {
            return write!(f, "ok      {name}");
        }
        let got = &self.explanation;
        writeln!(f, "FAILED  {name} ({})", escaped(&self.case.place))?;
        writeln!(f, "        expected: {}", self.case.expect)?;
        writeln!(f, "        decided:  {} in {}", got.decision, got.mode)?;
        write!(f, "        by:       {}", escaped(&got.rule))
    }
}
