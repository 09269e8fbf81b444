//! The gates that decide a call, read from this thread's stack of entered gates.

use super::refusal::no_gate;
use crate::gate::Gate;
use crate::gate::ambient::STACK;
use crate::gate::denied::Denied;
use crate::registry::ToolEntry;

/// The gates that decide a call: the tool's `&Gate` argument and the ambient ones, each once.
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

/// How many gates are entered on this thread, and the innermost one's id: a decision made for one call
/// is taken only by a check under the same gates.
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
