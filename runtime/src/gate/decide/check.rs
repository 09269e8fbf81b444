//! A tool's check: where the decision of every call starts, direct, by name or handed its arguments
//! by an MCP server.

use super::gates::{Around, Shape, around};
use super::in_place::InPlaceCall;
use super::refusal::{no_gate, refuse};
use super::suspension::{self, Entering};
use super::{in_place, table};
use crate::gate::Gate;
use crate::gate::call::CallInfo;
use crate::gate::denied::Denied;
use crate::gate::permit::Permit;
use crate::registry::ToolEntry;
use toolgate_policy::DenialCode;

/// Decides a call that [`fast_allows`](super::table::fast_allows) did not let through, its risk
/// escalated or not.
#[cold]
#[inline(never)]
pub(crate) fn check(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    // Only a tool gated in place looks at the slot: every other check pays one field read, here.
    if entry.in_place.is_some()
        && let Some(in_place) = in_place::take_in_place(entry)
    {
        return check_in_place(entry, explicit, &in_place, call);
    }
    if call.escalated.is_none()
        && let Some((mode, code)) = table::lone_refusal(entry, explicit)
    {
        return Err(refuse(entry, code, entry.manifest.risk_level, Some(mode)));
    }
    check_around(entry, explicit, call).map(|(permit, _)| permit)
}

/// The decision past a lone gate's table: the gates around the call asked once, and the stack's shape
/// the decision was made under.
#[cold]
#[inline(never)]
pub(super) fn check_around(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<(Permit, Shape), Denied> {
    let (around, shape) = around(entry, explicit, call.escalated.is_none());
    let permit = match around {
        Around::None => return Err(no_gate(entry)),
        Around::Ruled(gate) => match table::ruled(&gate, entry, call) {
            Some(result) => result?,
            None => suspension::decide_blocking(entry, vec![gate], call)?,
        },
        // Approvers and sinks run with the stack released, so that they may enter gates themselves.
        Around::Gates(gates) => suspension::decide_blocking(entry, gates, call)?,
    };
    Ok((permit, shape))
}

/// [`check`] for an async tool: the decision may wait for an async approver or a store.
#[cold]
#[inline(never)]
pub(crate) fn check_async(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Entering {
    // Only a tool gated in place looks at the slot: every other check pays one field read, here.
    if entry.in_place.is_some()
        && let Some(in_place) = in_place::take_in_place(entry)
    {
        return check_async_in_place(entry, explicit, &in_place, call);
    }
    if call.escalated.is_none()
        && let Some((mode, code)) = table::lone_refusal(entry, explicit)
    {
        return Entering::Done(Err(refuse(
            entry,
            code,
            entry.manifest.risk_level,
            Some(mode),
        )));
    }
    check_async_around(entry, explicit, call).0
}

/// [`check_around`] for an async call.
#[cold]
#[inline(never)]
pub(super) fn check_async_around(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> (Entering, Shape) {
    let (around, shape) = around(entry, explicit, call.escalated.is_none());
    let entering = match around {
        Around::None => Entering::Done(Err(no_gate(entry))),
        Around::Ruled(gate) => match table::ruled(&gate, entry, call) {
            Some(result) => Entering::Done(result),
            None => suspension::decide_async(entry, vec![gate], call),
        },
        Around::Gates(gates) => suspension::decide_async(entry, gates, call),
    };
    (entering, shape)
}

/// Decides a sync call of a tool gated in place with the arguments it was handed, and what its check
/// read of them (`typed`).
fn check_in_place(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &InPlaceCall,
    typed: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    let shown = call.shown(typed);
    let args = call.args(shown.as_ref());
    let result = match names_self(entry, call) {
        Some(denied) => Err(denied),
        None => check(entry, explicit, &call.info(&args, typed)),
    };
    call.report(&result);
    result
}

/// [`check_in_place`] for an async call: a decision that waits reports its refusal when it ends.
fn check_async_in_place(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &InPlaceCall,
    typed: &CallInfo<'_>,
) -> Entering {
    if let Some(denied) = names_self(entry, call) {
        call.report(&Err(denied.clone()));
        return Entering::Done(Err(denied));
    }
    let shown = call.shown(typed);
    let args = call.args(shown.as_ref());
    match check_async(entry, explicit, &call.info(&args, typed)) {
        Entering::Done(result) => {
            call.report(&result);
            Entering::Done(result)
        }
        Entering::Waiting(waiting) => Entering::Waiting(waiting.reporting(call.outcome.clone())),
    }
}

/// A call whose client named an argument `self`: that name stands for the handler instance the call
/// runs on, which the rules and the records read, so the call is refused rather than either dropped.
fn names_self(entry: &'static ToolEntry, call: &InPlaceCall) -> Option<Denied> {
    call.names_self().then(|| {
        let detail = "the call names an argument `self` (or one that reads as it), which stands for \
                      the handler it runs on";
        refuse(
            entry,
            DenialCode::ArgumentRefused,
            entry.manifest.risk_level,
            None,
        )
        .with_detail(detail.into())
    })
}
