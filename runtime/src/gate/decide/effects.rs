//! The step of a tool with lasting effects: its target checked (one target, for an irreversible
//! tool), its rollback plan made, and its target's state read by its `evidence` probe, once for
//! whoever approves the call and again just before the body, where the two must agree.

use super::arguments::ArgumentSource;
use super::refusal::refuse;
use super::state::Decision;
use crate::approval::{Evidence, not_single, typed};
use crate::audit::Decision as Decided;
use crate::gate::call::{EffectiveRisk, Effects};
use crate::gate::denied::Denied;
use crate::gate::permit::Permit;
use crate::registry::ToolEntry;
use toolgate_policy::{DenialCode, Mode, Verdict};

impl<A: ArgumentSource> Decision<A> {
    /// After every gate's table: the target, the plan, and, where some gate asks for an approval,
    /// the state of the target the approver is shown. Before any approver, store or budget.
    pub(super) fn effects_ready(&mut self) -> Result<(), Denied> {
        let (entry, risk) = (self.entry, self.risk);
        let manifest = &entry.manifest;
        let mode = self.held.first().map(|h| Mode::from_index(h.state));
        let refused =
            |code, why: String| refuse(entry, code, risk.get(), mode).with_detail(why.into());
        let Some(effects) = self.arguments.effects() else {
            // Generated code always hands them over; a call that does not is not decided.
            return Err(refused(
                DenialCode::TargetNotSingle,
                "the call came without its target, plan and probe".to_owned(),
            ));
        };
        if manifest.target.is_some() {
            match effects.target() {
                Some(Ok(value)) => {
                    if let (true, Some(why)) = (manifest.irreversible, not_single(&value)) {
                        return Err(refused(DenialCode::TargetNotSingle, why));
                    }
                    self.shown.get_or_insert_with(Box::default).target = Some(typed(&value));
                }
                Some(Err(why)) => return Err(refused(DenialCode::TargetNotSingle, why)),
                None => {
                    return Err(refused(
                        DenialCode::TargetNotSingle,
                        "the call came without its target".to_owned(),
                    ));
                }
            }
        }
        if manifest.rollback {
            match effects.rollback.map(|plan| plan()) {
                Some(Ok(plan)) => {
                    self.shown.get_or_insert_with(Box::default).plan = Some(plan);
                }
                Some(Err(why)) => {
                    return Err(refused(DenialCode::RollbackUnavailable, why));
                }
                None => {
                    return Err(refused(
                        DenialCode::RollbackUnavailable,
                        "the call came without its plan".to_owned(),
                    ));
                }
            }
        }
        let asks = self
            .held
            .iter()
            .any(|h| h.verdict == Verdict::NeedsApproval);
        if manifest.evidence && asks {
            let seen = read(effects, entry, risk, mode)?;
            self.shown.get_or_insert_with(Box::default).seen = Some(seen);
        }
        Ok(())
    }

    /// Just before the body: the probe reads the target again. Where an approver saw it, it must be
    /// as they saw it. Where the call is not at hand (an async decision that waited), the read is left
    /// to the confirmation before the body ([`confirm_evidence`]).
    pub(super) fn evidence_holds(&mut self) -> Result<(), Denied> {
        let (entry, risk) = (self.entry, self.risk);
        if !entry.manifest.evidence {
            return Ok(());
        }
        let approved = self.held.iter().any(|h| {
            h.allowed
                .as_ref()
                .is_some_and(|a| a.decision == Decided::Approved)
        });
        let expected = self
            .shown()
            .seen
            .as_ref()
            .filter(|_| approved)
            .map(|seen| seen.digest.clone());
        let record = entry.behaviour.record_arguments;
        let Some(effects) = self.arguments.effects() else {
            self.permit.expect_evidence(expected, record);
            return Ok(());
        };
        let mode = self.held.first().map(|h| Mode::from_index(h.state));
        let now = read(effects, entry, risk, mode)?;
        if let Some(expected) = &expected
            && *expected != now.digest
        {
            return Err(changed(entry, risk, mode, expected, &now));
        }
        self.permit.observed_before(now, record);
        Ok(())
    }
}

/// The probe's reading, or the refusal of a probe that failed.
fn read(
    effects: &Effects<'_>,
    entry: &'static ToolEntry,
    risk: EffectiveRisk,
    mode: Option<Mode>,
) -> Result<Evidence, Denied> {
    let probe = effects.evidence.ok_or_else(|| {
        refuse(entry, DenialCode::EvidenceUnavailable, risk.get(), mode)
            .with_detail("the call came without its probe".into())
    })?;
    match probe() {
        Ok(value) => Ok(Evidence::of(&value)),
        Err(why) => Err(
            refuse(entry, DenialCode::EvidenceUnavailable, risk.get(), mode)
                .with_detail(why.into()),
        ),
    }
}

#[cold]
fn changed(
    entry: &'static ToolEntry,
    risk: EffectiveRisk,
    mode: Option<Mode>,
    expected: &str,
    now: &Evidence,
) -> Denied {
    refuse(entry, DenialCode::EvidenceChanged, risk.get(), mode).with_detail(
        format!(
            "approved with the target's state {}, it reads {} now",
            short(expected),
            short(&now.digest)
        )
        .into(),
    )
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// The read left to the confirmation of an async call whose decision waited: the probe reads the
/// target now, which must be as the approver saw it.
pub(super) fn confirm_evidence(
    entry: &'static ToolEntry,
    permit: &mut Permit,
    effects: Option<&Effects<'_>>,
    risk: EffectiveRisk,
) -> Result<(), Denied> {
    let Some((expected, record)) = permit.take_expected_evidence() else {
        return Ok(());
    };
    let effects = effects.ok_or_else(|| {
        refuse(entry, DenialCode::EvidenceUnavailable, risk.get(), None)
            .with_detail("the call came without its probe".into())
    })?;
    let now = read(effects, entry, risk, None)?;
    if let Some(expected) = &expected
        && *expected != now.digest
    {
        return Err(changed(entry, risk, None, expected, &now));
    }
    permit.observed_before(now, record);
    Ok(())
}
