//! The gate: built once with a mode, a deny list and an approver; decides every call of every tool.
//!
//! Building a gate works out each tool's verdict in each mode ([`policy::decide`]) into a table indexed by
//! the tool's registry slot. Deciding a call then reads the mode and one table cell: no allocation, no
//! hashing, no lock. Only a call that needs an approval, or is refused, leaves that path.

pub(crate) mod ambient;
pub mod budget;
pub(crate) mod call;
pub(crate) mod decide;
pub(crate) mod denied;
pub(crate) mod denylist;
pub(crate) mod grants;
pub mod narrowing;
pub(crate) mod permit;
pub(crate) mod taint;
pub(crate) mod undoing;
pub(crate) mod wait;

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use crate::approval::store::{Answer, ApprovalStore, ApproveError, StoreError};
use crate::approval::two_step::{DEFAULT_APPROVAL_TTL, MAX_APPROVAL_TTL, MemoryStore};
use crate::approval::{AnyApprover, Approver, AsyncApprover, Taint};
use crate::audit::{AuditRecord, AuditSink, Decision, Stage};
use crate::gate::budget::{BudgetError, BudgetScope, BudgetSpec, BudgetStore, Budgets};
use crate::gate::denylist::{DenyRule, DenyRuleError};
use crate::gate::narrowing::Narrowing;
use crate::registry::ToolManifest;
use crate::registry::{RegistryError, registry};
use toolgate_policy::Mode;
use toolgate_policy::{self as policy, DenialCode, Facts, TaintPolicy, Verdict};

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
    /// The generation of the table in place, stored once it is: a commit point compares it with its
    /// decision's table's without loading the table.
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

/// What the gate's policy says of each tool, worked out when it was built.
pub(super) struct Table {
    /// Per registry slot, the verdict in each mode (indexed by `Mode as usize`).
    /// Then, at `TAINTED | mode`, the verdict once the session is tainted ([`policy::decide_tainted`]):
    /// the mode's atomic, with its taint bit, indexes the row.
    pub(super) verdicts: Box<[[Verdict; 8]]>,
    /// Per registry slot, the index of the first deny rule matching the tool.
    pub(super) deny_rule_of: Box<[Option<u32>]>,
    pub(super) deny_rules: Box<[Arc<str>]>,
    /// What the operator's policy takes away (its deny rules and asks are in `verdicts` already; its
    /// argument rules are read per call).
    pub(super) narrowing: Narrowing,
    /// The code's taint policy, as the operator's policy narrows it.
    pub(super) taint_policy: TaintPolicy,
    /// The operator's budgets, counted in the same store as the code's.
    pub(super) budgets: Option<Budgets>,
    /// Counts the tables a gate had: a decision made with one is read again at the commit point when
    /// another replaced it.
    pub(super) generation: u64,
    /// Per registry slot, whether a call takes the full decision whatever its verdict: a budget counts
    /// it, an argument rule reads it, or a record is written. A session grant never lets such a call
    /// run from the inlined check.
    pub(super) full: Box<[bool]>,
    /// Per registry slot, whether the operator's argument rules are all that takes a call to the full
    /// decision: no record, no budget, no latch to close. A lone gate then reads the rules and lets the
    /// call run from its check (`decide::table::lone_ruled`).
    pub(super) ruled_only: Box<[bool]>,
}

/// What a gate's table is worked out from, besides the operator's policy.
struct TableInputs {
    rules: Vec<DenyRule>,
    can_approve: bool,
    keeps_records: bool,
    /// Per registry slot, whether a budget of the code counts the tool's calls.
    counted: Vec<bool>,
    taint_policy: TaintPolicy,
    /// Where the operator's budgets count, beside the code's: one store for the gate's life, so that
    /// a budget that a new policy keeps keeps its count.
    budget_store: Arc<dyn BudgetStore>,
    agent: Option<Arc<str>>,
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
    /// A gate in `mode`, with no deny rule and no approver (so HIGH_WRITE calls are refused).
    ///
    /// Fails when two linked tools share an id.
    pub fn new(mode: Mode) -> Result<Gate, GateError> {
        Gate::builder().mode(mode).build()
    }

    /// A gate in the mode `TOOLGATE_MODE` names (SHADOW when unset), with no deny rule and no approver.
    pub fn from_env() -> Result<Gate, GateError> {
        let mode = Mode::from_env().map_err(GateError::Mode)?;
        Gate::new(mode)
    }

    /// Starts a gate with a deny list and an approver. Its mode is SHADOW until [`GateBuilder::mode`] says
    /// otherwise.
    pub fn builder() -> GateBuilder {
        GateBuilder {
            mode: Mode::Shadow,
            deny: Vec::new(),
            approver: None,
            store: StoreChoice::None,
            audit: Vec::new(),
            agent: None,
            principal: None,
            budgets: Vec::new(),
            budget_store: None,
            taint_policy: TaintPolicy::default(),
            policy: None,
        }
    }

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
    /// away (a [`PolicySource`] that changes calls this), and a `policy_changed` record says so, `by`
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
            let generation = table.generation;
            inner.table.store(Arc::new(table));
            inner.generation.store(generation, Ordering::Release);
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

    /// Records that a policy was refused and the gate kept the one it follows.
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

    /// Who the agent acts for, as the gate was built with ([`GateBuilder::principal`]).
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
        AuditRecord {
            agent: self
                .inner
                .agent
                .as_deref()
                .map(|a| Cow::Owned(a.to_owned())),
            call,
            manifest_digest: Cow::Borrowed(crate::registry::digest::manifest_digest()),
            policy_digest: self
                .inner
                .table
                .load()
                .narrowing
                .digest
                .as_deref()
                .map(str::to_owned),
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

/// Where a gate's operator policy comes from: a policy file that may change while the gate lives
/// (`toolgate::policy_file::LivePolicy`). See [`GateBuilder::policy`](crate::GateBuilder::policy).
pub trait PolicySource: Send + Sync + 'static {
    /// What the policy takes away from a gate built for `principal` and `agent`.
    fn narrowing(&self, principal: Option<&str>, agent: Option<&str>) -> Narrowing;

    /// Called once the gate is built with this source, so that a source that changes can narrow the
    /// gate again ([`Gate::follow_policy`]). A source that never changes does nothing.
    fn follow(&self, gate: &Gate) {
        let _ = gate;
    }
}

/// Configures a [`Gate`]: `Gate::builder().mode(..).deny(..).approver(..).build()`.
#[must_use]
pub struct GateBuilder {
    mode: Mode,
    deny: Vec<String>,
    approver: Option<AnyApprover>,
    store: StoreChoice,
    audit: Vec<Arc<dyn AuditSink>>,
    agent: Option<Arc<str>>,
    principal: Option<Arc<str>>,
    budgets: Vec<BudgetSpec>,
    budget_store: Option<Arc<dyn BudgetStore>>,
    taint_policy: TaintPolicy,
    policy: Option<Arc<dyn PolicySource>>,
}

impl GateBuilder {
    /// The mode to start in.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Refuses the tools whose id matches `pattern` in every mode, whatever an approver says. The pattern
    /// is a tool id or a glob (`users.*`, `*.delete`); one that matches no linked tool fails the build.
    pub fn deny(mut self, pattern: impl Into<String>) -> Self {
        self.deny.push(pattern.into());
        self
    }

    /// The approver of the calls whose risk needs one. Without one, those calls are refused (or wait for
    /// a two-step approval, where the gate takes them). Replaces an async approver given before.
    pub fn approver(mut self, approver: impl Approver) -> Self {
        self.approver = Some(AnyApprover::Sync(Box::new(approver)));
        self
    }

    /// An approver that takes its time: async tools await it, and a sync tool's call that needs it is
    /// refused with `APPROVAL_REQUIRED` (see [`AsyncApprover`]). Replaces a sync approver given before.
    pub fn async_approver(mut self, approver: impl AsyncApprover) -> Self {
        self.approver = Some(AnyApprover::Async(Box::new(approver)));
        self
    }

    /// Takes two-step approvals where no approver is set: a call that needs an approval is refused with
    /// `APPROVAL_PENDING` and a token ([`Denied::approval_token`](crate::Denied::approval_token)); after [`Gate::approve`] with that
    /// token, the same call with the same arguments runs once. Requests expire after
    /// [`DEFAULT_APPROVAL_TTL`](crate::DEFAULT_APPROVAL_TTL) (10 minutes).
    pub fn two_step_approvals(self) -> Self {
        self.approval_ttl(DEFAULT_APPROVAL_TTL)
    }

    /// [`GateBuilder::two_step_approvals`] with another expiry, at most
    /// [`MAX_APPROVAL_TTL`](crate::approval::two_step::MAX_APPROVAL_TTL) (a day) and not zero: another
    /// fails the build with [`GateError::ApprovalTtl`].
    pub fn approval_ttl(mut self, ttl: Duration) -> Self {
        self.store = StoreChoice::Memory(ttl);
        self
    }

    /// Takes two-step approvals through `store`, which may be shared with other gates and other
    /// processes (feature `postgres`: `toolgate::postgres::PostgresStore`), where no approver is set.
    /// A store that fails or does not answer in time refuses the call with
    /// `APPROVAL_STORE_UNAVAILABLE`.
    pub fn approval_store(self, store: impl ApprovalStore) -> Self {
        self.approval_store_shared(Arc::new(store))
    }

    /// [`GateBuilder::approval_store`] with a store kept by the caller too.
    pub fn approval_store_shared(mut self, store: Arc<dyn ApprovalStore>) -> Self {
        self.store = StoreChoice::Shared(store);
        self
    }

    /// Records every decision in `sink`. An allowed call runs only once its `enter` record is written:
    /// when the sink fails, the call is refused with `AUDIT_UNAVAILABLE`.
    ///
    /// Called again, it adds a sink (a [`JsonlSink`](crate::audit::JsonlSink) that keeps the record
    /// and a [`TracingSink`](crate::audit::TracingSink) that ships it, say): each record goes to every
    /// sink, in the order they were given. An `enter` that any sink refuses refuses the call, and is
    /// not offered to the sinks after it; the sinks before it get its `exit` of outcome `refused`, so
    /// that each sink still holds an `exit` for every `enter`. A `session_granted` record that any sink
    /// refuses makes no grant.
    pub fn audit(self, sink: impl AuditSink) -> Self {
        self.audit_shared(Arc::new(sink))
    }

    /// [`GateBuilder::audit`] with a sink shared with other gates or kept by the caller; called again,
    /// it adds a sink too.
    pub fn audit_shared(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit.push(sink);
        self
    }

    /// A label for the agent this gate decides for, written into every audit record.
    pub fn agent(mut self, label: impl Into<String>) -> Self {
        self.agent = Some(label.into().into());
        self
    }

    /// Who the agent acts for: the caller's identity as the application established it (a bearer
    /// token mapped to a user or a service, say), so that one gate is built per principal. Approvers
    /// see it ([`ApprovalRequest::principal`](crate::ApprovalRequest::principal)), stores get it with
    /// the call ([`ApprovalCall::principal`](crate::approval::store::ApprovalCall::principal)), and
    /// every audit record of the gate names it (`principal`). The gate does not check it: it is what
    /// the application says.
    pub fn principal(mut self, name: impl Into<String>) -> Self {
        self.principal = Some(name.into().into());
        self
    }

    /// Allows at most `calls` calls in any `window` (a sliding window) of what `scope` names: the
    /// calls of a tool or of the tools a glob matches (`BudgetScope::tool("users.*")`), of a risk level
    /// (`Risk::HighWrite`), or of the agent (`BudgetScope::Agent`).
    ///
    /// A call over a budget is refused with `BUDGET_EXHAUSTED` and the time after which it may be
    /// retried ([`Denied::retry_after`](crate::Denied::retry_after)), after the policy's mode checks and
    /// before any approver is asked. A budget counts the calls that run: a unit of every budget covering
    /// the call is reserved at the check and kept only when the body is about to run; a call refused
    /// later (an approval pending or rejected, a failing audit sink, a lowered gate) gives it back.
    /// Budgets count in memory, shared by the gate's clones, unless [`GateBuilder::budget_store`] says
    /// otherwise. `calls` must be 1 to [`MAX_BUDGET_CALLS`](budget::MAX_BUDGET_CALLS) and `window`
    /// more than zero and at most [`MAX_BUDGET_WINDOW`](budget::MAX_BUDGET_WINDOW): another fails
    /// `build()` with [`GateError::Budgets`], as does a tool pattern that matches no linked tool.
    pub fn budget(mut self, scope: impl Into<BudgetScope>, calls: u32, window: Duration) -> Self {
        self.budgets.push(BudgetSpec {
            scope: scope.into(),
            limit: calls,
            window,
            owner: None,
        });
        self
    }

    /// Counts the gate's budgets in `store`, which may be shared with other gates and processes
    /// (feature `postgres`: `toolgate::postgres::PostgresStore`). A store that fails or does not answer
    /// in time refuses the calls a budget covers with `BUDGET_STORE_UNAVAILABLE`.
    pub fn budget_store(self, store: impl BudgetStore) -> Self {
        self.budget_store_shared(Arc::new(store))
    }

    /// [`GateBuilder::budget_store`] with a store kept by the caller too.
    pub fn budget_store_shared(mut self, store: Arc<dyn BudgetStore>) -> Self {
        self.budget_store = Some(store);
        self
    }

    /// What the gate does with a call that writes once a tool with untrusted output
    /// (`#[tool(untrusted_output)]`) has run in its session: ask for an approval
    /// ([`TaintPolicy::RequireApproval`], the default) or refuse it with `TAINTED_SESSION`
    /// ([`TaintPolicy::Refuse`]). See [`Gate::taint`].
    pub fn taint_policy(mut self, policy: TaintPolicy) -> Self {
        self.taint_policy = policy;
        self
    }

    /// Narrows the gate by an operator's policy (`toolgate::policy_file::LivePolicy`): its part for
    /// the gate's principal and agent lowers the mode, refuses tools or arguments, and asks where the
    /// code alone would allow. It can take away and never give: see [`Narrowing`]. A policy that
    /// changes narrows the gate again ([`Gate::follow_policy`]).
    pub fn policy(self, source: impl PolicySource) -> Self {
        self.policy_shared(Arc::new(source))
    }

    /// Whether the builder was given an operator policy.
    #[cfg(feature = "postgres")]
    pub(crate) fn has_policy(&self) -> bool {
        self.policy.is_some()
    }

    /// [`GateBuilder::policy`] with a source shared with other gates.
    pub fn policy_shared(mut self, source: Arc<dyn PolicySource>) -> Self {
        self.policy = Some(source);
        self
    }

    /// Builds the gate and works out every tool's verdict in every mode.
    ///
    /// Fails when linked tools share an id, when a deny rule is not valid or matches no linked tool,
    /// or when a budget is not valid.
    pub fn build(mut self) -> Result<Gate, GateError> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let registry = registry();
        check_unique()?;
        let mut rules = Vec::with_capacity(self.deny.len());
        let mut errors = Vec::new();
        for pattern in &self.deny {
            match DenyRule::parse(pattern) {
                Ok(rule) if registry.entries.iter().any(|e| rule.matches_entry(e)) => {
                    rules.push(rule)
                }
                Ok(_) => errors.push(DenyRuleError::MatchesNothing {
                    pattern: pattern.clone(),
                }),
                Err(error) => errors.push(error),
            }
        }
        if !errors.is_empty() {
            return Err(GateError::DenyRules(errors));
        }
        let store: Option<Arc<dyn ApprovalStore>> = match self.store {
            StoreChoice::None => None,
            StoreChoice::Memory(ttl) => match MemoryStore::new(ttl) {
                Some(store) => Some(Arc::new(store)),
                None => return Err(GateError::ApprovalTtl(ttl)),
            },
            StoreChoice::Shared(store) => Some(store),
        };
        let budget_store: Arc<dyn BudgetStore> = self
            .budget_store
            .unwrap_or_else(|| Arc::new(budget::MemoryBudgets::new()));
        let budgets = Budgets::build(
            self.budgets,
            Some(budget_store.clone()),
            self.agent.as_deref(),
        )
        .map_err(GateError::Budgets)?;
        let can_approve = self.approver.is_some() || store.is_some();
        let inputs = TableInputs {
            counted: (0..registry.entries.len())
                .map(|slot| {
                    let risk = registry.entries[slot].manifest.risk_level;
                    budgets.as_ref().is_some_and(|b| b.covers(slot, risk))
                })
                .collect(),
            rules,
            can_approve,
            keeps_records: !self.audit.is_empty(),
            taint_policy: self.taint_policy,
            budget_store,
            agent: self.agent.clone(),
        };
        let narrowing = match &self.policy {
            Some(source) => source.narrowing(self.principal.as_deref(), self.agent.as_deref()),
            None => Narrowing::none(),
        };
        let ceiling = narrowing.ceiling();
        let (table, outright) = inputs.table(narrowing, 0);
        let verdict_cells = table
            .verdicts
            .iter()
            .map(|row| row.map(|v| AtomicU8::new(verdict_cell(v))))
            .collect();
        let ruled_hint = table
            .ruled_only
            .iter()
            .map(|&r| AtomicBool::new(r))
            .collect();
        let filer = store
            .as_ref()
            .and_then(|_| crate::approval::two_step::new_token())
            .map(Arc::from);
        let gate = Gate {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                mode: AtomicU8::new(self.mode.min(ceiling) as u8),
                modes: Mutex::new(ModeParts {
                    own: self.mode,
                    fleet: Mode::FullAuto,
                    policy: ceiling,
                    partitioned: false,
                    tainted: false,
                }),
                table: arc_swap::ArcSwap::new(Arc::new(table)),
                generation: AtomicU64::new(0),
                allowed_outright: outright
                    .into_iter()
                    .map(|bits| AtomicU32::new(u32::from(bits)))
                    .collect(),
                ruled_hint,
                verdict_cells,
                inputs,
                latch: Latch {
                    taint: OnceLock::new(),
                    taint_recorded: Mutex::new(false),
                },
                approvals: Approvals {
                    approver: self.approver,
                    store,
                    grants: Mutex::new(grants::Grants::default()),
                    granted_until: registry.entries.iter().map(|_| AtomicU64::new(0)).collect(),
                    epoch: std::time::Instant::now(),
                    filer,
                },
                audit: match self.audit.len() {
                    0 | 1 => self.audit.pop(),
                    _ => Some(Arc::new(crate::audit::Tee::new(self.audit))),
                },
                agent: self.agent,
                principal: self.principal,
                budgets,
                calls: AtomicU64::new(1),
                #[cfg(feature = "postgres")]
                kept: Mutex::new(Vec::new()),
            }),
        };
        if let Some(source) = &self.policy {
            source.follow(&gate);
        }
        Ok(gate)
    }
}

impl TableInputs {
    /// The table and the outright bits for `narrowing`.
    fn table(&self, mut narrowing: Narrowing, generation: u64) -> (Table, Vec<u8>) {
        let registry = registry();
        let taint_policy = narrowing.taint_policy(self.taint_policy);
        let specs = std::mem::take(&mut narrowing.budgets);
        let budgets = match Budgets::build(
            specs,
            Some(self.budget_store.clone()),
            self.agent.as_deref(),
        ) {
            Ok(budgets) => budgets,
            // A checked file's budgets build; were one not to, its tools are refused, not uncounted.
            Err(_) => {
                narrowing.deny_all("the operator's budgets could not be built");
                None
            }
        };
        let deny_rule_of: Box<[Option<u32>]> = registry
            .entries
            .iter()
            .map(|e| {
                let position = self.rules.iter().position(|r| r.matches_entry(e))?;
                u32::try_from(position).ok()
            })
            .collect();
        let mut allowed_outright = Vec::with_capacity(registry.entries.len());
        let mut verdicts = Vec::with_capacity(registry.entries.len());
        let mut fulls = Vec::with_capacity(registry.entries.len());
        let mut ruled_only = Vec::with_capacity(registry.entries.len());
        for (slot, (entry, rule)) in registry.entries.iter().zip(&deny_rule_of).enumerate() {
            let manifest = &entry.manifest;
            let policy_deny = narrowing.tool(slot).is_some_and(|t| t.deny.is_some());
            let facts = |mode| Facts {
                risk: manifest.risk_level,
                allowed_modes: manifest.allowed_modes,
                mode,
                deny_listed: rule.is_some() || policy_deny,
                can_approve: self.can_approve,
            };
            let narrow =
                |verdict| narrowing.narrow(slot, manifest.risk_level, verdict, self.can_approve);
            let clean = Mode::ALL.map(|mode| narrow(policy::decide(facts(mode))));
            let tainted =
                Mode::ALL.map(|mode| narrow(policy::decide_tainted(facts(mode), taint_policy)));
            // A call a budget counts, or an argument rule reads, takes the full decision.
            let counted = self.keeps_records
                || self.counted[slot]
                || budgets
                    .as_ref()
                    .is_some_and(|b| b.covers(slot, manifest.risk_level));
            let ruled = narrowing.has_argument_rules(slot);
            // A tool with lasting effects has its target checked, its plan made and its evidence read.
            let full = counted || ruled || manifest.has_effects();
            fulls.push(full);
            ruled_only
                .push(ruled && !counted && !manifest.has_effects() && !manifest.untrusted_output);
            allowed_outright.push(
                outright_bits(&clean, full || manifest.untrusted_output)
                    | outright_bits(&tainted, full) << TAINTED,
            );
            let mut row = [Verdict::Allow; 8];
            row[..4].copy_from_slice(&clean);
            row[4..].copy_from_slice(&tainted);
            verdicts.push(row);
        }
        let table = Table {
            verdicts: verdicts.into(),
            deny_rule_of,
            deny_rules: self.rules.iter().map(|r| Arc::from(r.as_str())).collect(),
            narrowing,
            taint_policy,
            budgets,
            generation,
            full: fulls.into(),
            ruled_only: ruled_only.into(),
        };
        (table, allowed_outright)
    }
}

/// The bit of [`Inner::mode`] set once the session is tainted; as a shift, where the tainted session's
/// bits of [`Inner::allowed_outright`] start.
pub(super) const TAINTED: u8 = 4;

/// A verdict as one byte: 0 allows, 1 needs an approval, 2 + i refuses with `DenialCode::ALL[i]`.
pub(super) fn verdict_cell(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Allow => 0,
        Verdict::NeedsApproval => 1,
        Verdict::Refuse(code) => {
            let i = DenialCode::ALL.iter().position(|c| *c == code).unwrap_or(0);
            2 + i as u8
        }
    }
}

/// [`verdict_cell`] read back; a byte it never writes refuses.
#[inline]
pub(super) fn cell_verdict(cell: u8) -> Verdict {
    match cell {
        0 => Verdict::Allow,
        1 => Verdict::NeedsApproval,
        n => Verdict::Refuse(
            DenialCode::ALL
                .get(usize::from(n - 2))
                .copied()
                .unwrap_or(DenialCode::UnregisteredTool),
        ),
    }
}

/// Bit `mode` set where `row` allows the call outright: allowed, and nothing to do beside running it.
pub(super) fn outright_bits(row: &[Verdict; 4], keeps_records: bool) -> u8 {
    let outright = |mode: usize| row[mode] == Verdict::Allow && !keeps_records;
    (0..4).fold(0u8, |bits, mode| bits | u8::from(outright(mode)) << mode)
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
#[derive(Clone)]
pub(crate) struct WeakGate(Weak<Inner>);

impl WeakGate {
    pub(crate) fn upgrade(&self) -> Option<Gate> {
        self.0.upgrade().map(|inner| Gate { inner })
    }
}

/// Where a gate keeps two-step approvals.
enum StoreChoice {
    None,
    Memory(Duration),
    Shared(Arc<dyn ApprovalStore>),
}

impl fmt::Debug for StoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreChoice::None => f.write_str("None"),
            StoreChoice::Memory(ttl) => write!(f, "Memory({ttl:?})"),
            StoreChoice::Shared(_) => f.write_str("Shared"),
        }
    }
}

fn check_unique() -> Result<(), GateError> {
    crate::registry::check_registry().map_err(GateError::Registry)
}

impl fmt::Debug for GateBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateBuilder")
            .field("mode", &self.mode)
            .field("deny", &self.deny)
            .field("approver", &self.approver.is_some())
            .field("store", &self.store)
            .field("audit", &!self.audit.is_empty())
            .field("agent", &self.agent)
            .field("principal", &self.principal)
            .field("budgets", &self.budgets)
            .field("budget_store", &self.budget_store.is_some())
            .field("taint_policy", &self.taint_policy)
            .field("policy", &self.policy.is_some())
            .finish()
    }
}

/// A gate could not be built.
///
/// Its `Debug` form is its message, the sentence users read: `main` returning
/// `Result<_, Box<dyn Error>>` prints an error with `Debug`. `{:#?}` shows its structure.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateError {
    /// Linked tools share an id.
    Registry(RegistryError),
    /// Deny rules that are not valid or match no linked tool.
    DenyRules(Vec<DenyRuleError>),
    /// `TOOLGATE_MODE` does not name a mode.
    Mode(toolgate_policy::ModeEnvError),
    /// The two-step approvals' time to live is zero or longer than
    /// [`MAX_APPROVAL_TTL`](crate::approval::two_step::MAX_APPROVAL_TTL).
    ApprovalTtl(Duration),
    /// Budgets that are not valid.
    Budgets(Vec<BudgetError>),
}

impl fmt::Debug for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !f.alternate() {
            return fmt::Display::fmt(self, f);
        }
        match self {
            GateError::Registry(error) => f.debug_tuple("Registry").field(error).finish(),
            GateError::DenyRules(errors) => f.debug_tuple("DenyRules").field(errors).finish(),
            GateError::Mode(error) => f.debug_tuple("Mode").field(error).finish(),
            GateError::ApprovalTtl(ttl) => f.debug_tuple("ApprovalTtl").field(ttl).finish(),
            GateError::Budgets(errors) => f.debug_tuple("Budgets").field(errors).finish(),
        }
    }
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateError::Registry(error) => write!(f, "cannot build the gate: {error}"),
            GateError::DenyRules(errors) => {
                f.write_str("cannot build the gate: ")?;
                for (i, error) in errors.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{error}")?;
                }
                Ok(())
            }
            GateError::Mode(error) => write!(f, "cannot build the gate: {error}"),
            GateError::Budgets(errors) => {
                f.write_str("cannot build the gate: ")?;
                for (i, error) in errors.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{error}")?;
                }
                Ok(())
            }
            GateError::ApprovalTtl(ttl) => write!(
                f,
                "cannot build the gate: an approval's time to live must be more than zero and at \
                 most {} s, not {} s",
                MAX_APPROVAL_TTL.as_secs(),
                ttl.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for GateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GateError::Registry(error) => Some(error),
            GateError::DenyRules(errors) => errors.first().map(|e| e as _),
            GateError::Mode(error) => Some(error),
            GateError::Budgets(errors) => errors.first().map(|e| e as _),
            GateError::ApprovalTtl(_) => None,
        }
    }
}

/// [`Gate::lower`] was asked for a higher mode than the gate's; the mode did not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaiseRefused {
    /// The gate's mode, unchanged.
    pub current: Mode,
    /// The mode asked for.
    pub requested: Mode,
}

impl fmt::Display for RaiseRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a gate's mode is never raised: it is {} and {} was asked for",
            self.current, self.requested
        )
    }
}

impl std::error::Error for RaiseRefused {}
