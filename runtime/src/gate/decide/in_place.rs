//! A call of an rmcp tool gated in place, made through toolgate's MCP server: its JSON arguments wait,
//! on a per-poll slot, for the tool's own check, which decides the call with them.

use super::gates::stack_shape;
use super::suspension::Outcome;
use crate::gate::call::{ArgRef, CallInfo};
use crate::gate::denied::Denied;
use crate::gate::permit::Permit;
use crate::registry::ToolEntry;

/// A call of an rmcp tool gated in place, made through the server: the JSON arguments the call is
/// decided with (the tool's own parameters are rmcp's extractors, which cannot be written), for the
/// tool's own check to take when rmcp's router reaches it, however many polls later: the call is
/// decided there, once, at its commit point right before the body.
pub(crate) struct InPlaceCall {
    entry: &'static ToolEntry,
    /// The call's arguments by name, and the handler instance as `self`: the shape a `callable`
    /// method's arguments have.
    arguments: serde_json::Value,
    /// The client named an argument `self`, or one that reads as it: `self` stands for the handler
    /// instance.
    names_self: bool,
    pub(super) outcome: Outcome,
    /// The ambient gates when it was put on the slot: how many, and the innermost one's id.
    stack: (usize, u64),
}

thread_local! {
    /// The call of a tool gated in place that this thread's poll is about to reach.
    static IN_PLACE: std::cell::RefCell<Option<Box<InPlaceCall>>> =
        const { std::cell::RefCell::new(None) };
}

pin_project_lite::pin_project! {
    /// A future (the handler's `call_tool`) during whose every poll the call's arguments wait for the
    /// check of its tool, until that check takes them.
    pub(crate) struct WithArguments<F> {
        call: Option<Box<InPlaceCall>>,
        #[pin]
        future: F,
    }
}

/// Has the call of `entry` that `future` makes decided with `arguments` and `label` as its `self`;
/// the refusal, if the call is refused, is put in the returned [`Outcome`].
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) fn with_arguments<F: Future>(
    entry: &'static ToolEntry,
    arguments: serde_json::Map<String, serde_json::Value>,
    label: String,
    future: F,
) -> (WithArguments<F>, Outcome) {
    let outcome = Outcome::default();
    let mut arguments = arguments;
    // An argument whose name reads as `self` (`ѕelf`, `self\u{200b}`) would pass for it too.
    let names_self = arguments
        .keys()
        .any(|name| crate::names::same(name, "self"));
    arguments.insert("self".to_owned(), serde_json::Value::String(label));
    let call = InPlaceCall {
        entry,
        arguments: serde_json::Value::Object(arguments),
        names_self,
        outcome: outcome.clone(),
        stack: (usize::MAX, 0),
    };
    let future = WithArguments {
        call: Some(Box::new(call)),
        future,
    };
    (future, outcome)
}

/// Puts a call on the slot for one poll; dropped, on return or unwind, it puts back what was there and
/// keeps the call if no check took it.
struct Offering<'a> {
    outer: Option<Box<InPlaceCall>>,
    untaken: &'a mut Option<Box<InPlaceCall>>,
}

impl Drop for Offering<'_> {
    fn drop(&mut self) {
        let outer = self.outer.take();
        let _ = IN_PLACE.try_with(|slot| {
            if let Ok(mut slot) = slot.try_borrow_mut() {
                *self.untaken = std::mem::replace(&mut *slot, outer);
            }
        });
    }
}

impl<F: Future> Future for WithArguments<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.project();
        let Some(mut call) = this.call.take() else {
            return this.future.poll(cx);
        };
        call.stack = stack_shape();
        let outer = IN_PLACE
            .try_with(|slot| slot.try_borrow_mut().ok().and_then(|mut s| s.replace(call)))
            .ok()
            .flatten();
        let _offering = Offering {
            outer,
            untaken: this.call,
        };
        this.future.poll(cx)
    }
}

/// The call of `entry` handed its arguments, if this check is the one it waits for: the same tool, under
/// the same gates.
#[inline]
pub(crate) fn take_in_place(entry: &'static ToolEntry) -> Option<Box<InPlaceCall>> {
    // Only a tool gated in place looks at the slot: every other check pays one field read.
    entry.in_place?;
    IN_PLACE
        .try_with(|slot| {
            let mut slot = slot.try_borrow_mut().ok()?;
            match &*slot {
                Some(call) if std::ptr::eq(call.entry, entry) && call.stack == stack_shape() => {
                    slot.take()
                }
                _ => None,
            }
        })
        .ok()
        .flatten()
}

impl InPlaceCall {
    /// The call as a decision reads it: its JSON arguments and the handler instance as `self`, with
    /// what the tool's own check read of its typed arguments (`escalate`, `target`, `evidence`,
    /// `rollback`), which rmcp deserialized from the same JSON.
    pub(super) fn info<'a>(
        &'a self,
        arguments: &'a [ArgRef<'a>; 1],
        typed: &CallInfo<'a>,
    ) -> CallInfo<'a> {
        CallInfo {
            escalated: typed.escalated,
            arguments,
            record_arguments: self.entry.behaviour.record_arguments,
            effects: typed.effects,
        }
    }

    /// The call's arguments, and as they are shown (`shown`, where some are redacted).
    pub(super) fn args<'a>(&'a self, shown: Option<&'a serde_json::Value>) -> [ArgRef<'a>; 1] {
        [ArgRef::whole(
            &self.arguments,
            shown.unwrap_or(&self.arguments),
        )]
    }

    /// The arguments as records, approvers and rules see them, where the tool redacts some: each
    /// argument `redact` names hidden, and every value its check read from a redacted field of the
    /// typed arguments (`typed`) hidden wherever else the JSON holds it. A redacted field is found
    /// only where the argument of its own name holds exactly the value its type writes; serde may
    /// read it elsewhere (`rename`, `alias`, `flatten`), and its type may change what it reads (trim
    /// it, parse a number from a string, serialize masked as secret wrappers do), so the JSON may
    /// hold it in a form no search recognises. Where a redacted field is not found, or cannot be
    /// written (not `Serialize`), every argument is hidden. `None`: nothing to hide.
    pub(super) fn shown(&self, typed: &CallInfo<'_>) -> Option<serde_json::Value> {
        let redact = self.entry.behaviour.redact;
        if redact.is_empty() {
            return None;
        }
        let mut secrets = Vec::new();
        let mut unfound = false;
        for (name, value) in typed.arguments.iter().filter_map(ArgRef::redacted) {
            let Some(value) = value else {
                unfound = true;
                continue;
            };
            let sent = match &self.arguments {
                serde_json::Value::Object(map) => map.get(name),
                _ => None,
            };
            unfound |= match sent {
                Some(sent) => *sent != value,
                // An absent field serde read as nothing holds nothing to hide.
                None => !value.is_null(),
            };
            leaves(value, &mut secrets);
        }
        let mut shown = self.arguments.clone();
        if let serde_json::Value::Object(map) = &mut shown {
            for (name, value) in map.iter_mut() {
                if name == "self" {
                    continue;
                }
                if unfound || redact.contains(&name.as_str()) {
                    *value = serde_json::Value::from("[REDACTED]");
                } else {
                    hide(value, &secrets);
                }
            }
        }
        Some(shown)
    }

    /// Whether the client named an argument `self`, which would pass for the handler instance.
    pub(super) fn names_self(&self) -> bool {
        self.names_self
    }

    pub(super) fn report(&self, result: &Result<Permit, Denied>) {
        let mut outcome = self
            .outcome
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *outcome = result.as_ref().err().cloned();
    }
}

/// The strings, numbers and booleans in `value`, at any depth: what a redacted field holds.
fn leaves(value: serde_json::Value, into: &mut Vec<serde_json::Value>) {
    match value {
        serde_json::Value::Object(map) => map.into_iter().for_each(|(_, v)| leaves(v, into)),
        serde_json::Value::Array(items) => items.into_iter().for_each(|v| leaves(v, into)),
        serde_json::Value::Null => {}
        leaf => into.push(leaf),
    }
}

/// `value` with every string or number among `secrets`, at any depth, written `"[REDACTED]"`.
fn hide(value: &mut serde_json::Value, secrets: &[serde_json::Value]) {
    match value {
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| hide(v, secrets)),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| hide(v, secrets)),
        leaf if secrets.contains(leaf) => *leaf = serde_json::Value::from("[REDACTED]"),
        _ => {}
    }
}
