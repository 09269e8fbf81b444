//! An approval's expiry, read again at the commit point: a store's answer is used before its request
//! expires, and the call must reach its body before then too. Whatever it waited for after the store
//! answered (its `enter` records, a lock, an argument written again, the target's probe), a call past
//! its approval's expiry is refused `APPROVAL_EXPIRED` and gives back what it reserved.

use std::time::Instant;

use super::arguments::ArgumentSource;
use super::refusal::refuse;
use super::state::Decision;
use crate::gate::call::EffectiveRisk;
use crate::gate::denied::Denied;
use crate::gate::permit::Permit;
use crate::registry::ToolEntry;
use toolgate_policy::{DenialCode, Mode};

impl<A: ArgumentSource> Decision<A> {
    /// Whether the store answers that approved the call are live still. Where an async call compares
    /// its arguments once more after this (or reads its target again), the permit keeps the expiry,
    /// read again there.
    #[inline]
    pub(super) fn approval_unexpired(&mut self) -> Result<(), Denied> {
        let Some(expires) = self.expires else {
            return Ok(());
        };
        self.approval_live_until(expires)
    }

    #[cold]
    #[inline(never)]
    fn approval_live_until(&mut self, expires: Instant) -> Result<(), Denied> {
        if Instant::now() >= expires {
            let mode = self.held.first().map(|h| Mode::from_index(h.state));
            return Err(expired(self.entry, self.risk, mode));
        }
        if self.permit.needs_confirmation() {
            self.permit.approved_until(expires);
        }
        Ok(())
    }
}

/// The last step before an async tool's body, after its decision waited: the approval it holds must be
/// live still.
pub(super) fn still_unexpired(
    entry: &'static ToolEntry,
    permit: &Permit,
    risk: EffectiveRisk,
) -> Result<(), Denied> {
    match permit.approval_expires() {
        Some(expires) if Instant::now() >= expires => Err(expired(entry, risk, None)),
        _ => Ok(()),
    }
}

#[cold]
fn expired(entry: &'static ToolEntry, risk: EffectiveRisk, mode: Option<Mode>) -> Denied {
    refuse(entry, DenialCode::ApprovalExpired, risk.get(), mode).with_detail(
        "its approval expired while the call was decided, after the store answered".into(),
    )
}
