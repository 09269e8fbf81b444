//! The gates that decide a call, read once from this thread's stack of entered gates where the call's
//! decision starts, and handed down to every step that needs them.

use super::refusal::no_gate;
use crate::gate::Gate;
use crate::gate::ambient::STACK;
use crate::gate::denied::Denied;
use crate::registry::ToolEntry;
use toolgate_policy::{DenialCode, Mode, Verdict};

/// What a decision asks of the gates around a call while it reads them, before anything is cloned.
#[derive(Clone, Copy)]
pub(super) enum Ask {
    /// A call by name: whether the innermost gate (the one it is made through) allows it outright;
    /// else, as [`Ask::LoneRefusal`], the refusal of a lone gate.
    Outright,
    /// A tool's check: the refusal of a lone gate that keeps no record, from its table.
    LoneRefusal,
    /// Nothing: the gates, for the full decision.
    Gates,
}

/// The gates that decide one call: the tool's `&Gate` argument and the ambient gates, read from the
/// stack once. The stack is released when this is made: approvers, sinks and the arguments' `Serialize`
/// may enter gates of their own, which do not change the gates that decide this call.
pub(super) struct Around<'a> {
    explicit: Option<&'a Gate>,
    /// How many gates are entered, and the innermost one's id: a decision made for one call is taken
    /// only by a check under the same gates. `usize::MAX` where the stack could not be read.
    shape: (usize, u64),
    /// What the lone or innermost gate answered to the [`Ask`], if it settles the call.
    answer: Option<Answer>,
    /// The innermost ambient gate and those outside it, outermost first, cloned where the answer does
    /// not settle the call (a lone gate costs no allocation).
    innermost: Option<Gate>,
    outer: Vec<Gate>,
}

/// An answer that settles a call without cloning a gate.
#[derive(Clone, Copy)]
pub(super) enum Answer {
    /// The innermost gate allows the call outright, with no record to write.
    Outright,
    /// The lone gate, which keeps no record, refuses the call from its table.
    Refused(Mode, DenialCode),
}

impl<'a> Around<'a> {
    /// Reads the stack, once, and asks `ask` of it while it is read.
    #[inline]
    pub(super) fn read(entry: &'static ToolEntry, explicit: Option<&'a Gate>, ask: Ask) -> Self {
        STACK
            .try_with(|stack| {
                let Ok(stack) = stack.try_borrow() else {
                    return Around::unreadable(explicit);
                };
                let shape = (stack.len(), stack.last().map_or(0, Gate::id));
                let answer = match (ask, explicit, stack.as_slice()) {
                    (Ask::Gates, ..) => None,
                    (Ask::Outright, _, [.., gate]) if gate.allows_unaudited(entry) => {
                        Some(Answer::Outright)
                    }
                    (_, None, [gate]) | (_, Some(gate), []) => lone_refusal(entry, gate),
                    _ => None,
                };
                let (innermost, outer) = match (answer, stack.split_last()) {
                    (None, Some((innermost, outer))) => (Some(innermost.clone()), outer.to_vec()),
                    _ => (None, Vec::new()),
                };
                Around {
                    explicit,
                    shape,
                    answer,
                    innermost,
                    outer,
                }
            })
            .unwrap_or_else(|_| Around::unreadable(explicit))
    }

    #[cold]
    fn unreadable(explicit: Option<&'a Gate>) -> Self {
        Around {
            explicit,
            shape: (usize::MAX, 0),
            answer: None,
            innermost: None,
            outer: Vec::new(),
        }
    }

    /// What the gate answered while the stack was read, if that settles the call.
    #[inline]
    pub(super) fn answer(&self) -> Option<Answer> {
        self.answer
    }

    /// How many gates were entered, and the innermost one's id.
    #[inline]
    pub(super) fn shape(&self) -> (usize, u64) {
        self.shape
    }

    /// The one gate that decides the call, where only one does: the tool's `&Gate` argument, or the
    /// one ambient gate. `None` where the answer settled the call.
    #[inline]
    pub(super) fn lone(&self) -> Option<&Gate> {
        if self.answer.is_some() || !self.outer.is_empty() {
            return None;
        }
        match (self.explicit, &self.innermost) {
            (None, Some(gate)) | (Some(gate), None) => Some(gate),
            _ => None,
        }
    }

    /// The ambient gates, outermost first (none where the answer settled the call).
    pub(super) fn ambient(&self) -> impl Iterator<Item = &Gate> {
        self.outer.iter().chain(&self.innermost)
    }

    /// Every gate that decides the call, each once: the tool's `&Gate` argument first, then the
    /// ambient ones, outermost first. Refused `NO_GATE` where there is none.
    #[cold]
    pub(super) fn gates(&self, entry: &'static ToolEntry) -> Result<Vec<Gate>, Denied> {
        debug_assert!(self.answer.is_none(), "the answer settled the call");
        if self.shape.0 == usize::MAX || (self.explicit.is_none() && self.innermost.is_none()) {
            return Err(no_gate(entry));
        }
        Ok(distinct(self.explicit.into_iter().chain(self.ambient())))
    }
}

/// The refusal of a lone gate that keeps no record, from its table, when nothing else is to be asked,
/// written or told (a deny-listed call is told its rule, and the latch its cause, on the full path).
#[inline(always)]
fn lone_refusal(entry: &'static ToolEntry, gate: &Gate) -> Option<Answer> {
    if gate.audits() {
        return None;
    }
    match gate.table_verdict(entry) {
        (
            mode,
            Verdict::Refuse(
                code @ (DenialCode::ModeNotAllowed
                | DenialCode::AboveCeiling
                | DenialCode::UnregisteredTool),
            ),
        ) => Some(Answer::Refused(mode, code)),
        (mode, Verdict::Refuse(DenialCode::ApprovalRequired)) if !gate.tainted() => {
            Some(Answer::Refused(mode, DenialCode::ApprovalRequired))
        }
        _ => None,
    }
}

/// Each gate once, outermost first: a gate entered twice, or both entered and passed, decides once.
#[cold]
pub(super) fn distinct<'a>(gates: impl Iterator<Item = &'a Gate>) -> Vec<Gate> {
    let mut seen: Vec<Gate> = Vec::new();
    for gate in gates {
        if !seen.iter().any(|g| g.id() == gate.id()) {
            seen.push(gate.clone());
        }
    }
    seen
}

/// How many gates are entered on this thread, and the innermost one's id: what [`Around::shape`] was
/// when a decision was made, read again by the check that takes it.
pub(super) fn stack_shape() -> (usize, u64) {
    STACK
        .try_with(|stack| {
            stack
                .try_borrow()
                .map(|stack| (stack.len(), stack.last().map_or(0, Gate::id)))
                .unwrap_or((usize::MAX, 0))
        })
        .unwrap_or((usize::MAX, 0))
}
