//! Short forms of what the tests of guarantees 4, 7, 13, 14 and 15 write again and again: a gate from
//! its mode and what a test adds to its builder (a gate that cannot be built fails the test), the code
//! of a refused call, what a refused call by name or over MCP says, who decided the calls that
//! entered, tools that count their runs, and threads racing on one gate.

use std::fmt::Debug;

use serde_json::Value;
use tokio::runtime::Runtime;
use toolgate::audit::{AuditRecord, Decision, Stage};
use toolgate::registry::CallError;
use toolgate::{DenialCode, Denied, Gate, GateBuilder, Mode};

/// A gate in `mode`, with what `more` adds.
pub(crate) fn built(mode: Mode, more: impl FnOnce(GateBuilder) -> GateBuilder) -> Gate {
    more(Gate::builder().mode(mode)).build().unwrap()
}

/// The code of the refusal `result` must be.
pub(crate) fn denial<T: Debug>(result: Result<T, Denied>) -> DenialCode {
    result.unwrap_err().code()
}

/// Who decided each call that entered, and how: the `enter` records' decisions and deciders.
pub(crate) fn entered(records: &[AuditRecord]) -> Vec<(Option<Decision>, Option<String>)> {
    let enters = records.iter().filter(|r| r.stage == Stage::Enter);
    enters.map(|r| (r.decision, r.by.clone())).collect()
}

/// What a refused call of `tool` by name says, run on `rt`.
pub(crate) fn refused_by_name(rt: &Runtime, gate: &Gate, tool: &str, args: Value) -> CallError {
    let call = toolgate::registry().call(gate, tool, args);
    rt.block_on(call).unwrap_err()
}

/// What a refused call of `tool` over MCP answers (as JSON), run on `rt`.
#[cfg(feature = "mcp")]
pub(crate) fn refused_over_mcp(rt: &Runtime, gate: &Gate, tool: &str, args: Value) -> Value {
    let server = toolgate::mcp::ToolgateServer::new(gate.clone());
    let result = rt.block_on(server.call(tool, args.as_object().cloned()));
    let result = result.unwrap();
    assert_eq!(result.is_error, Some(true));
    serde_json::to_value(&result).unwrap()
}

/// Asserts that `result` is a refusal with `code`.
#[track_caller]
pub(crate) fn assert_denied<T: Debug>(result: Result<T, Denied>, code: DenialCode) {
    assert_eq!(denial(result), code);
}

/// `#[tool]` functions that count their runs in `$count` and answer their one argument, each with
/// its doc and its `async` if any, all with the `#[tool(..)]` arguments in parentheses:
/// `counted_tools!(POSTS, (risk = "LOW_WRITE", domain = "d"); "Post." fn post(text: String); ...);`
macro_rules! counted_tools {
    ($count:ident, $tool:tt;) => {};
    ($count:ident, $tool:tt; $doc:tt async fn $($rest:tt)*) => {
        counted_tools!(@ [async] $count, $tool; $doc $($rest)*);
    };
    ($count:ident, $tool:tt; $doc:tt fn $($rest:tt)*) => {
        counted_tools!(@ [] $count, $tool; $doc $($rest)*);
    };
    (@ [$($asyncness:tt)*] $count:ident, ($($tool:tt)*); $doc:tt $name:ident($arg:ident: $ty:ty); $($rest:tt)*) => {
        #[doc = $doc]
        #[toolgate::tool($($tool)*)]
        $($asyncness)* fn $name($arg: $ty) -> Result<$ty, toolgate::Denied> {
            $count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok($arg)
        }
        counted_tools!($count, ($($tool)*); $($rest)*);
    };
}
pub(crate) use counted_tools;

/// Runs `each(gate, t)` on threads `t` in `0..threads`, each with a clone of `gate`, all released at
/// once; returns what each answered, in thread order.
#[cfg(feature = "mcp-http")]
pub(crate) fn racing<T: Send + 'static>(
    gate: &Gate,
    threads: usize,
    each: impl Fn(&Gate, usize) -> T + Send + Sync + 'static,
) -> Vec<T> {
    use std::sync::{Arc, Barrier};
    let barrier = Arc::new(Barrier::new(threads));
    let each = Arc::new(each);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (gate, barrier, each) = (gate.clone(), barrier.clone(), each.clone());
            std::thread::spawn(move || {
                barrier.wait();
                each(&gate, t)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}
