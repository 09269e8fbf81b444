//! The gates that decide a call, read from this thread's stack of entered gates once per decision
//! ([`around`]) and handed down as one value ([`Around`]).
//!
//! Past the inlined check ([`fast_allows`](super::table::fast_allows)), a call's full decision starts
//! by asking which gates decide it, once: the answer holds what the rest needs (the lone gate's
//! refusal, the lone gate whose argument rules decide, or every gate) and the stack's shape, which a
//! call by name hands over with its decision. The stack is never borrowed while the application's code
//! runs (an approver, a sink, an argument's `Serialize`), so that it may enter gates itself.

use super::refusal::no_gate;
use crate::gate::Gate;
use crate::gate::ambient::STACK;
use crate::gate::denied::Denied;
use crate::registry::ToolEntry;

/// How many gates are entered, and the innermost one's id: a decision made for one call is taken only
/// by a check under the same gates.
pub(super) type Shape = (usize, u64);

/// Which gates decide a call past its lone gate's table.
pub(super) enum Around {
    /// No gate: the call is refused (`NO_GATE`).
    None,
    /// One gate, keeping no record, whose operator's argument rules may decide the call alone: they
    /// read its arguments, and where the table allows it, their answer is the decision.
    Ruled(Gate),
    /// Every gate, each once, outermost first.
    Gates(Vec<Gate>),
}

/// Which gates decide a call of `entry` (the tool's `&Gate` argument `explicit` and the ambient ones),
/// and the stack's shape, in one read of the stack. `plain`: the call's risk is not escalated, so a
/// lone gate's argument rules may decide it.
#[inline(always)]
pub(super) fn around(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
    plain: bool,
) -> (Around, Shape) {
    STACK
        .try_with(|stack| {
            let Ok(stack) = stack.try_borrow() else {
                return (Around::None, (usize::MAX, 0));
            };
            let shape = (stack.len(), stack.last().map_or(0, Gate::id));
            let around = match (explicit, stack.as_slice()) {
                (None, []) => Around::None,
                (None, [gate]) | (Some(gate), [])
                    if plain && !gate.audits() && gate.ruled_hint(entry) =>
                {
                    Around::Ruled(gate.clone())
                }
                (explicit, ambient) => Around::Gates(distinct(explicit.into_iter().chain(ambient))),
            };
            (around, shape)
        })
        .unwrap_or_else(|_| (Around::None, (usize::MAX, 0)))
}

/// Every gate that decides a call of `entry`, each once, outermost first: for the part of a call by
/// name's decision asked before its arguments are read, of every gate's table alike.
#[cold]
pub(super) fn gates_around(
    entry: &'static ToolEntry,
    explicit: Option<&Gate>,
) -> Result<Vec<Gate>, Denied> {
    STACK
        .try_with(|stack| {
            let Ok(stack) = stack.try_borrow() else {
                return Err(no_gate(entry));
            };
            match (explicit, stack.as_slice()) {
                (None, []) => Err(no_gate(entry)),
                (explicit, ambient) => Ok(distinct(explicit.into_iter().chain(ambient))),
            }
        })
        .unwrap_or_else(|_| Err(no_gate(entry)))
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

/// The stack's shape now, for a decision handed over after it waited, and for the check that takes
/// one.
pub(super) fn stack_shape() -> Shape {
    STACK
        .try_with(|stack| {
            stack
                .try_borrow()
                .map(|stack| (stack.len(), stack.last().map_or(0, Gate::id)))
                .unwrap_or((usize::MAX, 0))
        })
        .unwrap_or((usize::MAX, 0))
}
