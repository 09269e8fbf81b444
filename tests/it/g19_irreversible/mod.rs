//! Guarantee 19 of SECURITY.md: an irreversible call acts on one target, shown as it is, confirmed by
//! typing it, and runs only on the state that was approved; every plan to undo a call is shown,
//! recorded and can be run.
//!
//! The tools act on a world of instances kept in this module: each test uses instances of its own.

mod attacks;
mod attacks_in_band;
mod attacks_names;
mod every_path;
mod in_place;
mod over_mcp;
mod records;
mod refusals;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use toolgate::{Denied, Rollback, tool};

/// An instance of the world: its state, how often the probe read it, and a change of state the
/// probe makes itself at a given read (another actor changing the target meanwhile).
#[derive(Default)]
struct Instance {
    state: String,
    reads: u32,
    flip: Option<(u32, String)>,
    terminated_by_body: u32,
    launched: u32,
}

static WORLD: Mutex<Option<HashMap<String, Instance>>> = Mutex::new(None);

fn world() -> MutexGuard<'static, Option<HashMap<String, Instance>>> {
    WORLD.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with<T>(id: &str, f: impl FnOnce(&mut Instance) -> T) -> Option<T> {
    world().get_or_insert_with(HashMap::new).get_mut(id).map(f)
}

/// Puts instance `id` in the world, in `state`.
pub(crate) fn put(id: &str, state: &str) {
    world().get_or_insert_with(HashMap::new).insert(
        id.to_owned(),
        Instance {
            state: state.to_owned(),
            ..Instance::default()
        },
    );
}

/// Sets instance `id`'s state, as another actor would.
pub(crate) fn set(id: &str, state: &str) {
    with(id, |i| i.state = state.to_owned()).expect("a known instance");
}

/// At the probe's `read`-th read of `id` (counted from 1), the state becomes `state` just before it
/// is read.
pub(crate) fn flip_at(id: &str, read: u32, state: &str) {
    with(id, |i| i.flip = Some((read, state.to_owned()))).expect("a known instance");
}

/// How many times the body of a terminating tool ran on `id`.
pub(crate) fn terminated(id: &str) -> u32 {
    with(id, |i| i.terminated_by_body).unwrap_or(0)
}

/// How many times the rollback tool launched `id` again.
pub(crate) fn launched(id: &str) -> u32 {
    with(id, |i| i.launched).unwrap_or(0)
}

pub(crate) fn reads(id: &str) -> u32 {
    with(id, |i| i.reads).unwrap_or(0)
}

/// The evidence probe: what the instance looks like now. Unknown instances cannot be read.
pub(crate) fn describe(id: &str) -> Result<Value, String> {
    with(id, |i| {
        i.reads += 1;
        if let Some((at, state)) = &i.flip
            && *at == i.reads
        {
            i.state = state.clone();
        }
        json!({"id": id, "state": i.state})
    })
    .ok_or_else(|| format!("no instance `{id}`"))
}

/// How many plans were made for calls whose reason is `counted`.
pub(crate) static PLANS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The rollback plan: launch the instance again from its last snapshot; none when told so.
pub(crate) fn relaunch_plan(instance_id: &str, reason: &str) -> Result<Rollback, String> {
    if reason == "counted" {
        PLANS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    if reason == "no snapshot" {
        return Err(format!("`{instance_id}` has no snapshot"));
    }
    Ok(Rollback::call(
        "irr.launch",
        json!({"instance_id": instance_id}),
    ))
}

fn terminate_body(instance_id: &str) -> String {
    with(instance_id, |i| {
        i.state = "terminated".to_owned();
        i.terminated_by_body += 1;
    });
    format!("{instance_id} terminated")
}

/// Terminate a cloud instance. It cannot be undone.
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "irr", callable, record_arguments,
       irreversible, target = instance_id, evidence = describe, rollback = relaunch_plan)]
pub(crate) fn terminate(instance_id: String, reason: String) -> Result<String, Denied> {
    let _ = reason;
    Ok(terminate_body(&instance_id))
}

/// Terminate a cloud instance, from async code. It cannot be undone.
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "irr", callable, record_arguments,
       irreversible, target = instance_id, evidence = describe, rollback = relaunch_plan)]
pub(crate) async fn terminate_async(instance_id: String, reason: String) -> Result<String, Denied> {
    let _ = reason;
    Ok(terminate_body(&instance_id))
}

/// Launch an instance again from its last snapshot: the plan that undoes a termination.
#[tool(risk = "LOW_WRITE", domain = "irr", callable)]
pub(crate) fn launch(instance_id: String) -> Result<String, Denied> {
    with(&instance_id, |i| {
        i.state = "running".to_owned();
        i.launched += 1;
    });
    Ok(format!("{instance_id} launched"))
}

/// Stop an instance: stateful, undone by starting it (the seed's T2), and not irreversible.
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "irr", callable, target = instance_id,
       evidence = describe, rollback = start_plan)]
pub(crate) fn stop(instance_id: String) -> Result<String, Denied> {
    with(&instance_id, |i| i.state = "stopped".to_owned());
    Ok(format!("{instance_id} stopped"))
}

pub(crate) fn start_plan(instance_id: &str) -> Rollback {
    Rollback::steps(format!("start `{instance_id}` again from the console"))
}
