// Inside a `#[toolset]`, `#[tool]` is read by the toolset itself and needs no import.
use toolgate::{AllowAllApprover, Denied, Gate, Mode, Risk, toolset};

#[derive(Default)]
pub struct Users {
    names: Vec<String>,
}

#[toolset(domain = "users")]
impl Users {
    /// Count the users.
    #[tool(risk = "READ_ONLY")]
    pub fn count(&self) -> Result<usize, Denied> {
        Ok(self.names.len())
    }

    /// Add a user.
    #[tool(risk = "LOW_WRITE", id = "users.create")]
    pub fn add(&mut self, name: &str) -> Result<usize, Denied> {
        self.names.push(self.normalize(name));
        Ok(self.names.len())
    }

    /// Delete every user.
    #[toolgate::tool(risk = "HIGH_WRITE", modes = [FULL_AUTO])]
    pub fn purge(&mut self) -> Result<usize, Denied> {
        let removed = self.names.len();
        self.names.clear();
        Ok(removed)
    }

    #[tool(skip)]
    pub fn capacity(&self) -> usize {
        self.names.capacity()
    }

    #[tool(skip)]
    pub fn new() -> Self {
        Self::default()
    }

    fn normalize(&self, name: &str) -> String {
        name.trim().to_lowercase()
    }
}

fn main() {
    let mut users = Users::new();
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    gate.run(|| {
        assert_eq!(users.add(" Ada ").unwrap(), 1);
        assert_eq!(users.count().unwrap(), 1);
        assert_eq!(users.purge().unwrap_err().code(), "MODE_NOT_ALLOWED");
    });
    assert!(users.capacity() >= 1);
    assert_eq!(users.names, ["ada"]);

    let full = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .build()
        .unwrap();
    assert_eq!(full.run(|| users.purge()).unwrap(), 1);

    let ids: Vec<&str> = toolgate::manifests().map(|m| m.id).collect();
    assert_eq!(ids, ["users.count", "users.create", "users.purge"]);
    let purge = toolgate::registry().manifest("users.purge").unwrap();
    assert_eq!(purge.domain, Some("users"));
    assert_eq!(purge.risk_level, Risk::HighWrite);
    assert_eq!(purge.description, "Delete every user.");
    assert!(toolgate::registry().manifest("users.capacity").is_none());
    assert!(toolgate::registry().manifest("users.normalize").is_none());
}
