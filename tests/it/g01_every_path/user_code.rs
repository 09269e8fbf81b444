//! Guarantee 1 (Every path into a tool's body passes the gate), against user code that runs between
//! a decision and a body (sinks, approvers, an argument's `Serialize`, `escalate`), in every
//! declaration form.
//! Each test asserts the guarantee: it passes when the attack fails.

// ---------------------------------------------------------------------------------------------
// Guarantee 1/3: a #[toolset] gives every tool it holds its domain, or refuses to compile

#[test]
fn g1_every_tool_in_a_users_toolset_is_in_the_users_domain() {
    let ids: Vec<&str> = toolgate::manifests()
        .filter(|m| m.id.contains("purge") && m.source.module_path.contains("users_forms"))
        .map(|m| m.id)
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    let lost: Vec<&&str> = ids.iter().filter(|id| !id.starts_with("users.")).collect();
    assert!(
        lost.is_empty(),
        "tools of a #[toolset(domain = \"users\")] without the domain: {lost:?}"
    );
}
