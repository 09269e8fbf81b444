//! Compile tests of `#[tool]` and `#[toolset]`: every misuse is one clear error on the token at fault,
//! and every supported form compiles and runs.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
