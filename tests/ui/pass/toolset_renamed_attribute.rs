// `tool` under another name inside a #[toolset] still gets the set's domain, on methods too.
use toolgate::tool as gated;
use toolgate::{Denied, Gate, Mode, toolset};

pub struct Users;

#[toolset(domain = "users")]
impl Users {
    /// Count the users.
    #[gated(risk = "READ_ONLY")]
    pub fn count(&self) -> Result<u32, Denied> {
        Ok(3)
    }

    /// Count the admins, by name too.
    #[gated(risk = "READ_ONLY", callable)]
    pub fn admins() -> Result<u32, Denied> {
        Ok(1)
    }
}

fn main() {
    let ids: Vec<&str> = toolgate::manifests().map(|m| m.id).collect();
    assert_eq!(ids, ["users.admins", "users.count"]);
    let gate = Gate::new(Mode::Shadow).unwrap();
    assert_eq!(gate.run(|| Users.count()).unwrap(), 3);
    let by_name = toolgate::registry()
        .call(&gate, "users.admins", serde_json::json!({}))
        .now()
        .unwrap()
        .unwrap();
    assert_eq!(by_name, serde_json::json!(1));
}
