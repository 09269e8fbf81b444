//! The ambient gate: the gates a thread has entered with `Gate::run`, or a future with `Gate::scope`.
//!
//! Gates nest as a stack, and a call must pass every gate on it, so an inner gate can only narrow what the
//! outer ones allow. A new thread starts with an empty stack: a call there is refused (`NO_GATE`) until it
//! enters a gate of its own.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::call::{CallInfo, EffectiveRisk};
use crate::denied::Denied;
use crate::gate::{Gate, LazyArguments};
use crate::permit::{Exit, Permit, close_refused};
use crate::policy::DenialCode;
use crate::policy::Mode;
use crate::policy::Verdict;
use crate::registry::ToolEntry;

thread_local! {
    static STACK: RefCell<Vec<Gate>> = const { RefCell::new(Vec::new()) };
}

/// Leaves the gate it entered when dropped, on return or unwind.
pub(crate) struct Entered {
    _not_send: PhantomData<*const ()>,
}

pub(crate) fn enter(gate: Gate) -> Entered {
    STACK.with(|stack| stack.borrow_mut().push(gate));
    Entered {
        _not_send: PhantomData,
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        // Leaving cannot fail unless the thread is being torn down, when nothing runs after it anyway.
        let _ = STACK.try_with(|stack| stack.borrow_mut().pop());
    }
}

/// Whether a call of `entry` runs outright: one gate (the tool's `&Gate` argument, or the one ambient
/// gate), which keeps no record and whose table allows the call in the current mode. Generated code asks
/// this first, inlined; everything else (refusals, escalation, approvals, audit records, nested gates)
/// goes through [`check_not_allowed`].
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

/// Decides a call that [`fast_allows`] did not let through.
#[cold]
#[inline(never)]
pub(crate) fn check_not_allowed(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    match lone_refusal(entry, explicit) {
        Some((mode, code)) => {
            let manifest = &entry.manifest;
            let denied = Denied::new(code, manifest, manifest.risk_level, Some(mode));
            crate::by_name::offer_refusal(entry, &denied);
            Err(denied)
        }
        None => check_slow(entry, explicit, call),
    }
}

/// The refusal of a lone gate that keeps no record, from its table, when nothing else is to be asked,
/// written or told (a deny-listed call is told its rule).
#[inline]
fn lone_refusal(entry: &'static ToolEntry, explicit: Option<&Gate>) -> Option<(Mode, DenialCode)> {
    STACK
        .try_with(|stack| {
            let stack = stack.try_borrow().ok()?;
            match (explicit, stack.as_slice()) {
                (None, [gate]) | (Some(gate), []) if !gate.audits() => {
                    match gate.table_verdict(entry) {
                        (_, Verdict::Refuse(DenialCode::DenyListed)) => None,
                        (mode, Verdict::Refuse(code)) => Some((mode, code)),
                        _ => None,
                    }
                }
                _ => None,
            }
        })
        .ok()
        .flatten()
}

/// Decides a call whose arguments escalated its risk: never from the table of declared risks.
#[cold]
#[inline(never)]
pub(crate) fn check_escalated(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    check_slow(entry, explicit, call)
}

#[cold]
#[inline(never)]
fn check_slow(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    let gates = STACK
        .try_with(|stack| {
            let Ok(stack) = stack.try_borrow() else {
                return Err(no_gate(entry));
            };
            match (explicit, stack.as_slice()) {
                (None, []) => Err(no_gate(entry)),
                (explicit, ambient) => Ok(distinct(explicit.into_iter().chain(ambient))),
            }
        })
        .unwrap_or_else(|_| Err(no_gate(entry)));
    // Approvers and sinks run with the stack released, so that they may enter gates themselves.
    let decided = gates.and_then(|gates| decide_all(entry, &gates, call));
    if let Err(denied) = &decided {
        crate::by_name::offer_refusal(entry, denied);
    }
    decided
}

/// Each gate once, outermost first: a gate entered twice, or both entered and passed, decides once.
#[cold]
fn distinct<'a>(gates: impl Iterator<Item = &'a Gate>) -> Vec<Gate> {
    let mut seen: Vec<Gate> = Vec::new();
    for gate in gates {
        if !seen.iter().any(|g| g.id() == gate.id()) {
            seen.push(gate.clone());
        }
    }
    seen
}

/// Decides a call against every gate around it, outermost first, then writes their `enter` records,
/// then re-checks every gate's mode: the re-check is the last thing before the body runs, since each
/// step before it may take time (an approver, an argument's `Serialize`, a slow sink) during which a
/// gate can be lowered. A refusal at any step is recorded by every gate that took part.
#[cold]
fn decide_all(
    entry: &'static ToolEntry,
    gates: &[Gate],
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    let risk = EffectiveRisk::new(entry.manifest.risk_level, call.escalated);
    let mut arguments = LazyArguments::new(call);
    let mut decisions = Vec::with_capacity(gates.len());
    for (i, gate) in gates.iter().enumerate() {
        match gate.decide(entry, risk, &mut arguments) {
            Ok(decision) => decisions.push(decision),
            // The refusing gate recorded its refusal; the ones that allowed before it record it too.
            Err(denied) => {
                return Err(abandon(
                    entry,
                    &gates[..i],
                    Vec::new(),
                    denied,
                    &mut arguments,
                ));
            }
        }
    }
    let mut exits = Vec::new();
    for (i, (gate, &(mode, decision))) in gates.iter().zip(&decisions).enumerate() {
        match gate.record_enter(entry, mode, decision, risk, call, &mut arguments) {
            Ok(Some(exit)) => exits.push(exit),
            Ok(None) => {}
            // The failing gate's sink is what failed: every other gate records the refusal.
            Err(denied) => {
                let others: Vec<Gate> = gates
                    .iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .map(|(_, g)| g.clone())
                    .collect();
                return Err(abandon(entry, &others, exits, denied, &mut arguments));
            }
        }
    }
    for (gate, &(mode, _)) in gates.iter().zip(&decisions) {
        if let Err(denied) = gate.recheck(entry, mode, risk) {
            return Err(abandon(entry, gates, exits, denied, &mut arguments));
        }
    }
    Ok(Permit::audited(exits))
}

/// Records a refusal in the log of each of `gates`: an `exit` of outcome `refused` where the gate wrote
/// the call's `enter`, a `refused` record otherwise. Every `enter` gets its `exit`.
#[cold]
fn abandon(
    entry: &'static ToolEntry,
    gates: &[Gate],
    exits: Vec<Exit>,
    denied: Denied,
    arguments: &mut LazyArguments<'_>,
) -> Denied {
    for gate in gates {
        if !exits.iter().any(|exit| exit.gate.id() == gate.id()) {
            gate.record_refusal(entry, &denied, arguments);
        }
    }
    close_refused(exits, &denied);
    denied
}

#[cold]
fn no_gate(entry: &'static ToolEntry) -> Denied {
    let manifest = &entry.manifest;
    Denied::new(DenialCode::NoGate, manifest, manifest.risk_level, None)
}

pin_project_lite::pin_project! {
    /// A future that has its gate as the ambient gate whenever it is polled: see [`Gate::scope`].
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<F> {
        gate: Gate,
        #[pin]
        future: F,
    }
}

impl<F> Scoped<F> {
    pub(crate) fn new(gate: Gate, future: F) -> Scoped<F> {
        Scoped { gate, future }
    }

    /// The gate the future runs under.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = enter(this.gate.clone());
        this.future.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::AllowAllApprover;
    use crate::audit::MemorySink;
    use crate::manifest::{Source, ToolManifest};
    use crate::policy::Risk;
    use crate::policy::{Mode, ModeSet};
    use crate::registry::Registration;

    // Tools over every risk, allowed in every mode, in FULL_AUTO only, or in SHADOW only.
    macro_rules! tools {
        ($($name:ident = $id:literal, $risk:ident, $modes:expr;)*) => {
            $(
                static $name: ToolEntry = ToolEntry::__new(
                    ToolManifest::__new(
                        $id, None, "", Risk::$risk, false, $modes, false, false,
                        Source { file: file!(), line: line!(), module_path: module_path!() },
                    ),
                    None,
                );
                inventory::submit! { Registration(&$name) }
            )*
            const TOOLS: &[&ToolEntry] = &[$(&$name),*];
        };
    }

    tools! {
        READ_ALL = "scope_test.read_all", ReadOnly, ModeSet::ALL;
        READ_FULL = "scope_test.read_full", ReadOnly, ModeSet::of(&[Mode::FullAuto]);
        READ_SHADOW = "scope_test.read_shadow", ReadOnly, ModeSet::of(&[Mode::Shadow]);
        PROPOSE_ALL = "scope_test.propose_all", ProposeOnly, ModeSet::ALL;
        PROPOSE_FULL = "scope_test.propose_full", ProposeOnly, ModeSet::of(&[Mode::FullAuto]);
        LOW_ALL = "scope_test.low_all", LowWrite, ModeSet::ALL;
        LOW_FULL = "scope_test.low_full", LowWrite, ModeSet::of(&[Mode::FullAuto]);
        LOW_SHADOW = "scope_test.low_shadow", LowWrite, ModeSet::of(&[Mode::Shadow]);
        HIGH_ALL = "scope_test.high_all", HighWrite, ModeSet::ALL;
        HIGH_FULL = "scope_test.high_full", HighWrite, ModeSet::of(&[Mode::FullAuto]);
    }

    fn gates(mode: Mode) -> Vec<(&'static str, Gate)> {
        let build = |builder: crate::gate::GateBuilder| builder.mode(mode).build().unwrap();
        vec![
            ("plain", build(Gate::builder())),
            ("audited", build(Gate::builder().audit(MemorySink::new()))),
            ("deny low", build(Gate::builder().deny("scope_test.low_*"))),
            (
                "approver",
                build(Gate::builder().approver(AllowAllApprover)),
            ),
            ("two-step", build(Gate::builder().two_step_approvals())),
        ]
    }

    const CALL: CallInfo<'static> = CallInfo {
        escalated: None,
        arguments: &[],
        record_arguments: false,
    };

    // The inlined check is a cache of the table: it must let through exactly the calls that one gate
    // keeping no record allows outright, never more (that would skip a refusal or a record) and never
    // fewer (that would put allowed calls on the slow path).
    #[test]
    fn the_inlined_check_lets_through_exactly_what_one_unaudited_gate_allows() {
        for entry in TOOLS {
            for mode in Mode::ALL {
                for (name, gate) in gates(mode) {
                    let outright =
                        !gate.audits() && gate.verdict(&entry.manifest) == Some(Verdict::Allow);
                    let case = format!("{} in {mode} through the {name} gate", entry.manifest.id);
                    assert_eq!(fast_allows(entry, Some(&gate)), outright, "{case}, passed");
                    assert_eq!(
                        gate.run(|| fast_allows(entry, None)),
                        outright,
                        "{case}, entered"
                    );
                    assert!(!fast_allows(entry, None), "{case}: no gate at all");
                    let both = gate.run(|| fast_allows(entry, Some(&gate)));
                    assert!(!both, "{case}, passed and entered");
                    let nested = gate.run(|| gate.run(|| fast_allows(entry, None)));
                    assert!(!nested, "{case}, entered twice");
                    let full = check_not_allowed(entry, Some(&gate), &CALL);
                    if outright {
                        assert!(full.is_ok(), "{case}: the full check disagrees");
                    }
                }
            }
        }
    }

    #[test]
    fn a_gate_keeps_records_exactly_when_it_has_a_sink() {
        for mode in Mode::ALL {
            for (name, gate) in gates(mode) {
                assert_eq!(gate.audits(), name == "audited", "{name} in {mode}");
            }
        }
    }
}
