//! The typed refusal every gated path returns.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

use crate::registry::ToolManifest;
use toolgate_policy::{self as policy, DenialCode, Mode, ModeSet, Risk};

/// A call the gate refused; the tool's body did not run.
///
/// Tools return it through their own error type (`E: From<Denied>`). Building one does not allocate: the
/// message is written when it is displayed or serialized. It serializes as
/// `{"code", "message", "tool", "risk_level", "mode"}`, and `"retry_after_ms"` where the refusal says
/// when the call may be retried ([`Denied::retry_after`]).
#[derive(Clone)]
pub struct Denied {
    code: DenialCode,
    tool: &'static ToolManifest,
    risk: Risk,
    mode: Option<Mode>,
    /// What only some refusals carry, behind one pointer so that a refusal stays small to return.
    extra: Option<Box<Extra>>,
}

#[derive(Clone, Default)]
struct Extra {
    detail: Option<Arc<str>>,
    approval_token: Option<Arc<str>>,
    approval_request_id: Option<Arc<str>>,
    /// Who rejected the call, for the audit record.
    by: Option<Arc<str>>,
    retry_after: Option<Duration>,
    /// Refused at the declared risk before the arguments were read, for a tool whose arguments may
    /// raise its risk (`escalate`): the modes the message names are those of the declared risk.
    unread_escalation: bool,
    /// The arguments of a pending request as the log writes them (redacted ones hidden).
    arguments: Option<Arc<str>>,
    /// What a pending request of a tool with lasting effects shows its operator.
    target: Option<Arc<str>>,
    evidence: Option<Arc<str>>,
    rollback: Option<Arc<crate::approval::effects::Rollback>>,
}

impl Denied {
    pub(crate) fn new(
        code: DenialCode,
        tool: &'static ToolManifest,
        risk: Risk,
        mode: Option<Mode>,
    ) -> Denied {
        Denied {
            code,
            tool,
            risk,
            mode,
            extra: None,
        }
    }

    fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    pub(crate) fn with_by(mut self, by: &str) -> Denied {
        self.extra().by = Some(by.into());
        self
    }

    pub(crate) fn by(&self) -> Option<&str> {
        self.extra.as_ref()?.by.as_deref()
    }

    pub(crate) fn with_approval_token(mut self, token: Arc<str>) -> Denied {
        self.extra().approval_token = Some(token);
        self
    }

    /// Adds the arguments a pending request shows its operator, as the log writes them.
    pub(crate) fn with_arguments(mut self, arguments: Arc<str>) -> Denied {
        self.extra().arguments = Some(arguments);
        self
    }

    /// The arguments of the call a pending request is for, as the audit log writes them (redacted
    /// ones `"[REDACTED]"`): what its operator is shown. `None` for any other refusal.
    pub fn arguments(&self) -> Option<&str> {
        self.extra.as_ref()?.arguments.as_deref()
    }

    pub(crate) fn with_approval_request_id(mut self, id: Arc<str>) -> Denied {
        self.extra().approval_request_id = Some(id);
        self
    }

    /// Adds what the operator of a pending request is shown of a tool with lasting effects.
    pub(crate) fn with_effects(
        mut self,
        target: Option<&str>,
        evidence: Option<&str>,
        rollback: Option<&crate::approval::effects::Rollback>,
    ) -> Denied {
        if target.is_none() && evidence.is_none() && rollback.is_none() {
            return self;
        }
        let extra = self.extra();
        extra.target = target.map(Arc::from);
        extra.evidence = evidence.map(Arc::from);
        extra.rollback = rollback.map(|plan| Arc::new(plan.clone()));
        self
    }

    /// The target of the call, as it is typed back to confirm it, on a refusal whose request waits
    /// for an operator (`APPROVAL_PENDING`, `EVIDENCE_CHANGED`) of a tool that names one.
    pub fn target(&self) -> Option<&str> {
        self.extra.as_ref()?.target.as_deref()
    }

    /// What the tool's `evidence` probe read of the target when the request was filed, as canonical
    /// JSON: the state the operator approves the call for.
    pub fn evidence(&self) -> Option<&str> {
        self.extra.as_ref()?.evidence.as_deref()
    }

    /// How the call would be undone, for a tool that declares `rollback`, on a refusal whose request
    /// waits for an operator.
    pub fn rollback(&self) -> Option<&crate::approval::effects::Rollback> {
        self.extra.as_ref()?.rollback.as_deref()
    }

    /// Marks a refusal made before the arguments of a tool that escalates were read.
    pub(crate) fn before_escalation(mut self) -> Denied {
        self.extra().unread_escalation = true;
        self
    }

    fn unread_escalation(&self) -> bool {
        self.extra.as_ref().is_some_and(|e| e.unread_escalation)
    }

    pub(crate) fn with_retry_after(mut self, after: Duration) -> Denied {
        self.extra().retry_after = Some(after);
        self
    }

    pub(crate) fn with_risk(mut self, risk: Risk) -> Denied {
        self.risk = risk;
        self
    }

    pub(crate) fn with_detail(mut self, detail: Arc<str>) -> Denied {
        self.extra().detail = Some(detail);
        self
    }

    /// The reason, as a stable code.
    pub fn code(&self) -> DenialCode {
        self.code
    }

    /// The refused tool's manifest.
    pub fn tool(&self) -> &'static ToolManifest {
        self.tool
    }

    /// The risk the call was judged at: the declared risk, or higher where the arguments escalated it.
    pub fn risk(&self) -> Risk {
        self.risk
    }

    /// The gate's mode at the decision; `None` when there was no gate.
    pub fn mode(&self) -> Option<Mode> {
        self.mode
    }

    /// The matching deny rule, or the approver's reason, where the code has one.
    pub fn detail(&self) -> Option<&str> {
        self.extra.as_ref()?.detail.as_deref()
    }

    /// The token an operator passes to [`Gate::approve`](crate::Gate::approve) to let this exact call run
    /// once, when the gate takes two-step approvals.
    ///
    /// It is for the operator only: it is not part of the message nor of the JSON, so an error that
    /// reaches the agent does not carry it.
    pub fn approval_token(&self) -> Option<&str> {
        self.extra.as_ref()?.approval_token.as_deref()
    }

    /// The id by which an operator answers the pending request of this call in the approval store's
    /// own channel (`toolgate approvals approve ID` with `PostgresStore`), where the store names its
    /// requests; `None` with the in-memory store, whose requests are answered by token.
    ///
    /// Unlike the token it is not a secret (answering by id takes the operator's access to the store):
    /// the message names it, so that the agent can say which request waits.
    pub fn approval_request_id(&self) -> Option<&str> {
        self.extra.as_ref()?.approval_request_id.as_deref()
    }

    /// How long from the refusal until the same call may be allowed again, where that is known: a call
    /// over a budget (`BUDGET_EXHAUSTED`) may be retried once the oldest call counted in the window is
    /// older than the window. `None` for every other refusal.
    pub fn retry_after(&self) -> Option<Duration> {
        self.extra.as_ref()?.retry_after
    }

    /// The human-readable message: the tool, its risk, the mode and what would be needed.
    pub fn message(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (id, risk) = (self.tool.id, self.risk);
        let mode = self.mode.map_or("none", Mode::as_str);
        let detail = self.detail().unwrap_or("no reason given");
        let subject = Subject(self);
        match self.code {
            DenialCode::NoGate => write!(
                f,
                "tool `{id}` ({risk}) was called outside any gate; call it inside `Gate::run` or \
                 `Gate::scope`, or pass a `&Gate` (a spawned thread or task does not inherit the gate \
                 of the code that spawned it: enter the gate inside it, or wrap its future in \
                 `gate.scope(..)`)"
            ),
            DenialCode::DenyListed => write!(
                f,
                "tool `{id}` ({risk}) is on the deny list (rule `{detail}`); no mode or approval lifts it"
            ),
            DenialCode::ModeNotAllowed | DenialCode::AboveCeiling
                if risk != self.tool.risk_level =>
            {
                let declared = self.tool.risk_level;
                let runs_in = runs_in(self.tool.allowed_modes, risk);
                let why = match self.code {
                    DenialCode::ModeNotAllowed => format!("is not allowed in mode {mode}"),
                    _ => format!(
                        "is above the ceiling of mode {mode} ({})",
                        self.mode.map(policy::ceiling).unwrap_or(Risk::ReadOnly)
                    ),
                };
                write!(
                    f,
                    "tool `{id}` (declared {declared}, raised to {risk} by its arguments) {why}; "
                )?;
                if runs_in.is_empty() {
                    write!(f, "at {risk} it runs in no mode")
                } else if policy::requires_approval(risk) {
                    write!(f, "at {risk} it runs in {runs_in}, with an approval")
                } else {
                    write!(f, "at {risk} it runs in {runs_in}")
                }
            }
            DenialCode::ModeNotAllowed => {
                write!(f, "tool `{id}` ({risk}) is not allowed in mode {mode}; ")?;
                let allowed = self.tool.allowed_modes;
                let at = if self.unread_escalation() {
                    "at its declared risk "
                } else {
                    ""
                };
                if allowed.is_empty() {
                    f.write_str("it is allowed in no mode")
                } else {
                    write!(f, "{at}it is allowed in {allowed}")?;
                    self.may_escalate(f)
                }
            }
            DenialCode::AboveCeiling => {
                let ceiling = self.mode.map(policy::ceiling).unwrap_or(Risk::ReadOnly);
                let needed = policy::lowest_mode_admitting(risk);
                write!(
                    f,
                    "tool `{id}` ({risk}) is above the ceiling of mode {mode} ({ceiling}); "
                )?;
                if self.unread_escalation() {
                    write!(f, "at its declared risk it needs {needed}")?;
                    self.may_escalate(f)
                } else {
                    write!(f, "it needs {needed}")
                }
            }
            DenialCode::ApprovalPending => {
                write!(f, "{subject} needs an approval in mode {mode}")?;
                if let Some(why) = self.detail() {
                    write!(f, " ({why})")?;
                }
                match self.approval_request_id() {
                    Some(request) => write!(
                        f,
                        ": the call is pending as request {request} until an operator approves it; \
                         then the same call, with the same arguments, runs once"
                    ),
                    None => f.write_str(
                        ": the call is pending until an operator approves it with its token, which \
                         the application holds (it is not in this message); then the same call, \
                         with the same arguments, runs once",
                    ),
                }
            }
            DenialCode::ApprovalRequired => match self.detail() {
                Some(why) => write!(f, "{subject} needs an approval in mode {mode}: {why}"),
                None => write!(
                    f,
                    "{subject} needs an approval in mode {mode} and the gate has no approver"
                ),
            },
            DenialCode::AuditUnavailable => write!(
                f,
                "{subject} did not run: the audit log could not record the call ({detail})"
            ),
            DenialCode::ApprovalExpired => write!(
                f,
                "{subject}: the approval of this call expired; ask for a new one"
            ),
            DenialCode::ApprovalMismatch => write!(
                f,
                "{subject}: the pending approval is for other arguments; this call needs \
                 its own approval"
            ),
            DenialCode::ApprovalReused => write!(
                f,
                "{subject}: the approval of this call was already used; an approval runs a \
                 call once"
            ),
            DenialCode::ApprovalRejected => {
                write!(f, "{subject} was not approved in mode {mode}: {detail}")
            }
            DenialCode::ApprovalStoreUnavailable => write!(
                f,
                "{subject} did not run: it needs an approval in mode {mode}, and the \
                 approval store failed ({detail}); retry when it is back"
            ),
            DenialCode::BudgetExhausted => {
                write!(
                    f,
                    "tool `{id}` ({risk}) is over the gate's budget of {detail}"
                )?;
                match self.retry_after() {
                    Some(after) => write!(f, "; retry in {} s", Seconds(after)),
                    None => Ok(()),
                }
            }
            DenialCode::BudgetStoreUnavailable => write!(
                f,
                "tool `{id}` ({risk}) did not run: it is counted by a budget, and the budget store \
                 failed ({detail}); retry when it is back"
            ),
            DenialCode::TaintedSession => write!(
                f,
                "tool `{id}` ({risk}) is refused in mode {mode}: {detail}; this gate refuses every \
                 call that writes for the rest of its session"
            ),
            DenialCode::UnregisteredTool => write!(
                f,
                "tool `{id}` ({risk}) is not in the registry the gate was built from"
            ),
            DenialCode::ArgumentRefused => write!(
                f,
                "tool `{id}` ({risk}) is refused for its arguments by the operator's policy: {detail}"
            ),
            DenialCode::TargetNotSingle => write!(
                f,
                "{subject} is irreversible and acts on one target at a time: {detail}; call it once \
                 per target, naming it exactly"
            ),
            DenialCode::RollbackUnavailable => write!(
                f,
                "{subject} did not run: no rollback plan could be made for this call ({detail})"
            ),
            DenialCode::EvidenceUnavailable => write!(
                f,
                "{subject} did not run: its evidence probe of the target failed ({detail})"
            ),
            DenialCode::EvidenceChanged => write!(
                f,
                "{subject} did not run: its target changed after the call was approved ({detail}); \
                 the approval was for the state the approver saw: ask again"
            ),
            DenialCode::ConfirmationMismatch => write!(
                f,
                "{subject} did not run: it is irreversible, and its approval does not carry its \
                 target typed back by whoever approved it ({detail})"
            ),
            DenialCode::HistoryRefused => {
                write!(
                    f,
                    "tool `{id}` ({risk}) is refused by the operator's policy for the calls before \
                     it: {detail}"
                )?;
                match self.retry_after() {
                    Some(after) => write!(f, "; retry in {} s", Seconds(after)),
                    None => Ok(()),
                }
            }
            // A code of a newer policy than this runtime knows.
            code => write!(f, "tool `{id}` ({risk}) was refused in mode {mode}: {code}"),
        }
    }
}

impl Denied {
    /// The end of a mode refusal made before the arguments of a tool that escalates were read.
    fn may_escalate(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.unread_escalation() {
            f.write_str(", and its arguments may raise its risk above that")
        } else {
            Ok(())
        }
    }
}

/// The tool and the risk a call is judged at, as an approval's message names them: where its arguments
/// raised the risk, the declared one too, so that an operator and the agent read why it asks.
struct Subject<'a>(&'a Denied);

impl fmt::Display for Subject<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (id, risk, declared) = (self.0.tool.id, self.0.risk, self.0.tool.risk_level);
        if risk == declared {
            write!(f, "tool `{id}` ({risk})")
        } else {
            write!(
                f,
                "tool `{id}` (declared {declared}, raised to {risk} by its arguments)"
            )
        }
    }
}

/// A tool may return `Result<T, String>`: a refusal becomes its message.
impl From<Denied> for String {
    fn from(denied: Denied) -> String {
        denied.to_string()
    }
}

impl fmt::Debug for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Denied")
            .field("code", &self.code)
            .field("tool", &self.tool.id)
            .field("risk", &self.risk)
            .field("mode", &self.mode)
            .field("message", &self.to_string())
            .finish()
    }
}

impl std::error::Error for Denied {}

impl Serialize for Denied {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let retry = self.retry_after();
        let mut s = serializer.serialize_struct("Denied", 5 + usize::from(retry.is_some()))?;
        s.serialize_field("code", &self.code)?;
        s.serialize_field("message", &self.to_string())?;
        s.serialize_field("tool", self.tool.id)?;
        s.serialize_field("risk_level", &self.risk)?;
        s.serialize_field("mode", &self.mode)?;
        if let Some(after) = retry {
            s.serialize_field("retry_after_ms", &ceil_millis(after))?;
        }
        s.end()
    }
}

/// Lets tools that return `std::io::Result` be gated: the refusal becomes a `PermissionDenied` error whose
/// inner error is the [`Denied`] (`err.get_ref()` and `downcast_ref::<Denied>()` give it back).
impl From<Denied> for std::io::Error {
    fn from(denied: Denied) -> Self {
        std::io::Error::new(std::io::ErrorKind::PermissionDenied, denied)
    }
}

/// Whole milliseconds, rounded up: a call retried after them is not early.
pub(crate) fn ceil_millis(after: Duration) -> u64 {
    u64::try_from(after.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// A duration as seconds with three decimals, rounded up like [`ceil_millis`].
struct Seconds(Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = ceil_millis(self.0);
        write!(f, "{}.{:03}", millis / 1000, millis % 1000)
    }
}

/// The modes that run a call of `risk`: those the manifest allows whose ceiling admits it.
fn runs_in(allowed: ModeSet, risk: Risk) -> ModeSet {
    Mode::ALL
        .into_iter()
        .filter(|&mode| allowed.contains(mode) && policy::admits(mode, risk))
        .fold(ModeSet::EMPTY, ModeSet::with)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Source;

    fn manifest(risk: Risk, modes: &[Mode]) -> &'static ToolManifest {
        Box::leak(Box::new(ToolManifest::__new(
            "host.run",
            Some("host"),
            "Run a command.",
            risk,
            true,
            ModeSet::of(modes),
            false,
            false,
            Source::__new("here.rs", 1, "here"),
        )))
    }

    fn message(code: DenialCode, tool: &'static ToolManifest, risk: Risk, mode: Mode) -> String {
        Denied::new(code, tool, risk, Some(mode)).to_string()
    }

    #[test]
    fn a_raised_risk_is_named_with_the_modes_that_would_run_the_call() {
        use Mode::*;
        let read = manifest(Risk::ReadOnly, &Mode::ALL);
        assert_eq!(
            message(DenialCode::AboveCeiling, read, Risk::LowWrite, Advisory),
            "tool `host.run` (declared READ_ONLY, raised to LOW_WRITE by its arguments) is above the \
             ceiling of mode ADVISORY (PROPOSE_ONLY); at LOW_WRITE it runs in PARTIAL_AUTO, FULL_AUTO"
        );
        // Its allowed modes admit none at the raised risk.
        let partial_only = manifest(Risk::LowWrite, &[PartialAuto]);
        assert_eq!(
            message(
                DenialCode::AboveCeiling,
                partial_only,
                Risk::HighWrite,
                PartialAuto
            ),
            "tool `host.run` (declared LOW_WRITE, raised to HIGH_WRITE by its arguments) is above the \
             ceiling of mode PARTIAL_AUTO (LOW_WRITE); at HIGH_WRITE it runs in no mode"
        );
        let write = manifest(Risk::LowWrite, &[PartialAuto, FullAuto]);
        assert_eq!(
            message(DenialCode::ModeNotAllowed, write, Risk::HighWrite, Shadow),
            "tool `host.run` (declared LOW_WRITE, raised to HIGH_WRITE by its arguments) is not \
             allowed in mode SHADOW; at HIGH_WRITE it runs in FULL_AUTO, with an approval"
        );
        // Not raised: the message of the declared risk, as ever.
        assert_eq!(
            message(DenialCode::ModeNotAllowed, write, Risk::LowWrite, Shadow),
            "tool `host.run` (LOW_WRITE) is not allowed in mode SHADOW; it is allowed in \
             PARTIAL_AUTO, FULL_AUTO"
        );
    }

    #[test]
    fn a_pending_two_step_approval_says_what_the_operator_does_and_claims_nothing_else() {
        let tool = manifest(Risk::HighWrite, &[Mode::FullAuto]);
        let denied = Denied::new(
            DenialCode::ApprovalPending,
            tool,
            Risk::HighWrite,
            Some(Mode::FullAuto),
        )
        .with_approval_token(Arc::from("tok-123"));
        let text = denied.to_string();
        assert_eq!(
            text,
            "tool `host.run` (HIGH_WRITE) needs an approval in mode FULL_AUTO: the call is pending \
             until an operator approves it with its token, which the application holds (it is not in \
             this message); then the same call, with the same arguments, runs once"
        );
        assert!(!text.contains("tok-123") && !text.contains("has been asked"));
    }
}
