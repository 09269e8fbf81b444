//! Approvals over MCP: out of band (the refusal goes back to the agent, the pending request to an
//! operator) or in band (an elicitation form the client's user answers, bound to the call by an HMAC
//! request state).

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    InputRequest, InputRequests, InputRequiredResult, InputResponses, RequestStateCodec,
    RequestStateError, SealOptions,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::codes::McpCode;
use crate::approval::Taint;
use crate::approval::store::Answer;
use crate::canonical;
use crate::gate::denied::Denied;
use crate::registry::Tool;
use toolgate_policy::{DenialCode, Risk};

/// The key of the approval form in an `InputRequiredResult`'s `inputRequests`, and of its answer in
/// the retry's `inputResponses`.
pub const APPROVAL_INPUT: &str = "toolgate/approval";

/// How long an in-band request state lives by default: 10 minutes, the gate's default approval time
/// to live.
pub const DEFAULT_STATE_TTL: Duration = Duration::from_secs(10 * 60);

/// How a [`ToolgateServer`](super::ToolgateServer) answers a call that needs an approval.
///
/// Either way the gate decides: its two-step approvals
/// ([`GateBuilder::two_step_approvals`](crate::gate::builder::GateBuilder::two_step_approvals), or an
/// approval store) bind an approval to the exact call, and the call runs once.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Approvals {
    /// The call is refused (`APPROVAL_PENDING`, with the text the agent reads), and
    /// the pending request waits in the gate's approval store for an operator: `toolgate approvals
    /// approve` with the PostgreSQL store, [`Gate::approve`](crate::Gate::approve) with the token that
    /// [`ToolgateServer::on_pending`](super::ToolgateServer::on_pending) hands over. The agent calls
    /// again once it is approved. The default.
    #[default]
    OutOfBand,
    /// The call answers `InputRequired` with an elicitation form that the client shows its user; the
    /// client retries with the answer. Trusts the client's user interface: whoever controls the client
    /// approves. Falls back to [`Approvals::OutOfBand`] for clients of protocol revisions before
    /// `2026-07-28`, which cannot answer `InputRequired`, and for every call of an `irreversible`
    /// tool or one declared `out_of_band`, and every call the operator's policy file keeps for an
    /// operator (`out_of_band`, `out_of_band_at` at the call's effective risk, in the policy the
    /// caller's gate follows when the call comes): an answer from whoever drives the client (possibly
    /// the agent itself) confirms a call, it does not authorize one that cannot be undone or that its
    /// tool or the operator keeps for an operator, so such a call always waits for an operator, and a
    /// request state sent with it is refused.
    InBand(InBand),
}

impl fmt::Debug for Approvals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Approvals::OutOfBand => f.write_str("OutOfBand"),
            Approvals::InBand(in_band) => f.debug_tuple("InBand").field(in_band).finish(),
        }
    }
}

/// In-band approvals: the key that seals request states, and how long one lives.
///
/// A request state is sealed with HMAC-SHA256 (rmcp's `RequestStateCodec`), bound to the MCP
/// session (and the gate's agent label), and carries the tool, the SHA-256 of the call's arguments
/// and the pending request's token. Every process that serves the same clients behind one address
/// needs the same key. The state is signed, not encrypted: the client can read the token it carries,
/// which lets it answer only the one call it is bound to, and the client answers that call anyway.
#[derive(Clone)]
pub struct InBand {
    codec: Arc<RequestStateCodec>,
    ttl: Duration,
}

impl fmt::Debug for InBand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InBand")
            .field("key", &"<redacted>")
            .field("ttl", &self.ttl)
            .finish()
    }
}

/// The key given to [`InBand::new`] is shorter than 32 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTooShort {
    /// Its length in bytes.
    pub length: usize,
}

impl fmt::Display for KeyTooShort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "an in-band approval key needs at least 32 bytes, this one has {}",
            self.length
        )
    }
}

impl std::error::Error for KeyTooShort {}

impl InBand {
    /// In-band approvals whose request states are sealed with `key` (at least 32 bytes of secret
    /// random data, the same in every process that serves the same clients).
    pub fn new(key: impl Into<Vec<u8>>) -> Result<InBand, KeyTooShort> {
        let key = key.into();
        let length = key.len();
        let codec = RequestStateCodec::try_new(key).map_err(|_| KeyTooShort { length })?;
        Ok(InBand {
            codec: Arc::new(codec),
            ttl: DEFAULT_STATE_TTL,
        })
    }

    /// In-band approvals with a random key of this process: states it seals open nowhere else, and
    /// not after a restart.
    pub fn process_key() -> InBand {
        let mut key = [0_u8; 32];
        if getrandom::fill(&mut key).is_err() {
            // No randomness: no key anyone could guess either, so a state opens nowhere.
            panic!("the operating system's random number generator failed");
        }
        InBand::new(key.to_vec()).unwrap_or_else(|_| unreachable!("32 bytes"))
    }

    /// How long a request state lives (the form's answer must come back within it); 10 minutes by
    /// default, at most a day.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> InBand {
        self.ttl = ttl.min(Duration::from_secs(24 * 60 * 60));
        self
    }

    fn associated_data(session: &str) -> Vec<u8> {
        format!("toolgate/mcp-approval\n{session}").into_bytes()
    }

    /// The `InputRequired` answer to a call that waits for an approval: the form, and the sealed state.
    pub(crate) fn ask(
        &self,
        session: &str,
        tool: Tool,
        arguments: &Map<String, Value>,
        denied: &Denied,
        token: &str,
        about: &About<'_>,
    ) -> InputRequiredResult {
        let state = State {
            token: token.to_owned(),
            tool: tool.manifest().id.to_owned(),
            arguments: arguments_digest(arguments),
            risk: denied.risk(),
        };
        let sealed = self
            .codec
            .seal_json_with(
                &state,
                &SealOptions::new()
                    .associated_data(&Self::associated_data(session))
                    .ttl(self.ttl),
            )
            .unwrap_or_else(|_| unreachable!("a state of strings serializes"));
        let mut requests = InputRequests::new();
        requests.insert(
            APPROVAL_INPUT.to_owned(),
            form(tool, arguments, denied, about),
        );
        InputRequiredResult::new(Some(requests), Some(format!("{STATE_PREFIX}{sealed}")))
    }

    /// Opens a retry's state and reads the user's answer, with the risk the call was asked at (its
    /// effective risk, which its approval is bound to), or says why the retry is refused.
    pub(crate) fn answer(
        &self,
        session: &str,
        tool: &str,
        arguments: &Map<String, Value>,
        sealed: &str,
        responses: Option<&InputResponses>,
    ) -> Result<(String, Answer, Risk), StateRefused> {
        let sealed = sealed
            .strip_prefix(STATE_PREFIX)
            .ok_or(StateRefused::Invalid)?;
        let state: State = self
            .codec
            .open_json_with(sealed, &Self::associated_data(session))
            .map_err(|error| match error {
                RequestStateError::Expired => StateRefused::Expired,
                _ => StateRefused::Invalid,
            })?;
        if state.tool != tool || state.arguments != arguments_digest(arguments) {
            return Err(StateRefused::Mismatch);
        }
        let answer = read_answer(responses.and_then(|r| r.get(APPROVAL_INPUT)));
        Ok((state.token, answer, state.risk))
    }
}

/// What leads the request states of this server's approval forms, so that a retry carrying a state of
/// the application's own handler (an rmcp tool that asks its client for input) goes to the handler.
const STATE_PREFIX: &str = "toolgate.";

/// Whether `sealed` is a state of an approval form of this server, valid or not.
pub(crate) fn is_approval_state(sealed: &str) -> bool {
    sealed.starts_with(STATE_PREFIX)
}

/// What a request state carries.
#[derive(Serialize, Deserialize)]
struct State {
    #[serde(rename = "k")]
    token: String,
    #[serde(rename = "t")]
    tool: String,
    #[serde(rename = "a")]
    arguments: String,
    #[serde(rename = "r")]
    risk: Risk,
}

/// Why a retry's request state is refused before the gate is asked; the body does not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateRefused {
    /// Forged, changed, sealed for another session or by another key, or not a state at all.
    Invalid,
    /// Past its time to live.
    Expired,
    /// A valid state of another tool or other arguments.
    Mismatch,
    /// Its approval was answered already: a replay.
    Reused,
    /// An approval of an irreversible call without its target typed back exactly.
    Unconfirmed,
    /// A state sent with a call that an operator approves only: its tool's manifest says so, or the
    /// operator's policy in force now does (which may have changed since the form was sent).
    OutOfBand,
}

impl StateRefused {
    pub(crate) fn code(self) -> McpCode {
        match self {
            StateRefused::Invalid | StateRefused::OutOfBand => McpCode::ApprovalStateInvalid,
            StateRefused::Expired => McpCode::Denied(DenialCode::ApprovalExpired),
            StateRefused::Mismatch => McpCode::Denied(DenialCode::ApprovalMismatch),
            StateRefused::Reused => McpCode::Denied(DenialCode::ApprovalReused),
            StateRefused::Unconfirmed => McpCode::Denied(DenialCode::ConfirmationMismatch),
        }
    }

    pub(crate) fn message(self, tool: &str) -> String {
        match self {
            StateRefused::Invalid => format!(
                "the request state of this call of `{tool}` is not one this server sealed for this \
                 session; call the tool again without it"
            ),
            StateRefused::Expired => {
                format!("the approval form of this call of `{tool}` expired; call the tool again")
            }
            StateRefused::Mismatch => format!(
                "the approval form was answered for another call than this one of `{tool}` (other \
                 tool or arguments); call the tool again"
            ),
            StateRefused::Reused => format!(
                "the approval form of this call of `{tool}` was answered already; call the tool \
                 again for a new one"
            ),
            StateRefused::Unconfirmed => format!(
                "`{tool}` is irreversible, and the approval form was not confirmed by typing the \
                 call's target exactly: it approved nothing; call the tool again"
            ),
            StateRefused::OutOfBand => format!(
                "this call of `{tool}` is approved by an operator only (its tool or the operator's \
                 policy says so), never by an approval form: the request state approves nothing; \
                 call the tool again without it, and the call waits for the operator"
            ),
        }
    }
}

/// The SHA-256 of the arguments as canonical JSON (keys sorted).
pub(crate) fn arguments_digest(arguments: &Map<String, Value>) -> String {
    let mut bytes = Vec::new();
    canonical::write(&Value::Object(arguments.clone()), &mut bytes);
    canonical::sha256_hex(&bytes)
}

/// The arguments as the audit log writes them: keys sorted, a redacted one as `"[REDACTED]"`.
pub(crate) fn shown_arguments(
    tool: Tool,
    arguments: &Map<String, Value>,
    denied: &Denied,
) -> String {
    // As the decision wrote them, where it did: redacted as the typed arguments' fields are read,
    // whatever their names on the wire. The receiver is shown apart, as the instance.
    if let Some(Ok(Value::Object(mut written))) =
        denied.arguments().map(serde_json::from_str::<Value>)
    {
        written.remove("self");
        return canonical::to_string(&Value::Object(written));
    }
    let redact = tool.entry.behaviour.redact;
    let shown: Map<String, Value> = arguments
        .iter()
        .map(|(key, value)| {
            let value = if redact.contains(&key.as_str()) {
                Value::from("[REDACTED]")
            } else {
                value.clone()
            };
            (key.clone(), value)
        })
        .collect();
    canonical::to_string(&Value::Object(shown))
}

/// What the form tells of the caller besides the call: who the agent acts for and what tainted its
/// session.
pub(crate) struct About<'a> {
    pub(crate) principal: Option<&'a str>,
    pub(crate) taint: Option<&'a Taint>,
}

fn form(
    tool: Tool,
    arguments: &Map<String, Value>,
    denied: &Denied,
    about: &About<'_>,
) -> InputRequest {
    let manifest = tool.manifest();
    let mode = denied.mode().map_or("none", |mode| mode.as_str());
    let mut message = String::from("Approve this call?\n\n");
    if let Some(taint) = about.taint {
        // First, where it cannot be missed: the agent has read untrusted output, and the arguments
        // below may be written from it.
        let _ = write!(
            message,
            "WARNING: {taint}; the agent has read its output since, and these arguments may come \
             from it.\n\n"
        );
    }
    let _ = write!(
        message,
        "tool: {id}\nrisk: {risk}",
        id = manifest.id,
        risk = denied.risk(),
    );
    if denied.risk() != manifest.risk_level {
        let _ = write!(
            message,
            " (declared {declared}, raised by its arguments)",
            declared = manifest.risk_level
        );
    }
    let _ = write!(message, "\nmode: {mode}\n");
    if let Some(principal) = about.principal {
        let _ = writeln!(message, "principal: {principal}");
    }
    let session = if about.taint.is_some() {
        "TAINTED"
    } else {
        "clean"
    };
    let _ = write!(
        message,
        "session: {session}\narguments: {arguments}\n",
        arguments = shown_arguments(tool, arguments, denied),
    );
    if let Some(target) = denied.target() {
        let _ = writeln!(message, "target: {target}");
    }
    if let Some(evidence) = denied.evidence() {
        let _ = writeln!(message, "the target now: {evidence}");
    }
    if let Some(plan) = denied.rollback() {
        let _ = writeln!(message, "undone by: {plan}");
    }
    let _ = write!(
        message,
        "\n{description}",
        description = manifest.description
    );
    // The arguments are the agent's text: what the user reads must be what the call carries.
    let message = visible(&message);
    let schema = json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "enum": ["approve", "reject"],
            },
            "reason": {
                "type": "string",
                "title": "Reason",
                "description": "Why (the agent reads it when the call is rejected).",
            },
        },
        "required": ["decision"],
    });
    let request = json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": schema,
        },
    });
    serde_json::from_value(request)
        .unwrap_or_else(|e| unreachable!("the approval form is an elicitation request: {e}"))
}

/// `text` with every character a reader cannot see, or that reorders what they see (controls other
/// than the line feed, whitespace other than the space, zero-width and joining characters, bidi
/// embeddings, overrides and isolates, invisible operators, tags, variation selectors, fillers),
/// written as `\u{XXXX}`.
pub(crate) fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hidden(c) {
            let _ = write!(shown, "\\u{{{:04X}}}", u32::from(c));
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

fn hidden(c: char) -> bool {
    if c == '\n' || c == ' ' {
        return false;
    }
    c.is_control()
        || c.is_whitespace()
        || matches!(
            u32::from(c),
            0x00AD
                | 0x034F
                | 0x0600..=0x0605
                | 0x061C
                | 0x06DD
                | 0x070F
                | 0x0890..=0x0891
                | 0x08E2
                | 0x115F..=0x1160
                | 0x17B4..=0x17B5
                | 0x180B..=0x180F
                | 0x200B..=0x200F
                | 0x202A..=0x202E
                | 0x2060..=0x206F
                | 0x3164
                | 0xFE00..=0xFE0F
                | 0xFEFF
                | 0xFFA0
                | 0xFFF0..=0xFFFB
                | 0x110BD
                | 0x110CD
                | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3
                | 0x1D173..=0x1D17A
                | 0xE0000..=0xE0FFF
        )
}

/// Who answers in band, in the audit log.
pub(crate) const IN_BAND_BY: &str = "mcp-client";

/// The user's answer: an accepted form whose decision is `approve` approves; anything else (a
/// rejection, a declined or cancelled form, no answer) rejects.
fn read_answer(response: Option<&Value>) -> Answer {
    let by = IN_BAND_BY.to_owned();
    let Some(response) = response else {
        return Answer::Reject {
            by,
            reason: "the client sent no answer to the approval form".to_owned(),
            stop: false,
        };
    };
    let action = response.get("action").and_then(Value::as_str);
    let content = response.get("content");
    let decision = content
        .and_then(|c| c.get("decision"))
        .and_then(Value::as_str);
    let reason = content
        .and_then(|c| c.get("reason"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|r| !r.is_empty());
    match (action, decision) {
        (Some("accept"), Some("approve")) => Answer::Approve {
            by,
            for_session: false,
            confirmation: content
                .and_then(|c| c.get("confirmation"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        },
        (Some("accept"), _) => Answer::Reject {
            by,
            reason: reason.unwrap_or("rejected by the user").to_owned(),
            stop: false,
        },
        (Some("decline"), _) => Answer::Reject {
            by,
            reason: "the user declined the approval form".to_owned(),
            stop: false,
        },
        (Some("cancel"), _) => Answer::Reject {
            by,
            reason: "the user cancelled the approval form".to_owned(),
            stop: false,
        },
        _ => Answer::Reject {
            by,
            reason: "the client's answer to the approval form is not one it can give".to_owned(),
            stop: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_accepted_approve_approves() {
        let approve = json!({"action": "accept", "content": {"decision": "approve"}});
        assert!(matches!(
            read_answer(Some(&approve)),
            Answer::Approve { .. }
        ));
        let reject =
            json!({"action": "accept", "content": {"decision": "reject", "reason": " no "}});
        assert!(
            matches!(read_answer(Some(&reject)), Answer::Reject { reason, .. } if reason == "no")
        );
        for refused in [
            json!({"action": "decline"}),
            json!({"action": "cancel", "content": {"decision": "approve"}}),
            json!({"action": "accept"}),
            json!({"decision": "approve"}),
            json!("approve"),
        ] {
            assert!(
                matches!(read_answer(Some(&refused)), Answer::Reject { .. }),
                "{refused}"
            );
        }
        assert!(matches!(read_answer(None), Answer::Reject { .. }));
    }

    fn sealed(
        in_band: &InBand,
        session: &str,
        tool: &str,
        arguments: &Map<String, Value>,
    ) -> String {
        let state = State {
            token: "token".to_owned(),
            tool: tool.to_owned(),
            arguments: arguments_digest(arguments),
            risk: Risk::HighWrite,
        };
        in_band
            .codec
            .seal_json_with(
                &state,
                &SealOptions::new()
                    .associated_data(&InBand::associated_data(session))
                    .ttl(in_band.ttl),
            )
            .map(|sealed| format!("{STATE_PREFIX}{sealed}"))
            .unwrap()
    }

    #[test]
    fn a_state_opens_only_for_its_session_tool_and_arguments_in_time() {
        let in_band = InBand::new(vec![1; 32]).unwrap();
        let arguments = json!({"id": 7, "cents": 100}).as_object().unwrap().clone();
        let state = sealed(&in_band, "one", "t.refund", &arguments);
        let yes = json!({"action": "accept", "content": {"decision": "approve"}});
        let responses = InputResponses::from([(APPROVAL_INPUT.to_owned(), yes)]);
        let (token, answer, risk) = in_band
            .answer("one", "t.refund", &arguments, &state, Some(&responses))
            .unwrap();
        assert_eq!(token, "token");
        assert_eq!(risk, Risk::HighWrite);
        assert!(matches!(answer, Answer::Approve { .. }));

        let refused = |session, tool, arguments: &Map<String, Value>, state: &str| {
            in_band
                .answer(session, tool, arguments, state, Some(&responses))
                .unwrap_err()
        };
        assert_eq!(
            refused("two", "t.refund", &arguments, &state),
            StateRefused::Invalid
        );
        // Without the mark of this server's forms it is not one of its states (it is a handler's own).
        let unmarked = state.strip_prefix(STATE_PREFIX).unwrap();
        assert!(!is_approval_state(unmarked));
        assert_eq!(
            refused("one", "t.refund", &arguments, unmarked),
            StateRefused::Invalid
        );
        assert_eq!(
            refused("one", "t.other", &arguments, &state),
            StateRefused::Mismatch
        );
        let more = json!({"id": 7, "cents": 101}).as_object().unwrap().clone();
        assert_eq!(
            refused("one", "t.refund", &more, &state),
            StateRefused::Mismatch
        );
        let other_key = InBand::new(vec![2; 32]).unwrap();
        let forged = sealed(&other_key, "one", "t.refund", &arguments);
        assert_eq!(
            refused("one", "t.refund", &arguments, &forged),
            StateRefused::Invalid
        );

        let short = InBand::new(vec![1; 32])
            .unwrap()
            .ttl(Duration::from_millis(1));
        let late = sealed(&short, "one", "t.refund", &arguments);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            short
                .answer("one", "t.refund", &arguments, &late, Some(&responses))
                .unwrap_err(),
            StateRefused::Expired
        );
    }

    #[test]
    fn hidden_characters_are_shown_as_escapes() {
        assert!(matches!(
            visible("plain\nlines, é and 漢字"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            visible("a\u{202E}b\u{200B}c\u{2066}d\u{E0041}e\tf\u{FEFF}\u{00A0}g\u{1B}"),
            "a\\u{202E}b\\u{200B}c\\u{2066}d\\u{E0041}e\\u{0009}f\\u{FEFF}\\u{00A0}g\\u{001B}"
        );
    }

    #[test]
    fn a_short_key_is_refused() {
        assert_eq!(
            InBand::new(vec![7; 31]).unwrap_err(),
            KeyTooShort { length: 31 }
        );
        assert!(InBand::new(vec![7; 32]).is_ok());
    }
}
