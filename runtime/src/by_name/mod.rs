//! Calling a tool by name with JSON arguments, as agents do.
//!
//! A tool declared `callable` gets a generated adapter that asks the gate first, before it reads the
//! arguments ([`precheck`]: a tool the gates refuse is refused whatever its arguments), then parses the
//! arguments strictly, one parameter at a time (unknown keys refused, see `params`), then has the call
//! decided in full with them, as a direct call is ([`decide`]), and calls the same gated function with
//! the decision handed to its check ([`hand`]). The refusal comes back typed, from the decision itself.

pub(crate) mod error;
pub(crate) mod params;

pub use error::CallError;

use std::fmt;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use serde::Serialize;
use serde_json::Value;

use crate::by_name::params::Param;
use crate::gate::Gate;
use crate::gate::call::{ArgRef, CallInfo};
use crate::gate::decide::{self as deciding, Decided};
use crate::gate::denied::Denied;
use crate::policy::Risk;
use crate::registry::{Registry, Tool, ToolEntry, registry};

/// What a callable tool adds to its registration: its adapter, its parameters and its output schema.
#[doc(hidden)]
pub struct Callable {
    pub invoke: fn(&Gate, Value) -> CallFuture,
    pub params: &'static [Param],
    pub output_schema: fn() -> Option<Value>,
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
    #[inline]
    pub fn call(&self, gate: &Gate, id: &str, arguments: Value) -> CallFuture {
        let Some(entry) = self.entry(id) else {
            return CallFuture::ready(Err(CallError::UnknownTool { id: id.to_owned() }));
        };
        match callable(entry) {
            Some(callable) => (callable.invoke)(gate, arguments),
            None => CallFuture::ready(Err(CallError::NotCallable {
                id: entry.manifest.id,
            })),
        }
    }
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

/// Decides a call by name with its parsed arguments; see [`invoke_sync`].
#[doc(hidden)]
#[inline]
pub fn decide(
    entry: &'static ToolEntry,
    outright: bool,
    gate_parameter: Option<&Gate>,
    escalated: Option<Risk>,
    arguments: &[ArgRef<'_>],
    record_arguments: bool,
) -> Result<Decided, Denied> {
    let call = CallInfo {
        escalated,
        arguments,
        record_arguments,
    };
    deciding::decide_by_name(entry, outright, gate_parameter, &call)
}

/// Runs a sync tool for a call by name: `call` decides it ([`decide`]) inside `gate`, then calls the
/// tool with the decision handed over ([`hand`]).
#[doc(hidden)]
#[inline]
pub fn invoke_sync<T: Serialize, E: fmt::Display>(
    gate: &Gate,
    call: impl FnOnce(&Gate) -> Result<Result<T, E>, Denied>,
) -> CallFuture {
    CallFuture::ready(to_json(gate.run(|| call(gate))))
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

/// Calls the tool a decision is for, handing the decision to its check.
#[doc(hidden)]
#[inline]
pub fn hand<R>(decided: Decided, call: impl FnOnce() -> R) -> R {
    deciding::hand(decided, call)
}

/// [`hand`] for an async tool's future.
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
