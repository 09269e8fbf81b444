//! The refusals: every refusal of every call is made by [`refuse`].

use crate::approval::store::StoreError;
use crate::gate::denied::Denied;
use crate::registry::ToolEntry;
use toolgate_policy::{DenialCode, Mode, Risk};

#[cold]
pub(super) fn store_panicked() -> StoreError {
    StoreError::Unexpected("the store panicked".to_owned())
}

/// Every refusal of every call is made here.
#[cold]
pub(super) fn refuse(
    entry: &'static ToolEntry,
    code: DenialCode,
    risk: Risk,
    mode: Option<Mode>,
) -> Denied {
    Denied::new(code, &entry.manifest, risk, mode)
}

#[cold]
pub(super) fn no_gate(entry: &'static ToolEntry) -> Denied {
    let manifest = &entry.manifest;
    refuse(entry, DenialCode::NoGate, manifest.risk_level, None)
}
