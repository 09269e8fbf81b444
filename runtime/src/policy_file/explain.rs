//! Why a policy file decides a call as it does: the decision and the rule that made it.

use std::fmt;

use serde_json::Value;

use super::check;
use super::file::PolicyFile;
use crate::gate::budget::{HistoryOrder, HistoryPer};
use crate::gate::narrowing::{Judged, Ruling, json_arguments};
use crate::registry::registry;
use toolgate_policy::{DenialCode, Mode, Risk, Verdict};

/// A decision as a policy file and the code's manifest make it ([`PolicyFile::explain`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// What the call comes to.
    pub ruling: Ruling,
    /// The mode the call is decided in: the one asked about, under the file's ceiling.
    pub mode: Mode,
    /// `allowed`, `asks for an approval`, or `refused (CODE)`.
    pub decision: String,
    /// The code a refusal carries.
    pub code: Option<DenialCode>,
    /// The rule that made the decision, with its place, or what in the code did.
    pub rule: String,
    /// For a call that asks for an approval an operator alone gives (never a client's in-band
    /// form), what keeps it for one: the rule with its place (`out_of_band`, `out_of_band_at`), or
    /// the code (a tool declared `out_of_band`, or `irreversible`). `None` otherwise.
    pub approval: Option<String>,
    /// What the file's rules logged only (`[shadow]`) would make of the call where stricter: the
    /// ruling and the rule, as a gate records it (`rule_in_shadow`). `None` otherwise.
    pub shadow: Option<String>,
    /// The rules over history that decide the call too, on the calls before it, where it is not
    /// refused already: each as a refusal names it, with its place. Empty where none does.
    pub history: Vec<String>,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "decision: {}", self.decision)?;
        writeln!(f, "mode:     {}", self.mode)?;
        writeln!(f, "by:       {}", self.rule)?;
        if let Some(approval) = &self.approval {
            writeln!(f, "approval: out of band only, by {approval}")?;
        }
        if let Some(shadow) = &self.shadow {
            writeln!(f, "shadow:   {shadow} (logged only)")?;
        }
        for rule in &self.history {
            writeln!(f, "history:  {rule} (decided on the calls before it)")?;
        }
        Ok(())
    }
}

impl PolicyFile {
    /// How a gate of `principal` and `agent` in `mode`, following this file, decides a call of
    /// `tool` with `arguments` (a JSON object), before any approver is asked and assuming the gate
    /// can ask one; deny rules and budgets written in the application's code are not seen here.
    pub fn explain(
        &self,
        principal: Option<&str>,
        agent: Option<&str>,
        mode: Mode,
        tool: &str,
        arguments: &Value,
    ) -> Result<Explanation, String> {
        self.explain_at(principal, agent, mode, tool, arguments, None)
    }

    /// [`explain`](PolicyFile::explain) for a call judged at `risk` (what the tool's `escalate`
    /// makes of its arguments, which is not run here), or at its declared risk where `None`; a risk
    /// below the declared one is refused.
    pub fn explain_at(
        &self,
        principal: Option<&str>,
        agent: Option<&str>,
        mode: Mode,
        tool: &str,
        arguments: &Value,
        risk: Option<Risk>,
    ) -> Result<Explanation, String> {
        let registry = registry();
        let Some(found) = registry.get(tool) else {
            return Err(format!("no linked tool has the id {tool:?}"));
        };
        let entry = found.entry;
        let declared = entry.manifest.risk_level;
        let risk = risk.unwrap_or(declared);
        if risk < declared {
            return Err(format!(
                "`{tool}` declares {declared}: a call of it is judged at that risk or above, not at {risk}"
            ));
        }
        let slot = entry.slot.load(std::sync::atomic::Ordering::Relaxed) as usize;
        let narrowing = self.narrowing(principal, agent);
        let lowered = narrowing
            .ceiling
            .as_ref()
            .filter(|c| c.value < mode)
            .map(|c| c.rule.to_string());
        let manifest = &entry.manifest;
        let parsed = Some(arguments.clone());
        let judged = Judged::new(
            &narrowing,
            manifest,
            slot,
            mode,
            risk,
            json_arguments(&parsed),
        );
        let (code_verdict, verdict) = (judged.code_verdict, judged.verdict);
        let the_code = || {
            format!(
                "the code: `{tool}` is {}{} and runs in {}",
                manifest.risk_level,
                if risk == declared {
                    String::new()
                } else {
                    format!(" (this call judged at {risk})")
                },
                manifest.allowed_modes
            )
        };
        let (decision, code, rule) = match (verdict, &judged.argument) {
            (Verdict::Refuse(code), _) => {
                let rule = match code {
                    DenialCode::DenyListed => narrowing
                        .tool(slot)
                        .and_then(|r| r.deny.as_deref())
                        .map(str::to_owned),
                    _ => lowered.clone().map(|c| format!("{c}, and {}", the_code())),
                };
                (
                    format!("refused ({code})"),
                    Some(code),
                    rule.unwrap_or_else(the_code),
                )
            }
            (_, Some(why)) => (
                format!("refused ({})", DenialCode::ArgumentRefused),
                Some(DenialCode::ArgumentRefused),
                why.clone(),
            ),
            (Verdict::NeedsApproval, None) if code_verdict == Verdict::Allow => {
                let rule = narrowing.asks(slot, risk).map(|r| r.to_string());
                (
                    "asks for an approval".to_owned(),
                    None,
                    rule.unwrap_or_else(the_code),
                )
            }
            (Verdict::NeedsApproval, None) => ("asks for an approval".to_owned(), None, the_code()),
            (_, None) => (
                "allowed".to_owned(),
                None,
                lowered.map_or_else(the_code, |c| format!("{}, under {c}", the_code())),
            ),
        };
        // The channel of an approval: the code's say first, since the file only adds to it.
        let approval = (code.is_none() && verdict == Verdict::NeedsApproval)
            .then(|| {
                if manifest.irreversible {
                    Some(format!("the code: `{tool}` is irreversible"))
                } else if manifest.out_of_band {
                    Some(format!("the code: `{tool}` is declared out_of_band"))
                } else {
                    narrowing
                        .out_of_band(slot, risk)
                        .map(|rule| rule.to_string())
                }
            })
            .flatten();
        let history = match code {
            Some(_) => Vec::new(),
            None => narrowing
                .history
                .iter()
                .filter(|rule| check::pattern_reaches(&rule.tool, entry))
                .map(|rule| {
                    let (what, ended) = match rule.order {
                        HistoryOrder::After => ("only within", " ended without an error"),
                        HistoryOrder::NotAfter => ("not within", " ran"),
                    };
                    let whose = match rule.per {
                        HistoryPer::Principal => "for the principal",
                        HistoryPer::Session => "in the session",
                    };
                    format!(
                        "{what} {} s after a call of `{}`{ended} {whose} ({})",
                        rule.within.as_secs(),
                        rule.other,
                        rule.owner.1
                    )
                })
                .collect(),
        };
        Ok(Explanation {
            history,
            ruling: judged.ruling(),
            mode: judged.mode,
            decision,
            code,
            rule,
            approval,
            shadow: narrowing.shadow_ruling(
                entry,
                mode,
                risk,
                false,
                judged.ruling(),
                json_arguments(&parsed),
            ),
        })
    }
}
