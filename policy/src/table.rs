//! The policy table of ADR-005. This module is the only place it lives; the gate, the macros' compile-time
//! checks and the defaults all read it from here.
//!
//! | mode | ceiling |
//! | --- | --- |
//! | SHADOW, ADVISORY | PROPOSE_ONLY |
//! | PARTIAL_AUTO | LOW_WRITE |
//! | FULL_AUTO | HIGH_WRITE, with an approval |

use crate::denial::DenialCode;
use crate::mode::{Mode, ModeSet};
use crate::risk::Risk;

/// The version of the decision rules below, stamped into what records a decision.
pub const POLICY_VERSION: u32 = 1;

/// The highest risk a tool may have to run in `mode`.
pub const fn ceiling(mode: Mode) -> Risk {
    match mode {
        Mode::Shadow | Mode::Advisory => Risk::ProposeOnly,
        Mode::PartialAuto => Risk::LowWrite,
        Mode::FullAuto => Risk::HighWrite,
    }
}

/// Whether a call of this risk needs an approval even where the mode admits it.
pub const fn requires_approval(risk: Risk) -> bool {
    matches!(risk, Risk::HighWrite)
}

/// Whether `mode`'s ceiling admits `risk`.
pub const fn admits(mode: Mode, risk: Risk) -> bool {
    risk as u8 <= ceiling(mode) as u8
}

/// Every mode whose ceiling admits `risk`: the default `allowed_modes` of a tool.
pub const fn modes_admitting(risk: Risk) -> ModeSet {
    let mut set = ModeSet::EMPTY;
    let mut i = 0;
    while i < Mode::ALL.len() {
        if admits(Mode::ALL[i], risk) {
            set = set.with(Mode::ALL[i]);
        }
        i += 1;
    }
    set
}

/// The most restrictive mode that admits `risk`. The search ends: FULL_AUTO, the last mode, admits every
/// risk.
pub const fn lowest_mode_admitting(risk: Risk) -> Mode {
    let mut i = 0;
    while !admits(Mode::ALL[i], risk) {
        i += 1;
    }
    Mode::ALL[i]
}

/// What the policy says of a call before any approver is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Run it only if an approver approves.
    NeedsApproval,
    /// Refuse it, for this reason.
    Refuse(DenialCode),
}

/// What a gate does with a call that writes once its session is tainted: once a tool whose output is
/// untrusted (a web page, an e-mail, a user's file) has run, what the agent does next may be steered by
/// that input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TaintPolicy {
    /// Every call that writes needs an approval (`NeedsApproval`, or `APPROVAL_REQUIRED` where the gate
    /// has no way to approve).
    #[default]
    RequireApproval,
    /// Every call that writes is refused with `TAINTED_SESSION`.
    Refuse,
}

/// Whether the taint latch holds a call of `risk`: every risk that writes (LOW_WRITE and above).
pub const fn latched(risk: Risk) -> bool {
    risk.is_write()
}

/// Decides a call in a tainted session: as [`decide`], then, for a call that writes and that [`decide`]
/// does not refuse, what `taint` says: an approval where the gate can approve, else
/// `APPROVAL_REQUIRED`; or `TAINTED_SESSION`. The latch comes after the ceiling and before the approval,
/// so a tainted session never allows what a clean one refuses, and never lets a write run unasked.
pub const fn decide_tainted(facts: Facts, taint: TaintPolicy) -> Verdict {
    let clean = decide(facts);
    if matches!(clean, Verdict::Refuse(_)) || !latched(facts.risk) {
        return clean;
    }
    match taint {
        TaintPolicy::Refuse => Verdict::Refuse(DenialCode::TaintedSession),
        TaintPolicy::RequireApproval if facts.can_approve => Verdict::NeedsApproval,
        TaintPolicy::RequireApproval => Verdict::Refuse(DenialCode::ApprovalRequired),
    }
}

/// Everything the policy reads of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The risk of the call: the tool's declared risk, or higher where its arguments escalate it.
    pub risk: Risk,
    /// The modes the tool's manifest allows.
    pub allowed_modes: ModeSet,
    /// The gate's current mode.
    pub mode: Mode,
    /// Whether a deny rule of the gate matches the tool.
    pub deny_listed: bool,
    /// Whether the gate has a way to approve a call: an approver, or two-step approvals.
    pub can_approve: bool,
}

/// Decides a call, in the order of ADR-0004 and ADR-005: the deny list (in every mode, and no approval
/// lifts it), then the manifest's allowed modes, then the mode's ceiling, then the approval a risk needs:
/// `NeedsApproval` where the gate can approve, `APPROVAL_REQUIRED` where it cannot.
pub const fn decide(facts: Facts) -> Verdict {
    if facts.deny_listed {
        Verdict::Refuse(DenialCode::DenyListed)
    } else if !facts.allowed_modes.contains(facts.mode) {
        Verdict::Refuse(DenialCode::ModeNotAllowed)
    } else if !admits(facts.mode, facts.risk) {
        Verdict::Refuse(DenialCode::AboveCeiling)
    } else if requires_approval(facts.risk) && facts.can_approve {
        Verdict::NeedsApproval
    } else if requires_approval(facts.risk) {
        Verdict::Refuse(DenialCode::ApprovalRequired)
    } else {
        Verdict::Allow
    }
}
