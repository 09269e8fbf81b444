//! The gate: built once with a mode, a deny list and an approver; decides every call of every tool.
//!
//! Building a gate works out each tool's verdict in each mode ([`policy::decide`]) into a table indexed by
//! the tool's registry slot. Deciding a call then reads the mode and one table cell: no allocation, no
//! hashing, no lock. Only a call that needs an approval, or is refused, leaves that path.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crate::approval::{Approval, ApprovalRequest, Approver};
use crate::denied::{DenialCode, Denied};
use crate::denylist::{DenyRule, DenyRuleError};
use crate::manifest::ToolManifest;
use crate::mode::Mode;
use crate::policy::{self, Facts, Verdict};
use crate::registry::{RegistryError, ToolEntry, registry};
use crate::scope::{self, Scoped};

/// Decides every call of every `#[tool]`.
///
/// Cloning a gate is cheap and every clone is the same gate: lowering the mode of one lowers it for all,
/// on every thread at once. The mode can be lowered and never raised.
///
/// ```
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
    /// Per registry slot, the index of the first deny rule matching the tool.
    deny_rule_of: Box<[Option<u32>]>,
    deny_rules: Box<[Arc<str>]>,
    approver: Option<Box<dyn Approver>>,
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
        let before = Mode::from_index(self.inner.mode.fetch_min(to as u8, Ordering::AcqRel));
        if to > before {
            Err(RaiseRefused {
                current: before,
                requested: to,
            })
        } else {
            Ok(())
        }
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
        let entries = &registry().entries;
        let slot = entries.partition_point(|e| e.manifest.id < manifest.id);
        let entry = entries.get(slot).filter(|e| e.manifest.id == manifest.id)?;
        Some(self.table_verdict(entry).1)
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
        let rule = self.inner.deny_rule_of.get(slot).copied().flatten();
        match rule {
            Some(rule) if code == DenialCode::DenyListed => {
                denied.with_detail(self.inner.deny_rules[rule as usize].clone())
            }
            _ => denied,
        }
    }

    /// Asks the approver about a call the table says needs one, then decides again: the mode may have been
    /// lowered while the approver thought.
    #[cold]
    pub(crate) fn approve(
        &self,
        entry: &'static ToolEntry,
        arguments_digest: Option<&str>,
    ) -> Result<(), Denied> {
        let manifest = &entry.manifest;
        let (mode, verdict) = self.table_verdict(entry);
        match verdict {
            Verdict::Allow => return Ok(()),
            Verdict::Refuse(code) => return Err(self.refusal(entry, mode, code)),
            Verdict::NeedsApproval => {}
        }
        let Some(approver) = self.inner.approver.as_deref() else {
            return Err(self.refusal(entry, mode, DenialCode::ApprovalRequired));
        };
        let request = ApprovalRequest {
            tool: manifest,
            mode,
            risk: manifest.risk_level,
            arguments_digest,
        };
        let answer = catch_unwind(AssertUnwindSafe(|| approver.approve(&request)))
            .unwrap_or_else(|_| Approval::Reject("the approver panicked".to_owned()));
        match answer {
            Approval::Reject(reason) => Err(Denied::new(
                DenialCode::ApprovalRejected,
                manifest,
                manifest.risk_level,
                Some(mode),
            )
            .with_detail(reason.into())),
            Approval::Approve => match self.table_verdict(entry) {
                (_, Verdict::NeedsApproval | Verdict::Allow) => Ok(()),
                (mode, Verdict::Refuse(code)) => Err(self.refusal(entry, mode, code)),
            },
        }
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("id", &self.inner.id)
            .field("mode", &self.mode())
            .field("deny_rules", &self.inner.deny_rules)
            .field("approver", &self.inner.approver.is_some())
            .finish()
    }
}

/// Configures a [`Gate`]: `Gate::builder().mode(..).deny(..).approver(..).build()`.
#[must_use]
pub struct GateBuilder {
    mode: Mode,
    deny: Vec<String>,
    approver: Option<Box<dyn Approver>>,
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
        let has_approver = self.approver.is_some();
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
                        Verdict::NeedsApproval if !has_approver => {
                            Verdict::Refuse(DenialCode::ApprovalRequired)
                        }
                        other => other,
                    }
                })
            })
            .collect();
        Ok(Gate {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                mode: AtomicU8::new(self.mode as u8),
                verdicts,
                deny_rule_of,
                deny_rules: rules.iter().map(|r| Arc::from(r.as_str())).collect(),
                approver: self.approver,
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
    Mode(crate::mode::ModeEnvError),
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
