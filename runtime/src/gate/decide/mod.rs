//! Deciding a call: the one place where a call is allowed or refused, and the only producer of
//! refusals ([`refusal`]).
//!
//! A call is decided against every gate around it (the ambient gates, outermost first, and the tool's
//! `&Gate` argument). Each step runs over every gate before the next step starts, so that nothing asks
//! a person about a call that another gate's own checks refuse:
//!
//! 1. **the table** ([`table`]): deny list, allowed modes, the ceiling and the taint latch, worked out
//!    when the gate was built; then, for a tool with lasting effects ([`effects`]), its target (one,
//!    for an irreversible tool), its rollback plan and the state of its target an approver is shown;
//! 2. **budgets** ([`budgets`]): a unit of every budget covering the call is reserved;
//! 3. **approvals** ([`approvals`]), where the table asks for one: a live session grant, else the
//!    approver or the two-step store;
//! 4. **records** ([`records`]): each gate's `enter`;
//! 5. **the commit point** ([`commit`]): what can change while a decision waits is read again (the
//!    target's state an approval saw, each gate's mode and latch, the grant that allowed the call, the
//!    arguments an approval saw, the expiry of a store's approval: [`expiry`]), then what
//!    the decision reserved is made real (budget units kept, session grants made). A refusal at any
//!    step gives everything back and is recorded by every gate that took part, and is returned once
//!    the budget units are back in their stores; so is one at an async call's last comparison of its
//!    arguments, after the driver ([`Resuming`]).
//!
//! Past the table of a lone gate, a decision asks once which gates decide the call ([`gates::around`]),
//! and hands that one value down, with the shape of the stack a call by name hands over with its
//! decision.
//!
//! One driver ([`driver`]) runs these steps for sync and async calls alike, over what a decision
//! holds ([`state`]): where it must wait it says for what ([`waits`]); a sync call parks its thread on it, an async one awaits it
//! ([`suspension`]). Every call's decision starts in the tool's check ([`check`]); calls by name hand theirs to it
//! ([`hand_off`]), and MCP servers hand it the arguments of a tool gated in place ([`in_place`]).
//!
//! The common case, one gate that keeps no record and whose table allows the call, never reaches the
//! driver: it is one inlined bit test ([`fast_allows`]).
//!
//! The modules import one another in one direction only, lowest first: `refusal`, `arguments`,
//! `waits`, `gates`, `table`; the steps (`budgets`, `approvals`, `records`); `state`, `effects`, `expiry`, `commit`,
//! `driver`, `suspension`, `in_place`, `check`; `hand_off` on top.

mod approvals;
mod arguments;
mod budgets;
mod check;
mod commit;
mod driver;
mod effects;
mod expiry;
mod gates;
mod hand_off;
mod in_place;
#[cfg(feature = "mcp")]
mod reads;
mod records;
mod refusal;
mod state;
mod suspension;
mod table;
#[cfg(test)]
mod tests;
mod waits;

pub(crate) use check::{check, check_async};
pub use commit::Refusing;
pub(crate) use commit::confirm;
pub use hand_off::{Decided, DecidingByName, HandOver};
pub(crate) use hand_off::{
    confirm_handed, decide_by_name, decide_by_name_async, hand_async, hand_over, handed, precheck,
};
#[cfg(feature = "mcp")]
pub(crate) use in_place::with_arguments;
pub use suspension::{Entering, Resumed, Resuming, Waiting};
pub(crate) use table::fast_allows;
