//! A call's arguments as a decision reads them: written at the first need, and written out for a
//! decision that waits.

use serde_json::{Map, Value};

use crate::approval::{Evidence, Rollback};
use crate::gate::call::{Arguments, CallInfo, Effects};
use crate::gate::permit::{Permit, Seen};

/// A call's arguments as a decision reads them: borrowed from the call and written at the first need
/// ([`LazyArguments`]), or written out ([`WrittenArguments`]), which an async decision holds while it
/// waits, since the call's own references to its arguments cannot cross threads.
pub(crate) trait ArgumentSource {
    /// The arguments as the log writes them; `None` where one is bound by a pattern.
    fn get(&mut self) -> Option<&Arguments>;

    /// The digest a two-step approval is bound to, and the digest the log shows.
    fn binding(&mut self) -> Option<(String, String)>;

    /// The arguments a record carries: written out (redacted ones redacted) for a tool that records
    /// its arguments, the digest alone otherwise.
    fn recorded(&mut self) -> Option<String>;

    /// Whether the call still has the arguments its approval was given for: written again and compared
    /// now, where the call's arguments are at hand; otherwise kept in `permit`, for [`confirm`] to
    /// compare once the call has them back.
    fn unchanged(&mut self, permit: &mut Permit) -> bool;

    /// The value of the argument `name` as the operator's argument rules read it (see
    /// [`CallInfo::value`]): read from the call itself each time where it is at hand.
    fn value(&mut self, name: &str) -> Option<Value>;

    /// The arguments the rules read are the call's own now: nothing to do where the call is at hand;
    /// written out, they are kept in `permit`, for [`confirm`](super::commit::confirm) to compare once the call has them back.
    fn read_again(&mut self, permit: &mut Permit);

    /// What a tool with lasting effects adds to the call (its target, plan and probe), where the call
    /// is at hand; `None` once the arguments are written out.
    fn effects(&self) -> Option<&Effects<'_>>;
}

/// A call's arguments, written once at the first need.
pub(crate) struct LazyArguments<'a> {
    call: &'a CallInfo<'a>,
    written: Option<Option<Arguments>>,
    bound: Option<Option<String>>,
}

impl<'a> LazyArguments<'a> {
    pub(crate) fn new(call: &'a CallInfo<'a>) -> LazyArguments<'a> {
        LazyArguments {
            call,
            written: None,
            bound: None,
        }
    }

    /// Everything a decision may still need, written out.
    pub(super) fn write_out(mut self) -> WrittenArguments {
        let bound = self.binding().map(|(digest, _)| digest);
        WrittenArguments {
            written: self.get().cloned(),
            bound,
            record: self.call.record_arguments,
            parsed: None,
        }
    }
}

impl ArgumentSource for LazyArguments<'_> {
    fn get(&mut self) -> Option<&Arguments> {
        self.written
            .get_or_insert_with(|| self.call.arguments())
            .as_ref()
    }

    fn binding(&mut self) -> Option<(String, String)> {
        if self.bound.is_none() {
            let call = self.call;
            let bound = self.get().and_then(|arguments| call.binding(arguments));
            self.bound = Some(bound);
        }
        let digest = self.bound.clone().flatten()?;
        Some((digest, self.get()?.digest().to_owned()))
    }

    fn recorded(&mut self) -> Option<String> {
        let record = self.call.record_arguments;
        self.get().filter(|_| record).map(|a| a.json.clone())
    }

    fn unchanged(&mut self, _permit: &mut Permit) -> bool {
        let call = self.call;
        let bound = self.bound.clone().flatten();
        let Some(seen) = self.get() else {
            return true;
        };
        let seen = Seen {
            json: seen.json.clone(),
            binding: bound,
        };
        still_seen(call, &seen)
    }

    fn value(&mut self, name: &str) -> Option<Value> {
        self.call.value(name)
    }

    fn read_again(&mut self, _permit: &mut Permit) {}

    fn effects(&self) -> Option<&Effects<'_>> {
        self.call.effects
    }
}

/// Whether `call` writes the arguments an approval saw (and, where it was bound, binds the same).
pub(super) fn still_seen(call: &CallInfo<'_>, seen: &Seen) -> bool {
    let Some(now) = call.arguments() else {
        return false;
    };
    now.json == seen.json
        && seen
            .binding
            .as_ref()
            .is_none_or(|binding| call.binding(&now).as_ref() == Some(binding))
}

/// [`LazyArguments`] written out.
pub(crate) struct WrittenArguments {
    written: Option<Arguments>,
    bound: Option<String>,
    record: bool,
    /// `written`, parsed at the first rule that reads it.
    parsed: Option<Option<Map<String, Value>>>,
}

impl ArgumentSource for WrittenArguments {
    fn get(&mut self) -> Option<&Arguments> {
        self.written.as_ref()
    }

    fn binding(&mut self) -> Option<(String, String)> {
        Some((
            self.bound.clone()?,
            self.written.as_ref()?.digest().to_owned(),
        ))
    }

    fn recorded(&mut self) -> Option<String> {
        let record = self.record;
        self.written
            .as_ref()
            .filter(|_| record)
            .map(|a| a.json.clone())
    }

    fn unchanged(&mut self, permit: &mut Permit) -> bool {
        if let Some(written) = &self.written {
            permit.set_seen(Seen {
                json: written.json.clone(),
                binding: self.bound.clone(),
            });
        }
        true
    }

    fn value(&mut self, name: &str) -> Option<Value> {
        let written = &self.written;
        let parsed = self.parsed.get_or_insert_with(|| {
            match serde_json::from_str(&written.as_ref()?.json) {
                Ok(Value::Object(values)) => Some(values),
                _ => None,
            }
        });
        Some(parsed.as_ref()?.get(name).cloned().unwrap_or(Value::Null))
    }

    fn read_again(&mut self, permit: &mut Permit) {
        self.unchanged(permit);
    }

    fn effects(&self) -> Option<&Effects<'_>> {
        None
    }
}

/// What a call of a tool with lasting effects shows whoever decides it.
#[derive(Debug, Default)]
pub(crate) struct Shown {
    /// The target, as it is typed back to confirm.
    pub(crate) target: Option<String>,
    /// How the call would be undone.
    pub(crate) plan: Option<Rollback>,
    /// What the probe read of the target when an approval was to be asked.
    pub(crate) seen: Option<Evidence>,
}

impl Shown {
    /// What a tool without lasting effects shows.
    pub(super) const NOTHING: &'static Shown = &Shown {
        target: None,
        plan: None,
        seen: None,
    };
}
