use serde_json::json;
use toolgate::{Denied, Gate, Mode, Rollback, tool, toolset};

fn describe(id: &str) -> Result<serde_json::Value, String> {
    Ok(json!({"id": id, "state": "running"}))
}

fn snapshot_plan(id: &str, _force: &bool) -> Result<Rollback, String> {
    Ok(Rollback::call("restore", json!({"snapshot": format!("snap-{id}")})))
}

/// Restore an instance from a snapshot.
#[tool(risk = "LOW_WRITE", callable)]
fn restore(snapshot: String) -> Result<String, Denied> {
    Ok(snapshot)
}

/// Terminate an instance.
#[tool(risk = "HIGH_WRITE", irreversible, target = id, evidence = describe, rollback = snapshot_plan, callable)]
fn terminate(id: String, force: bool) -> Result<(), Denied> {
    let _ = (id, force);
    Ok(())
}

/// Terminate an instance, from async code.
#[tool(risk = "HIGH_WRITE", irreversible = true, target = id, evidence = describe)]
async fn terminate_async(id: String) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

/// Stop an instance: undone by starting it.
#[tool(risk = "LOW_WRITE", target = id, rollback = start_plan)]
fn stop(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

fn start_plan(id: &u64) -> Option<Rollback> {
    Some(Rollback::steps(format!("start instance {id} again")))
}

struct Repositories;

#[toolset(domain = "repos")]
impl Repositories {
    /// Delete a repository.
    #[tool(risk = "HIGH_WRITE", irreversible, target = name, evidence = Self::describe)]
    pub fn delete(&self, name: String) -> Result<(), Denied> {
        let _ = name;
        Ok(())
    }

    #[tool(skip)]
    pub fn describe(name: &str) -> Result<String, String> {
        Ok(name.to_owned())
    }
}

fn main() {
    let manifest = |id| *toolgate::registry().manifest(id).unwrap();
    let terminating = manifest("terminate");
    assert!(terminating.irreversible && terminating.evidence && terminating.rollback);
    assert_eq!(terminating.target, Some("id"));
    assert!(manifest("repos.delete").irreversible);
    let stopping = manifest("stop");
    assert!(!stopping.irreversible && !stopping.evidence && stopping.rollback);
    // An irreversible call is never run without a two-step approval, whatever the mode.
    let gate = Gate::new(Mode::FullAuto).unwrap();
    let denied = gate.run(|| terminate("i-1".into(), false)).unwrap_err();
    assert_eq!(denied.code(), "APPROVAL_REQUIRED");
    assert!(gate.run(|| Repositories.delete("r".into())).is_err());
    assert_eq!(gate.run(|| stop(3)).unwrap(), 3);
    drop(terminate_async("i-2".into()));
}
