//! The table: each gate's verdict for a tool in its mode and session, worked out when the gate was
//! built, and the inlined check that reads it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::arguments::ArgumentSource;
use super::refusal::refuse;
use crate::gate::Gate;
use crate::gate::ambient::STACK;
use crate::gate::call::{CallInfo, EffectiveRisk};
use crate::gate::compile::{TAINTED, Table, cell_verdict};
use crate::gate::denied::Denied;
use crate::gate::permit::Permit;
use crate::registry::ToolEntry;
use toolgate_policy::{self as policy, DenialCode, Facts, Mode, Verdict};

impl Gate {
    /// The gate's mode and, in [`TAINTED`], whether its session is tainted: the state a decision is
    /// made in, and read again at the commit point.
    #[inline]
    pub(crate) fn state(&self) -> u8 {
        self.inner.mode.load(Ordering::Acquire) & 7
    }

    /// Whether the table allows `entry` outright in the current mode, with no record to write.
    #[inline]
    pub(crate) fn allows_unaudited(&self, entry: &'static ToolEntry) -> bool {
        let inner = &*self.inner;
        let state = self.state();
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        match inner.allowed_outright.get(slot) {
            Some(bits) if bits.load(Ordering::Relaxed) >> state & 1 == 1 => true,
            Some(_) => {
                matches!(inner.approvals.granted_until.get(slot), Some(until) if until.load(Ordering::Relaxed) != 0)
                    && self.granted_outright(slot, state)
            }
            None => false,
        }
    }

    /// Whether a live grant of the whole tool lets a call that needs an approval in `state` run
    /// outright (a gate that keeps no record only; see `Inner::granted_until`). Never in a tainted
    /// session: the latch revokes every grant, and a grant racing it must not outlive it here.
    #[cold]
    #[inline(never)]
    fn granted_outright(&self, slot: usize, state: u8) -> bool {
        let inner = &*self.inner;
        if state & TAINTED != 0 {
            return false;
        }
        let table = inner.table.load();
        // A call the operator's argument rules read or its budgets count takes the full decision,
        // whatever grant it has.
        if table.full.get(slot).is_none_or(|&full| full) {
            return false;
        }
        let needs_approval = matches!(table.verdicts.get(slot), Some(row) if row[usize::from(state)] == Verdict::NeedsApproval);
        let Some(until) = inner.approvals.granted_until.get(slot) else {
            return false;
        };
        needs_approval
            && since(inner.approvals.epoch, Instant::now()) < until.load(Ordering::Acquire)
    }

    /// The verdict at the tool's declared risk in the current state.
    #[inline]
    pub(crate) fn table_verdict(&self, entry: &'static ToolEntry) -> (Mode, Verdict) {
        let state = self.state();
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        let verdict = match self.inner.verdict_cells.get(slot) {
            Some(row) => cell_verdict(row[usize::from(state)].load(Ordering::Acquire)),
            None => Verdict::Refuse(DenialCode::UnregisteredTool),
        };
        (Mode::from_index(state), verdict)
    }

    /// A refusal by this gate's table, a deny-listed tool told its rule.
    #[cold]
    pub(crate) fn refusal(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        code: DenialCode,
    ) -> Denied {
        let denied = refuse(entry, code, entry.manifest.risk_level, Some(mode));
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        let table = self.inner.table.load();
        // Deny trumps every other verdict, so a tool with a rule is refused DENY_LISTED: the rule is
        // the detail. The code's rules come first, then the operator's.
        if code == DenialCode::DenyListed
            && let Some(rule) = table.deny_rule_of.get(slot).copied().flatten()
        {
            return denied.with_detail(table.deny_rules[rule as usize].clone());
        }
        let rules = table.narrowing.tool(slot);
        match code {
            DenialCode::DenyListed => match rules.and_then(|r| r.deny.clone()) {
                Some(rule) => denied.with_detail(rule),
                None => denied,
            },
            DenialCode::ApprovalRequired => {
                match table.narrowing.asks(slot, entry.manifest.risk_level) {
                    Some(rule) => denied.with_detail(
                        format!("the operator's policy asks for every call of it ({rule})").into(),
                    ),
                    None => denied,
                }
            }
            _ => denied,
        }
    }

    /// The verdict `table` gives a call judged at `risk` in `state` (a mode and the taint bit): the
    /// precomputed one at the declared risk, else worked out now.
    pub(crate) fn verdict_in(
        &self,
        table: &Table,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        state: u8,
    ) -> Verdict {
        let manifest = &entry.manifest;
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        if risk.get() == manifest.risk_level {
            return match table.verdicts.get(slot) {
                Some(row) => row[usize::from(state & 7)],
                None => Verdict::Refuse(DenialCode::UnregisteredTool),
            };
        }
        let Some(rule) = table.deny_rule_of.get(slot) else {
            return Verdict::Refuse(DenialCode::UnregisteredTool);
        };
        let narrowing = &table.narrowing;
        let can_approve =
            self.inner.approvals.approver.is_some() || self.inner.approvals.store.is_some();
        let facts = Facts {
            risk: risk.get(),
            allowed_modes: manifest.allowed_modes,
            mode: Mode::from_index(state),
            deny_listed: rule.is_some() || narrowing.tool(slot).is_some_and(|t| t.deny.is_some()),
            can_approve,
        };
        let verdict = if state & TAINTED != 0 {
            policy::decide_tainted(facts, table.taint_policy)
        } else {
            policy::decide(facts)
        };
        narrowing.narrow(slot, risk.get(), verdict, can_approve)
    }

    /// Whether the operator's argument rules alone may take a call of `entry` to the full decision
    /// (`Inner::ruled_hint`): the table says for sure.
    #[inline]
    pub(super) fn ruled_hint(&self, entry: &'static ToolEntry) -> bool {
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        self.inner
            .ruled_hint
            .get(slot)
            .is_some_and(|hint| hint.load(Ordering::Acquire))
    }

    /// The table every decision reads now, and the commit point reads again.
    pub(crate) fn table(&self) -> Arc<Table> {
        self.inner.table.load_full()
    }

    /// The refusal of the operator's argument rules in `table` for this call, if one refuses it.
    /// Reads the arguments only for a tool that a rule names, and only the arguments rules name.
    pub(super) fn argument_refusal<A: ArgumentSource>(
        table: &Table,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        state: u8,
        arguments: &mut A,
    ) -> Option<Denied> {
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        if !table.narrowing.has_argument_rules(slot) {
            return None;
        }
        let why = table
            .narrowing
            .refuses_arguments(slot, |name| arguments.value(name))?;
        Some(argument_refused(entry, risk, state, why))
    }

    /// A refusal the table gives in `state`, told what caused it.
    #[cold]
    pub(crate) fn table_refusal(
        &self,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        state: u8,
        code: DenialCode,
    ) -> Denied {
        let denied = self.refusal(entry, Mode::from_index(state), code);
        self.with_taint(denied, risk.get()).with_risk(risk.get())
    }
}

#[cold]
fn argument_refused(
    entry: &'static ToolEntry,
    risk: EffectiveRisk,
    state: u8,
    why: String,
) -> Denied {
    refuse(
        entry,
        DenialCode::ArgumentRefused,
        risk.get(),
        Some(Mode::from_index(state)),
    )
    .with_detail(why.into())
}

/// Whether a call of `entry` runs outright: one gate (the tool's `&Gate` argument, or the one ambient
/// gate), which keeps no record and whose table allows the call in the current mode. Generated code asks
/// this first, inlined; everything else (refusals, escalation, approvals, audit records, nested gates)
/// goes through [`check`](super::check).
#[inline]
pub(crate) fn fast_allows(entry: &'static ToolEntry, explicit: Option<&Gate>) -> bool {
    STACK
        .try_with(|stack| {
            let Ok(stack) = stack.try_borrow() else {
                return false;
            };
            match (explicit, stack.as_slice()) {
                (None, [gate]) | (Some(gate), []) => gate.allows_unaudited(entry),
                _ => false,
            }
        })
        .unwrap_or(false)
}

/// The refusal of a lone gate that keeps no record, from its table, when nothing else is to be asked,
/// written or told (a deny-listed call is told its rule, and the latch its cause, on the full path):
/// a copy of the answer, read from the stack before anything further is asked of it. Inlined into the
/// two checks, which are out of line themselves.
#[inline(always)]
pub(super) fn lone_refusal(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
) -> Option<(Mode, DenialCode)> {
    STACK
        .try_with(|stack| {
            let stack = stack.try_borrow().ok()?;
            match (explicit, stack.as_slice()) {
                (None, [gate]) | (Some(gate), []) if !gate.audits() => {
                    match gate.table_verdict(entry) {
                        (
                            mode,
                            Verdict::Refuse(
                                code @ (DenialCode::ModeNotAllowed
                                | DenialCode::AboveCeiling
                                | DenialCode::UnregisteredTool),
                            ),
                        ) => Some((mode, code)),
                        (mode, Verdict::Refuse(DenialCode::ApprovalRequired))
                            if !gate.tainted() =>
                        {
                            Some((mode, DenialCode::ApprovalRequired))
                        }
                        _ => None,
                    }
                }
                _ => None,
            }
        })
        .ok()
        .flatten()
}

/// The decision of a lone gate that keeps no record, for a call its table allows and the operator's
/// argument rules alone read (no budget counts it, no latch to close): the rules read the call's own
/// arguments and their answer is the decision, with no wait between the rules and the body. `None`
/// where the full decision is needed.
///
/// The arguments' `Serialize` is the application's code, which may enter a gate itself: the caller
/// holds no borrow of the stack while this runs.
#[inline(always)]
pub(super) fn ruled(
    gate: &Gate,
    entry: &'static ToolEntry,
    call: &CallInfo<'_>,
) -> Option<Result<Permit, Denied>> {
    let slot = entry.slot.load(Ordering::Relaxed) as usize;
    let table = gate.inner.table.load();
    if !table.ruled_only.get(slot).copied().unwrap_or(false) {
        return None;
    }
    let state = gate.state();
    if table.verdicts[slot][usize::from(state)] != Verdict::Allow {
        return None;
    }
    let risk = EffectiveRisk::new(entry.manifest.risk_level, None);
    if let Some(why) = table
        .narrowing
        .refuses_arguments(slot, |name| call.value(name))
    {
        return Some(Err(argument_refused(entry, risk, state, why)));
    }
    // Reading the arguments ran their `Serialize`, the application's code, which may have waited:
    // the gate may have been lowered, its session tainted or its policy replaced meanwhile. Then the
    // full decision decides the call as the gate is now.
    let unchanged =
        gate.state() == state && gate.inner.generation.load(Ordering::Acquire) <= table.generation;
    unchanged.then(|| Ok(Permit::unaudited()))
}

/// Nanoseconds from `epoch` to `at`, at least 1 (0 means no grant).
pub(super) fn since(epoch: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch).as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}
