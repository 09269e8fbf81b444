use toolgate::{Denied, Gate, Mode, tool, toolset};

/// Fetch a web page.
#[tool(risk = "READ_ONLY", open_world, untrusted_output, callable)]
fn fetch(url: String) -> Result<String, Denied> {
    Ok(url)
}

/// Read the inbox.
#[tool(risk = "READ_ONLY", untrusted_output = true)]
async fn inbox() -> Result<Vec<String>, Denied> {
    Ok(Vec::new())
}

/// Read a setting.
#[tool(risk = "READ_ONLY", untrusted_output = false)]
fn setting() -> Result<String, Denied> {
    Ok(String::new())
}

struct Files;

#[toolset(domain = "files")]
impl Files {
    /// Read a file a user uploaded.
    #[tool(risk = "READ_ONLY", untrusted_output)]
    pub fn upload(&self, name: String) -> Result<String, Denied> {
        Ok(name)
    }
}

fn main() {
    let untrusted = |id| toolgate::registry().manifest(id).unwrap().untrusted_output;
    assert!(untrusted("fetch") && untrusted("inbox") && untrusted("files.upload"));
    assert!(!untrusted("setting"));
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    assert_eq!(gate.run(|| Files.upload("a".into())).unwrap(), "a");
    assert_eq!(gate.taint().unwrap().tool, "files.upload");
    assert_eq!(gate.run(|| fetch("u".into())).unwrap(), "u");
    assert_eq!(gate.run(setting).unwrap(), "");
    drop(inbox());
}
