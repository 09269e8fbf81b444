//! Building a gate: [`GateBuilder`], its checks, and the constructors of [`Gate`].

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::approval::store::ApprovalStore;
use crate::approval::two_step::{DEFAULT_APPROVAL_TTL, MemoryStore};
use crate::approval::{AnyApprover, Approver, AsyncApprover};
use crate::audit::AuditSink;
use crate::gate::budget::{self, BudgetScope, BudgetSpec, BudgetStore, Budgets};
use crate::gate::compile::{TableInputs, verdict_cell};
use crate::gate::denylist::{DenyRule, DenyRuleError};
use crate::gate::error::GateError;
use crate::gate::narrowing::Narrowing;
use crate::gate::{Approvals, Gate, Inner, Latch, ModeParts, grants};
use crate::registry::registry;
use toolgate_policy::{Mode, TaintPolicy};

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
            principal: self.principal.clone(),
            session: session_name(),
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

/// A name for a new gate's session, unique across processes: the key under which the rules over
/// history per session keep its calls.
fn session_name() -> Arc<str> {
    let bytes = crate::gate::budget::Reservation::next().to_bytes();
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .into()
}
