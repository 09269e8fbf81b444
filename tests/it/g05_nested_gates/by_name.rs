//! Guarantee 5 (Nested gates intersect), against calls by name (`registry().call`), with hooks
//! fired from the user code a call runs.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::Ordering::SeqCst;
use std::task::Poll;

use crate::fixtures::by_name::*;
use serde_json::json;
use toolgate::{Gate, Mode, registry};

/// A tool body calling itself by name (and directly) under a narrower gate, and `hi` by name.
#[test]
fn a6_body_calling_itself_by_name_under_a_narrower_gate() {
    let _s = serial();
    let (gate, sink) = fresh(Mode::FullAuto);
    *WIDE.lock().unwrap() = Some(gate.clone());
    assert_eq!(
        call(&gate, "rt2.lo", json!({"x": 7})).unwrap(),
        json!("Err(\"MODE_NOT_ALLOWED\")")
    );
    assert_eq!(
        call(&gate, "rt2.lo", json!({"x": 17})).unwrap(),
        json!("Err(\"MODE_NOT_ALLOWED\")")
    );
    assert_eq!(
        call(&gate, "rt2.lo", json!({"x": 27})).unwrap(),
        json!("Err(\"MODE_NOT_ALLOWED\")")
    );
    assert_eq!(take_runs(), vec![("lo", 7), ("lo", 17), ("lo", 27)]);
    assert_balanced(&sink.0.records());
}

/// Calling by name from inside `run` of a narrower gate: both gates decide.
#[test]
fn a7_call_by_name_inside_a_narrower_gate() {
    let _s = serial();
    let (gate, sink, narrow) = fresh_under_shadow(Mode::FullAuto);
    for id in ["rt2.lo", "rt2.hi", "rt2.glo", "rt2.esc_lo", "rt2set.assoc"] {
        let r = narrow.run(|| call(&gate, id, json!({"x": 3})));
        assert_eq!(r.unwrap_err().code(), "MODE_NOT_ALLOWED", "{id}");
    }
    for id in ["rt2.alo", "rt2.ahi"] {
        let r = narrow.run(|| block_on(registry().call(&gate, id, json!({"x": 3}))));
        assert_eq!(r.unwrap_err().code(), "MODE_NOT_ALLOWED", "{id}");
    }
    assert!(take_runs().is_empty());
    assert_eq!(APPROVALS.load(SeqCst), 0);
    assert_balanced(&sink.0.records());
}

/// An async tool by name whose future is polled across a `lower` between polls: the body that had
/// not started yet (x >= 1000 yields inside the body, after the decision) may finish; a fresh one
/// does not start.
#[test]
fn a16_async_by_name_created_in_scope_of_narrow_polled_later() {
    let _s = serial();
    let (gate, sink, narrow) = fresh_under_shadow(Mode::PartialAuto);
    // created inside a narrower gate, polled outside it
    let fut = narrow.run(|| registry().call(&gate, "rt2.alo", json!({"x": 11})));
    let r = block_on(fut);
    // documented: a call must pass every gate entered around it
    let runs = take_runs();
    assert_balanced(&sink.0.records());
    assert!(
        runs.is_empty(),
        "created inside SHADOW gate, ran: {runs:?} ({r:?})"
    );
}

/// The first poll of an async call by name inside a narrower gate's `run`: refused, as is the direct
/// call polled the same way.
#[test]
fn b3_async_first_polled_inside_a_narrower_gate() {
    let _s = serial();
    reset();
    let (gate, _sink) = audited(Mode::PartialAuto);
    let narrow = Gate::new(Mode::Shadow).unwrap();
    let mut direct = Box::pin(gate.scope(alo(Evil(21))));
    let d = narrow.run(|| poll_once(&mut direct));
    let mut by_name = registry().call(&gate, "rt2.alo", json!({"x": 22}));
    let n = narrow.run(|| poll_once(&mut by_name));
    let d = match d {
        Poll::Ready(r) => r.map_err(|e| e.code().to_string()),
        Poll::Pending => panic!(),
    };
    let n = match n {
        Poll::Ready(r) => r.map_err(|e| e.code().to_string()),
        Poll::Pending => panic!(),
    };
    assert_eq!(d.map(|v| json!(v)), n, "direct vs by name");
    assert!(take_runs().is_empty());
}

/// A fresh gate at `mode`, its sink, and a SHADOW gate to call it from.
fn fresh_under_shadow(mode: Mode) -> (Gate, HookSink, Gate) {
    let (gate, sink) = fresh(mode);
    (gate, sink, Gate::new(Mode::Shadow).unwrap())
}
