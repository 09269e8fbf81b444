use toolgate::{Denied, Mode, Risk, tool, toolset};
use toolgate::policy::ModeSet;

#[tool(risk = "READ_ONLY")]
fn read() -> Result<(), Denied> {
    Ok(())
}

#[tool(risk = "PROPOSE_ONLY", domain = "notes")]
fn propose() -> Result<(), Denied> {
    Ok(())
}

#[tool(risk = "LOW_WRITE", domain = "notes")]
fn low() -> Result<(), Denied> {
    Ok(())
}

#[tool(risk = "HIGH_WRITE", domain = "notes")]
fn high() -> Result<(), Denied> {
    Ok(())
}

#[tool(
    risk = "LOW_WRITE",
    side_effects = true,
    modes = [FULL_AUTO],
    id = "notes.archive.all",
    domain = "notes",
    idempotent,
    open_world = true,
)]
fn archive() -> Result<(), Denied> {
    Ok(())
}

#[tool(risk = "READ_ONLY", side_effects = false, idempotent = false)]
fn explicit_defaults() -> Result<(), Denied> {
    Ok(())
}

#[toolset(domain = "notes.shared")]
mod shared {
    use toolgate::Denied;

    #[tool(risk = "READ_ONLY")]
    pub fn list() -> Result<(), Denied> {
        Ok(())
    }

    #[tool(risk = "READ_ONLY", domain = "other")]
    pub fn own_domain() -> Result<(), Denied> {
        Ok(())
    }
}

fn main() {
    let all = ModeSet::of(&Mode::ALL);
    let get = |id: &str| *toolgate::registry().manifest(id).unwrap();

    let read_m = get("read");
    assert_eq!(read_m.domain, None);
    assert_eq!(read_m.risk_level, Risk::ReadOnly);
    assert!(!read_m.side_effects);
    assert_eq!(read_m.allowed_modes, all);
    assert!(!read_m.idempotent);
    assert!(!read_m.open_world);

    let propose_m = get("notes.propose");
    assert_eq!(propose_m.domain, Some("notes"));
    assert!(!propose_m.side_effects);
    assert_eq!(propose_m.allowed_modes, all);

    let low_m = get("notes.low");
    assert!(low_m.side_effects);
    assert_eq!(
        low_m.allowed_modes,
        ModeSet::of(&[Mode::PartialAuto, Mode::FullAuto])
    );

    let high_m = get("notes.high");
    assert!(high_m.side_effects);
    assert_eq!(high_m.allowed_modes, ModeSet::of(&[Mode::FullAuto]));

    let archive_m = get("notes.archive.all");
    assert_eq!(archive_m.domain, Some("notes"));
    assert!(archive_m.side_effects);
    assert_eq!(archive_m.allowed_modes, ModeSet::of(&[Mode::FullAuto]));
    assert!(archive_m.idempotent);
    assert!(archive_m.open_world);

    let explicit = get("explicit_defaults");
    assert!(!explicit.side_effects);
    assert!(!explicit.idempotent);

    assert_eq!(get("notes.shared.list").domain, Some("notes.shared"));
    assert_eq!(get("other.own_domain").domain, Some("other"));

    assert_eq!(toolgate::manifests().len(), 8);
    toolgate::check_registry().unwrap();

    let json = serde_json::to_value(get("notes.high")).unwrap();
    assert_eq!(json["risk_level"], "HIGH_WRITE");
    assert_eq!(json["allowed_modes"], serde_json::json!(["FULL_AUTO"]));
    assert_eq!(json["side_effects"], true);
    assert!(json["source"]["line"].as_u64().unwrap() > 0);

    for result in [
        read(),
        propose(),
        low(),
        high(),
        archive(),
        explicit_defaults(),
        shared::list(),
        shared::own_domain(),
    ] {
        assert_eq!(result.unwrap_err().code(), "NO_GATE");
    }
}
