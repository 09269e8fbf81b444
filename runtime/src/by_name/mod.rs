//! Calling a tool by name with JSON arguments, as agents do.
//!
//! A tool declared `callable` gets a generated adapter: its arguments parsed strictly, one parameter at a
//! time (unknown keys refused, see `params`), and a call of the same gated function, so a call by name passes the same gate, deny list, approvals and
//! audit as a direct call. There is one decision path, not two.

pub(crate) mod params;

use std::cell::{Cell, RefCell};
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::by_name::params::Param;
use crate::gate::Gate;
use crate::gate::denied::Denied;
use crate::registry::{Registry, Tool, ToolEntry};

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

/// The adapter a `callable` tool registered, read back from the registry, which keeps it untyped.
fn callable(entry: &'static ToolEntry) -> Option<&'static Callable> {
    entry.callable?.downcast_ref::<Callable>()
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

/// Why a call by name did not return the tool's result.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CallError {
    /// `UNKNOWN_TOOL`: no linked tool has this id (ids are compared exactly).
    UnknownTool {
        /// The id asked for.
        id: String,
    },
    /// `NOT_CALLABLE`: the tool exists but is not declared `callable`, so it has no JSON interface.
    NotCallable {
        /// The tool's id.
        id: &'static str,
    },
    /// `INVALID_PARAMS`: the arguments are not an object of the tool's parameters: an unknown key, a
    /// missing one, or a value of the wrong type.
    InvalidParams {
        /// Where in the arguments the problem is (`.` for the arguments object itself).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The gate refused the call; the body did not run. The code is the refusal's.
    Denied(Denied),
    /// `HANDLER_ERROR`: the tool ran and returned an error.
    HandlerError {
        /// The error's message.
        message: String,
    },
    /// `OUTPUT_ERROR`: the tool's result could not be turned into JSON.
    OutputError {
        /// What went wrong.
        message: String,
    },
}

impl CallError {
    /// The stable code: `UNKNOWN_TOOL`, `NOT_CALLABLE`, `INVALID_PARAMS`, `HANDLER_ERROR`,
    /// `OUTPUT_ERROR`, or the refusal's code.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. } => "UNKNOWN_TOOL",
            CallError::NotCallable { .. } => "NOT_CALLABLE",
            CallError::InvalidParams { .. } => "INVALID_PARAMS",
            CallError::Denied(denied) => denied.code().as_str(),
            CallError::HandlerError { .. } => "HANDLER_ERROR",
            CallError::OutputError { .. } => "OUTPUT_ERROR",
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
            CallError::UnknownTool { id } => write!(f, "no tool is named `{id}`"),
            CallError::NotCallable { id } => {
                write!(
                    f,
                    "tool `{id}` is not declared `callable`, so it cannot be called by name"
                )
            }
            CallError::InvalidParams { path, message } => {
                write!(f, "invalid arguments at `{path}`: {message}")
            }
            CallError::Denied(denied) => denied.fmt(f),
            CallError::HandlerError { message } => f.write_str(message),
            CallError::OutputError { message } => {
                write!(f, "the tool's result is not JSON: {message}")
            }
        }
    }
}

impl std::error::Error for CallError {}

impl Serialize for CallError {
    /// `{"code", "message"}`, with `path` for `INVALID_PARAMS`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let path = match self {
            CallError::InvalidParams { path, .. } => Some(path),
            _ => None,
        };
        let mut s = serializer.serialize_struct("CallError", 2 + usize::from(path.is_some()))?;
        s.serialize_field("code", self.code())?;
        s.serialize_field("message", &self.to_string())?;
        if let Some(path) = path {
            s.serialize_field("path", path)?;
        }
        s.end()
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

thread_local! {
    /// The tool (its entry's address) whose call by name is running on this thread, if any.
    static CAPTURING: Cell<usize> = const { Cell::new(0) };
    /// The refusal of that tool's gate check, if the gate refused it.
    static CAPTURED: RefCell<Option<Denied>> = const { RefCell::new(None) };
}

fn key(entry: &'static ToolEntry) -> usize {
    std::ptr::from_ref(entry) as usize
}

/// Keeps the refusal of `entry`'s gate check, when a call by name is running it on this thread.
#[inline]
pub(crate) fn offer_refusal(entry: &'static ToolEntry, denied: &Denied) {
    if CAPTURING.try_with(Cell::get) == Ok(key(entry)) {
        let _ = CAPTURED.try_with(|slot| {
            if let Ok(mut slot) = slot.try_borrow_mut() {
                *slot = Some(denied.clone());
            }
        });
    }
}

/// Called by a callable tool once its own gate check allowed it: from then on, a refusal of the same
/// tool on this thread is a nested call's, made by the body, not the refusal of the call by name.
#[inline]
pub fn started(entry: &'static ToolEntry) {
    let _ = CAPTURING.try_with(|capturing| {
        if capturing.get() == key(entry) {
            capturing.set(0);
        }
    });
}

/// Runs `f` (which calls the tool of `entry`), keeping the gate's refusal if there is one; also says
/// whether the tool's own check was decided during `f` (refused, or allowed and started).
#[inline]
fn capturing<R>(entry: &'static ToolEntry, f: impl FnOnce() -> R) -> (R, Option<Denied>, bool) {
    // Only `f` is generic: the capture itself is compiled once, not once per callable tool.
    let mut capture = Capture::begin(entry);
    let result = f();
    let (denied, decided) = capture.end();
    (result, denied, decided)
}

/// The capture of one call by name; dropped, on return or unwind, it restores the outer capture, so
/// that nested calls by name keep theirs.
///
/// No refusal is ever kept when a capture begins: a refusal is offered after its gate's approvers and
/// sinks have run, and taken by the capture's end before anything else can begin one, so only the
/// capturing tool's key needs saving. An allowed call, which clears its key as it starts, touches the
/// kept refusal not at all.
struct Capture {
    key: usize,
    outer_key: usize,
    ended: bool,
}

// Inline, so that a call by name pays no call for them; still compiled once per codegen unit of the
// tools' crate rather than once per tool, as they are not generic.
impl Capture {
    #[inline]
    fn begin(entry: &'static ToolEntry) -> Capture {
        let key = key(entry);
        Capture {
            key,
            outer_key: CAPTURING.with(|c| c.replace(key)),
            ended: false,
        }
    }

    /// The refusal kept, and whether the tool's own check was decided (refused, or allowed and started).
    #[inline]
    fn end(&mut self) -> (Option<Denied>, bool) {
        self.ended = true;
        if CAPTURING.with(Cell::get) != self.key {
            return (None, true);
        }
        let denied = CAPTURED.with(|c| c.borrow_mut().take());
        let decided = denied.is_some();
        (denied, decided)
    }
}

impl Drop for Capture {
    #[inline]
    fn drop(&mut self) {
        let _ = CAPTURING.try_with(|c| c.set(self.outer_key));
        if !self.ended {
            // Unwound between a refusal and its taking: keep nothing for the next capture.
            let _ = CAPTURED.try_with(|c| c.borrow_mut().take());
        }
    }
}

#[inline]
fn to_json<T: Serialize, E: fmt::Display>(
    result: Result<T, E>,
    denied: Option<Denied>,
) -> Result<Value, CallError> {
    match (result, denied) {
        (Ok(value), _) => serde_json::to_value(value).map_err(|e| CallError::OutputError {
            message: e.to_string(),
        }),
        (Err(_), Some(denied)) => Err(CallError::Denied(denied)),
        (Err(error), None) => Err(CallError::HandlerError {
            message: error.to_string(),
        }),
    }
}

/// Runs a sync tool for a call by name.
#[doc(hidden)]
#[inline]
pub fn invoke_sync<T: Serialize, E: fmt::Display>(
    gate: &Gate,
    entry: &'static ToolEntry,
    call: impl FnOnce() -> Result<T, E>,
) -> CallFuture {
    let (result, denied, _) = capturing(entry, || gate.run(call));
    CallFuture::ready(to_json(result, denied))
}

/// Runs an async tool for a call by name.
#[doc(hidden)]
pub fn invoke_async<T, E, F>(gate: &Gate, entry: &'static ToolEntry, future: F) -> CallFuture
where
    T: Serialize,
    E: fmt::Display,
    F: Future<Output = Result<T, E>> + Send + 'static,
{
    let scoped = gate.scope(future);
    CallFuture::pending(Capturing {
        entry,
        decided: false,
        denied: None,
        future: Box::pin(scoped),
    })
}

struct Capturing<F> {
    entry: &'static ToolEntry,
    /// The tool's own check has decided: later polls run its body, whose refusals are not the call's.
    decided: bool,
    denied: Option<Denied>,
    future: Pin<Box<F>>,
}

impl<T, E, F> Future for Capturing<F>
where
    T: Serialize,
    E: fmt::Display,
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<Value, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let poll = if this.decided {
            this.future.as_mut().poll(cx)
        } else {
            let (poll, denied, decided) = capturing(this.entry, || this.future.as_mut().poll(cx));
            this.denied = denied;
            this.decided = decided;
            poll
        };
        match poll {
            Poll::Pending => Poll::Pending,
            Poll::Ready(result) => Poll::Ready(to_json(result, this.denied.take())),
        }
    }
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
