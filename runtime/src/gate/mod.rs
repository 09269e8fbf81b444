//! The gate: built once with a mode, a deny list and an approver; decides every call of every tool.
//!
//! Building a gate works out each tool's verdict in each mode ([`policy::decide`]) into a table indexed by
//! the tool's registry slot. Deciding a call then reads the mode and one table cell: no allocation, no
//! hashing, no lock. Only a call that needs an approval, or is refused, leaves that path.

pub(crate) mod ambient;
pub mod budget;
pub(crate) mod builder;
pub(crate) mod call;
pub(crate) mod caller;
pub(crate) mod compile;
pub(crate) mod decide;
pub(crate) mod denied;
pub(crate) mod denylist;
pub(crate) mod error;
pub(crate) mod grants;
pub mod narrowing;
pub(crate) mod permit;
pub(crate) mod reads;
pub(crate) mod taint;
pub(crate) mod undoing;
pub(crate) mod wait;

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::approval::store::{Answer, ApprovalStore, ApproveError, StoreError};
use crate::approval::{AnyApprover, Taint};
use crate::audit::{AuditRecord, AuditSink, Decision, Stage};
use crate::gate::budget::Budgets;
use crate::gate::compile::{TAINTED, Table, TableInputs, verdict_cell};
use crate::gate::denylist::DenyRule;
use crate::gate::error::RaiseRefused;
use crate::gate::narrowing::Narrowing;
use crate::registry::registry;
use crate::registry::{ToolEntry, ToolManifest};
use toolgate_policy::{DenialCode, Verdict};
use toolgate_policy::{Mode, Risk};

/// Decides every call of every `#[tool]`.
///
/// Cloning a gate is cheap and every clone is the same gate: lowering the mode of one lowers it for all,
/// on every thread at once. The mode can be lowered and never raised.
///
/// ```
/// # extern crate toolgate_runtime as toolgate;
/// use toolgate::{Gate, Mode};
///
/// let gate = Gate::builder().mode(Mode::PartialAuto).build()?;
/// gate.run(|| {
///     // tools called here are decided by `gate`
/// });
/// gate.lower(Mode::Shadow)?; // the kill switch
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Gate {
    pub(super) inner: Arc<Inner>,
}

/// A gate's state, by concern: who it is and its mode here, the rest in a part each.
pub(super) struct Inner {
    pub(super) id: u64,
    /// The mode every decision reads: [`ModeParts::effective`] in bits 0-1, and [`TAINTED`] once the
    /// session is tainted, stored by whoever changes a part, under `modes`' lock.
    pub(super) mode: AtomicU8,
    modes: Mutex<ModeParts>,
    /// The table, replaced whole when the operator's policy changes.
    pub(super) table: arc_swap::ArcSwap<Table>,
    /// The generation of the newest table, stored before the table is: whoever sees a table (its
    /// policy's digest, say) sees at least its generation here, so that a commit point, which reads
    /// this rather than loading the table, never decides on a table older than one already seen.
    pub(super) generation: AtomicU64,
    /// Per registry slot, bit `mode` is set where the call runs outright: allowed, and no record to write;
    /// bits 4-7 say the same of a tainted session, so that the inlined check reads `mode | TAINTED`'s
    /// bit. A tool with untrusted output has none of bits 0-3, since its call must close the latch.
    /// Kept beside the table, not in it, so that the inlined check reads one byte: a change of policy
    /// clears the bits it takes away before the new table is in place, and sets the bits it gives
    /// back after.
    // A word, not a byte, per slot: the inlined check then loads it straight into the register it
    // tests, with no widening (one instruction fewer on every allowed call).
    pub(super) allowed_outright: Box<[AtomicU32]>,
    /// Per registry slot, the table's verdicts (as [`verdict_cell`] writes them), beside the table for
    /// the same reason: a lone gate's refusal reads one byte. Written after a new table is in place,
    /// and read only to refuse: a cell behind its table refuses what the table would, never allows.
    pub(super) verdict_cells: Box<[[AtomicU8; 8]]>,
    /// Per registry slot, the table's `ruled_only`, beside it so that a call it does not concern loads
    /// no table. Only a hint: a set one sends the check to the table, which decides.
    pub(super) ruled_hint: Box<[AtomicBool]>,
    /// What the table is worked out from besides the operator's policy.
    inputs: TableInputs,
    pub(super) latch: Latch,
    pub(super) approvals: Approvals,
    pub(super) audit: Option<Arc<dyn AuditSink>>,
    /// The number of the next call this gate records.
    pub(super) calls: AtomicU64,
    pub(super) agent: Option<Arc<str>>,
    pub(super) principal: Option<Arc<str>>,
    /// The gate's budgets (`None`: none), checked after every gate's table and before any approval.
    pub(super) budgets: Option<Budgets>,
    /// What must live as long as the gate: the memberships of fleets it joined, so that the fleet's
    /// hold on it ends with the gate, never before.
    #[cfg(feature = "postgres")]
    kept: Mutex<Vec<Arc<dyn std::any::Any + Send + Sync>>>,
}

/// The taint latch (its bit is [`TAINTED`] in [`Inner::mode`]).
pub(super) struct Latch {
    /// What closed the taint latch; empty while the session is clean. Set once.
    pub(super) taint: OnceLock<Taint>,
    /// Whether the `session_tainted` record is in the log; held while it is written, so that no
    /// untrusted call runs before the log says why the session is tainted.
    pub(super) taint_recorded: Mutex<bool>,
}

/// Who approves, and what was granted for the session.
pub(super) struct Approvals {
    pub(super) approver: Option<AnyApprover>,
    pub(super) store: Option<Arc<dyn ApprovalStore>>,
    pub(super) grants: Mutex<grants::Grants>,
    /// Per registry slot, where the gate keeps no record: the end of a live grant of the whole tool at
    /// its declared risk or above, in nanoseconds after `epoch` (0: none), so that the inlined check
    /// lets a granted call run as it lets an allowed one. The grant list stays the authority, and the
    /// taint latch clears these under its lock.
    pub(super) granted_until: Box<[AtomicU64]>,
    pub(super) epoch: std::time::Instant,
    /// The gate's id in its store's requests ([`ApprovalCall::gate`]): 128 random bits, shared by its
    /// clones, so that an answer for the session grants to the gate that filed its request alone.
    /// `None` without a store, or without randomness (then no store answer grants it anything).
    ///
    /// [`ApprovalCall::gate`]: crate::approval::store::ApprovalCall::gate
    pub(super) filer: Option<Arc<str>>,
}

impl Gate {
    /// The current mode.
    pub fn mode(&self) -> Mode {
        Mode::from_index(self.inner.mode.load(Ordering::Acquire))
    }

    /// A number that tells this gate (and its clones) apart from the process's other gates.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The deny rules, as given.
    pub fn deny_rules(&self) -> impl Iterator<Item = &str> {
        self.inner.inputs.rules.iter().map(DenyRule::as_str)
    }

    /// Lowers the mode, for every clone of this gate on every thread, from the next decision on.
    ///
    /// Asking for a higher mode is refused with [`RaiseRefused`] and changes nothing: a gate's mode only
    /// goes down. A new gate is needed to run in a higher mode, and a gate entered inside this one still
    /// cannot run more than this one allows.
    pub fn lower(&self, to: Mode) -> Result<(), RaiseRefused> {
        self.lower_by(to, "unnamed operator")
    }

    /// [`Gate::lower`], naming who lowers it and why for the audit log (`mode_lowered` record).
    pub fn lower_by(&self, to: Mode, who: &str) -> Result<(), RaiseRefused> {
        let before = {
            let mut parts = self.modes();
            let before = parts.own.min(parts.fleet);
            if to > before {
                return Err(RaiseRefused {
                    current: parts.effective(),
                    requested: to,
                });
            }
            parts.own = to;
            self.store_mode(&parts);
            before
        };
        if self.inner.audit.is_some() {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            let record = AuditRecord {
                by: Some(who.to_owned()),
                message: Some(format!("mode lowered from {before} to {to} by {who}")),
                ..self.record(Stage::ModeLowered, Cow::Borrowed(""), to, call)
            };
            self.write_after_the_fact(&record);
        }
        Ok(())
    }

    /// Follows the operator's policy from now on: `narrowing` replaces what the previous policy took
    /// away (a [`PolicySource`](crate::PolicySource) that changes calls this), and a `policy_changed` record says so, `by`
    /// naming who changed it.
    ///
    /// What the new policy takes away is taken before its table is in place, and what it gives back
    /// (relative to the previous policy, never beyond the code) is given after; a call decided under
    /// the previous policy and not yet past its commit point is decided again there.
    pub fn follow_policy(&self, narrowing: Narrowing, by: &str) {
        let inner = &*self.inner;
        let (before, after) = {
            let mut parts = self.modes();
            let old = inner.table.load_full();
            let ceiling = narrowing.ceiling();
            let (table, outright) = inner.inputs.table(narrowing, old.generation + 1);
            for (cell, bits) in inner.allowed_outright.iter().zip(&outright) {
                cell.fetch_and(u32::from(*bits), Ordering::AcqRel);
            }
            let old_ceiling = parts.policy;
            parts.policy = old_ceiling.min(ceiling);
            self.store_mode(&parts);
            let after = table.narrowing.digest.clone();
            let cells: Vec<[u8; 8]> = table
                .verdicts
                .iter()
                .map(|row| row.map(verdict_cell))
                .collect();
            inner.generation.store(table.generation, Ordering::Release);
            inner.table.store(Arc::new(table));
            for (row, new) in inner.verdict_cells.iter().zip(cells) {
                for (cell, v) in row.iter().zip(new) {
                    cell.store(v, Ordering::Release);
                }
            }
            let table = inner.table.load();
            for (hint, ruled) in inner.ruled_hint.iter().zip(&table.ruled_only) {
                hint.store(*ruled, Ordering::Release);
            }
            for (cell, bits) in inner.allowed_outright.iter().zip(outright) {
                cell.store(u32::from(bits), Ordering::Release);
            }
            parts.policy = ceiling;
            self.store_mode(&parts);
            (old.narrowing.digest.clone(), after)
        };
        if self.inner.audit.is_some() {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            let name = |d: &Option<Arc<str>>| d.as_deref().unwrap_or("none").to_owned();
            let record = AuditRecord {
                by: Some(by.to_owned()),
                message: Some(format!(
                    "policy {} replaces policy {}, by {by}",
                    name(&after),
                    name(&before)
                )),
                ..self.record(Stage::PolicyChanged, Cow::Borrowed(""), self.mode(), call)
            };
            self.write_after_the_fact(&record);
        }
    }

    /// The digest of the operator's policy the gate follows (`None`: it follows none).
    pub fn policy_digest(&self) -> Option<Arc<str>> {
        self.inner.table.load().narrowing.digest.clone()
    }

    /// Whether a call of `entry`, judged at `risk` (its effective risk, escalation included), is
    /// approved by an operator only, never by a client's in-band form: its manifest says so
    /// (`out_of_band`, `irreversible`), or the operator's policy the gate follows now does
    /// (`out_of_band`, `out_of_band_at`). Read at each call, so a replaced policy applies to the next.
    #[cfg_attr(
        not(feature = "mcp"),
        expect(dead_code, reason = "only the MCP server answers approvals in band")
    )]
    pub(crate) fn approved_out_of_band(&self, entry: &ToolEntry, risk: Risk) -> bool {
        if entry.manifest.approved_out_of_band() {
            return true;
        }
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        self.inner
            .table
            .load()
            .narrowing
            .out_of_band(slot, risk)
            .is_some()
    }

    /// Records that a policy was refused and the gate kept the one it follows.
    #[cfg(feature = "policy-file")]
    pub(crate) fn note_policy_refused(&self, why: &str, by: &str) {
        if self.inner.audit.is_some() {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            let record = AuditRecord {
                by: Some(by.to_owned()),
                message: Some(why.to_owned()),
                ..self.record(Stage::PolicyRefused, Cow::Borrowed(""), self.mode(), call)
            };
            self.write_after_the_fact(&record);
        }
    }

    fn modes(&self) -> std::sync::MutexGuard<'_, ModeParts> {
        // Every update of the parts is a single assignment: a panic cannot leave them half-changed.
        self.inner
            .modes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn store_mode(&self, parts: &ModeParts) {
        let tainted = if parts.tainted { TAINTED } else { 0 };
        self.inner
            .mode
            .store(parts.effective() as u8 | tainted, Ordering::Release);
    }

    #[cfg(feature = "postgres")]
    /// Holds the gate under its fleet's mode: the effective mode is the lower of the gate's own and
    /// the fleet's, and a fleet's mode only ever lowers a running gate. Records `mode_lowered` when the
    /// effective mode went down.
    pub(crate) fn hold_under(&self, fleet: Mode, who: &str, why: &str) {
        let (before, after) = {
            let mut parts = self.modes();
            let before = parts.effective();
            parts.fleet = parts.fleet.min(fleet);
            self.store_mode(&parts);
            (before, parts.effective())
        };
        if after < before && self.inner.audit.is_some() {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            let record = AuditRecord {
                by: Some(who.to_owned()),
                message: Some(format!(
                    "mode lowered from {before} to {after} by {who}: {why}"
                )),
                ..self.record(Stage::ModeLowered, Cow::Borrowed(""), after, call)
            };
            self.write_after_the_fact(&record);
        }
    }

    #[cfg(feature = "postgres")]
    /// Marks the gate cut off from its fleet (it acts as SHADOW) or back in contact (it acts as its own
    /// and the fleet's mode allow again); records `fleet_lost` or `fleet_rejoined` when that changed.
    ///
    /// The record is written after the mode goes down and before it goes up, under the parts' lock, so
    /// that in the log every call between the two records was decided as SHADOW.
    pub(crate) fn set_partitioned(&self, partitioned: bool, why: &str) {
        let mut parts = self.modes();
        if parts.partitioned == partitioned {
            return;
        }
        parts.partitioned = partitioned;
        if partitioned {
            self.store_mode(&parts);
        }
        if self.inner.audit.is_some() {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            let stage = if partitioned {
                Stage::FleetLost
            } else {
                Stage::FleetRejoined
            };
            let record = AuditRecord {
                message: Some(why.to_owned()),
                ..self.record(stage, Cow::Borrowed(""), parts.effective(), call)
            };
            self.write_after_the_fact(&record);
        }
        if !partitioned {
            self.store_mode(&parts);
        }
    }

    #[cfg(feature = "postgres")]
    /// Whether the gate acts as SHADOW because it lost its fleet.
    pub(crate) fn partitioned(&self) -> bool {
        self.modes().partitioned
    }

    #[cfg(feature = "postgres")]
    /// Keeps `what` alive as long as the gate (or a clone) lives.
    pub(crate) fn keep_alive(&self, what: Arc<dyn std::any::Any + Send + Sync>) {
        self.inner
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(what);
    }

    /// A reference that does not keep the gate alive.
    #[cfg(feature = "policy-file")]
    pub(crate) fn downgrade(&self) -> WeakGate {
        WeakGate(Arc::downgrade(&self.inner))
    }

    /// Approves a two-step approval request: the call that was refused with this token (same tool, same
    /// arguments, same risk) may then run once, until the request expires.
    ///
    /// With a store shared between processes (feature `postgres`), this waits for the store.
    pub fn approve(&self, token: &str) -> Result<(), ApproveError> {
        self.answer(
            token,
            Answer::Approve {
                by: "operator".to_owned(),
                for_session: false,
                confirmation: None,
            },
        )
    }

    /// Approves the request of an `irreversible` call, its target typed back as whoever approves reads
    /// it (as one types a repository's name to delete it): a mistyped target approves nothing
    /// ([`ApproveError::ConfirmationMismatch`]) and the request still waits.
    pub fn approve_typed(&self, token: &str, by: &str, target: &str) -> Result<(), ApproveError> {
        self.answer(
            token,
            Answer::Approve {
                by: by.to_owned(),
                for_session: false,
                confirmation: Some(target.to_owned()),
            },
        )
    }

    /// Answers a two-step approval request: approve it (once, or for the session of the gate that runs
    /// the call), or reject it with a reason the agent reads when it calls again. `answer.by()` is
    /// recorded as who answered.
    pub fn answer(&self, token: &str, answer: Answer) -> Result<(), ApproveError> {
        let store = self
            .inner
            .approvals
            .store
            .as_ref()
            .ok_or(ApproveError::NotEnabled)?;
        let by = answer.by().to_owned();
        if by.trim().is_empty() {
            // The store would keep an answer that no one gave, and the call would be refused.
            return Err(ApproveError::Store(StoreError::Unexpected(
                "an answer must name who gives it".to_owned(),
            )));
        }
        let (stage, decision, reason) = match &answer {
            Answer::Reject { reason, .. } => (
                Stage::ApprovalRejected,
                Decision::Refused,
                Some(reason.clone()),
            ),
            _ => (Stage::ApprovalGranted, Decision::Approved, None),
        };
        let binding = wait::block_on(store.answer(token, answer))?;
        if self.inner.audit.is_some() {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            // The digest the log shows for these arguments: the binding's own covers the real values
            // of redacted arguments, and a digest of a short secret gives the secret away.
            let record = AuditRecord {
                arguments_digest: Some(binding.shown_digest),
                by: Some(by),
                effective_risk: Some(binding.risk),
                decision: Some(decision),
                message: reason,
                ..self.record(stage, Cow::Owned(binding.tool), self.mode(), call)
            };
            self.write_after_the_fact(&record);
        }
        Ok(())
    }

    /// The live session grants of this gate (and its clones), oldest first.
    pub fn grants(&self) -> Vec<crate::approval::Grant> {
        grants::lock(&self.inner.approvals.grants).live(std::time::Instant::now())
    }

    /// Revokes the session grants of the tool with this id (every grant where `tool` is `None`); the
    /// next call of it asks again. Returns how many were revoked; recorded (`grant_revoked`) when any
    /// were.
    pub fn revoke_grants(&self, tool: Option<&str>, by: &str) -> usize {
        // The inlined check's copy first: from here on, every call asks the list, then the list.
        match tool.map(|id| registry().entry(id)) {
            None => {
                for until in &self.inner.approvals.granted_until {
                    until.store(0, Ordering::Release);
                }
            }
            Some(Some(entry)) => {
                let slot = entry.slot.load(Ordering::Relaxed) as usize;
                if let Some(until) = self.inner.approvals.granted_until.get(slot) {
                    until.store(0, Ordering::Release);
                }
            }
            Some(None) => {}
        }
        let revoked = grants::lock(&self.inner.approvals.grants).revoke(tool);
        if revoked > 0 && self.inner.audit.is_some() {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            let record = AuditRecord {
                by: Some(by.to_owned()),
                message: Some(format!("{revoked} session grant(s) revoked")),
                ..self.record(
                    Stage::GrantRevoked,
                    Cow::Owned(tool.unwrap_or_default().to_owned()),
                    self.mode(),
                    call,
                )
            };
            self.write_after_the_fact(&record);
        }
        revoked
    }

    /// The agent label the gate was built with.
    pub fn agent(&self) -> Option<&str> {
        self.inner.agent.as_deref()
    }

    /// Who the agent acts for, as the gate was built with ([`GateBuilder::principal`](crate::GateBuilder::principal)).
    pub fn principal(&self) -> Option<&str> {
        self.inner.principal.as_deref()
    }

    /// What this gate would decide for the tool with `manifest`'s id in the current mode and session
    /// (a tainted session's verdict once the latch is closed), before any approver is asked; `None`
    /// when no such tool is linked. A sync tool that needs an approval from an async approver is
    /// refused (`APPROVAL_REQUIRED`), as its calls are: it cannot wait for one.
    pub fn verdict(&self, manifest: &ToolManifest) -> Option<Verdict> {
        let entry = registry().entry(manifest.id)?;
        Some(match self.table_verdict(entry).1 {
            // Its decision would refuse it before asking anyone: it cannot wait for the approver.
            Verdict::NeedsApproval
                if !entry.behaviour.is_async
                    && matches!(self.inner.approvals.approver, Some(AnyApprover::Async(_))) =>
            {
                Verdict::Refuse(DenialCode::ApprovalRequired)
            }
            verdict => verdict,
        })
    }

    pub(crate) fn audits(&self) -> bool {
        self.inner.audit.is_some()
    }

    /// A record with the fields every record of this gate has.
    pub(crate) fn record(
        &self,
        stage: Stage,
        tool: Cow<'static, str>,
        mode: Mode,
        call: u64,
    ) -> AuditRecord {
        self.record_under(&self.inner.table.load(), stage, tool, mode, call)
    }

    /// [`record`](Gate::record) naming the policy of `table`, the gate's table already at hand.
    pub(crate) fn record_under(
        &self,
        table: &Table,
        stage: Stage,
        tool: Cow<'static, str>,
        mode: Mode,
        call: u64,
    ) -> AuditRecord {
        AuditRecord {
            agent: self
                .inner
                .agent
                .as_deref()
                .map(|a| Cow::Owned(a.to_owned())),
            call,
            manifest_digest: Cow::Borrowed(crate::registry::digest::manifest_digest()),
            policy_digest: table.narrowing.digest.as_deref().map(str::to_owned),
            principal: self
                .inner
                .principal
                .as_deref()
                .map(|p| Cow::Owned(p.to_owned())),
            rollback_of: undoing::origin(),
            ..AuditRecord::new(stage, tool, mode, self.inner.id)
        }
    }

    /// Records what cannot be refused any more (a body that ran, a refusal, a lowered mode); a failing
    /// sink is reported through `tracing`.
    pub(crate) fn write_after_the_fact(&self, record: &AuditRecord) {
        if let Some(sink) = &self.inner.audit
            && let Err(error) = sink.record(record)
        {
            tracing::error!(target: "toolgate::audit", %error, tool = %record.tool, "audit record lost");
        }
    }
}

// A panic anywhere (a tool body, an approver, a sink) leaves a gate consistent: its state is atomics and a
// store whose poisoned lock is recovered, each update being a single assignment.
impl std::panic::UnwindSafe for Gate {}
impl std::panic::RefUnwindSafe for Gate {}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("id", &self.inner.id)
            .field("mode", &self.mode())
            .field("deny_rules", &self.inner.inputs.rules)
            .field("policy", &self.inner.table.load().narrowing.digest)
            .field("approver", &self.inner.approvals.approver.is_some())
            .field("store", &self.inner.approvals.store.is_some())
            .field("audit", &self.inner.audit.is_some())
            .field("agent", &self.inner.agent)
            .field("principal", &self.inner.principal)
            .field("taint", &self.inner.latch.taint.get())
            .finish()
    }
}

/// What a gate's mode is made of.
#[derive(Debug)]
struct ModeParts {
    /// The gate's own mode: where it started, lowered by [`Gate::lower`].
    own: Mode,
    /// The lowest mode its fleet has held it under (FULL_AUTO without a fleet).
    fleet: Mode,
    /// The ceiling of the operator's policy (FULL_AUTO where it sets none): it follows the policy,
    /// down and up, and never lifts the gate above its own mode or its fleet's.
    policy: Mode,
    /// Cut off from its fleet for longer than the grace period.
    partitioned: bool,
    /// The taint latch is closed: see [`Gate::taint`].
    tainted: bool,
}

impl ModeParts {
    fn effective(&self) -> Mode {
        if self.partitioned {
            Mode::Shadow
        } else {
            self.own.min(self.fleet).min(self.policy)
        }
    }
}

/// A [`Gate`] that may have been dropped.
#[cfg(feature = "policy-file")]
#[derive(Clone)]
pub(crate) struct WeakGate(std::sync::Weak<Inner>);

#[cfg(feature = "policy-file")]
impl WeakGate {
    pub(crate) fn upgrade(&self) -> Option<Gate> {
        self.0.upgrade().map(|inner| Gate { inner })
    }
}
