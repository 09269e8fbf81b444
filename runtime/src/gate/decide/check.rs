//! A tool's check: where the decision of every call starts, direct, by name or handed its arguments
//! by an MCP server. The gates around the call are read here once ([`Around`]) and handed down.

use super::gates::{Answer, Around, Ask};
use super::in_place::InPlaceCall;
use super::refusal::refuse;
use super::suspension::{self, Entering};
use super::{in_place, table};
use crate::gate::Gate;
use crate::gate::call::CallInfo;
use crate::gate::denied::Denied;
use crate::gate::permit::Permit;
use crate::registry::ToolEntry;

/// What a tool's check asks of the gates while it reads them: a lone gate's refusal from its table,
/// where nothing else can change it (no escalated risk; a tool gated in place decides with the
/// arguments it is handed, on the full path).
#[inline]
pub(super) fn ask(entry: &'static ToolEntry, call: &CallInfo<'_>) -> Ask {
    if call.escalated.is_none() && entry.in_place.is_none() {
        Ask::LoneRefusal
    } else {
        Ask::Gates
    }
}

/// Decides a call that [`fast_allows`](table::fast_allows) did not let through, its risk escalated or
/// not.
#[cold]
#[inline(never)]
pub(crate) fn check(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    let around = Around::read(entry, explicit, ask(entry, call));
    check_around(entry, &around, call)
}

/// [`check`] under the gates read already.
pub(super) fn check_around(
    entry: &'static ToolEntry,
    around: &Around<'_>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    // Only a tool gated in place looks at the slot: every other check pays one field read, here.
    if entry.in_place.is_some()
        && let Some(in_place) = in_place::take_in_place(entry, around.shape())
    {
        return check_in_place(entry, around, &in_place);
    }
    if let Some(Answer::Refused(mode, code)) = around.answer() {
        return Err(refuse(entry, code, entry.manifest.risk_level, Some(mode)));
    }
    if call.escalated.is_none()
        && let Some(result) = table::lone_ruled(entry, around, call)
    {
        return result;
    }
    check_slow(entry, around, call)
}

#[cold]
#[inline(never)]
fn check_slow(
    entry: &'static ToolEntry,
    around: &Around<'_>,
    call: &CallInfo<'_>,
) -> Result<Permit, Denied> {
    // Approvers and sinks run with the stack released, so that they may enter gates themselves.
    let gates = around.gates(entry)?;
    suspension::decide_blocking(entry, gates, call)
}

/// [`check`] for an async tool: the decision may wait for an async approver or a store.
#[cold]
#[inline(never)]
pub(crate) fn check_async(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    call: &CallInfo<'_>,
) -> Entering {
    let around = Around::read(entry, explicit, ask(entry, call));
    check_async_around(entry, &around, call)
}

/// [`check_async`] under the gates read already.
pub(super) fn check_async_around(
    entry: &'static ToolEntry,
    around: &Around<'_>,
    call: &CallInfo<'_>,
) -> Entering {
    // Only a tool gated in place looks at the slot: every other check pays one field read, here.
    if entry.in_place.is_some()
        && let Some(in_place) = in_place::take_in_place(entry, around.shape())
    {
        return check_async_in_place(entry, around, &in_place);
    }
    if let Some(Answer::Refused(mode, code)) = around.answer() {
        return Entering::Done(Err(refuse(
            entry,
            code,
            entry.manifest.risk_level,
            Some(mode),
        )));
    }
    if call.escalated.is_none()
        && let Some(result) = table::lone_ruled(entry, around, call)
    {
        return Entering::Done(result);
    }
    match around.gates(entry) {
        Ok(gates) => suspension::decide_async(entry, gates, call),
        Err(denied) => Entering::Done(Err(denied)),
    }
}

/// Decides a sync call of a tool gated in place with the arguments it was handed.
fn check_in_place(
    entry: &'static ToolEntry,
    around: &Around<'_>,
    call: &InPlaceCall,
) -> Result<Permit, Denied> {
    let args = call.args();
    let result = check_around(entry, around, &call.info(&args));
    call.report(&result);
    result
}

/// [`check_in_place`] for an async call: a decision that waits reports its refusal when it ends.
fn check_async_in_place(
    entry: &'static ToolEntry,
    around: &Around<'_>,
    call: &InPlaceCall,
) -> Entering {
    let args = call.args();
    match check_async_around(entry, around, &call.info(&args)) {
        Entering::Done(result) => {
            call.report(&result);
            Entering::Done(result)
        }
        Entering::Waiting(waiting) => Entering::Waiting(waiting.reporting(call.outcome.clone())),
    }
}
