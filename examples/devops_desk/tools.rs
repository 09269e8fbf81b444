//! The desk's tools: one `#[toolset]` over the desk's state (its services, volumes and host), each tool
//! declaring what it may do. Shared by the example and its lockfile test.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Mutex;

use toolgate::{Denied, Risk, toolset};

/// Why a desk tool did not do what it was asked.
#[derive(Debug)]
pub enum DeskError {
    /// The gate refused the call.
    Refused(Denied),
    /// No such service or volume.
    NotFound(String),
}

impl From<Denied> for DeskError {
    fn from(denied: Denied) -> Self {
        DeskError::Refused(denied)
    }
}

impl fmt::Display for DeskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeskError::Refused(denied) => denied.fmt(f),
            DeskError::NotFound(what) => write!(f, "there is no {what}"),
        }
    }
}

/// How risky a shell command is, from its words: anything that asks for privileges, stops a service
/// or removes files recursively is a critical write. The declared risk (LOW_WRITE) is the floor.
pub fn classify(command: &str, _token: &Option<String>) -> Risk {
    let words: Vec<&str> = command.split_whitespace().collect();
    let privileged = words.iter().any(|w| matches!(*w, "sudo" | "doas" | "su"));
    let stops = words.windows(2).any(|w| w == ["systemctl", "stop"]);
    let wipes = words
        .windows(2)
        .any(|w| w[0] == "rm" && w[1].starts_with("-r"));
    if privileged || stops || wipes {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

/// The desk: what its tools act on, shared by every call.
pub struct Desk {
    services: Mutex<BTreeMap<String, String>>,
    volumes: Mutex<BTreeSet<String>>,
}

impl Desk {
    /// A desk with two services and two volumes.
    pub fn new() -> Desk {
        let services = [("web", "1.4.2"), ("worker", "2.0.1")]
            .map(|(name, version)| (name.to_owned(), version.to_owned()));
        Desk {
            services: Mutex::new(services.into_iter().collect()),
            volumes: Mutex::new(["web-cache", "worker-data"].map(str::to_owned).into()),
        }
    }

    fn version(&self, service: &str) -> Result<String, DeskError> {
        let services = self.services.lock().unwrap_or_else(|p| p.into_inner());
        services
            .get(service)
            .cloned()
            .ok_or_else(|| DeskError::NotFound(format!("service `{service}`")))
    }
}

impl Default for Desk {
    fn default() -> Self {
        Desk::new()
    }
}

#[toolset(domain = "desk")]
impl Desk {
    /// Show the last lines of a service's log.
    #[tool(risk = "READ_ONLY", id = "logs.tail", idempotent, callable)]
    pub fn logs_tail(
        &self,
        service: String,
        lines: Option<usize>,
    ) -> Result<Vec<String>, DeskError> {
        let version = self.version(&service)?;
        let all = [
            format!("{service} {version}: started"),
            format!("{service} {version}: listening"),
            format!("{service} {version}: healthy"),
        ];
        let lines = lines.unwrap_or(all.len()).min(all.len());
        Ok(all[all.len() - lines..].to_vec())
    }

    /// Plan a deploy of a version: what would change. Nothing is done.
    #[tool(risk = "PROPOSE_ONLY", id = "deploy.plan", callable)]
    pub fn deploy_plan(&self, service: String, version: String) -> Result<String, DeskError> {
        let current = self.version(&service)?;
        Ok(format!(
            "{service}: {current} -> {version} (restart, about 20 s of downtime)"
        ))
    }

    /// Restart a service.
    #[tool(risk = "LOW_WRITE", id = "service.restart", callable)]
    pub async fn service_restart(&self, service: String) -> Result<String, DeskError> {
        let version = self.version(&service)?;
        Ok(format!("{service} {version} restarted"))
    }

    /// Delete a volume and its data for good.
    #[tool(risk = "HIGH_WRITE", id = "volume.delete", modes = [FULL_AUTO], callable)]
    pub fn volume_delete(&self, volume: String) -> Result<String, DeskError> {
        let mut volumes = self.volumes.lock().unwrap_or_else(|p| p.into_inner());
        if !volumes.remove(&volume) {
            return Err(DeskError::NotFound(format!("volume `{volume}`")));
        }
        Ok(format!("volume {volume} deleted"))
    }

    /// Run a shell command on the desk's host, with an optional access token (simulated: the command
    /// is echoed, not run).
    #[tool(
        risk = "LOW_WRITE",
        id = "shell.run",
        escalate = classify,
        redact = [token],
        record_arguments,
        callable
    )]
    pub fn shell_run(&self, command: String, token: Option<String>) -> Result<String, DeskError> {
        let _ = token;
        Ok(format!("$ {command}\n(ok)"))
    }
}
