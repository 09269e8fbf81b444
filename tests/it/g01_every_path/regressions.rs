//! Guarantee 1 (Every path into a tool's body passes the gate), against holes found by review, each
//! reproduced as an outside attacker would write it.
//! Each test asserts the guarantee: it passes when the attack fails.

use serde_json::{Value, json};
use toolgate::audit::{MemorySink, Stage};
use toolgate::{AllowAllApprover, Denied, Gate, Mode, registry};

use crate::common::gates;
use crate::common::{Scratch, serial};
use crate::fixtures::regressions::*;

// Finding: the call-by-name adapter of a `callable` associated function calls the function by its bare
// name; in an impl block that name resolves to whatever the module has in scope (here
// `std::fs::remove_file`), not to the gated function, so a call by name runs with no decision at all.
#[test]
fn a_callable_associated_function_called_by_name_is_decided_by_the_gate() {
    let _serial = serial();
    let _ = files::Files;
    let scratch = Scratch::new("remove-file");
    let victim = scratch.path("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    let arguments = json!({ "path": victim.to_str().unwrap() });

    // Called directly, the function is gated: outside any gate it is refused and removes nothing.
    let direct = files::Files::remove_file(victim.to_str().unwrap().to_owned()).unwrap_err();
    let direct = direct.into_inner().unwrap().downcast::<Denied>().unwrap();
    assert_eq!(direct.code().as_str(), "NO_GATE");
    assert!(victim.exists());

    let shadow = Gate::new(Mode::Shadow).unwrap();
    let refused = registry()
        .call(&shadow, "files.remove_file", arguments.clone())
        .now()
        .expect("a sync tool's call completes at once");
    let still_there = victim.exists();
    assert_eq!(
        refused.as_ref().map_err(toolgate::CallError::code),
        Err("MODE_NOT_ALLOWED"),
        "HIGH_WRITE is allowed in FULL_AUTO only: SHADOW must refuse the call by name"
    );
    assert!(still_there, "a refused call must not delete the file");

    // The same call runs through a gate that allows it, and is audited as a call of the tool.
    let sink = MemorySink::new();
    let full = gates::approved_audited(Mode::FullAuto, AllowAllApprover, sink.clone());
    let ran = registry()
        .call(&full, "files.remove_file", arguments)
        .now()
        .expect("a sync tool's call completes at once");
    assert_eq!(ran.map_err(|e| e.code()), Ok(Value::Null));
    assert!(!victim.exists(), "the allowed call removes the file");
    let stages: Vec<(Stage, String)> = sink
        .records()
        .iter()
        .map(|r| (r.stage, r.tool.to_string()))
        .collect();
    assert_eq!(
        stages,
        [
            (Stage::Enter, "files.remove_file".to_owned()),
            (Stage::Exit, "files.remove_file".to_owned()),
        ]
    );
}

// Finding 1, nested form: the adapter of a tool declared inside a function, with a parameter named like
// it, calls that tool, gated, and not the module's function of the same name.
#[test]
fn a_nested_callable_tool_with_a_parameter_named_like_it_is_gated() {
    let _serial = serial();
    let (tool_runs, wrong) = (count(&NESTED_TOOL_RUNS), count(&WRONG_RUNS));
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let refused = registry()
        .call(&shadow, "nested.sibling_wipe", json!({"sibling_wipe": "x"}))
        .now()
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.code(), "MODE_NOT_ALLOWED");
    let full = gates::approved(Mode::FullAuto, AllowAllApprover);
    registry()
        .call(&full, "nested.sibling_wipe", json!({"sibling_wipe": "x"}))
        .now()
        .unwrap()
        .unwrap();
    assert_eq!(count(&NESTED_TOOL_RUNS), tool_runs + 1);
    assert_eq!(count(&WRONG_RUNS), wrong, "the module's function never ran");
    assert!(sibling_wipe("direct".into()).is_ok());
}

// Finding 1, trait-impl form: a callable associated function of a `#[toolset]` trait impl is called
// through `<Type as Trait>`, gated.
#[test]
fn a_callable_function_of_a_toolset_trait_impl_is_gated() {
    let _serial = serial();
    let (made, wrong) = (count(&MADE), count(&WRONG_RUNS));
    let call = |gate: &Gate| {
        registry()
            .call(gate, "factory.make", json!({"kind": "widget"}))
            .now()
            .unwrap()
    };
    let refused = call(&Gate::new(Mode::Shadow).unwrap()).unwrap_err();
    assert_eq!(refused.code(), "MODE_NOT_ALLOWED");
    assert_eq!(count(&MADE), made);
    call(&Gate::new(Mode::PartialAuto).unwrap()).unwrap();
    assert_eq!(count(&MADE), made + 1);
    assert_eq!(count(&WRONG_RUNS), wrong);
    assert!(make("direct".into()).is_ok());
}

// Finding: an async tool's generated code, once its decision has waited for an approver, compared the
// arguments under names of its own (`waiting`, `decided`): a parameter of the same name was shadowed,
// and such a tool did not compile. Its parameters are compared as the call has them, direct and by name.
#[test]
fn an_async_tool_whose_parameters_are_named_like_the_generated_locals_is_decided_with_them() {
    let _serial = serial();
    /// Approves every call, after a wait.
    struct Approving;
    impl toolgate::approval::AsyncApprover for Approving {
        fn approve<'a>(
            &'a self,
            _: &'a toolgate::ApprovalRequest<'a>,
        ) -> toolgate::approval::ApprovalFuture<'a> {
            Box::pin(async {
                tokio::task::yield_now().await;
                toolgate::Approval::Approve
            })
        }
    }
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .async_approver(Approving)
        .build()
        .unwrap();
    let rt = crate::fixtures::support::runtime();
    let before = count(&NAMED_LIKE_LOCALS);
    let direct = rt.block_on(gate.scope(pay_named_like_locals("w".into(), 7, true, "s".into())));
    assert_eq!(direct.unwrap(), "w 7 true s");
    let named = rt.block_on(registry().call(
        &gate,
        "locals.pay_named_like_locals",
        json!({"waiting": "x", "decided": 8, "confirming": false, "step": "t"}),
    ));
    assert_eq!(named.unwrap(), json!("x 8 false t"));
    assert_eq!(count(&NAMED_LIKE_LOCALS), before + 2);
}
