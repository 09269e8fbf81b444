//! The manifests `#[tool]` and `#[toolset]` generate: the registry, defaults, JSON shape and sources.

use toolgate::policy::ModeSet;
use toolgate::{AllowAllApprover, Denied, Gate, Mode, Risk, ToolManifest, tool, toolset};

use crate::common::gates;

/// Deletes a user account.
///
/// The account cannot be restored.
#[tool(risk = "HIGH_WRITE", domain = "members")]
pub fn delete(id: u64) -> Result<u64, Denied> {
    Ok(id)
}
const DELETE_LINE: u32 = line!() - 3;

/// Looks a user up.
#[tool(risk = "READ_ONLY", domain = "members", idempotent)]
pub fn lookup(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

/// Says hello; no domain.
#[tool(risk = "READ_ONLY")]
pub fn ping() -> Result<&'static str, Denied> {
    Ok("pong")
}
const PING_LINE: u32 = line!() - 3;

/// Ignored: the argument wins.
#[tool(
    risk = "PROPOSE_ONLY",
    id = "drafts.compose_reply",
    description = "  Drafts a reply to a thread.  ",
    open_world = true,
    idempotent = false
)]
pub fn compose(thread: u64) -> Result<u64, Denied> {
    Ok(thread)
}

/// Tags a ticket.
#[tool(risk = "LOW_WRITE", domain = "tickets", modes = [FULL_AUTO, PARTIAL_AUTO])]
pub fn tag(ticket: u64) -> Result<u64, Denied> {
    Ok(ticket)
}

/// Writes a note, declaring its side effects explicitly.
#[tool(
    risk = "LOW_WRITE",
    side_effects,
    domain = "notes",
    id = "notes.append"
)]
pub fn write_note(text: &str) -> Result<usize, Denied> {
    Ok(text.len())
}

/// Summarizes anything displayable.
#[tool(risk = "READ_ONLY", domain = "generic")]
pub fn summarize<T: std::fmt::Display>(value: T) -> Result<String, Denied> {
    Ok(value.to_string())
}

pub struct Billing;

#[toolset(domain = "billing")]
impl Billing {
    /// Shows an invoice.
    #[tool(risk = "READ_ONLY")]
    pub fn invoice(&self, id: u64) -> Result<u64, Denied> {
        Ok(id)
    }

    /// Refunds an invoice.
    #[tool(risk = "HIGH_WRITE")]
    pub fn refund(&self, id: u64) -> Result<u64, Denied> {
        Ok(id)
    }

    /// Exports invoices to the ledger, which has its own domain.
    #[tool(risk = "LOW_WRITE", domain = "ledger")]
    pub fn export(&self) -> Result<(), Denied> {
        Ok(())
    }

    /// Voids an invoice under an explicit id.
    #[tool(risk = "LOW_WRITE", id = "invoices.void")]
    pub fn void(&self, id: u64) -> Result<u64, Denied> {
        Ok(id)
    }

    /// Not a tool.
    #[tool(skip)]
    pub fn cache_size(&self) -> usize {
        0
    }
}

#[toolset(domain = "inventory.stock")]
mod stock {
    use toolgate::Denied;

    pub const MODULE: &str = module_path!();

    /// Counts items.
    #[tool(risk = "READ_ONLY")]
    pub fn count(sku: &str) -> Result<usize, Denied> {
        Ok(sku.len())
    }

    /// Reserves items.
    #[tool(risk = "LOW_WRITE")]
    pub fn reserve(sku: &str) -> Result<usize, Denied> {
        Ok(sku.len())
    }
}

fn get(id: &str) -> &'static ToolManifest {
    toolgate::registry()
        .manifest(id)
        .unwrap_or_else(|| panic!("no tool `{id}` is registered"))
}

const OURS: [&str; 13] = [
    "billing.invoice",
    "billing.refund",
    "drafts.compose_reply",
    "generic.summarize",
    "inventory.stock.count",
    "inventory.stock.reserve",
    "invoices.void",
    "ledger.export",
    "notes.append",
    "ping",
    "tickets.tag",
    "members.delete",
    "members.lookup",
];

#[test]
fn manifests_are_sorted_by_id_and_hold_every_tool_once() {
    let ids: Vec<&str> = toolgate::manifests().map(|m| m.id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "sorted, without duplicates: {ids:?}"
    );
    for id in &OURS {
        assert_eq!(ids.iter().filter(|i| *i == id).count(), 1, "{id}");
    }
    assert!(
        !ids.contains(&"billing.cache_size"),
        "a skipped fn is no tool"
    );
    assert_eq!(toolgate::manifests().len(), ids.len());
    let reversed: Vec<&str> = toolgate::manifests().rev().map(|m| m.id).collect();
    assert_eq!(reversed, ids.iter().rev().copied().collect::<Vec<_>>());
    assert!(toolgate::registry().manifest("members.remove").is_none());
    assert!(toolgate::registry().manifest("members").is_none());
    assert!(toolgate::registry().manifest("").is_none());
    toolgate::check_registry().unwrap();
}

#[test]
fn a_manifest_serializes_with_exactly_its_keys() {
    let json = serde_json::to_value(get("members.delete")).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "id": "members.delete",
            "domain": "members",
            "description": "Deletes a user account.\n\nThe account cannot be restored.",
            "risk_level": "HIGH_WRITE",
            "side_effects": true,
            "allowed_modes": ["FULL_AUTO"],
            "idempotent": false,
            "open_world": false,
            "source": {
                "file": file!(),
                "line": DELETE_LINE,
                "module_path": module_path!(),
            },
        })
    );
    for manifest in toolgate::manifests() {
        let json = serde_json::to_value(manifest).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        // `untrusted_output` only where it is true, so that other manifests serialize as before.
        let mut expected = vec![
            "allowed_modes",
            "description",
            "domain",
            "id",
            "idempotent",
            "open_world",
            "risk_level",
            "side_effects",
            "source",
        ];
        if manifest.untrusted_output {
            expected.push("untrusted_output");
            assert_eq!(json["untrusted_output"], true, "{}", manifest.id);
        }
        // So are the declarations of a tool with lasting effects.
        for (key, declared) in [
            ("evidence", manifest.evidence),
            ("irreversible", manifest.irreversible),
            ("out_of_band", manifest.out_of_band),
            ("rollback", manifest.rollback),
            ("title", manifest.title.is_some()),
            ("target", manifest.target.is_some()),
        ] {
            if declared {
                expected.push(key);
                assert_ne!(json[key], false, "{}", manifest.id);
            }
        }
        expected.sort_unstable();
        assert_eq!(keys, expected, "{}", manifest.id);
        let mut source: Vec<&str> = json["source"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        source.sort_unstable();
        assert_eq!(source, ["file", "line", "module_path"]);
    }
}

#[test]
fn a_tool_without_domain_has_a_null_domain_and_its_fn_name_as_id() {
    let ping = get("ping");
    assert_eq!(ping.domain, None);
    let json = serde_json::to_value(ping).unwrap();
    assert_eq!(json["domain"], serde_json::Value::Null);
    assert_eq!(json["description"], "Says hello; no domain.");
    assert_eq!(json["source"]["line"], PING_LINE);
}

#[test]
fn allowed_modes_serialize_in_mode_order() {
    // Declared as [FULL_AUTO, PARTIAL_AUTO].
    let tag = get("tickets.tag");
    assert_eq!(
        serde_json::to_value(tag).unwrap()["allowed_modes"],
        serde_json::json!(["PARTIAL_AUTO", "FULL_AUTO"])
    );
    assert_eq!(
        serde_json::to_value(get("members.lookup")).unwrap()["allowed_modes"],
        serde_json::json!(["SHADOW", "ADVISORY", "PARTIAL_AUTO", "FULL_AUTO"])
    );
    assert_eq!(
        serde_json::to_value(get("drafts.compose_reply")).unwrap()["allowed_modes"],
        serde_json::json!(["SHADOW", "ADVISORY", "PARTIAL_AUTO", "FULL_AUTO"])
    );
}

#[test]
fn defaults_follow_the_risk() {
    let cases = [
        ("members.lookup", Risk::ReadOnly, false),
        ("drafts.compose_reply", Risk::ProposeOnly, false),
        ("tickets.tag", Risk::LowWrite, true),
        ("inventory.stock.reserve", Risk::LowWrite, true),
        ("billing.refund", Risk::HighWrite, true),
        ("members.delete", Risk::HighWrite, true),
    ];
    for (id, risk, side_effects) in cases {
        let manifest = get(id);
        assert_eq!(manifest.risk_level, risk, "{id}");
        assert_eq!(
            manifest.side_effects, side_effects,
            "{id}: implied by the risk"
        );
    }
    assert!(get("notes.append").side_effects);

    // Without `modes`, a tool is allowed in every mode whose ceiling admits its risk.
    let defaults = [
        ("members.lookup", ModeSet::ALL),
        ("billing.invoice", ModeSet::ALL),
        (
            "drafts.compose_reply",
            ModeSet::of(&[
                Mode::Shadow,
                Mode::Advisory,
                Mode::PartialAuto,
                Mode::FullAuto,
            ]),
        ),
        (
            "inventory.stock.reserve",
            ModeSet::of(&[Mode::PartialAuto, Mode::FullAuto]),
        ),
        (
            "notes.append",
            ModeSet::of(&[Mode::PartialAuto, Mode::FullAuto]),
        ),
        ("members.delete", ModeSet::of(&[Mode::FullAuto])),
        ("billing.refund", ModeSet::of(&[Mode::FullAuto])),
    ];
    for (id, modes) in defaults {
        assert_eq!(get(id).allowed_modes, modes, "{id}");
    }

    assert!(get("members.lookup").idempotent);
    assert!(!get("members.lookup").open_world);
    assert!(!get("members.delete").idempotent);
    assert!(get("drafts.compose_reply").open_world);
    assert!(!get("drafts.compose_reply").idempotent);
}

#[test]
fn ids_descriptions_and_domains() {
    assert_eq!(get("members.delete").domain, Some("members"));
    // An explicit id is used as written and the function's name plays no part.
    let compose = get("drafts.compose_reply");
    assert_eq!(compose.domain, None);
    assert_eq!(compose.description, "Drafts a reply to a thread.");
    assert!(toolgate::registry().manifest("compose").is_none());
    let note = get("notes.append");
    assert_eq!(note.domain, Some("notes"));
    assert!(toolgate::registry().manifest("notes.write_note").is_none());
    assert_eq!(
        note.description,
        "Writes a note, declaring its side effects explicitly."
    );
}

#[test]
fn a_toolset_gives_its_domain_to_its_tools() {
    for id in ["billing.invoice", "billing.refund"] {
        let manifest = get(id);
        assert_eq!(manifest.domain, Some("billing"), "{id}");
        assert_eq!(manifest.source.file, file!());
        assert_eq!(manifest.source.module_path, module_path!());
    }
    assert_eq!(get("billing.invoice").description, "Shows an invoice.");
    // A tool's own domain wins over the toolset's.
    assert_eq!(get("ledger.export").domain, Some("ledger"));
    assert!(toolgate::registry().manifest("billing.export").is_none());
    // An explicit id is not prefixed, and the toolset's domain is still the tool's.
    let void = get("invoices.void");
    assert_eq!(void.domain, Some("billing"));
    assert!(toolgate::registry().manifest("billing.void").is_none());
    // An inline module, with a dotted domain.
    for id in ["inventory.stock.count", "inventory.stock.reserve"] {
        let manifest = get(id);
        assert_eq!(manifest.domain, Some("inventory.stock"), "{id}");
        assert_eq!(manifest.source.module_path, stock::MODULE);
    }
    assert_eq!(Billing.cache_size(), 0);
}

#[test]
fn toolset_methods_are_gated() {
    let billing = Billing;
    assert_eq!(billing.invoice(1).unwrap_err().code(), "NO_GATE");
    let gate = gates::approved(Mode::FullAuto, AllowAllApprover);
    gate.run(|| {
        assert_eq!(billing.invoice(1).unwrap(), 1);
        assert_eq!(billing.refund(2).unwrap(), 2);
        billing.export().unwrap();
        assert_eq!(billing.void(3).unwrap(), 3);
        assert_eq!(stock::count("abc").unwrap(), 3);
        assert_eq!(stock::reserve("ab").unwrap(), 2);
    });
    let advisory = Gate::new(Mode::Advisory).unwrap();
    advisory.run(|| {
        assert_eq!(billing.invoice(1).unwrap(), 1);
        assert_eq!(billing.refund(2).unwrap_err().code(), "MODE_NOT_ALLOWED");
        assert_eq!(stock::reserve("ab").unwrap_err().code(), "MODE_NOT_ALLOWED");
    });
}

#[test]
fn a_generic_tool_is_one_tool_for_all_its_instances() {
    let gate = Gate::new(Mode::Shadow).unwrap();
    gate.run(|| {
        assert_eq!(summarize(1).unwrap(), "1");
        assert_eq!(summarize("a").unwrap(), "a");
    });
    assert_eq!(summarize(2.5).unwrap_err().code(), "NO_GATE");
    let count = toolgate::manifests()
        .filter(|m| m.id == "generic.summarize")
        .count();
    assert_eq!(count, 1);
}

#[test]
fn sources_point_at_the_function_name() {
    let delete = get("members.delete");
    assert_eq!(delete.source.file, file!());
    assert_eq!(delete.source.line, DELETE_LINE);
    assert_eq!(delete.source.module_path, module_path!());
    assert_eq!(get("ping").source.line, PING_LINE);
    assert_eq!(
        delete.source.to_string(),
        format!("{}:{} ({})", file!(), DELETE_LINE, module_path!())
    );
}

#[test]
fn the_other_tools_are_called_too() {
    let gate = gates::approved(Mode::FullAuto, AllowAllApprover);
    gate.run(|| {
        assert_eq!(delete(1).unwrap(), 1);
        assert_eq!(lookup(2).unwrap(), 2);
        assert_eq!(ping().unwrap(), "pong");
        assert_eq!(compose(3).unwrap(), 3);
        assert_eq!(tag(4).unwrap(), 4);
        assert_eq!(write_note("abc").unwrap(), 3);
    });
    for manifest in OURS.iter().map(|id| get(id)) {
        assert!(gate.verdict(manifest).is_some(), "{}", manifest.id);
    }
}
