//! Why a gate could not be built, and why a raise of its mode was refused.

use std::fmt;
use std::time::Duration;

use crate::approval::two_step::MAX_APPROVAL_TTL;
use crate::gate::budget::BudgetError;
use crate::gate::denylist::DenyRuleError;
use crate::registry::RegistryError;
use toolgate_policy::Mode;

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

/// [`Gate::lower`](crate::Gate::lower) was asked for a higher mode than the gate's; the mode did not change.
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
