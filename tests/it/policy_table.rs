//! The decision table, checked against a reference written here from the rules alone: exhaustively
//! over its finite domain, then through real gates and real tools, then as properties.

use std::cell::Cell;
use std::collections::HashSet;
use std::str::FromStr;

use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use toolgate::policy::ModeSet;
use toolgate::policy::{self, Facts, Verdict};
use toolgate::{AllowAllApprover, Approval, ApprovalRequest, Denied, Gate, Mode, Risk, tool};

// ---------------------------------------------------------------------------------------------------------
// The reference
// ---------------------------------------------------------------------------------------------------------

/// What the rules say of a call before any approver is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expected {
    Allow,
    NeedsApproval,
    Refuse(&'static str),
}

fn risk_rank(risk: Risk) -> u8 {
    match risk {
        Risk::ReadOnly => 0,
        Risk::ProposeOnly => 1,
        Risk::LowWrite => 2,
        Risk::HighWrite => 3,
    }
}

/// The rank of the highest risk a mode admits.
fn ceiling_rank(mode: Mode) -> u8 {
    match mode {
        Mode::Shadow | Mode::Advisory => 1,
        Mode::PartialAuto => 2,
        Mode::FullAuto => 3,
    }
}

fn mode_bit(mode: Mode) -> u8 {
    match mode {
        Mode::Shadow => 1,
        Mode::Advisory => 2,
        Mode::PartialAuto => 4,
        Mode::FullAuto => 8,
    }
}

/// The modes of a 4-bit mask, bit 0 being SHADOW.
fn modes_of_mask(mask: u8) -> Vec<Mode> {
    [
        Mode::Shadow,
        Mode::Advisory,
        Mode::PartialAuto,
        Mode::FullAuto,
    ]
    .into_iter()
    .filter(|&m| mask & mode_bit(m) != 0)
    .collect()
}

fn reference(
    risk: Risk,
    mode: Mode,
    allowed_mask: u8,
    deny_listed: bool,
    can_approve: bool,
) -> Expected {
    let in_allowed = allowed_mask & mode_bit(mode) != 0;
    let under_ceiling = risk_rank(risk) <= ceiling_rank(mode);
    match (deny_listed, in_allowed, under_ceiling, risk, can_approve) {
        (true, _, _, _, _) => Expected::Refuse("DENY_LISTED"),
        (false, false, _, _, _) => Expected::Refuse("MODE_NOT_ALLOWED"),
        (false, true, false, _, _) => Expected::Refuse("ABOVE_CEILING"),
        (false, true, true, Risk::HighWrite, true) => Expected::NeedsApproval,
        (false, true, true, Risk::HighWrite, false) => Expected::Refuse("APPROVAL_REQUIRED"),
        (false, true, true, _, _) => Expected::Allow,
    }
}

/// How the approver of a gate answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ApproverKind {
    Absent,
    Approves,
    Rejects,
    Panics,
}

const APPROVERS: [ApproverKind; 4] = [
    ApproverKind::Absent,
    ApproverKind::Approves,
    ApproverKind::Rejects,
    ApproverKind::Panics,
];

/// What finally happens to a call: it runs, or it is refused with a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Runs,
    Refused(&'static str),
}

fn reference_outcome(expected: Expected, approver: ApproverKind) -> Outcome {
    match (expected, approver) {
        (Expected::Allow, _) => Outcome::Runs,
        (Expected::Refuse(code), _) => Outcome::Refused(code),
        (Expected::NeedsApproval, ApproverKind::Absent) => {
            unreachable!("a gate without an approver never needs one")
        }
        (Expected::NeedsApproval, ApproverKind::Approves) => Outcome::Runs,
        (Expected::NeedsApproval, ApproverKind::Rejects | ApproverKind::Panics) => {
            Outcome::Refused("APPROVAL_REJECTED")
        }
    }
}

fn actual(verdict: Verdict) -> Expected {
    match verdict {
        Verdict::Allow => Expected::Allow,
        Verdict::NeedsApproval => Expected::NeedsApproval,
        Verdict::Refuse(code) => Expected::Refuse(code.as_str()),
    }
}

fn facts(risk: Risk, mode: Mode, allowed_mask: u8, deny_listed: bool) -> Facts {
    Facts {
        risk,
        allowed_modes: ModeSet::of(&modes_of_mask(allowed_mask)),
        mode,
        deny_listed,
        can_approve: true,
    }
}

fn all_risks() -> [Risk; 4] {
    [
        Risk::ReadOnly,
        Risk::ProposeOnly,
        Risk::LowWrite,
        Risk::HighWrite,
    ]
}

fn all_modes() -> [Mode; 4] {
    [
        Mode::Shadow,
        Mode::Advisory,
        Mode::PartialAuto,
        Mode::FullAuto,
    ]
}

// ---------------------------------------------------------------------------------------------------------
// The whole domain of `decide`
// ---------------------------------------------------------------------------------------------------------

#[test]
fn every_subset_is_the_sixteen_mode_sets() {
    let subsets: Vec<ModeSet> = ModeSet::every_subset().collect();
    assert_eq!(subsets.len(), 16);
    let distinct: HashSet<ModeSet> = subsets.iter().copied().collect();
    let mine: HashSet<ModeSet> = (0..16u8)
        .map(|mask| ModeSet::of(&modes_of_mask(mask)))
        .collect();
    assert_eq!(distinct, mine);
}

#[test]
fn decide_matches_the_reference_over_the_whole_domain() {
    let mut checked = 0;
    let mut seen = HashSet::new();
    for risk in all_risks() {
        for mode in all_modes() {
            for allowed in ModeSet::every_subset() {
                let mask = all_modes()
                    .into_iter()
                    .filter(|&m| allowed.contains(m))
                    .map(mode_bit)
                    .sum();
                for (deny_listed, can_approve) in
                    [(false, false), (false, true), (true, false), (true, true)]
                {
                    let got = actual(policy::decide(Facts {
                        risk,
                        allowed_modes: allowed,
                        mode,
                        deny_listed,
                        can_approve,
                    }));
                    let want = reference(risk, mode, mask, deny_listed, can_approve);
                    assert_eq!(
                        got, want,
                        "{risk} in {mode}, allowed {allowed}, deny list {deny_listed}, \
                         can approve {can_approve}"
                    );
                    seen.insert(format!("{want:?}"));
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 4 * 4 * 16 * 2 * 2);
    // Every verdict of the table is reached somewhere in the domain.
    assert_eq!(seen.len(), 6, "{seen:?}");
}

#[test]
fn ceilings_and_their_derived_helpers() {
    let expected_ceiling = [
        (Mode::Shadow, Risk::ProposeOnly),
        (Mode::Advisory, Risk::ProposeOnly),
        (Mode::PartialAuto, Risk::LowWrite),
        (Mode::FullAuto, Risk::HighWrite),
    ];
    for (mode, ceiling) in expected_ceiling {
        assert_eq!(policy::ceiling(mode), ceiling, "{mode}");
    }
    for risk in all_risks() {
        let admitting: Vec<Mode> = all_modes()
            .into_iter()
            .filter(|&m| risk_rank(risk) <= ceiling_rank(m))
            .collect();
        assert_eq!(
            policy::modes_admitting(risk),
            ModeSet::of(&admitting),
            "{risk}"
        );
        assert_eq!(policy::lowest_mode_admitting(risk), admitting[0], "{risk}");
        assert_eq!(
            policy::requires_approval(risk),
            risk == Risk::HighWrite,
            "{risk}"
        );
        for mode in all_modes() {
            assert_eq!(
                policy::admits(mode, risk),
                admitting.contains(&mode),
                "{mode} {risk}"
            );
        }
    }
    assert_eq!(
        policy::modes_admitting(Risk::HighWrite),
        ModeSet::of(&[Mode::FullAuto])
    );
    assert_eq!(policy::modes_admitting(Risk::ReadOnly), ModeSet::ALL);
}

// ---------------------------------------------------------------------------------------------------------
// Real tools through real gates
// ---------------------------------------------------------------------------------------------------------

thread_local! {
    static RAN: Cell<usize> = const { Cell::new(0) };
}

fn ran() -> usize {
    RAN.with(Cell::get)
}

struct MatrixTool {
    id: &'static str,
    declared_risk: &'static str,
    /// The modes written in the declaration; `None` when the tool relies on the default.
    declared_modes: Option<&'static [&'static str]>,
    call: fn() -> Result<(), Denied>,
}

/// Declares one tool per line, each counting its runs in `RAN`, and lists them.
macro_rules! matrix {
    (@modes) => { None };
    (@modes [$($mode:ident),*]) => { Some(&[$(stringify!($mode)),*]) };
    ($($name:ident: $risk:tt $([$($mode:ident),*])?;)*) => {
        mod matrix {
            use super::*;
            $(
                #[tool(risk = $risk $(, modes = [$($mode),*])?, domain = "matrix")]
                pub fn $name() -> Result<(), Denied> {
                    RAN.with(|ran| ran.set(ran.get() + 1));
                    Ok(())
                }
            )*
        }

        fn matrix_tools() -> Vec<MatrixTool> {
            vec![$(MatrixTool {
                id: concat!("matrix.", stringify!($name)),
                declared_risk: $risk,
                declared_modes: matrix!(@modes $([$($mode),*])?),
                call: matrix::$name,
            }),*]
        }
    };
}

// Every declaration the macros accept: each non-empty set of modes admitting the risk, and the default.
matrix! {
    ro_default: "READ_ONLY";
    ro_s: "READ_ONLY" [SHADOW];
    ro_a: "READ_ONLY" [ADVISORY];
    ro_p: "READ_ONLY" [PARTIAL_AUTO];
    ro_f: "READ_ONLY" [FULL_AUTO];
    ro_sa: "READ_ONLY" [SHADOW, ADVISORY];
    ro_sp: "READ_ONLY" [SHADOW, PARTIAL_AUTO];
    ro_sf: "READ_ONLY" [SHADOW, FULL_AUTO];
    ro_ap: "READ_ONLY" [ADVISORY, PARTIAL_AUTO];
    ro_af: "READ_ONLY" [ADVISORY, FULL_AUTO];
    ro_pf: "READ_ONLY" [PARTIAL_AUTO, FULL_AUTO];
    ro_sap: "READ_ONLY" [SHADOW, ADVISORY, PARTIAL_AUTO];
    ro_saf: "READ_ONLY" [SHADOW, ADVISORY, FULL_AUTO];
    ro_spf: "READ_ONLY" [SHADOW, PARTIAL_AUTO, FULL_AUTO];
    ro_apf: "READ_ONLY" [ADVISORY, PARTIAL_AUTO, FULL_AUTO];
    ro_sapf: "READ_ONLY" [SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO];
    po_default: "PROPOSE_ONLY";
    po_s: "PROPOSE_ONLY" [SHADOW];
    po_a: "PROPOSE_ONLY" [ADVISORY];
    po_p: "PROPOSE_ONLY" [PARTIAL_AUTO];
    po_f: "PROPOSE_ONLY" [FULL_AUTO];
    po_sa: "PROPOSE_ONLY" [SHADOW, ADVISORY];
    po_sp: "PROPOSE_ONLY" [SHADOW, PARTIAL_AUTO];
    po_sf: "PROPOSE_ONLY" [SHADOW, FULL_AUTO];
    po_ap: "PROPOSE_ONLY" [ADVISORY, PARTIAL_AUTO];
    po_af: "PROPOSE_ONLY" [ADVISORY, FULL_AUTO];
    po_pf: "PROPOSE_ONLY" [PARTIAL_AUTO, FULL_AUTO];
    po_sap: "PROPOSE_ONLY" [SHADOW, ADVISORY, PARTIAL_AUTO];
    po_saf: "PROPOSE_ONLY" [SHADOW, ADVISORY, FULL_AUTO];
    po_spf: "PROPOSE_ONLY" [SHADOW, PARTIAL_AUTO, FULL_AUTO];
    po_apf: "PROPOSE_ONLY" [ADVISORY, PARTIAL_AUTO, FULL_AUTO];
    po_sapf: "PROPOSE_ONLY" [SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO];
    lw_default: "LOW_WRITE";
    lw_p: "LOW_WRITE" [PARTIAL_AUTO];
    lw_f: "LOW_WRITE" [FULL_AUTO];
    lw_pf: "LOW_WRITE" [PARTIAL_AUTO, FULL_AUTO];
    hw_default: "HIGH_WRITE";
    hw_f: "HIGH_WRITE" [FULL_AUTO];
}

/// The allowed-mode mask a tool's declaration means, worked out here: the listed modes, else every mode
/// whose ceiling admits the risk.
fn declared_mask(tool: &MatrixTool) -> u8 {
    let risk: Risk = tool.declared_risk.parse().unwrap();
    match tool.declared_modes {
        Some(names) => names
            .iter()
            .map(|name| mode_bit(name.parse().unwrap()))
            .sum(),
        None => all_modes()
            .into_iter()
            .filter(|&m| risk_rank(risk) <= ceiling_rank(m))
            .map(mode_bit)
            .sum(),
    }
}

fn build_gate(mode: Mode, approver: ApproverKind, deny: Option<&str>) -> Gate {
    let mut builder = Gate::builder().mode(mode);
    if let Some(pattern) = deny {
        builder = builder.deny(pattern);
    }
    builder = match approver {
        ApproverKind::Absent => builder,
        ApproverKind::Approves => builder.approver(AllowAllApprover),
        ApproverKind::Rejects => {
            builder.approver(|_: &ApprovalRequest<'_>| Approval::Reject("rejected".into()))
        }
        ApproverKind::Panics => {
            builder.approver(|_: &ApprovalRequest<'_>| -> Approval { panic!("approver failure") })
        }
    };
    builder.build().unwrap()
}

/// Calls a tool through `gate` and reports what happened, checking the body ran exactly when allowed.
fn observe(gate: &Gate, tool: &MatrixTool) -> Outcome {
    let before = ran();
    let result = gate.run(tool.call);
    let runs = ran() - before;
    match result {
        Ok(()) => {
            assert_eq!(runs, 1, "{}", tool.id);
            Outcome::Runs
        }
        Err(denied) => {
            assert_eq!(runs, 0, "{}: refused, yet its body ran", tool.id);
            assert_eq!(denied.tool().id, tool.id);
            assert_eq!(denied.mode(), Some(gate.mode()));
            Outcome::Refused(denied.code().as_str())
        }
    }
}

#[test]
fn matrix_manifests_are_what_was_declared() {
    let tools = matrix_tools();
    assert_eq!(tools.len(), 38);
    for tool in &tools {
        let manifest = toolgate::registry().manifest(tool.id).expect(tool.id);
        assert_eq!(
            manifest.risk_level.as_str(),
            tool.declared_risk,
            "{}",
            tool.id
        );
        assert_eq!(
            manifest.allowed_modes,
            ModeSet::of(&modes_of_mask(declared_mask(tool))),
            "{}",
            tool.id
        );
    }
}

#[test]
fn gates_match_the_reference_for_every_tool_mode_approver_and_deny_list() {
    let mut checked = 0;
    let mut outcomes = HashSet::new();
    for tool in matrix_tools() {
        let manifest = toolgate::registry().manifest(tool.id).unwrap();
        let mask = declared_mask(&tool);
        for mode in all_modes() {
            for approver in APPROVERS {
                for deny_listed in [false, true] {
                    let gate = build_gate(mode, approver, deny_listed.then_some(tool.id));
                    let can_approve = approver != ApproverKind::Absent;
                    let expected =
                        reference(manifest.risk_level, mode, mask, deny_listed, can_approve);
                    let want = reference_outcome(expected, approver);
                    let got = observe(&gate, &tool);
                    assert_eq!(
                        got, want,
                        "{} in {mode}, approver {approver:?}, deny list {deny_listed}",
                        tool.id
                    );
                    // The table the gate precomputed agrees.
                    assert_eq!(gate.verdict(manifest).map(actual), Some(expected));
                    outcomes.insert(format!("{want:?}"));
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 38 * 4 * 4 * 2);
    // Runs, DENY_LISTED, MODE_NOT_ALLOWED, APPROVAL_REQUIRED, APPROVAL_REJECTED. ABOVE_CEILING cannot be
    // reached by a real tool: the macros refuse a declared mode whose ceiling is below the risk.
    assert_eq!(outcomes.len(), 5, "{outcomes:?}");
}

#[test]
fn the_approver_is_asked_exactly_when_the_table_needs_approval() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    for tool in matrix_tools() {
        let manifest = toolgate::registry().manifest(tool.id).unwrap();
        for mode in all_modes() {
            for deny_listed in [false, true] {
                let asked = Arc::new(AtomicUsize::new(0));
                let counter = Arc::clone(&asked);
                let mut builder =
                    Gate::builder()
                        .mode(mode)
                        .approver(move |_: &ApprovalRequest<'_>| {
                            counter.fetch_add(1, Ordering::SeqCst);
                            Approval::Approve
                        });
                if deny_listed {
                    builder = builder.deny(tool.id);
                }
                let gate = builder.build().unwrap();
                observe(&gate, &tool);
                let expected = reference(
                    manifest.risk_level,
                    mode,
                    declared_mask(&tool),
                    deny_listed,
                    true,
                );
                assert_eq!(
                    asked.load(Ordering::SeqCst),
                    usize::from(expected == Expected::NeedsApproval),
                    "{} in {mode}, deny list {deny_listed}",
                    tool.id
                );
            }
        }
    }
}

/// An allowed-mode mask is upward closed when every mode above an allowed mode is allowed too.
fn upward_closed(mask: u8) -> bool {
    let modes = all_modes();
    (0..4).all(|i| mask & mode_bit(modes[i]) == 0 || (i..4).all(|j| mask & mode_bit(modes[j]) != 0))
}

#[test]
fn a_tool_allowed_only_in_low_modes_loses_its_permission_when_the_mode_rises() {
    // The property "raising the mode never removes a permission" holds for upward-closed allowed modes
    // (every default is one); a declaration such as `modes = [SHADOW]` is not, and the gate honours it.
    let tool = matrix_tools()
        .into_iter()
        .find(|t| t.id == "matrix.ro_s")
        .unwrap();
    assert!(!upward_closed(declared_mask(&tool)));
    assert_eq!(
        observe(&build_gate(Mode::Shadow, ApproverKind::Absent, None), &tool),
        Outcome::Runs
    );
    assert_eq!(
        observe(
            &build_gate(Mode::FullAuto, ApproverKind::Absent, None),
            &tool
        ),
        Outcome::Refused("MODE_NOT_ALLOWED")
    );
}

// ---------------------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------------------

fn any_risk() -> impl Strategy<Value = Risk> {
    prop::sample::select(all_risks().to_vec())
}

fn any_mode() -> impl Strategy<Value = Mode> {
    prop::sample::select(all_modes().to_vec())
}

fn any_matrix_tool() -> impl Strategy<Value = usize> {
    0..matrix_tools().len()
}

fn upward_closed_matrix_tool() -> impl Strategy<Value = usize> {
    let tools = matrix_tools();
    let indices: Vec<usize> = (0..tools.len())
        .filter(|&i| upward_closed(declared_mask(&tools[i])))
        .collect();
    prop::sample::select(indices)
}

fn permitted(verdict: Verdict) -> bool {
    !matches!(verdict, Verdict::Refuse(_))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn raising_the_mode_never_removes_a_permission(
        risk in any_risk(),
        mask in (0u8..16).prop_filter("upward closed", |&m| upward_closed(m)),
        low in any_mode(),
        high in any_mode(),
        deny_listed in any::<bool>(),
    ) {
        let (low, high) = (low.min(high), low.max(high));
        let before = policy::decide(facts(risk, low, mask, deny_listed));
        let after = policy::decide(facts(risk, high, mask, deny_listed));
        prop_assert!(!permitted(before) || permitted(after), "{risk}: {before:?} in {low}, {after:?} in {high}");
        // The ceiling alone is monotone, whatever the allowed modes.
        prop_assert!(policy::ceiling(low) <= policy::ceiling(high));
        prop_assert!(!policy::admits(low, risk) || policy::admits(high, risk));
    }

    #[test]
    fn raising_the_mode_of_a_real_gate_never_removes_a_permission(
        index in upward_closed_matrix_tool(),
        low in any_mode(),
        high in any_mode(),
    ) {
        let tool = &matrix_tools()[index];
        let (low, high) = (low.min(high), low.max(high));
        let before = observe(&build_gate(low, ApproverKind::Approves, None), tool);
        let after = observe(&build_gate(high, ApproverKind::Approves, None), tool);
        prop_assert!(before != Outcome::Runs || after == Outcome::Runs, "{}: {before:?} in {low}, {after:?} in {high}", tool.id);
    }

    #[test]
    fn raising_the_risk_never_adds_a_permission(
        low in any_risk(),
        high in any_risk(),
        mode in any_mode(),
        mask in 0u8..16,
        deny_listed in any::<bool>(),
    ) {
        let (low, high) = (low.min(high), low.max(high));
        let at_low = policy::decide(facts(low, mode, mask, deny_listed));
        let at_high = policy::decide(facts(high, mode, mask, deny_listed));
        prop_assert!(!permitted(at_high) || permitted(at_low), "{mode}: {at_low:?} at {low}, {at_high:?} at {high}");
        // Nor lifts the need for an approval.
        prop_assert!(at_high != Verdict::Allow || at_low == Verdict::Allow);
    }

    #[test]
    fn a_deny_rule_always_wins(
        risk in any_risk(),
        mode in any_mode(),
        mask in 0u8..16,
    ) {
        prop_assert_eq!(
            actual(policy::decide(facts(risk, mode, mask, true))),
            Expected::Refuse("DENY_LISTED")
        );
    }

    #[test]
    fn a_deny_rule_wins_over_every_mode_and_approver_in_a_real_gate(
        index in any_matrix_tool(),
        mode in any_mode(),
        approver in prop::sample::select(APPROVERS.to_vec()),
        glob in any::<bool>(),
    ) {
        let tool = &matrix_tools()[index];
        let rule = if glob { "matrix.*" } else { tool.id };
        let gate = build_gate(mode, approver, Some(rule));
        prop_assert_eq!(observe(&gate, tool), Outcome::Refused("DENY_LISTED"));
    }

    #[test]
    fn without_a_gate_every_call_is_refused(index in any_matrix_tool()) {
        let tool = &matrix_tools()[index];
        let before = ran();
        let denied = (tool.call)().unwrap_err();
        prop_assert_eq!(denied.code().as_str(), "NO_GATE");
        prop_assert_eq!(denied.mode(), None);
        prop_assert_eq!(ran(), before);
    }

    #[test]
    fn names_parse_in_any_case_with_dashes_or_underscores(
        index in 0usize..4,
        case in prop::collection::vec(any::<bool>(), 16),
        dashes in prop::collection::vec(any::<bool>(), 16),
    ) {
        let risk = all_risks()[index];
        let mode = all_modes()[index];
        let vary = |name: &str| -> String {
            name.chars()
                .enumerate()
                .map(|(i, c)| match c {
                    '_' if dashes[i % 16] => '-',
                    c if case[i % 16] => c.to_ascii_lowercase(),
                    c => c,
                })
                .collect()
        };
        prop_assert_eq!(vary(risk.as_str()).parse::<Risk>(), Ok(risk));
        prop_assert_eq!(vary(mode.as_str()).parse::<Mode>(), Ok(mode));
    }

    #[test]
    fn anything_else_is_rejected(text in "\\PC{0,14}") {
        let normal = text.to_ascii_uppercase().replace('-', "_");
        let risk_names = ["READ_ONLY", "PROPOSE_ONLY", "LOW_WRITE", "HIGH_WRITE"];
        let mode_names = ["SHADOW", "ADVISORY", "PARTIAL_AUTO", "FULL_AUTO"];
        prop_assert_eq!(text.parse::<Risk>().is_ok(), risk_names.contains(&normal.as_str()));
        prop_assert_eq!(text.parse::<Mode>().is_ok(), mode_names.contains(&normal.as_str()));
    }
}

// ---------------------------------------------------------------------------------------------------------
// Risk and Mode as values
// ---------------------------------------------------------------------------------------------------------

#[test]
fn risks_and_modes_are_ordered_from_harmless_to_critical() {
    assert!(Risk::ReadOnly < Risk::ProposeOnly);
    assert!(Risk::ProposeOnly < Risk::LowWrite);
    assert!(Risk::LowWrite < Risk::HighWrite);
    assert!(Mode::Shadow < Mode::Advisory);
    assert!(Mode::Advisory < Mode::PartialAuto);
    assert!(Mode::PartialAuto < Mode::FullAuto);
    assert_eq!(Risk::ALL, all_risks());
    assert_eq!(Mode::ALL, all_modes());
    assert!(Risk::ALL.windows(2).all(|w| w[0] < w[1]));
    assert!(Mode::ALL.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(Risk::ALL.iter().max(), Some(&Risk::HighWrite));
    assert_eq!(Mode::ALL.iter().min(), Some(&Mode::Shadow));
    for risk in Risk::ALL {
        assert_eq!(risk.is_write(), risk_rank(risk) >= 2, "{risk}");
    }
}

const RISK_NAMES: [(Risk, &str); 4] = [
    (Risk::ReadOnly, "READ_ONLY"),
    (Risk::ProposeOnly, "PROPOSE_ONLY"),
    (Risk::LowWrite, "LOW_WRITE"),
    (Risk::HighWrite, "HIGH_WRITE"),
];

const MODE_NAMES: [(Mode, &str); 4] = [
    (Mode::Shadow, "SHADOW"),
    (Mode::Advisory, "ADVISORY"),
    (Mode::PartialAuto, "PARTIAL_AUTO"),
    (Mode::FullAuto, "FULL_AUTO"),
];

#[test]
fn display_and_from_str_round_trip_with_exact_names() {
    for (risk, name) in RISK_NAMES {
        assert_eq!(risk.to_string(), name);
        assert_eq!(risk.as_str(), name);
        assert_eq!(Risk::from_str(name), Ok(risk));
        assert_eq!(name.to_lowercase().parse::<Risk>(), Ok(risk));
        assert_eq!(name.replace('_', "-").parse::<Risk>(), Ok(risk));
        assert_eq!(
            name.to_lowercase().replace('_', "-").parse::<Risk>(),
            Ok(risk)
        );
        assert_eq!(risk.to_string().parse::<Risk>(), Ok(risk));
    }
    for (mode, name) in MODE_NAMES {
        assert_eq!(mode.to_string(), name);
        assert_eq!(mode.as_str(), name);
        assert_eq!(Mode::from_str(name), Ok(mode));
        assert_eq!(name.to_lowercase().parse::<Mode>(), Ok(mode));
        assert_eq!(name.replace('_', "-").parse::<Mode>(), Ok(mode));
        assert_eq!(
            name.to_lowercase().replace('_', "-").parse::<Mode>(),
            Ok(mode)
        );
        assert_eq!(mode.to_string().parse::<Mode>(), Ok(mode));
    }
    assert_eq!("full-auto".parse::<Mode>(), Ok(Mode::FullAuto));
    assert_eq!("high-write".parse::<Risk>(), Ok(Risk::HighWrite));
}

#[test]
fn garbage_is_rejected_with_the_expected_names() {
    let garbage = [
        "",
        " ",
        "HIGHWRITE",
        "HIGH WRITE",
        "HIGH__WRITE",
        " HIGH_WRITE",
        "HIGH_WRITE ",
        "HIGH_WRITE\n",
        "HIGH_WRITES",
        "HIGH_WRIT",
        "high.write",
        "SHADOW",
        "3",
        "Ｈigh_write",
    ];
    for text in garbage {
        let error = text.parse::<Risk>().unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "`{text}` is not a risk level; expected one of READ_ONLY, PROPOSE_ONLY, LOW_WRITE, \
                 HIGH_WRITE"
            )
        );
    }
    for text in [
        "",
        "FULLAUTO",
        "full auto",
        "FULL_AUTO ",
        "auto",
        "READ_ONLY",
        "0",
        "fullauto",
    ] {
        let error = text.parse::<Mode>().unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "`{text}` is not a mode; expected one of SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO"
            )
        );
    }
}

#[test]
fn risk_and_mode_serialize_as_their_exact_names() {
    for (risk, name) in RISK_NAMES {
        assert_eq!(serde_json::to_string(&risk).unwrap(), format!("\"{name}\""));
        assert_eq!(
            serde_json::from_str::<Risk>(&format!("\"{name}\"")).unwrap(),
            risk
        );
        let lower = format!("\"{}\"", name.to_lowercase().replace('_', "-"));
        assert_eq!(serde_json::from_str::<Risk>(&lower).unwrap(), risk);
        assert_eq!(
            serde_json::from_value::<Risk>(serde_json::json!(name)).unwrap(),
            risk
        );
    }
    for (mode, name) in MODE_NAMES {
        assert_eq!(serde_json::to_string(&mode).unwrap(), format!("\"{name}\""));
        assert_eq!(
            serde_json::from_str::<Mode>(&format!("\"{name}\"")).unwrap(),
            mode
        );
        let lower = format!("\"{}\"", name.to_lowercase().replace('_', "-"));
        assert_eq!(serde_json::from_str::<Mode>(&lower).unwrap(), mode);
    }
    // Escaped JSON strings are decoded before parsing.
    assert_eq!(
        serde_json::from_str::<Mode>("\"FULL\\u005fAUTO\"").unwrap(),
        Mode::FullAuto
    );
    for bad in ["\"WRITE\"", "3", "null", "[\"HIGH_WRITE\"]", "\"\""] {
        assert!(serde_json::from_str::<Risk>(bad).is_err(), "{bad}");
        assert!(serde_json::from_str::<Mode>(bad).is_err(), "{bad}");
    }
}

#[test]
fn mode_sets_serialize_in_mode_order() {
    let set = ModeSet::of(&[Mode::FullAuto, Mode::Shadow, Mode::PartialAuto]);
    assert_eq!(
        serde_json::to_value(set).unwrap(),
        serde_json::json!(["SHADOW", "PARTIAL_AUTO", "FULL_AUTO"])
    );
    assert_eq!(serde_json::to_string(&ModeSet::EMPTY).unwrap(), "[]");
    assert_eq!(
        serde_json::to_value(ModeSet::ALL).unwrap(),
        serde_json::json!(["SHADOW", "ADVISORY", "PARTIAL_AUTO", "FULL_AUTO"])
    );
    for set in ModeSet::every_subset() {
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(
            serde_json::from_str::<ModeSet>(&json).unwrap(),
            set,
            "{json}"
        );
        let names: Vec<String> = serde_json::from_str(&json).unwrap();
        let expected: Vec<&str> = all_modes()
            .into_iter()
            .filter(|&m| set.contains(m))
            .map(Mode::as_str)
            .collect();
        assert_eq!(names, expected);
        assert_eq!(set.len(), expected.len());
        assert_eq!(set.is_empty(), expected.is_empty());
        assert_eq!(set.iter().map(Mode::as_str).collect::<Vec<_>>(), expected);
        assert_eq!(set.iter().collect::<ModeSet>(), set);
    }
    assert_eq!(
        serde_json::from_str::<ModeSet>("[\"full-auto\", \"shadow\"]").unwrap(),
        ModeSet::of(&[Mode::Shadow, Mode::FullAuto])
    );
    assert!(serde_json::from_str::<ModeSet>("[\"turbo\"]").is_err());
    assert!(serde_json::from_str::<ModeSet>("\"SHADOW\"").is_err());
    assert_eq!(ModeSet::EMPTY.to_string(), "none");
    assert_eq!(set.to_string(), "SHADOW, PARTIAL_AUTO, FULL_AUTO");
}

/// `main() -> Result<_, Box<dyn Error>>` prints its error with `Debug`: a mode in the environment that
/// is not one reads as the sentence, not as the error's structure.
#[test]
fn an_invalid_mode_in_the_environment_ends_main_with_its_sentence() {
    let quickstart = crate::common::example("quickstart", "");
    let output = std::process::Command::new(quickstart)
        .env("TOOLGATE_MODE", "full_autox")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.trim_end(),
        "Error: environment variable TOOLGATE_MODE: `full_autox` is not a mode; expected one of \
         SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO"
    );

    let output = std::process::Command::new(crate::common::example("quickstart", ""))
        .env("TOOLGATE_MODE", "partial-auto")
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("Mode PARTIAL_AUTO (from TOOLGATE_MODE):"),
        "{stdout}"
    );
    assert!(!stdout.contains("Mode SHADOW:"), "{stdout}");
}
