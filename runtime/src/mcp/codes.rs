//! The codes of the refusals and errors that only an MCP server gives, beside the gate's
//! [`DenialCode`]s: each written here once, and nowhere else as a literal.

use std::fmt;

use toolgate_policy::DenialCode;

/// A code an MCP server answers with, in a refusal's `{"code", "message"}` or a JSON-RPC error's
/// data: one of the gate's [`DenialCode`]s, or one that only the server's own protocol has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum McpCode {
    /// The gate's refusal, with its code.
    Denied(DenialCode),
    /// A retry's request state that fails its integrity check: forged, altered, sealed by another
    /// key or for another caller (a JSON-RPC error, `-32602`).
    ApprovalStateInvalid,
    /// A task-augmented call beyond the server's limit of live tasks.
    TooManyTasks,
    /// A tool of the handler's router that no toolgate declaration covers.
    UndeclaredTool,
    /// A name that is no tool of the server (a JSON-RPC error, `-32602`).
    UnknownTool,
    /// A task id that is none of the caller's tasks (a JSON-RPC error, `-32602`).
    UnknownTask,
    /// An answer to an approval's form that the server cannot read.
    UnsupportedResponse,
    /// A call cancelled by its client.
    Cancelled,
    /// A message longer than the server's limit (a JSON-RPC error, `-32600`).
    MessageTooLarge,
    /// A resource URI or prompt name that holds a character a reader cannot see or that reorders
    /// text (a URI: a blank too), refused before the handler reads it.
    UnreadableName,
}

impl McpCode {
    /// The code as it is written on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            McpCode::Denied(code) => code.as_str(),
            McpCode::ApprovalStateInvalid => "APPROVAL_STATE_INVALID",
            McpCode::TooManyTasks => "TOO_MANY_TASKS",
            McpCode::UndeclaredTool => "UNDECLARED_TOOL",
            McpCode::UnknownTool => "UNKNOWN_TOOL",
            McpCode::UnknownTask => "UNKNOWN_TASK",
            McpCode::UnsupportedResponse => "UNSUPPORTED_RESPONSE",
            McpCode::Cancelled => "CANCELLED",
            McpCode::MessageTooLarge => "MESSAGE_TOO_LARGE",
            McpCode::UnreadableName => "UNREADABLE_NAME",
        }
    }
}

impl fmt::Display for McpCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for McpCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl From<DenialCode> for McpCode {
    fn from(code: DenialCode) -> McpCode {
        McpCode::Denied(code)
    }
}

#[cfg(test)]
mod tests {
    use super::McpCode;
    use toolgate_policy::DenialCode;

    #[test]
    fn the_server_s_own_codes_are_distinct_and_none_is_a_denial_code() {
        let own = [
            McpCode::ApprovalStateInvalid,
            McpCode::TooManyTasks,
            McpCode::UndeclaredTool,
            McpCode::UnknownTool,
            McpCode::UnknownTask,
            McpCode::UnsupportedResponse,
            McpCode::Cancelled,
            McpCode::MessageTooLarge,
            McpCode::UnreadableName,
        ];
        let mut written: Vec<&str> = own.iter().map(|c| c.as_str()).collect();
        written.sort_unstable();
        written.dedup();
        assert_eq!(
            written.len(),
            own.len(),
            "two of the server's codes are written alike"
        );
        for code in DenialCode::ALL {
            assert!(
                !written.contains(&code.as_str()),
                "{code:?} is written as one of the server's own codes"
            );
            assert_eq!(McpCode::from(code).as_str(), code.as_str());
        }
        for code in own {
            assert!(
                code.as_str()
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b == b'_'),
                "{code} is not written as the other codes are"
            );
        }
    }
}
