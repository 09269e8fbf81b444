//! Budgets in a decision: a unit of every budget covering the call is reserved after the table's
//! checks, before any approver is asked; the commit point keeps it, and any refusal gives it back. A
//! budget that a policy replaced during the decision adds is reserved at the commit point.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::refusal::{refuse, store_panicked};
use super::waits::Wait;
use crate::approval::store::StoreError;
use crate::gate::Gate;
use crate::gate::budget::{BudgetCharge, BudgetStore, ChargeKind, Reservation, Reserved, Taken};
use crate::gate::call::EffectiveRisk;
use crate::gate::compile::Table;
use crate::gate::denied::Denied;
use crate::registry::ToolEntry;
use toolgate_policy::{DenialCode, Mode};

/// What the budgets say of a call, in one gate.
pub(super) enum Reserve {
    /// No budget covers it.
    Free,
    Refused(Denied),
    /// The store has not answered yet: the reservation (given back if the decision ends unfinished)
    /// and the answer to wait for.
    Waiting(Reserved, Wait),
}

/// The budget units one gate's part of a decision reserved, the last one asked for first: the unit of
/// the decision's table, then any a replacement of the gate's policy added at the commit point. The
/// first is kept inline: the common decision reserves one and allocates nothing for it.
#[derive(Default)]
pub(super) struct Units {
    first: Option<Reserved>,
    added: Vec<Reserved>,
}

impl Units {
    pub(super) fn push(&mut self, reserved: Reserved) {
        if self.first.is_none() && self.added.is_empty() {
            self.first = Some(reserved);
        } else {
            self.added.push(reserved);
        }
    }

    /// The unit of the decision's table: the one reserved before any approver was asked.
    pub(super) fn first(&self) -> Option<&Reserved> {
        self.first.as_ref()
    }

    /// The last one reserved.
    pub(super) fn pop(&mut self) -> Option<Reserved> {
        self.added.pop().or_else(|| self.first.take())
    }

    /// Every unit, first reserved first, leaving none.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Reserved> + use<'_> {
        self.first.take().into_iter().chain(self.added.drain(..))
    }

    /// Whether `charge` in `store` is held here already.
    fn holds_in(&self, store: &Arc<dyn BudgetStore>, charge: &BudgetCharge) -> bool {
        self.first
            .iter()
            .chain(&self.added)
            .any(|reserved| reserved.holds_in(store, charge))
    }

    fn holds(&self, charge: &BudgetCharge) -> bool {
        self.first
            .iter()
            .chain(&self.added)
            .flat_map(Reserved::charges)
            .any(|held| held == charge)
    }
}

impl Gate {
    /// Reserves a unit of every budget covering the call that the gates around it (`outer`, their
    /// units) did not reserve in the same store already, or refuses it: gates configured alike share a
    /// budget, and a call through both takes one unit of it.
    pub(super) fn reserve<'a>(
        &self,
        table: &Table,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        outer: impl Iterator<Item = &'a Units> + Clone,
    ) -> Reserve {
        let slot = entry.slot.load(std::sync::atomic::Ordering::Relaxed) as usize;
        let (code, operator) = (&self.inner.budgets, &table.budgets);
        let mut charges = code
            .as_ref()
            .map_or_else(Vec::new, |b| b.charges(slot, risk.get()));
        let store = match (code, operator) {
            (Some(b), _) | (None, Some(b)) => b.store.clone(),
            (None, None) => return Reserve::Free,
        };
        if let Some(operator) = operator {
            charges.extend(operator.charges(slot, risk.get()));
            // Taken in key order, each charge once, as a store expects.
            charges.sort_by(|a, b| (&a.key, a.kind, a.window).cmp(&(&b.key, b.kind, b.window)));
            charges.dedup_by(|a, b| a == b);
        }
        charges.retain(|charge| !outer.clone().any(|units| units.holds_in(&store, charge)));
        self.take_units(store, charges, entry, risk)
    }

    /// At the commit point, where `table` replaced the table the call was decided by: reserves a unit
    /// of each budget of `table` covering the call that none of `reserved` holds yet (a budget the
    /// replacement added), or refuses it. A budget the replacement kept keeps its unit.
    pub(super) fn reserve_added(
        &self,
        table: &Table,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        reserved: &Units,
    ) -> Reserve {
        let Some(operator) = &table.budgets else {
            return Reserve::Free;
        };
        let slot = entry.slot.load(std::sync::atomic::Ordering::Relaxed) as usize;
        let mut charges = operator.charges(slot, risk.get());
        charges.retain(|charge| !reserved.holds(charge));
        let store = match &self.inner.budgets {
            Some(code) => code.store.clone(),
            None => operator.store.clone(),
        };
        self.take_units(store, charges, entry, risk)
    }

    /// Asks `store` for a unit of each of `charges` (sorted by key, each once) under a new reservation.
    fn take_units(
        &self,
        store: Arc<dyn BudgetStore>,
        charges: Vec<BudgetCharge>,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
    ) -> Reserve {
        if charges.is_empty() {
            return Reserve::Free;
        }
        if !store.keeps_history() && charges.iter().any(|c| c.kind != ChargeKind::Count) {
            let why = "the operator's policy has rules over history, and this budget store keeps \
                       no history";
            return Reserve::Refused(self.unavailable(
                entry,
                risk,
                StoreError::Unavailable(why.into()),
            ));
        }
        let reserved = Reserved::new(store, charges, Reservation::next());
        match catch_unwind(AssertUnwindSafe(|| reserved.take())) {
            Ok(future) => Reserve::Waiting(reserved, Wait::Budget(future)),
            Err(_) => Reserve::Refused(self.unavailable(entry, risk, store_panicked())),
        }
    }

    /// A budget store's answer for `reserved`, carried out: the units kept until the commit point, or
    /// the refusal (nothing was taken).
    pub(super) fn taken(
        &self,
        table: &Table,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        reserved: Reserved,
        taken: Result<Taken, StoreError>,
    ) -> Result<Option<Reserved>, Denied> {
        let mode = self.mode();
        match taken {
            Ok(Taken::Taken) => Ok(Some(reserved)),
            Ok(Taken::Exhausted {
                charge,
                retry_after,
            }) => {
                let label = self.label(table, reserved.charges(), charge);
                let code = self.code(table, reserved.charges(), charge);
                let kind = reserved_kind(reserved.charges(), charge);
                // Nothing was taken: nothing to give back.
                reserved.disarm();
                Err(exhausted(
                    refuse(entry, code, risk.get(), Some(mode)).with_detail(label),
                    kind,
                    retry_after,
                ))
            }
            // The store may have taken the units before it failed: the reservation gives them back.
            Err(error) => Err(self.unavailable(entry, risk, error)),
        }
    }

    /// A budget store's answer to whether `reserved`'s units are still held after the decision waited
    /// ([`BudgetStore::hold`]). A refusal leaves `reserved` as it is: the decision's
    /// refusal gives back what it still holds.
    pub(super) fn held_again(
        &self,
        table: &Table,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        reserved: &[BudgetCharge],
        held: Result<Taken, StoreError>,
    ) -> Result<(), Denied> {
        match held {
            Ok(Taken::Taken) => Ok(()),
            Ok(Taken::Exhausted {
                charge,
                retry_after,
            }) => {
                let label = self.label(table, reserved, charge);
                let code = self.code(table, reserved, charge);
                let mode = self.mode();
                let detail = match reserved_kind(reserved, charge) {
                    Some(ChargeKind::Require | ChargeKind::Forbid) => {
                        format!("{label}, as it stood at the commit point")
                    }
                    _ => format!(
                        "{label}: the unit it held was cleared (reset, or out of its window) \
                         while the call waited"
                    ),
                };
                Err(exhausted(
                    refuse(entry, code, risk.get(), Some(mode)).with_detail(detail.into()),
                    reserved_kind(reserved, charge),
                    retry_after,
                ))
            }
            Err(error) => Err(self.unavailable(entry, risk, error)),
        }
    }

    /// The code of a refusal by the budget at `charge` in `charges`.
    fn code(&self, table: &Table, charges: &[BudgetCharge], charge: usize) -> DenialCode {
        let history = charges.get(charge).is_some_and(|charge| {
            [&self.inner.budgets, &table.budgets]
                .into_iter()
                .flatten()
                .any(|b| b.is_history(charge))
        });
        match history {
            true => DenialCode::HistoryRefused,
            false => DenialCode::BudgetExhausted,
        }
    }

    /// The label of the budget at `charge` in `charges`, as a refusal names it.
    fn label(&self, table: &Table, charges: &[BudgetCharge], charge: usize) -> Arc<str> {
        match charges.get(charge) {
            Some(charge) => [&self.inner.budgets, &table.budgets]
                .into_iter()
                .flatten()
                .find(|b| b.has(charge))
                .map_or_else(|| "a budget".into(), |b| b.label(charge)),
            None => "a budget".into(),
        }
    }

    #[cold]
    pub(super) fn unavailable(
        &self,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        error: StoreError,
    ) -> Denied {
        let why = match error {
            StoreError::Unavailable(why) => format!("unavailable: {why}"),
            StoreError::Timeout => "no answer in time".to_owned(),
            StoreError::Unexpected(what) => format!("an unexpected answer: {what}"),
        };
        let mode: Mode = self.mode();
        refuse(
            entry,
            DenialCode::BudgetStoreUnavailable,
            risk.get(),
            Some(mode),
        )
        .with_detail(why.into())
    }
}

/// The kind of the charge at `charge` in `charges`.
fn reserved_kind(charges: &[BudgetCharge], charge: usize) -> Option<ChargeKind> {
    charges.get(charge).map(|charge| charge.kind)
}

/// A refusal of a budget or a rule over history, with when to retry where waiting helps: not for a
/// call that must follow another, which no wait brings.
fn exhausted(denied: Denied, kind: Option<ChargeKind>, retry_after: std::time::Duration) -> Denied {
    match kind {
        Some(ChargeKind::Require) => denied,
        _ => denied.with_retry_after(retry_after),
    }
}
