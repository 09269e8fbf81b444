#![forbid(unsafe_code)]
#![deny(warnings)]

use toolgate::{Denied, Gate, Mode, tool, toolset};

/// Look a user up.
#[tool(risk = "READ_ONLY", domain = "users")]
fn get_user(id: u64) -> Result<String, Denied> {
    Ok(format!("user {id}"))
}

/// Rename a user.
#[tool(risk = "LOW_WRITE", domain = "users", idempotent)]
pub fn rename_user(id: u64, name: &str) -> Result<String, Denied> {
    Ok(format!("user {id} is now {name}"))
}

/// Notify a user.
#[tool(risk = "LOW_WRITE", domain = "users")]
async fn notify_user(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

#[derive(Default)]
pub struct Sessions {
    open: u32,
}

#[toolset(domain = "sessions")]
impl Sessions {
    /// Count the open sessions.
    #[tool(risk = "READ_ONLY")]
    pub fn count(&self) -> Result<u32, Denied> {
        Ok(self.open)
    }

    /// Open a session.
    #[tool(risk = "LOW_WRITE")]
    pub fn open(&mut self) -> Result<u32, Denied> {
        self.open += 1;
        Ok(self.open)
    }
}

fn main() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let mut sessions = Sessions::default();
    gate.run(|| {
        assert_eq!(get_user(1).unwrap(), "user 1");
        assert_eq!(rename_user(1, "ada").unwrap(), "user 1 is now ada");
        assert_eq!(sessions.open().unwrap(), 1);
        assert_eq!(sessions.count().unwrap(), 1);
    });
    assert_eq!(get_user(1).unwrap_err().code(), "NO_GATE");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(runtime.block_on(gate.scope(notify_user(9))).unwrap(), 9);

    let shadow = Gate::new(Mode::Shadow).unwrap();
    let denied = shadow.run(|| rename_user(1, "ada")).unwrap_err();
    assert_eq!(denied.code(), "MODE_NOT_ALLOWED");
    assert_eq!(denied.tool().id, "users.rename_user");
    assert_eq!(
        shadow.run(|| sessions.open()).unwrap_err().code(),
        "MODE_NOT_ALLOWED"
    );
}
