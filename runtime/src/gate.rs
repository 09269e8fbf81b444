//! The gate: built once with a mode, a deny list and an approver; decides every call of every tool.
//!
//! Building a gate works out each tool's verdict in each mode ([`policy::decide`]) into a table indexed by
//! the tool's registry slot. Deciding a call then reads the mode and one table cell: no allocation, no
//! hashing, no lock. Only a call that needs an approval, or is refused, leaves that path.

use std::borrow::Cow;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::approval::{Approval, ApprovalRequest, Approver};
use crate::audit::{AuditRecord, AuditSink, Decision, Stage};
use crate::call::{Arguments, CallInfo, EffectiveRisk};
use crate::denied::Denied;
use crate::denylist::{DenyRule, DenyRuleError};
use crate::manifest::ToolManifest;
use crate::policy::DenialCode;
use crate::policy::Mode;
use crate::policy::{self, Facts, Verdict};
use crate::registry::{RegistryError, ToolEntry, registry};
use crate::scope::{self, Scoped};
use crate::two_step::{self, ApprovalStore, ApproveError, DEFAULT_APPROVAL_TTL, Lookup};

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
    inner: Arc<Inner>,
}

struct Inner {
    id: u64,
    mode: AtomicU8,
    /// Per registry slot, the verdict in each mode (indexed by `Mode as usize`).
    verdicts: Box<[[Verdict; 4]]>,
    /// Per registry slot, bit `mode` is set where the call runs outright: allowed, and no record to write.
    allowed_outright: Box<[u8]>,
    /// Per registry slot, the index of the first deny rule matching the tool.
    deny_rule_of: Box<[Option<u32>]>,
    deny_rules: Box<[Arc<str>]>,
    approver: Option<Box<dyn Approver>>,
    two_step: Option<Mutex<ApprovalStore>>,
    audit: Option<Arc<dyn AuditSink>>,
    agent: Option<Arc<str>>,
    calls: AtomicU64,
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
            two_step: None,
            audit: None,
            agent: None,
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
        self.inner.deny_rules.iter().map(|r| &**r)
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
        let before = Mode::from_index(self.inner.mode.fetch_min(to as u8, Ordering::AcqRel));
        if to > before {
            return Err(RaiseRefused {
                current: before,
                requested: to,
            });
        }
        if self.inner.audit.is_some() {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            let record = AuditRecord {
                message: Some(format!("mode lowered from {before} to {to} by {who}")),
                ..self.record(Stage::ModeLowered, Cow::Borrowed(""), to, call)
            };
            self.write_after_the_fact(&record);
        }
        Ok(())
    }

    /// Approves a two-step approval request: the call that was refused with this token (same tool, same
    /// arguments, same risk) may then run once, until the request expires.
    pub fn approve(&self, token: &str) -> Result<(), ApproveError> {
        let store = self
            .inner
            .two_step
            .as_ref()
            .ok_or(ApproveError::NotEnabled)?;
        let binding = lock(store).approve(token, Instant::now())?;
        if self.inner.audit.is_some() {
            let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
            // The digest the log shows for these arguments: the binding's own covers the real values
            // of redacted arguments, and a digest of a short secret gives the secret away.
            let record = AuditRecord {
                arguments_digest: Some(binding.shown_digest),
                effective_risk: Some(binding.risk),
                decision: Some(Decision::Approved),
                ..self.record(
                    Stage::ApprovalGranted,
                    Cow::Borrowed(binding.tool),
                    self.mode(),
                    call,
                )
            };
            self.write_after_the_fact(&record);
        }
        Ok(())
    }

    /// The agent label the gate was built with.
    pub fn agent(&self) -> Option<&str> {
        self.inner.agent.as_deref()
    }

    /// Runs `f` with this gate as the ambient gate of the current thread: the tools `f` calls are decided
    /// by it (and by every gate entered around it).
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let _entered = scope::enter(self.clone());
        f()
    }

    /// Wraps a future so that this gate is the ambient gate whenever it is polled, on whatever thread and
    /// executor polls it.
    pub fn scope<F: Future>(&self, future: F) -> Scoped<F> {
        Scoped::new(self.clone(), future)
    }

    /// What this gate would decide for the tool with `manifest`'s id in the current mode, before any
    /// approver is asked; `None` when no such tool is linked.
    pub fn verdict(&self, manifest: &ToolManifest) -> Option<Verdict> {
        let entry = registry().entry(manifest.id)?;
        Some(self.table_verdict(entry).1)
    }

    /// Whether the table allows `entry` outright in the current mode, with no record to write.
    #[inline]
    pub(crate) fn allows_unaudited(&self, entry: &'static ToolEntry) -> bool {
        let inner = &*self.inner;
        let mode = inner.mode.load(Ordering::Acquire) & 3;
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        matches!(inner.allowed_outright.get(slot), Some(bits) if bits >> mode & 1 == 1)
    }

    #[inline]
    pub(crate) fn table_verdict(&self, entry: &'static ToolEntry) -> (Mode, Verdict) {
        let inner = &*self.inner;
        let mode = Mode::from_index(inner.mode.load(Ordering::Acquire));
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        let verdict = match inner.verdicts.get(slot) {
            Some(row) => row[mode as usize],
            None => Verdict::Refuse(DenialCode::UnregisteredTool),
        };
        (mode, verdict)
    }

    #[cold]
    pub(crate) fn refusal(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        code: DenialCode,
    ) -> Denied {
        let manifest = &entry.manifest;
        let denied = Denied::new(code, manifest, manifest.risk_level, Some(mode));
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        // Deny trumps every other verdict, so a tool with a rule is refused DENY_LISTED: the rule is
        // the detail.
        match self.inner.deny_rule_of.get(slot).copied().flatten() {
            Some(rule) => denied.with_detail(self.inner.deny_rules[rule as usize].clone()),
            None => denied,
        }
    }

    /// The verdict for a call judged at `risk` in the current mode.
    fn verdict_at(&self, entry: &'static ToolEntry, risk: EffectiveRisk) -> (Mode, Verdict) {
        let mode = self.mode();
        (mode, self.verdict_in(entry, risk, mode))
    }

    /// The verdict for a call judged at `risk` in `mode`: the precomputed one at the declared risk,
    /// else worked out now.
    fn verdict_in(&self, entry: &'static ToolEntry, risk: EffectiveRisk, mode: Mode) -> Verdict {
        let manifest = &entry.manifest;
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        if risk.get() == manifest.risk_level {
            return match self.inner.verdicts.get(slot) {
                Some(row) => row[mode as usize],
                None => Verdict::Refuse(DenialCode::UnregisteredTool),
            };
        }
        let Some(rule) = self.inner.deny_rule_of.get(slot) else {
            return Verdict::Refuse(DenialCode::UnregisteredTool);
        };
        // NeedsApproval with no approval path is refused by `approval`, as the table does at build.
        policy::decide(Facts {
            risk: risk.get(),
            allowed_modes: manifest.allowed_modes,
            mode,
            deny_listed: rule.is_some(),
        })
    }

    /// The last word before a body runs: the gate's mode now, against a call it decided in `decided`.
    ///
    /// The mode may have been lowered since the decision, while an approver thought, an argument was
    /// serialized or a record was written; a call whose decision completes after `lower` returns must
    /// not run at the old mode. The mode only goes down, so an unchanged mode is the decision itself;
    /// a lower one lets the call run only if it is allowed there outright.
    pub(crate) fn recheck(
        &self,
        entry: &'static ToolEntry,
        decided: Mode,
        risk: EffectiveRisk,
    ) -> Result<(), Denied> {
        let now = self.mode();
        if now == decided {
            return Ok(());
        }
        let code = match self.verdict_in(entry, risk, now) {
            Verdict::Allow => return Ok(()),
            Verdict::Refuse(code) => code,
            Verdict::NeedsApproval => DenialCode::ApprovalRequired,
        };
        Err(self.refusal(entry, now, code).with_risk(risk.get()))
    }

    /// Decides one call in full: policy, then approval; records a refusal where the gate audits.
    #[cold]
    pub(crate) fn decide(
        &self,
        entry: &'static ToolEntry,
        risk: EffectiveRisk,
        arguments: &mut LazyArguments<'_>,
    ) -> Result<(Mode, Decision), Denied> {
        let result = match self.verdict_at(entry, risk) {
            (mode, Verdict::Allow) => Ok((mode, Decision::Allowed)),
            (mode, Verdict::Refuse(code)) => Err(self.refusal(entry, mode, code)),
            (mode, Verdict::NeedsApproval) => self.approval(entry, mode, risk, arguments),
        };
        result.map_err(|denied| {
            let denied = denied.with_risk(risk.get());
            self.record_refusal(entry, &denied, arguments);
            denied
        })
    }

    fn approval(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        risk: EffectiveRisk,
        arguments: &mut LazyArguments<'_>,
    ) -> Result<(Mode, Decision), Denied> {
        let manifest = &entry.manifest;
        let refused = |code| Denied::new(code, manifest, risk.get(), Some(mode));
        if let Some(approver) = self.inner.approver.as_deref() {
            let digest = arguments.get().map(|a| a.digest.as_str());
            let request = ApprovalRequest {
                tool: manifest,
                mode,
                risk: risk.get(),
                arguments_digest: digest,
            };
            let answer = catch_unwind(AssertUnwindSafe(|| approver.approve(&request)))
                .unwrap_or_else(|_| Approval::Reject("the approver panicked".to_owned()));
            return match answer {
                Approval::Reject(reason) if reason.trim().is_empty() => {
                    Err(refused(DenialCode::ApprovalRejected))
                }
                Approval::Reject(reason) => {
                    Err(refused(DenialCode::ApprovalRejected).with_detail(reason.into()))
                }
                // A mode lowered while the approver thought is caught by the re-check before the body.
                Approval::Approve => Ok((mode, Decision::Approved)),
            };
        }
        let Some(store) = &self.inner.two_step else {
            return Err(refused(DenialCode::ApprovalRequired));
        };
        let Some((digest, shown)) = arguments
            .get()
            .and_then(|a| Some((a.binding.clone()?, a.digest.clone())))
        else {
            return Err(refused(DenialCode::ApprovalRequired).with_detail(
                "a two-step approval is bound to the call's arguments (and a method's receiver), \
                 and this tool's are not serializable"
                    .into(),
            ));
        };
        let binding = two_step::binding(manifest.id, digest, shown, risk.get());
        match lock(store).lookup(binding, Instant::now()) {
            Lookup::Approved => Ok((mode, Decision::Approved)),
            Lookup::Refused(code, Some(token)) => Err(refused(code).with_approval_token(token)),
            Lookup::Refused(code, None) => Err(refused(code)),
        }
    }

    pub(crate) fn record_refusal(
        &self,
        entry: &'static ToolEntry,
        denied: &Denied,
        arguments: &mut LazyArguments<'_>,
    ) {
        if self.inner.audit.is_none() {
            return;
        }
        let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let mode = denied.mode().unwrap_or_else(|| self.mode());
        let record = AuditRecord {
            arguments_digest: arguments.get().map(|a| a.digest.clone()),
            code: Some(Cow::Borrowed(denied.code().as_str())),
            decision: Some(Decision::Refused),
            declared_risk: Some(entry.manifest.risk_level),
            effective_risk: Some(denied.risk()),
            message: Some(denied.to_string()),
            ..self.record(Stage::Refused, Cow::Borrowed(entry.manifest.id), mode, call)
        };
        self.write_after_the_fact(&record);
    }

    /// Writes the `enter` record of an allowed call; the body may run only if this succeeds.
    pub(crate) fn record_enter(
        &self,
        entry: &'static ToolEntry,
        mode: Mode,
        decision: Decision,
        risk: EffectiveRisk,
        call_info: &CallInfo<'_>,
        arguments: &mut LazyArguments<'_>,
    ) -> Result<Option<crate::permit::Exit>, Denied> {
        let Some(sink) = &self.inner.audit else {
            return Ok(None);
        };
        let manifest = &entry.manifest;
        let call = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let args = arguments.get();
        let record = AuditRecord {
            arguments: args
                .filter(|_| call_info.record_arguments)
                .map(|a| a.json.clone()),
            arguments_digest: args.map(|a| a.digest.clone()),
            decision: Some(decision),
            declared_risk: Some(manifest.risk_level),
            effective_risk: Some(risk.get()),
            ..self.record(Stage::Enter, Cow::Borrowed(manifest.id), mode, call)
        };
        match sink.record(&record) {
            Ok(()) => Ok(Some(crate::permit::Exit {
                gate: self.clone(),
                tool: manifest,
                call,
                started: Instant::now(),
                risk: risk.get(),
                mode,
                arguments_digest: record.arguments_digest,
            })),
            Err(error) => Err(Denied::new(
                DenialCode::AuditUnavailable,
                manifest,
                risk.get(),
                Some(mode),
            )
            .with_detail(error.to_string().into())),
        }
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
            manifest_digest: Cow::Borrowed(crate::report::manifest_digest()),
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

fn lock(store: &Mutex<ApprovalStore>) -> std::sync::MutexGuard<'_, ApprovalStore> {
    // A panic while holding the lock leaves the store consistent (every update is one assignment).
    store
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A call's arguments, written once at the first need.
pub(crate) struct LazyArguments<'a> {
    call: &'a CallInfo<'a>,
    written: Option<Option<Arguments>>,
}

impl<'a> LazyArguments<'a> {
    pub(crate) fn new(call: &'a CallInfo<'a>) -> LazyArguments<'a> {
        LazyArguments {
            call,
            written: None,
        }
    }

    pub(crate) fn get(&mut self) -> Option<&Arguments> {
        self.written
            .get_or_insert_with(|| self.call.arguments())
            .as_ref()
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
            .field("deny_rules", &self.inner.deny_rules)
            .field("approver", &self.inner.approver.is_some())
            .field("two_step", &self.inner.two_step.is_some())
            .field("audit", &self.inner.audit.is_some())
            .field("agent", &self.inner.agent)
            .finish()
    }
}

/// Configures a [`Gate`]: `Gate::builder().mode(..).deny(..).approver(..).build()`.
#[must_use]
pub struct GateBuilder {
    mode: Mode,
    deny: Vec<String>,
    approver: Option<Box<dyn Approver>>,
    two_step: Option<Duration>,
    audit: Option<Arc<dyn AuditSink>>,
    agent: Option<Arc<str>>,
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

    /// The approver of the calls whose risk needs one. Without one, those calls are refused.
    pub fn approver(mut self, approver: impl Approver) -> Self {
        self.approver = Some(Box::new(approver));
        self
    }

    /// Takes two-step approvals where no approver is set: a call that needs an approval is refused with
    /// `APPROVAL_REQUIRED` and a token ([`Denied::approval_token`]); after [`Gate::approve`] with that
    /// token, the same call with the same arguments runs once. Requests expire after
    /// [`DEFAULT_APPROVAL_TTL`](crate::DEFAULT_APPROVAL_TTL) (10 minutes).
    pub fn two_step_approvals(self) -> Self {
        self.approval_ttl(DEFAULT_APPROVAL_TTL)
    }

    /// [`GateBuilder::two_step_approvals`] with another expiry.
    pub fn approval_ttl(mut self, ttl: Duration) -> Self {
        self.two_step = Some(ttl);
        self
    }

    /// Records every decision in `sink`. An allowed call runs only once its `enter` record is written:
    /// when the sink fails, the call is refused with `AUDIT_UNAVAILABLE`.
    pub fn audit(mut self, sink: impl AuditSink) -> Self {
        self.audit = Some(Arc::new(sink));
        self
    }

    /// [`GateBuilder::audit`] with a sink shared with other gates or kept by the caller.
    pub fn audit_shared(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(sink);
        self
    }

    /// A label for the agent this gate decides for, written into every audit record.
    pub fn agent(mut self, label: impl Into<String>) -> Self {
        self.agent = Some(label.into().into());
        self
    }

    /// Builds the gate and works out every tool's verdict in every mode.
    ///
    /// Fails when linked tools share an id, or when a deny rule is not valid or matches no linked tool.
    pub fn build(self) -> Result<Gate, GateError> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let registry = registry();
        check_unique()?;
        let mut rules = Vec::with_capacity(self.deny.len());
        let mut errors = Vec::new();
        for pattern in &self.deny {
            match DenyRule::parse(pattern) {
                Ok(rule) if registry.entries.iter().any(|e| rule.matches(e.manifest.id)) => {
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
        let has_approval_path = self.approver.is_some() || self.two_step.is_some();
        let deny_rule_of: Box<[Option<u32>]> = registry
            .entries
            .iter()
            .map(|e| {
                let position = rules.iter().position(|r| r.matches(e.manifest.id))?;
                u32::try_from(position).ok()
            })
            .collect();
        let verdicts = registry
            .entries
            .iter()
            .zip(&deny_rule_of)
            .map(|(entry, rule)| {
                Mode::ALL.map(|mode| {
                    let manifest = &entry.manifest;
                    let verdict = policy::decide(Facts {
                        risk: manifest.risk_level,
                        allowed_modes: manifest.allowed_modes,
                        mode,
                        deny_listed: rule.is_some(),
                    });
                    match verdict {
                        Verdict::NeedsApproval if !has_approval_path => {
                            Verdict::Refuse(DenialCode::ApprovalRequired)
                        }
                        other => other,
                    }
                })
            })
            .collect();
        let verdicts: Box<[[Verdict; 4]]> = verdicts;
        let allowed_outright = verdicts
            .iter()
            .map(|row| {
                let outright = |mode: usize| row[mode] == Verdict::Allow && self.audit.is_none();
                (0..4).fold(0u8, |bits, mode| bits | u8::from(outright(mode)) << mode)
            })
            .collect();
        Ok(Gate {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                mode: AtomicU8::new(self.mode as u8),
                verdicts,
                allowed_outright,
                deny_rule_of,
                deny_rules: rules.iter().map(|r| Arc::from(r.as_str())).collect(),
                approver: self.approver,
                two_step: self.two_step.map(|ttl| Mutex::new(ApprovalStore::new(ttl))),
                audit: self.audit,
                agent: self.agent,
                calls: AtomicU64::new(1),
            }),
        })
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
            .field("two_step", &self.two_step)
            .field("audit", &self.audit.is_some())
            .field("agent", &self.agent)
            .finish()
    }
}

/// A gate could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateError {
    /// Linked tools share an id.
    Registry(RegistryError),
    /// Deny rules that are not valid or match no linked tool.
    DenyRules(Vec<DenyRuleError>),
    /// `TOOLGATE_MODE` does not name a mode.
    Mode(crate::policy::ModeEnvError),
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
        }
    }
}

impl std::error::Error for GateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GateError::Registry(error) => Some(error),
            GateError::DenyRules(errors) => errors.first().map(|e| e as _),
            GateError::Mode(error) => Some(error),
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
