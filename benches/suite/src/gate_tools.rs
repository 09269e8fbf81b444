//! A trivial tool, once as a plain function and once as a `#[tool]`, so that the difference between
//! calling the two is what the gate costs.
//!
//! Every function is `#[inline(never)]`, so that each side is a real call of its own function.

use toolgate::{Denied, Gate, Mode, tool};

/// The mode of the benchmarks' gate: `gate.add` runs, `gate.delete` is refused (`MODE_NOT_ALLOWED`).
pub const MODE: Mode = Mode::PartialAuto;

/// A gate in [`MODE`], with no audit sink, no deny rule and no approver.
///
/// # Panics
///
/// If two linked tools share an id.
pub fn gate() -> Gate {
    Gate::new(MODE).expect("the benchmarks' tools have distinct ids")
}

/// The body, without `#[tool]`.
#[inline(never)]
pub fn add_direct(a: u64, b: u64) -> Result<u64, Denied> {
    Ok(a.wrapping_add(b))
}

/// The body, as a tool that the gate allows.
#[tool(risk = "READ_ONLY", domain = "gate")]
#[inline(never)]
pub fn add(a: u64, b: u64) -> Result<u64, Denied> {
    Ok(a.wrapping_add(b))
}

/// The body, as a tool that the gate refuses in [`MODE`].
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "gate")]
#[inline(never)]
pub fn delete(a: u64, b: u64) -> Result<u64, Denied> {
    Ok(a.wrapping_add(b))
}

/// The body as an `async fn`, without `#[tool]`.
#[inline(never)]
pub async fn add_async_direct(a: u64, b: u64) -> Result<u64, Denied> {
    Ok(a.wrapping_add(b))
}

/// The body as an `async fn` tool that the gate allows.
#[tool(risk = "READ_ONLY", domain = "gate")]
#[inline(never)]
pub async fn add_async(a: u64, b: u64) -> Result<u64, Denied> {
    Ok(a.wrapping_add(b))
}
