//! The README's first example: a tool that deletes, and a gate whose mode does not let it run.

use toolgate::{Denied, Gate, Mode, tool};

#[derive(Debug)]
struct AppError(Denied);

impl From<Denied> for AppError {
    fn from(denied: Denied) -> Self {
        AppError(denied)
    }
}

/// Delete a user account.
#[tool(risk = "HIGH_WRITE", side_effects, modes = [FULL_AUTO], domain = "users")]
async fn delete_user(id: u64) -> Result<(), AppError> {
    println!("deleted user {id}"); // runs only if the gate allowed this call
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gate = Gate::new(Mode::PartialAuto)?;
    let AppError(refused) = gate.scope(delete_user(7)).await.unwrap_err();
    // MODE_NOT_ALLOWED: tool `users.delete_user` (HIGH_WRITE) is not allowed in mode PARTIAL_AUTO; ...
    println!("{}: {refused}", refused.code());
    Ok(())
}
