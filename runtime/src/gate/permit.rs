//! The permit an allowed call holds while its body runs, and the audit records that close the call.
//!
//! Generated code holds the permit for the length of the body and hands it the result at the end. A
//! permit dropped without that (the body panicked, or its future was dropped) still writes the `exit`
//! record, with the outcome `panic` or `cancelled`.

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::Instant;

use crate::approval::Evidence;
use crate::audit::{AuditRecord, Outcome, Stage};
use crate::gate::Gate;
use crate::gate::budget::{BudgetCharge, BudgetStore, ReleaseFuture, Reservation, Reserved};
use crate::gate::wait::block_on;
use crate::registry::ToolManifest;
use std::sync::Arc;
use toolgate_policy::Mode;
use toolgate_policy::Risk;

/// Proof that a call was decided and allowed; generated code holds it for the length of the body.
#[doc(hidden)]
#[derive(Debug)]
pub struct Permit {
    /// `None` for a call no gate records, which is then a single null check to close.
    exits: Option<Box<Exits>>,
}

/// The exits of one call, behind one thin pointer so that an unaudited permit is a single word; and,
/// for an approved call whose decision waited, the arguments the approval saw, the budget units
/// kept only if they are still the same, and when a store's approval of the call expires.
#[derive(Debug, Default)]
struct Exits(
    Vec<Exit>,
    Option<Seen>,
    Vec<Reserved>,
    Option<Box<Observed>>,
    Option<Instant>,
    Option<Box<[Marks]>>,
);

/// What a call leaves in a budget store once it ends without an error, for the operator's rules
/// over history (`after`) that look back at it.
struct Marks {
    store: Arc<dyn BudgetStore>,
    charges: Vec<BudgetCharge>,
}

impl std::fmt::Debug for Marks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Marks")
            .field("charges", &self.charges)
            .finish_non_exhaustive()
    }
}

/// What a tool's `evidence` probe read of its target, for the `exit` records.
#[derive(Debug, Default)]
struct Observed {
    /// The read just before the body is still to be made, by the confirmation of an async call whose
    /// decision waited; where an approver saw the target, the digest it must have.
    pending: Option<Option<String>>,
    before: Option<Evidence>,
    after: Option<Result<Evidence, String>>,
    /// The records carry what was read, not only its digest.
    record: bool,
}

/// The arguments an approval was given for: the call must still have them when its body starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) json: String,
    pub(crate) binding: Option<String>,
}

/// What an audited gate needs to write the `exit` record of a call.
#[derive(Debug)]
pub(crate) struct Exit {
    pub(crate) gate: Gate,
    pub(crate) tool: &'static ToolManifest,
    pub(crate) call: u64,
    pub(crate) started: Instant,
    pub(crate) risk: Risk,
    pub(crate) mode: Mode,
    pub(crate) arguments_digest: Option<String>,
}

impl Permit {
    #[inline]
    pub(crate) fn unaudited() -> Permit {
        Permit { exits: None }
    }

    /// The permit of a call that [`allows`](crate::__private::allows) let run outright.
    #[inline]
    pub fn allowed() -> Permit {
        Permit::unaudited()
    }

    /// Adds the `exit` an allowed call owes the gate that wrote its `enter`. Held in the permit from
    /// then on, it is written however the call ends, a panic of another gate's sink included.
    pub(crate) fn push(&mut self, exit: Exit) {
        self.exits.get_or_insert_with(Box::default).0.push(exit);
    }

    /// Keeps what an approval saw, to compare with the arguments once the call has them back.
    pub(crate) fn set_seen(&mut self, seen: Seen) {
        self.exits.get_or_insert_with(Box::default).1 = Some(seen);
    }

    /// Holds budget units until the arguments are compared ([`Permit::commit_held`]).
    pub(crate) fn hold(&mut self, reserved: Reserved) {
        self.exits.get_or_insert_with(Box::default).2.push(reserved);
    }

    /// The arguments are the same: the held units are kept.
    pub(crate) fn commit_held(&mut self) {
        if let Some(exits) = &mut self.exits {
            for reserved in exits.2.drain(..) {
                reserved.commit();
            }
        }
    }

    /// The call is refused: the held units are given back, and the releases to await.
    pub(crate) fn give_back_held(&mut self) -> Vec<ReleaseFuture> {
        match &mut self.exits {
            Some(exits) => exits.2.drain(..).filter_map(Reserved::give_back).collect(),
            None => Vec::new(),
        }
    }

    /// Leaves `charges` in `store` once the call ends without an error.
    pub(crate) fn mark_on_success(
        &mut self,
        store: Arc<dyn BudgetStore>,
        charges: Vec<BudgetCharge>,
    ) {
        let exits = self.exits.get_or_insert_with(Box::default);
        let mut marks = exits.5.take().map(Vec::from).unwrap_or_default();
        marks.push(Marks { store, charges });
        exits.5 = Some(marks.into_boxed_slice());
    }

    /// Keeps when the store's approval of the call expires, for the last comparison before the body.
    pub(crate) fn approved_until(&mut self, expires: Instant) {
        self.exits.get_or_insert_with(Box::default).4 = Some(expires);
    }

    /// When the store's approval of the call expires, where the last comparison must read it.
    pub(crate) fn approval_expires(&self) -> Option<Instant> {
        self.exits.as_ref()?.4
    }

    /// What an approval saw, taken out to be compared.
    pub(crate) fn take_seen(&mut self) -> Option<Seen> {
        self.exits.as_mut().and_then(|exits| exits.1.take())
    }

    /// Whether an approval's arguments must be compared with the call's before the body runs, or the
    /// target read again.
    #[inline]
    pub fn needs_confirmation(&self) -> bool {
        self.exits.as_ref().is_some_and(|exits| {
            exits.1.is_some() || exits.3.as_ref().is_some_and(|o| o.pending.is_some())
        })
    }

    fn observed(&mut self) -> &mut Observed {
        self.exits
            .get_or_insert_with(Box::default)
            .3
            .get_or_insert_with(Box::default)
    }

    /// Leaves the read of the target just before the body to the confirmation; `expected`: the digest
    /// an approver saw.
    pub(crate) fn expect_evidence(&mut self, expected: Option<String>, record: bool) {
        let observed = self.observed();
        observed.pending = Some(expected);
        observed.record = record;
    }

    /// The read left to the confirmation, taken out to be made.
    pub(crate) fn take_expected_evidence(&mut self) -> Option<(Option<String>, bool)> {
        let observed = self.exits.as_mut()?.3.as_mut()?;
        Some((observed.pending.take()?, observed.record))
    }

    /// What the probe read just before the body.
    pub(crate) fn observed_before(&mut self, before: Evidence, record: bool) {
        let observed = self.observed();
        observed.before = Some(before);
        observed.record = record;
    }

    /// Reads the target again after the body, where a record will show it (a gate audits the call and
    /// the probe read it before the body).
    #[doc(hidden)]
    pub fn observe_after(&mut self, probe: impl FnOnce() -> Result<serde_json::Value, String>) {
        let Some(exits) = &mut self.exits else {
            return;
        };
        if exits.0.is_empty() {
            return;
        }
        if let Some(observed) = &mut exits.3
            && observed.before.is_some()
        {
            observed.after = Some(probe().map(|value| Evidence::of(&value)));
        }
    }

    /// The exits owed, taken out to be closed otherwise (the call was refused after its `enter`).
    pub(crate) fn take_exits(&mut self) -> Vec<Exit> {
        self.exits.take().map(|exits| exits.0).unwrap_or_default()
    }

    /// Closes the call with its result, and hands the result back; `output_digest` is asked only where
    /// a gate audits the call.
    #[inline]
    pub fn finish<T, E>(
        self,
        result: Result<T, E>,
        output_digest: fn(&T) -> Option<String>,
    ) -> Result<T, E> {
        if self.exits.is_none() {
            // Nothing to close: skip the drop glue, which would only find `None` again.
            std::mem::forget(self);
            return result;
        }
        self.finish_audited(result, output_digest)
    }

    #[cold]
    #[inline(never)]
    fn finish_audited<T, E>(
        mut self,
        result: Result<T, E>,
        output_digest: fn(&T) -> Option<String>,
    ) -> Result<T, E> {
        let (outcome, digest) = match &result {
            Ok(value) => (Outcome::Ok, output_digest(value)),
            Err(_) => (Outcome::Error, None),
        };
        self.close(outcome, digest);
        result
    }

    #[cold]
    fn close(&mut self, outcome: Outcome, output_digest: Option<String>) {
        let Some(exits) = self.exits.take() else {
            return;
        };
        // Every gate gets its `exit`: a sink that panics does not keep the next gates' from being
        // written; its panic goes on once they are (during an unwind, a second panic aborts anyway).
        let mut panicked = None;
        if outcome == Outcome::Ok
            && let Some(marks) = &exits.5
        {
            marks.iter().for_each(leave);
        }
        let evidence = exits.3.as_deref().map(evidence_fields).unwrap_or_default();
        for exit in exits.0 {
            let record = AuditRecord {
                evidence: evidence.0.clone(),
                evidence_after: evidence.1.clone(),
                evidence_before: evidence.2.clone(),
                message: evidence.3.clone(),
                arguments_digest: exit.arguments_digest,
                duration_us: Some(
                    u64::try_from(exit.started.elapsed().as_micros()).unwrap_or(u64::MAX),
                ),
                effective_risk: Some(exit.risk),
                outcome: Some(outcome),
                output_digest: output_digest.clone(),
                ..exit.gate.record(
                    Stage::Exit,
                    Cow::Borrowed(exit.tool.id),
                    exit.mode,
                    exit.call,
                )
            };
            let record = AuditRecord {
                declared_risk: Some(exit.tool.risk_level),
                ..record
            };
            // The body has run: a sink that fails now cannot undo it, so the failure is only reported.
            let write = || exit.gate.write_after_the_fact(&record);
            if std::thread::panicking() {
                write();
            } else if let Err(panic) = catch_unwind(AssertUnwindSafe(write)) {
                panicked.get_or_insert(panic);
            }
        }
        if let Some(panic) = panicked {
            resume_unwind(panic);
        }
    }
}

/// Leaves a call's marks. The call has run: a store that fails now cannot undo it, so the failure is
/// reported, and the calls that must follow it are refused for want of the mark.
fn leave(marks: &Marks) {
    // A store that keeps no history refuses every call that would read the mark.
    if !marks.store.keeps_history() {
        return;
    }
    let taken = catch_unwind(AssertUnwindSafe(|| {
        block_on(marks.store.take(&marks.charges, Reservation::next()))
    }));
    match taken {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::error!(target: "toolgate::budget", %error, "a call's mark for the rules over history could not be kept");
        }
        Err(_) => {
            tracing::error!(target: "toolgate::budget", "the budget store panicked keeping a call's mark for the rules over history");
        }
    }
}

/// The `evidence`, `evidence_after` and `evidence_before` fields of an `exit` record, and the message of
/// a probe that failed after the body.
fn evidence_fields(
    observed: &Observed,
) -> (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    let before = observed.before.as_ref();
    let after = observed.after.as_ref().and_then(|a| a.as_ref().ok());
    let values = (observed.record && before.is_some()).then(|| {
        let value = |e: Option<&Evidence>| e.map_or("null", |e| e.json.as_str()).to_owned();
        format!(
            "{{\"after\":{},\"before\":{}}}",
            value(after),
            value(before)
        )
    });
    let failed = match &observed.after {
        Some(Err(why)) => Some(format!("the evidence probe after the body failed: {why}")),
        _ => None,
    };
    (
        values,
        after.map(|e| e.digest.clone()),
        before.map(|e| e.digest.clone()),
        failed,
    )
}

/// Closes the `enter` records of a call refused after they were written: the body never ran.
#[cold]
pub(crate) fn close_refused(exits: Vec<Exit>, denied: &crate::gate::denied::Denied) {
    for exit in exits {
        let gate = exit.gate.clone();
        gate.write_after_the_fact(&unran(exit, Some(denied)));
    }
}

/// Hands the `exit` of a call whose `enter` its gate's sink refused (`denied`), or whose decision was
/// dropped while the sink wrote it (`None`), to that sink's [`abandoned`](crate::audit::AuditSink::abandoned):
/// the body never runs, and what the sink took of the `enter` is closed.
#[cold]
pub(crate) fn abandon_enter(exit: Exit, denied: Option<&crate::gate::denied::Denied>) {
    let gate = exit.gate.clone();
    let Some(sink) = &gate.inner.audit else {
        return;
    };
    let record = unran(exit, denied);
    // A sink that panics here has refused its `exit` as well: there is nothing more to close.
    let _ = catch_unwind(AssertUnwindSafe(|| sink.abandoned(&record)));
}

/// The `exit` record of a call whose body never ran: refused by `denied`, or cancelled.
fn unran(exit: Exit, denied: Option<&crate::gate::denied::Denied>) -> AuditRecord {
    let (code, message, outcome) = match denied {
        Some(denied) => (
            Some(Cow::Borrowed(denied.code().as_str())),
            Some(denied.to_string()),
            Outcome::Refused,
        ),
        None => (None, None, Outcome::Cancelled),
    };
    AuditRecord {
        arguments_digest: exit.arguments_digest,
        code,
        declared_risk: Some(exit.tool.risk_level),
        duration_us: Some(0),
        effective_risk: Some(exit.risk),
        message,
        outcome: Some(outcome),
        ..exit.gate.record(
            Stage::Exit,
            Cow::Borrowed(exit.tool.id),
            exit.mode,
            exit.call,
        )
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.exits.is_some() {
            let outcome = if std::thread::panicking() {
                Outcome::Panic
            } else {
                Outcome::Cancelled
            };
            self.close(outcome, None);
        }
    }
}
