//! What a decision holds between its steps: where it stands, and what each gate decided so far.

use std::sync::Arc;

use super::arguments::{ArgumentSource, LazyArguments, Shown, WrittenArguments};
use super::budgets::Units;
use super::records::abandon;
use super::waits::{Allowed, Waits};
use crate::gate::Gate;
use crate::gate::budget::ReleaseFuture;
use crate::gate::call::{CallInfo, EffectiveRisk};
use crate::gate::compile::Table;
use crate::gate::denied::Denied;
use crate::gate::permit::{Exit, Permit, abandon_enter};
use crate::registry::ToolEntry;
use toolgate_policy::Verdict;

/// Where a decision stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum At {
    Table(usize),
    Budget(usize),
    Approval(usize),
    Enter(usize),
    Commit,
    /// At the commit point, taking a unit of each budget that a replacement of `gates[i]`'s policy
    /// added.
    Charge(usize),
    /// At the commit point of a call that waited once it held budget units (for its approver, a
    /// store, a sink), asking whether `gates[i]`'s store still holds the units it reserved.
    Hold(usize),
    /// Refused (the refusal in `failed`): the budget units its decision reserved are being given
    /// back.
    Refused,
}

/// What one gate decided so far.
pub(super) struct Held {
    /// The gate's mode and taint bit when its table was read: the state its decision is for.
    pub(super) state: u8,
    /// The gate's table the decision read, loaded once for all its steps; the commit point compares
    /// its generation with the table's then.
    pub(super) table: Arc<Table>,
    /// The gate's table at the commit point, where another replaced `table` meanwhile.
    pub(super) now: Option<Arc<Table>>,
    pub(super) verdict: Verdict,
    /// The gate's count of revocations when it asked for an approval: a grant the answer gives is
    /// made only if no revocation came between.
    pub(super) revocations: u64,
    /// The budget units reserved (the last one asked for first), given back when dropped unless
    /// committed: those of the decision's table, then those a replacement added, reserved at the
    /// commit point.
    pub(super) reserved: Units,
    pub(super) allowed: Option<Allowed>,
    /// Whether the commit point asked the store to hold the units again after a wait.
    pub(super) held_again: bool,
}

impl Held {
    /// The gate's table as the commit point reads it.
    pub(super) fn current(&self) -> &Table {
        self.now.as_deref().unwrap_or(&self.table)
    }
}

/// One call's decision, in every gate around it: the driver that sync and async calls share.
pub(super) struct Decision<A> {
    pub(super) entry: &'static ToolEntry,
    pub(super) gates: Vec<Gate>,
    pub(super) risk: EffectiveRisk,
    pub(super) arguments: A,
    pub(super) waits: Waits,
    pub(super) held: Vec<Held>,
    pub(super) at: At,
    /// The `exit`s owed by the gates whose `enter` is written.
    pub(super) permit: Permit,
    /// A refusal to give at the next step.
    pub(super) failed: Option<Denied>,
    /// The releases of a refused call's budget units, awaited before its refusal is given.
    pub(super) releases: Vec<ReleaseFuture>,
    /// The `exit` owed to a gate whose sink refused the `enter`: it is handed to the sink's
    /// `abandoned`, and the gate records nothing else of the refusal.
    pub(super) unrecorded: Option<Exit>,
    /// What a tool with lasting effects shows whoever decides it: boxed, since most tools have none.
    pub(super) shown: Option<Box<Shown>>,
    /// When the earliest of the store answers that approved the call expires, where a store said:
    /// the commit point refuses the call from then on.
    pub(super) expires: Option<std::time::Instant>,
    /// Whether the decision waited (for an approver, a store, a sink) while it held a budget unit:
    /// a reset or the end of its window may have cleared the unit meanwhile, so the commit point asks
    /// the stores whether they still hold them.
    pub(super) waited: bool,
}

impl<A: ArgumentSource> Decision<A> {
    #[inline]
    pub(super) fn new(
        entry: &'static ToolEntry,
        gates: Vec<Gate>,
        call: &CallInfo<'_>,
        arguments: A,
        waits: Waits,
    ) -> Decision<A> {
        Decision {
            entry,
            risk: EffectiveRisk::new(entry.manifest.risk_level, call.escalated),
            held: Vec::with_capacity(gates.len()),
            gates,
            arguments,
            waits,
            at: At::Table(0),
            permit: Permit::unaudited(),
            failed: None,
            releases: Vec::new(),
            unrecorded: None,
            shown: None,
            expires: None,
            waited: false,
        }
    }

    /// The decision ends in a refusal: every gate that took part records it (an `exit` of outcome
    /// `refused` where it wrote the `enter`), and every reserved budget unit is given back (the driver
    /// awaits the releases before it gives the refusal).
    pub(super) fn fail(&mut self, denied: Denied) -> Denied {
        let denied = denied.with_risk(self.risk.get());
        let exits = self.permit.take_exits();
        let unrecorded = self.unrecorded.take();
        let gates: Vec<Gate> = match &unrecorded {
            Some(exit) => {
                let id = exit.gate.id();
                self.gates
                    .iter()
                    .filter(|g| g.id() != id)
                    .cloned()
                    .collect()
            }
            None => std::mem::take(&mut self.gates),
        };
        for held in &mut self.held {
            for reserved in held.reserved.drain() {
                if let Some(release) = reserved.give_back() {
                    self.releases.push(release);
                }
            }
        }
        self.held.clear();
        let denied = abandon(self.entry, &gates, exits, denied, &mut self.arguments);
        if let Some(exit) = unrecorded {
            abandon_enter(exit, Some(&denied));
        }
        denied
    }
}

impl<A> Decision<A> {
    /// What the call shows whoever decides it: nothing, for a tool without lasting effects.
    pub(super) fn shown(&self) -> &Shown {
        self.shown.as_deref().unwrap_or(Shown::NOTHING)
    }

    /// Notes a wait of the decision, which matters once it holds a budget unit.
    #[inline]
    pub(super) fn waiting(&mut self) {
        if !self.waited {
            self.waited = self.held.iter().any(|held| held.reserved.first().is_some());
        }
    }
}

impl Decision<LazyArguments<'_>> {
    /// The decision, holding the call's arguments written out: what an async call awaits.
    pub(super) fn write_out(self) -> Decision<WrittenArguments> {
        Decision {
            entry: self.entry,
            gates: self.gates,
            risk: self.risk,
            arguments: self.arguments.write_out(),
            waits: self.waits,
            held: self.held,
            at: self.at,
            permit: self.permit,
            failed: self.failed,
            releases: self.releases,
            unrecorded: self.unrecorded,
            shown: self.shown,
            expires: self.expires,
            waited: self.waited,
        }
    }
}
