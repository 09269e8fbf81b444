//! Why a call by name did not return the tool's result: one stable code per reason.

use std::fmt;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

use crate::gate::denied::{Denied, ceil_millis};
use crate::terminal::escaped;
use toolgate_policy::suggest::did_you_mean;

/// Why a call by name did not return the tool's result.
///
/// Its message (`Display`, and `message` when serialized) shows the caller's text, and the tool's
/// error, which may quote it, [`escaped`]: a tool name, an argument's key, a value or a parser's
/// message cannot hide, fake or reorder what a person reads in a transcript or a log.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CallError {
    /// `UNKNOWN_TOOL`: no linked tool has this id (ids are compared exactly).
    UnknownTool {
        /// The id asked for, as given (its message shows it escaped).
        id: String,
    },
    /// `NOT_CALLABLE`: the tool exists but is not declared `callable`, so it has no JSON interface.
    NotCallable {
        /// The tool's id.
        id: &'static str,
    },
    /// `NO_INSTANCE`: the tool is a method, and the call was given no instance of its type to run on
    /// (see `Instances`).
    NoInstance {
        /// The tool's id.
        id: &'static str,
        /// The type whose instance is needed.
        type_name: &'static str,
    },
    /// `INVALID_PARAMS`: the arguments are not an object of the tool's parameters: an unknown key, a
    /// missing one, or a value of the wrong type.
    InvalidParams {
        /// Where in the arguments the problem is (`.` for the arguments object itself); a key the
        /// caller wrote is [`escaped`].
        path: String,
        /// What is wrong, with the caller's text in it [`escaped`].
        message: String,
    },
    /// The gate refused the call; the body did not run. The code is the refusal's.
    Denied(Denied),
    /// `HANDLER_ERROR`: the tool ran and returned an error.
    HandlerError {
        /// The error's message, as the tool gave it (its message shows it escaped).
        message: String,
    },
    /// `OUTPUT_ERROR`: the tool's result could not be turned into JSON.
    OutputError {
        /// What went wrong, as the serializer said (its message shows it escaped).
        message: String,
    },
    /// `NO_ROLLBACK`: a rollback was asked of a record that keeps no plan to call: not an `enter`
    /// record, no `rollback` in it, a plan a person carries out, or one that cannot be read.
    NoRollback {
        /// Why, with the record's text in it [`escaped`].
        message: String,
    },
}

impl CallError {
    /// The stable code: `UNKNOWN_TOOL`, `NOT_CALLABLE`, `NO_INSTANCE`, `INVALID_PARAMS`,
    /// `HANDLER_ERROR`, `OUTPUT_ERROR`, `NO_ROLLBACK`, or the refusal's code.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. } => "UNKNOWN_TOOL",
            CallError::NotCallable { .. } => "NOT_CALLABLE",
            CallError::NoInstance { .. } => "NO_INSTANCE",
            CallError::InvalidParams { .. } => "INVALID_PARAMS",
            CallError::Denied(denied) => denied.code().as_str(),
            CallError::HandlerError { .. } => "HANDLER_ERROR",
            CallError::OutputError { .. } => "OUTPUT_ERROR",
            CallError::NoRollback { .. } => "NO_ROLLBACK",
        }
    }

    /// The refusal, where the gate refused.
    pub fn denied(&self) -> Option<&Denied> {
        match self {
            CallError::Denied(denied) => Some(denied),
            _ => None,
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::UnknownTool { id } => {
                let callable: Vec<&str> = crate::registry::manifests()
                    .map(|m| m.id)
                    .filter(|&id| {
                        crate::registry::registry()
                            .get(id)
                            .is_some_and(|t| t.is_callable())
                    })
                    .collect();
                write!(
                    f,
                    "no tool is named `{}`{}",
                    escaped(id),
                    did_you_mean(id, &callable)
                )
            }
            CallError::NotCallable { id } => {
                write!(
                    f,
                    "tool `{id}` is not declared `callable`, so it cannot be called by name"
                )
            }
            CallError::NoInstance { id, type_name } => write!(
                f,
                "tool `{id}` is a method of `{type_name}`, and this call has no instance of it to \
                 run on: give one to the registry or the server (`Instances::with`)"
            ),
            CallError::InvalidParams { path, message } => {
                write!(f, "invalid arguments at `{path}`: {message}")
            }
            CallError::Denied(denied) => denied.fmt(f),
            CallError::HandlerError { message } => f.write_str(&escaped(message)),
            CallError::NoRollback { message } => {
                write!(f, "there is no rollback plan to run: {message}")
            }
            CallError::OutputError { message } => {
                write!(f, "the tool's result is not JSON: {}", escaped(message))
            }
        }
    }
}

impl std::error::Error for CallError {}

impl Serialize for CallError {
    /// `{"code", "message"}`, with `path` for `INVALID_PARAMS` and `retry_after_ms` for a refusal
    /// that says when to retry (`BUDGET_EXHAUSTED`).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let path = match self {
            CallError::InvalidParams { path, .. } => Some(path),
            _ => None,
        };
        let retry = self.denied().and_then(Denied::retry_after);
        let fields = 2 + usize::from(path.is_some()) + usize::from(retry.is_some());
        let mut s = serializer.serialize_struct("CallError", fields)?;
        s.serialize_field("code", self.code())?;
        s.serialize_field("message", &self.to_string())?;
        if let Some(path) = path {
            s.serialize_field("path", path)?;
        }
        if let Some(after) = retry {
            s.serialize_field("retry_after_ms", &ceil_millis(after))?;
        }
        s.end()
    }
}
