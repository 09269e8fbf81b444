// rmcp's hints in `annotations(..)` are checked against the risk only as literals: a hint given by a
// constant, an expression, twice, or under another spelling is refused rather than listed unchecked.
use toolgate::{Denied, tool};

const READ: bool = true;

/// Delete one.
#[tool(risk = "HIGH_WRITE", annotations(read_only_hint = READ))]
fn delete_one(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

/// Delete two.
#[tool(risk = "HIGH_WRITE", annotations(destructive_hint = !true))]
fn delete_two(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

/// Delete three.
#[tool(risk = "HIGH_WRITE", annotations(read_only_hint = { true }))]
fn delete_three(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

/// Delete four.
#[tool(risk = "HIGH_WRITE", annotations(read_only_hint = true, read_only_hint = false))]
fn delete_four(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

/// Delete five.
#[tool(risk = "HIGH_WRITE", annotations(readOnlyHint = true))]
fn delete_five(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

/// Delete six.
#[tool(risk = "HIGH_WRITE", annotations(r#read_only_hint = true))]
fn delete_six(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
