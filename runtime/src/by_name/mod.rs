//! Calling a tool by name with JSON arguments, as agents do.
//!
//! A tool declared `callable` gets a generated adapter that asks the gate first, before it reads the
//! arguments ([`precheck`]: a tool the gates refuse is refused whatever its arguments), then parses the
//! arguments strictly, one parameter at a time (unknown keys refused, see `params`), then has the call
//! decided in full with them, as a direct call is ([`decide`]), and calls the same gated function with
//! the decision handed to its check ([`hand`]). The refusal comes back typed, from the decision itself.

pub(crate) mod error;
pub(crate) mod instances;
pub(crate) mod params;
pub mod provider;
mod strict;

pub use error::CallError;
pub use instances::{Instances, Receiver};

use std::borrow::Cow;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use serde::Serialize;
use serde_json::Value;

use crate::approval::effects::Rollback;
use crate::audit::{AuditRecord, Stage};
use crate::by_name::params::Param;
use crate::canonical::sha256_hex;
use crate::gate::Gate;
use crate::gate::call::{ArgRef, CallInfo, Effects};
use crate::gate::decide::{self as deciding, Decided};
use crate::gate::denied::Denied;
use crate::gate::undoing::{Undo, Undoing};
use crate::registry::{Registry, Tool, ToolEntry, registry};
use toolgate_policy::Risk;

/// What a callable tool adds to its registration: its adapter, its parameters and its output schema.
#[doc(hidden)]
pub struct Callable {
    pub invoke: fn(&Gate, &Instances, Value) -> CallFuture,
    pub params: &'static [Param],
    pub output_schema: fn() -> Option<Value>,
    /// The type of a method's `self`, whose instance a call by name runs on.
    pub receiver: Option<Receiver>,
}

impl fmt::Debug for Callable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Callable")
    }
}

/// The adapter a `callable` tool registered. The registry keeps it untyped; its typed read-back is
/// done once for every tool, into a table indexed by registry slot, so that a call does not pay it.
fn callable(entry: &'static ToolEntry) -> Option<&'static Callable> {
    static ADAPTERS: OnceLock<Box<[Option<&'static Callable>]>> = OnceLock::new();
    let adapters = ADAPTERS.get_or_init(|| {
        registry()
            .entries
            .iter()
            .map(|entry| entry.callable?.downcast_ref::<Callable>())
            .collect()
    });
    let slot = entry.slot.load(Ordering::Relaxed) as usize;
    adapters.get(slot).copied().flatten()
}

impl Tool {
    /// The JSON Schema (draft 2020-12) of the tool's arguments: an object that admits exactly its
    /// parameters. `None` for a tool that is not `callable`.
    pub fn input_schema(&self) -> Option<Value> {
        callable(self.entry).map(|c| params::input_schema(c.params))
    }

    /// The JSON Schema of the tool's result, where its type has one.
    pub fn output_schema(&self) -> Option<Value> {
        callable(self.entry).and_then(|c| (c.output_schema)())
    }

    /// For a `callable` method, the name of the type whose instance ([`Instances`]) a call by name
    /// runs on.
    pub fn instance_type(&self) -> Option<&'static str> {
        callable(self.entry)?.receiver.map(|r| (r.type_name)())
    }

    /// The type of the instance a method runs on, for a `callable` method.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn receiver_type(&self) -> Option<std::any::TypeId> {
        callable(self.entry)
            .and_then(|c| c.receiver)
            .map(|receiver| (receiver.type_id)())
    }

    /// Whether a call by name with `instances` can reach the tool: it is `callable`, and a method's
    /// instance is among `instances`.
    pub fn is_served_by(&self, instances: &Instances) -> bool {
        callable(self.entry).is_some_and(|c| {
            c.receiver
                .is_none_or(|receiver| instances.holds((receiver.type_id)()))
        })
    }
}

/// The result of [`Registry::call`]: ready at once for a sync tool, polled for an async one.
#[must_use = "futures do nothing unless polled"]
pub struct CallFuture {
    state: State,
}

enum State {
    Ready(Option<Result<Value, CallError>>),
    Pending(Pin<Box<dyn Future<Output = Result<Value, CallError>> + Send>>),
}

impl CallFuture {
    #[doc(hidden)]
    pub fn ready(result: Result<Value, CallError>) -> CallFuture {
        CallFuture {
            state: State::Ready(Some(result)),
        }
    }

    #[doc(hidden)]
    pub fn pending(
        future: impl Future<Output = Result<Value, CallError>> + Send + 'static,
    ) -> CallFuture {
        CallFuture {
            state: State::Pending(Box::pin(future)),
        }
    }

    /// The result, if the call has completed without being polled (every sync tool's call has).
    pub fn now(self) -> Option<Result<Value, CallError>> {
        match self.state {
            State::Ready(result) => result,
            State::Pending(_) => None,
        }
    }
}

impl Future for CallFuture {
    type Output = Result<Value, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            State::Ready(result) => Poll::Ready(
                result
                    .take()
                    .expect("a CallFuture is not polled after it completed"),
            ),
            State::Pending(future) => future.as_mut().poll(cx),
        }
    }
}

impl fmt::Debug for CallFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.state {
            State::Ready(_) => "CallFuture(ready)",
            State::Pending(_) => "CallFuture(pending)",
        })
    }
}

impl Registry {
    /// Calls the tool `id` with JSON `arguments` through `gate`.
    ///
    /// The arguments must be an object with exactly the tool's parameters. The call is decided by the
    /// same gate check as a direct call, with `gate` as the ambient gate.
    ///
    /// ```
    /// # extern crate toolgate_runtime as toolgate;
    /// # async fn demo(gate: &toolgate::Gate) {
    /// let result = toolgate::registry()
    ///     .call(gate, "users.delete", serde_json::json!({"id": 3}))
    ///     .await;
    /// # }
    /// ```
    ///
    /// A method's call needs its instance: see [`call_with`](Registry::call_with); here it is refused
    /// with `NO_INSTANCE`.
    #[inline]
    pub fn call(&self, gate: &Gate, id: &str, arguments: Value) -> CallFuture {
        static NONE: Instances = Instances::new();
        self.call_with(gate, &NONE, id, arguments)
    }

    /// [`call`](Registry::call), where a `callable` method runs on its type's instance in `instances`.
    ///
    /// ```
    /// # extern crate toolgate_runtime;
    /// # mod toolgate {
    /// #     pub use toolgate_runtime::{Gate, registry};
    /// #     pub mod registry_types { pub use toolgate_runtime::Instances; }
    /// # }
    /// # use std::sync::Arc;
    /// # use toolgate::registry_types as registry;
    /// # struct Users;
    /// # async fn demo(gate: &toolgate::Gate, users: Arc<Users>) {
    /// let instances = registry::Instances::new().with_shared(users);
    /// let result = toolgate::registry()
    ///     .call_with(gate, &instances, "users.count", serde_json::json!({}))
    ///     .await;
    /// # }
    /// ```
    #[inline]
    pub fn call_with(
        &self,
        gate: &Gate,
        instances: &Instances,
        id: &str,
        arguments: Value,
    ) -> CallFuture {
        let Some(entry) = self.entry(id) else {
            record_unknown(gate, id);
            return CallFuture::ready(Err(CallError::UnknownTool { id: id.to_owned() }));
        };
        let Some(callable) = callable(entry) else {
            let error = CallError::NotCallable {
                id: entry.manifest.id,
            };
            record_stopped(gate, entry, &error);
            return CallFuture::ready(Err(error));
        };
        let future = (callable.invoke)(gate, instances, arguments);
        if gate.audits()
            && let State::Ready(Some(Err(
                error @ (CallError::InvalidParams { .. } | CallError::NoInstance { .. }),
            ))) = &future.state
        {
            record_stopped(gate, entry, error);
        }
        future
    }
}

impl Registry {
    /// Runs the rollback plan an `enter` record keeps (a tool's `rollback` function made it when the
    /// call was decided): a call of the plan's tool with the plan's arguments, through `gate` like any
    /// other call by name, decided, approved and recorded as such. Every record written while it runs
    /// names the call it undoes (`rollback_of`: the `enter` record's
    /// [`reference`](crate::audit::AuditRecord::reference), `GATE/CALL@DIGEST`).
    ///
    /// A record that keeps no plan to call (not an `enter` record, no plan, or steps a person carries
    /// out) is answered `NO_ROLLBACK`, and nothing runs.
    ///
    /// ```no_run
    /// # extern crate toolgate_runtime as toolgate;
    /// # async fn demo(gate: &toolgate::Gate, enter: &toolgate::audit::AuditRecord) {
    /// // `enter`: the `enter` record of the call to undo, read back from the audit trail.
    /// let undone = toolgate::registry().rollback(gate, enter).await;
    /// # }
    /// ```
    pub fn rollback(&self, gate: &Gate, enter: &AuditRecord) -> CallFuture {
        static NONE: Instances = Instances::new();
        self.rollback_with(gate, &NONE, enter)
    }

    /// [`rollback`](Registry::rollback), where the plan's tool is a method run on its type's instance
    /// in `instances`.
    pub fn rollback_with(
        &self,
        gate: &Gate,
        instances: &Instances,
        enter: &AuditRecord,
    ) -> CallFuture {
        let no = |message: String| CallFuture::ready(Err(CallError::NoRollback { message }));
        if enter.stage != Stage::Enter {
            let stage = serde_json::to_value(enter.stage).unwrap_or_default();
            return no(format!(
                "the record is a {stage} record, not an `enter` record"
            ));
        }
        let Some(plan) = &enter.rollback else {
            return no(format!(
                "the `enter` record of call {}/{} of `{}` keeps no plan",
                enter.gate,
                enter.call,
                crate::terminal::escaped(&enter.tool)
            ));
        };
        let (tool, arguments) = match serde_json::from_str::<Rollback>(plan) {
            Ok(Rollback::Call { tool, arguments }) => (tool, arguments),
            Ok(Rollback::Steps { text }) => {
                return no(format!(
                    "the plan is steps a person carries out: {}",
                    crate::terminal::escaped(&text)
                ));
            }
            Err(error) => {
                return no(format!(
                    "the plan cannot be read: {}",
                    crate::terminal::escaped(&error.to_string())
                ));
            }
        };
        let origin: Arc<str> = Arc::from(enter.reference());
        let future = {
            let _undoing = Undoing::enter(&origin);
            self.call_with(gate, instances, &tool, arguments)
        };
        match future.state {
            State::Pending(future) => CallFuture {
                state: State::Pending(Box::pin(Undo { origin, future })),
            },
            ready => CallFuture { state: ready },
        }
    }
}

/// Records a call by name of an id no tool has. The id is the caller's text, which may be anything (a
/// secret pasted in the wrong place): the record has its SHA-256, which matches a known id, and not the
/// text.
pub(crate) fn record_unknown(gate: &Gate, id: &str) {
    if gate.audits() {
        gate.record_probe(
            Cow::Borrowed("(unknown)"),
            None,
            "UNKNOWN_TOOL",
            format!(
                "no tool has this id (SHA-256 of the id: {})",
                sha256_hex(id.as_bytes())
            ),
        );
    }
}

/// Records a call by name of a tool that stopped before the gate decided it: not callable, arguments
/// that do not parse (by their path alone: a bad value is the caller's raw input), no instance.
pub(crate) fn record_stopped(gate: &Gate, entry: &'static ToolEntry, error: &CallError) {
    let message = match error {
        CallError::InvalidParams { path, .. } => format!("invalid arguments at `{path}`"),
        other => other.to_string(),
    };
    gate.record_probe(
        Cow::Borrowed(entry.manifest.id),
        Some(entry.manifest.risk_level),
        error.code(),
        message,
    );
}

fn to_json<T: Serialize, E: fmt::Display>(
    result: Result<Result<T, E>, Denied>,
) -> Result<Value, CallError> {
    match result {
        Ok(Ok(value)) => serde_json::to_value(value).map_err(|e| CallError::OutputError {
            message: e.to_string(),
        }),
        Ok(Err(error)) => Err(CallError::HandlerError {
            message: error.to_string(),
        }),
        Err(denied) => Err(CallError::Denied(denied)),
    }
}

/// Refuses a call by name before its arguments are read, when the gates refuse the tool whatever they
/// are; `Ok(true)` where the gate alone allows the call outright (see [`decide`]). `gate_parameter`: the
/// tool takes the gate as its `&Gate` parameter, which then decides first.
#[doc(hidden)]
#[inline]
pub fn precheck(
    entry: &'static ToolEntry,
    gate: &Gate,
    gate_parameter: bool,
) -> Result<bool, CallFuture> {
    deciding::precheck(entry, gate, gate_parameter)
        .map_err(|denied| CallFuture::ready(Err(CallError::Denied(denied))))
}

/// The instance a method's call by name runs on and its label, or the call's `NO_INSTANCE` answer.
#[doc(hidden)]
#[inline]
pub fn instance<T: Send + Sync + 'static>(
    entry: &'static ToolEntry,
    instances: &Instances,
) -> Result<(Arc<T>, Arc<String>), CallFuture> {
    instances.get_labelled::<T>().ok_or_else(|| {
        CallFuture::ready(Err(CallError::NoInstance {
            id: entry.manifest.id,
            type_name: std::any::type_name::<T>(),
        }))
    })
}

/// Decides a call by name with its parsed arguments; see [`finish_sync`] and [`invoke_async`].
/// `outright`: the gate the call is made through, where [`precheck`] found that it alone allows the
/// call outright.
#[doc(hidden)]
#[inline]
pub fn decide(
    entry: &'static ToolEntry,
    outright: Option<&Gate>,
    gate_parameter: Option<&Gate>,
    escalated: Option<Risk>,
    arguments: &[ArgRef<'_>],
    record_arguments: bool,
    effects: Option<&Effects<'_>>,
) -> Result<Decided, Denied> {
    let call = CallInfo {
        escalated,
        arguments,
        record_arguments,
        effects,
    };
    deciding::decide_by_name(entry, outright, gate_parameter, &call)
}

/// [`decide`] for an async tool: the decision may wait for an async approver or a store
/// ([`resume`]).
#[doc(hidden)]
#[inline]
pub fn decide_async(
    entry: &'static ToolEntry,
    outright: Option<&Gate>,
    gate_parameter: Option<&Gate>,
    escalated: Option<Risk>,
    arguments: &[ArgRef<'_>],
    record_arguments: bool,
    effects: Option<&Effects<'_>>,
) -> deciding::DecidingByName {
    let call = CallInfo {
        escalated,
        arguments,
        record_arguments,
        effects,
    };
    deciding::decide_by_name_async(entry, outright, gate_parameter, &call)
}

/// Waits for a decision [`decide_async`] left waiting.
#[doc(hidden)]
pub async fn resume(waiting: deciding::Waiting) -> Result<Decided, Denied> {
    waiting.resume_handed().await
}

/// After [`resume`]: the call must still have the arguments its approval saw. A refusal is awaited: it
/// is given once the call's budget units are back.
#[doc(hidden)]
pub fn confirm_handed(
    decided: Result<Decided, Denied>,
    escalated: Option<Risk>,
    arguments: &[ArgRef<'_>],
    record_arguments: bool,
    effects: Option<&Effects<'_>>,
) -> Result<Decided, deciding::Refusing> {
    let call = CallInfo {
        escalated,
        arguments,
        record_arguments,
        effects,
    };
    deciding::confirm_handed(decided, &call)
}

/// Enters `gate` for a sync call by name, until the guard is dropped.
#[doc(hidden)]
#[inline]
pub fn enter_gate(gate: &Gate) -> crate::gate::ambient::Entered {
    crate::gate::ambient::enter(gate.clone())
}

/// Hands a decision over to the tool's check, called next, until the guard is dropped.
#[doc(hidden)]
#[inline]
pub fn hand_over(decided: Decided) -> crate::gate::decide::HandOver {
    deciding::hand_over(decided)
}

/// The answer of a sync call by name, made in its gate ([`enter_gate`]), decided ([`decide`]) and run
/// with the decision handed over ([`hand_over`]).
#[doc(hidden)]
pub fn finish_sync<T: Serialize, E: fmt::Display>(
    result: Result<Result<T, E>, Denied>,
) -> CallFuture {
    CallFuture::ready(to_json(result))
}

/// Runs an async tool for a call by name: `future` decides it ([`decide`]), then awaits the tool with
/// the decision handed over ([`hand_async`]), all inside `gate`.
#[doc(hidden)]
pub fn invoke_async<T, E, F>(gate: &Gate, future: F) -> CallFuture
where
    T: Serialize,
    E: fmt::Display,
    F: Future<Output = Result<Result<T, E>, Denied>> + Send + 'static,
{
    let scoped = gate.scope(future);
    CallFuture::pending(async move { to_json(scoped.await) })
}

/// [`hand_over`] for an async tool's future: handed over for its first poll.
#[doc(hidden)]
pub fn hand_async<F: Future>(decided: Decided, future: F) -> impl Future<Output = F::Output> {
    deciding::hand_async(decided, future)
}

/// The JSON Schema (draft 2020-12) of `T`, without the title the generated type would give it.
#[doc(hidden)]
pub fn schema_of<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<T>();
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
    }
    schema.to_value()
}

/// Wraps a result type so generated code can ask whether it has a schema, without a bound on it.
#[doc(hidden)]
pub struct Output<T: ?Sized>(std::marker::PhantomData<T>);

impl<T: ?Sized> Output<T> {
    #[doc(hidden)]
    pub const fn new() -> Output<T> {
        Output(std::marker::PhantomData)
    }
}

/// Picked for `(&&Output::<T>::new())` when `T: JsonSchema`.
#[doc(hidden)]
pub trait OutputWithSchema {
    fn __toolgate_output_schema(&self) -> Option<Value>;
}

impl<T: schemars::JsonSchema> OutputWithSchema for &Output<T> {
    fn __toolgate_output_schema(&self) -> Option<Value> {
        Some(schema_of::<T>())
    }
}

/// Picked for `(&&Output::<T>::new())` otherwise.
#[doc(hidden)]
pub trait OutputWithoutSchema {
    fn __toolgate_output_schema(&self) -> Option<Value>;
}

impl<T: ?Sized> OutputWithoutSchema for Output<T> {
    fn __toolgate_output_schema(&self) -> Option<Value> {
        None
    }
}
