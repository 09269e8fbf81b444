use toolgate::{Denied, Rollback, tool};

fn plan(id: &u64) -> Rollback {
    Rollback::steps(format!("restore {id}"))
}

fn not_a_plan(id: &str) -> String {
    id.to_owned()
}

/// Stop a job.
#[tool(risk = "LOW_WRITE", rollback = plan)]
fn stop_job(id: String) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

/// Pause a job.
#[tool(risk = "LOW_WRITE", rollback = not_a_plan)]
fn pause_job(id: String) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
