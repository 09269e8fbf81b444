//! Property tests of the attribute entry points on generated token streams.
//!
//! `#[tool(ARGS)] ITEM` and `#[toolset(ARGS)] ITEM` are written out as source text from a grammar of
//! plausible and implausible tokens, parsed as one file (so that every span has a byte range in it), and
//! expanded. For every input:
//!
//! - the expansion does not panic;
//! - the output is a file of items: `compile_error!` invocations and the item (or, when the item does not
//!   parse, one error and the input as it was);
//! - every error points into the attribute's arguments or into the item, or at the attribute itself
//!   (`Span::call_site()`);
//! - expanding twice gives the same output;
//! - a well-formed declaration, its arguments in any order, expands with no error.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};

use proc_macro2::{Span, TokenStream, TokenTree};
use proptest::prelude::*;
use proptest::test_runner::Config;

use crate::{expand, toolset};

// -------------------------------------------------------------------------------------------------
// Inputs
// -------------------------------------------------------------------------------------------------

/// Identifiers besides the attribute's own keys (`attr::TOOL_KEYS`): near misses, mode and risk names,
/// keywords, argument names.
const OTHER_IDENTS: &[&str] = &[
    "rsik",
    "Risk",
    "side_efects",
    "mode",
    "SHADOW",
    "ADVISORY",
    "PARTIAL_AUTO",
    "FULL_AUTO",
    "FULLAUTO",
    "shadow",
    "READ_ONLY",
    "HIGH_WRITE",
    "r#risk",
    "r#fn",
    "self",
    "Self",
    "crate",
    "super",
    "true",
    "false",
    "fn",
    "async",
    "_",
    "x",
    "shell",
    "classify",
    "password",
    "gate",
];

const LITERALS: &[&str] = &[
    r#""READ_ONLY""#,
    r#""PROPOSE_ONLY""#,
    r#""LOW_WRITE""#,
    r#""HIGH_WRITE""#,
    r#""high-write""#,
    r#""DELETE""#,
    r#""users""#,
    r#""users.delete""#,
    r#""Users""#,
    r#""a..b""#,
    r#""1x""#,
    r#""""#,
    r#""x\ny""#,
    r#""\u{1F600}""#,
    r#""aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa""#,
    r#"r"HIGH_WRITE""#,
    r###"r#"READ_ONLY"#"###,
    r#"b"x""#,
    r#"c"x""#,
    "'c'",
    "b'c'",
    "0",
    "1",
    "1.5",
    "0x10",
    "1u8",
    "1e3",
    "18446744073709551616",
];

const PUNCTS: &[&str] = &[
    "=", ",", "::", ":", "-", "#", "!", "&", ".", "..", "=>", ";", "<", ">", "*", "?", "@", "|",
    "'a",
];

const PATHS: &[&str] = &[
    "a::b",
    "::toolgate::x",
    "shell::classify",
    "crate::f",
    "self::g",
    "Vec::<u8>::new",
    "<T as U>::f",
];

/// One of the attribute's keys or of [`OTHER_IDENTS`].
fn pick_ident() -> BoxedStrategy<String> {
    let idents: Vec<&'static str> = crate::attr::TOOL_KEYS
        .iter()
        .chain(OTHER_IDENTS)
        .copied()
        .collect();
    prop::sample::select(idents).prop_map(str::to_owned).boxed()
}

fn pick(options: &'static [&'static str]) -> BoxedStrategy<String> {
    prop::sample::select(options)
        .prop_map(str::to_owned)
        .boxed()
}

/// A single token or a short path.
fn leaf() -> BoxedStrategy<String> {
    prop_oneof![
        3 => pick_ident(),
        3 => pick(LITERALS),
        3 => pick(PUNCTS),
        1 => pick(PATHS),
        1 => "[a-z_][a-z0-9_]{0,6}",
        1 => (-1000i64..1000).prop_map(|n| n.to_string()),
    ]
    .boxed()
}

/// Any token stream of those leaves, with nested groups (empty ones too).
fn tokens() -> BoxedStrategy<String> {
    leaf()
        .prop_recursive(3, 64, 6, |inner| {
            (
                prop::sample::select(&[("[", "]"), ("(", ")"), ("{", "}")][..]),
                prop::collection::vec(inner, 0..6),
            )
                .prop_map(|((open, close), parts)| format!("{open}{}{close}", parts.join(" ")))
        })
        .boxed()
}

fn arbitrary_args() -> BoxedStrategy<String> {
    prop::collection::vec(tokens(), 0..10)
        .prop_map(|parts| parts.join(" "))
        .boxed()
}

/// A value after `key =`: mostly of a shape some key takes.
fn value() -> BoxedStrategy<String> {
    let element = prop_oneof![
        pick_ident(),
        pick(LITERALS),
        pick(PATHS),
        Just("-1".to_owned())
    ];
    prop_oneof![
        3 => pick(LITERALS),
        2 => pick_ident(),
        1 => pick(PATHS),
        3 => (prop::collection::vec(element, 0..4), any::<bool>()).prop_map(|(items, trailing)| {
            let comma = if trailing && !items.is_empty() { "," } else { "" };
            format!("[{}{comma}]", items.join(", "))
        }),
        1 => pick(&["()", "{}", "[[]]", "- 1", "-1", "[,]", "[FULL_AUTO FULL_AUTO]"]),
        1 => tokens(),
    ]
    .boxed()
}

/// `key`, `key = value` and near misses, separated by commas (or not).
fn plausible_args() -> BoxedStrategy<String> {
    let arg = prop_oneof![
        3 => (pick_ident(), value()).prop_map(|(key, value)| format!("{key} = {value}")),
        2 => pick_ident(),
        1 => pick_ident().prop_map(|key| format!("{key} =")),
        1 => (pick_ident(), value()).prop_map(|(key, value)| format!("{key} {value}")),
        1 => value(),
    ];
    (
        prop::collection::vec(arg, 0..7),
        pick(&[", ", ",", " , , ", " "]),
    )
        .prop_map(|(args, separator)| args.join(&separator))
        .boxed()
}

/// One argument as a declaration would write it, sound or a near miss of one.
const NEAR_MISSES: &[&str] = &[
    r#"risk = "READ_ONLY""#,
    r#"risk = "PROPOSE_ONLY""#,
    r#"risk = "LOW_WRITE""#,
    r#"risk = "HIGH_WRITE""#,
    r#"risk = "high_write""#,
    r#"risk = "DELETE""#,
    "risk = READ_ONLY",
    r#"risk = """#,
    "side_effects",
    "side_effects = true",
    "side_effects = false",
    "side_effects = 1",
    r#"side_effects = "yes""#,
    "modes = [SHADOW]",
    "modes = [SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO]",
    "modes = [FULL_AUTO]",
    "modes = [PARTIAL_AUTO, FULL_AUTO,]",
    "modes = [FULL_AUTO, FULL_AUTO]",
    "modes = [FULLAUTO]",
    "modes = [shadow]",
    r#"modes = ["SHADOW"]"#,
    "modes = [Mode::SHADOW, FULL_AUTO]",
    "modes = []",
    "modes = FULL_AUTO",
    r#"id = "users.delete""#,
    r#"id = "Users.delete""#,
    r#"id = "users..delete""#,
    r#"id = "users.""#,
    r#"id = "1x""#,
    r#"id = "a-b""#,
    r#"id = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa""#,
    r#"id = """#,
    r#"domain = "users""#,
    r#"domain = "Users""#,
    r#"domain = "a.b_c""#,
    r#"domain = "_x""#,
    "domain = users",
    "idempotent",
    "open_world = false",
    r#"idempotent = "x""#,
    r#"description = "Deletes a user.""#,
    "description = 1",
    "skip",
    "skip = true",
    "escalate = shell::classify",
    "escalate = classify",
    r#"escalate = "classify""#,
    "escalate",
    "record_arguments",
    "redact = [id]",
    "redact = [x, password]",
    "redact = [id,]",
    "redact = id",
    r#"redact = ["id"]"#,
    "callable",
    "callable = false",
];

/// A few declaration-shaped arguments, each sound or nearly so, in any order and number.
fn near_miss_args() -> BoxedStrategy<String> {
    (
        prop::collection::vec(pick(NEAR_MISSES), 1..7),
        pick(&[", ", ","]),
    )
        .prop_map(|(args, separator)| args.join(&separator))
        .boxed()
}

fn any_args() -> BoxedStrategy<String> {
    prop_oneof![3 => near_miss_args(), 2 => plausible_args(), 1 => arbitrary_args()].boxed()
}

const FIXED_ITEMS: &[&str] = &[
    "fn f() -> Result<(), E> { Ok(()) }",
    "fn get(id: u64, password: String) -> Result<u64, E> { Ok(id) }",
    "/// Deletes a user.\n///\n/// For good.\n\
     pub async fn delete_user(gate: &Gate, id: u64, name: String) -> Result<u64, Error> { Ok(id) }",
    "fn g<T: Clone, 'a>(x: T, (a, b): (u8, u8), _: &'a str) -> std::io::Result<T> { Ok(x) }",
    "const fn h() -> Result<(), E> { Ok(()) }",
    "fn r#type(r#in: u8) -> Result<u8, E> { Ok(r#in) }",
    "fn no_result(x: u8) -> u8 { x }",
    "fn no_return() {}",
    "fn Upper() -> Result<(), E> { Ok(()) }",
    "fn borrowed(s: &str, t: impl Display, g1: &Gate, g2: &toolgate::Gate) -> Result<(), E> \
     { Ok(()) }",
    "fn method(&self, x: u8) -> Result<u8, E> { Ok(x) }",
    "#[doc = include_str!(\"x.md\")] #[doc = 1] #[cfg(test)] \
     fn documented() -> anyhow::Result<u8> { Ok(1) }",
    "fn early(x: u8) -> Result<Box<dyn Fn()>, E> \
     { if x > 1 { return Ok(Box::new(|| ())); } loop {} }",
    "fn impl_ret() -> Result<impl Display, E> { Ok(1) }",
    "unsafe extern \"C\" fn ffi(x: i32) -> Result<i32, E> { Ok(x) }",
    "fn decl(x: u8) -> Result<u8, E>;",
    "struct S;",
    "impl X { fn m(&self) -> Result<(), E> { Ok(()) } }",
    "mod m;",
    "let x = 1;",
    "fn () {}",
    "",
];

/// A function with a generated signature.
fn generated_fn() -> BoxedStrategy<String> {
    let params = prop::collection::vec(
        pick(&[
            "x: u8",
            "gate: &Gate",
            "g: &'a toolgate::Gate",
            "m: &mut Gate",
            "_: u8",
            "(a, b): (u8, u8)",
            "s: &str",
            "t: impl Clone",
            "mut v: Vec<u8>",
            "r#type: String",
            "&self",
            "self",
            "password: String",
            "f: fn() -> u8",
        ]),
        0..4,
    );
    (
        pick(&["", "pub ", "pub(crate) "]),
        pick(&["", "async ", "const ", "unsafe "]),
        pick(&[
            "f",
            "r#fn",
            "Upper",
            "_x",
            "ünïcode",
            "a_very_long_function_name_that_goes_on_and_on_past_the_sixty_four_limit",
        ]),
        pick(&["", "<T>", "<'a>", "<const N: usize>"]),
        params,
        pick(&[
            "",
            "-> Result<(), E>",
            "-> anyhow::Result<u8>",
            "-> u8",
            "-> impl Future<Output = Result<(), E>>",
            "-> (Result<u8, E>)",
            "-> Result<impl Display, E>",
            "-> Result<Self, E>",
        ]),
        pick(&["{ Ok(()) }", "{}", "{ return Err(e); }", ";"]),
    )
        .prop_map(|(vis, qualifier, name, generics, params, ret, body)| {
            format!(
                "{vis}{qualifier}fn {name}{generics}({}) {ret} {body}",
                params.join(", ")
            )
        })
        .boxed()
}

fn tool_item() -> BoxedStrategy<String> {
    prop_oneof![pick(FIXED_ITEMS), generated_fn()].boxed()
}

/// An impl block or module whose members carry generated `#[tool(...)]` arguments.
fn toolset_item() -> BoxedStrategy<String> {
    (any_args(), any_args(), generated_fn(), 0..7usize)
        .prop_map(|(a, b, f, shape)| match shape {
            0 => format!(
                "impl Users {{ #[tool({a})] pub fn get(&self, id: u64) -> Result<u64, E> {{ Ok(id) }} \
                 #[tool(skip)] pub fn size(&self) -> usize {{ 0 }} \
                 #[toolgate::tool({b})] pub fn other(&self) -> Result<(), E> {{ Ok(()) }} \
                 fn private(&self) {{}} }}"
            ),
            1 => format!(
                "mod users {{ #[tool({a})] pub fn a() -> Result<(), E> {{ Ok(()) }} \
                 #[tool] pub fn b() -> Result<(), E> {{ Ok(()) }} \
                 #[tool = \"x\"] pub fn c() {{}} \
                 pub fn undeclared() {{}} \
                 #[tool({b})] #[tool({a})] pub fn twice() -> Result<(), E> {{ Ok(()) }} }}"
            ),
            2 => format!(
                "impl Trait for T {{ #[tool({a})] fn t(&self) -> Result<(), E> {{ Ok(()) }} \
                 const C: u8 = 1; }}"
            ),
            3 => format!("mod generated {{ #[tool({a})] {f} #[::toolgate::tool({b})] {f} }}"),
            4 => format!("impl<T> Generic<T> {{ #[tool({a})] {f} }}"),
            5 => pick_fixed_other(&a),
            _ => format!(
                "mod m {{ #[tool({a})] pub fn same() -> Result<(), E> {{ Ok(()) }} \
                 #[tool({a})] pub fn same2() -> Result<(), E> {{ Ok(()) }} }}"
            ),
        })
        .boxed()
}

fn pick_fixed_other(args: &str) -> String {
    match args.len() % 4 {
        0 => "mod declared;".to_owned(),
        1 => "struct S;".to_owned(),
        2 => "fn f() -> Result<(), E> { Ok(()) }".to_owned(),
        _ => "impl X {}".to_owned(),
    }
}

// -------------------------------------------------------------------------------------------------
// Running one expansion
// -------------------------------------------------------------------------------------------------

/// One attribute on one item, parsed from a single source text.
struct Input {
    args: TokenStream,
    item: TokenStream,
    /// Byte ranges in that text: inside the attribute's parentheses, and the item.
    args_range: Range<usize>,
    item_range: Range<usize>,
}

/// Parses `#[name(args)] item`; `None` when the text does not lex.
fn input(name: &str, args: &str, item: &str) -> Option<Input> {
    let source = format!("#[{name}({args})]\n{item}");
    let stream: TokenStream = source.parse().ok()?;
    let mut trees = stream.into_iter();
    let (Some(TokenTree::Punct(_)), Some(TokenTree::Group(attribute))) =
        (trees.next(), trees.next())
    else {
        panic!("not an attribute: {source}");
    };
    let Some(TokenTree::Group(parens)) = attribute.stream().into_iter().nth(1) else {
        panic!("no argument list: {source}");
    };
    let item: TokenStream = trees.collect();
    let item_range = extent(&item).unwrap_or(source.len()..source.len());
    Some(Input {
        args: parens.stream(),
        args_range: parens.span_open().byte_range().end..parens.span_close().byte_range().start,
        item,
        item_range,
    })
}

/// From the start of the first token to the end of the last one.
fn extent(tokens: &TokenStream) -> Option<Range<usize>> {
    let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
    Some(trees.first()?.span().byte_range().start..trees.last()?.span().byte_range().end)
}

fn within(span: Span, range: &Range<usize>) -> bool {
    let bytes = span.byte_range();
    range.start <= bytes.start && bytes.end <= range.end
}

fn is_call_site(span: Span) -> bool {
    span.byte_range() == (0..0)
}

/// Every `compile_error!` in `tokens`: the span of its name and of its braces, and its message.
fn compile_errors(tokens: &TokenStream, found: &mut Vec<(Span, Span, String)>) {
    let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
    for (i, tree) in trees.iter().enumerate() {
        match tree {
            TokenTree::Ident(ident) if ident == "compile_error" => {
                let Some(TokenTree::Group(body)) = trees.get(i + 2) else {
                    panic!("`compile_error` without a body in {tokens}");
                };
                let message = body.stream().to_string();
                found.push((ident.span(), body.span(), message));
            }
            TokenTree::Group(group) => compile_errors(&group.stream(), found),
            _ => {}
        }
    }
}

type Entry = fn(TokenStream, TokenStream) -> TokenStream;

/// Expands `input` with `entry` and checks every property; returns the errors' messages.
fn check(entry: Entry, input: &Input) -> Result<Vec<String>, TestCaseError> {
    let expand = || {
        catch_unwind(AssertUnwindSafe(|| {
            entry(input.args.clone(), input.item.clone())
        }))
    };
    let Ok(output) = expand() else {
        return Err(TestCaseError::fail(format!(
            "the expansion panicked\nargs: {}\nitem: {}",
            input.args, input.item
        )));
    };
    let again = expand().map_err(|_| TestCaseError::fail("the second expansion panicked"))?;
    prop_assert_eq!(
        output.to_string(),
        again.to_string(),
        "expanding twice differs"
    );

    let mut errors = Vec::new();
    compile_errors(&output, &mut errors);
    for (start, end, message) in &errors {
        prop_assert!(message.len() > 2, "an empty error message in {}", output);
        for span in [*start, *end] {
            prop_assert!(
                is_call_site(span)
                    || within(span, &input.args_range)
                    || within(span, &input.item_range),
                "error {} at bytes {:?}, outside the arguments {:?} and the item {:?}\nargs: {}\nitem: {}",
                message,
                span.byte_range(),
                input.args_range,
                input.item_range,
                input.args,
                input.item
            );
        }
    }

    match syn::parse2::<syn::File>(input.item.clone()) {
        Ok(_) => {
            let file = syn::parse2::<syn::File>(output.clone());
            prop_assert!(
                file.is_ok(),
                "the output is not a file of items: {}",
                output
            );
        }
        Err(_) => {
            // The input did not parse: one error, then the input as it was.
            prop_assert!(
                !errors.is_empty(),
                "an item that does not parse, and no error"
            );
            let text = output.to_string();
            prop_assert!(text.starts_with(":: core :: compile_error !"), "{}", text);
            prop_assert!(text.ends_with(&input.item.to_string()), "{}", text);
        }
    }
    Ok(errors.into_iter().map(|(_, _, message)| message).collect())
}

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

// -------------------------------------------------------------------------------------------------
// Well-formed declarations
// -------------------------------------------------------------------------------------------------

const RISKS: [&str; 4] = ["READ_ONLY", "PROPOSE_ONLY", "LOW_WRITE", "HIGH_WRITE"];
const MODES: [&str; 4] = ["SHADOW", "ADVISORY", "PARTIAL_AUTO", "FULL_AUTO"];

/// The arguments of a sound `#[tool]` on `fn get(id: u64)`, in a shuffled order, and the tool id.
fn sound_declaration() -> BoxedStrategy<(String, String)> {
    (
        0..4usize,
        any::<(bool, bool)>(),
        prop::collection::vec(any::<bool>(), 4),
        prop::option::of(pick(&["users", "a1.b_2", "x"])),
        prop::option::of(pick(&["users.delete", "a.b.c", "x", "r9"])),
        any::<[bool; 6]>(),
        pick(&[", ", ","]),
        any::<bool>(),
    )
        .prop_flat_map(
            |(risk, side_effects, mode_bits, domain, id, flags, separator, trailing)| {
                let write = risk >= 2;
                // The modes whose ceiling admits the risk; a declared list takes some of them.
                let admitted: Vec<&str> = match risk {
                    0 | 1 => MODES.to_vec(),
                    2 => MODES[2..].to_vec(),
                    _ => MODES[3..].to_vec(),
                };
                let chosen: Vec<&str> = admitted
                    .iter()
                    .zip(&mode_bits)
                    .filter(|(_, on)| **on)
                    .map(|(m, _)| *m)
                    .collect();
                let mut args = vec![format!("risk = {:?}", RISKS[risk])];
                match side_effects {
                    (false, _) => {}
                    (true, true) if write => args.push("side_effects".to_owned()),
                    (true, _) => args.push(format!("side_effects = {write}")),
                }
                if !chosen.is_empty() {
                    args.push(format!("modes = [{}]", chosen.join(", ")));
                }
                if let Some(domain) = &domain {
                    args.push(format!("domain = {domain:?}"));
                }
                if let Some(id) = &id {
                    args.push(format!("id = {id:?}"));
                }
                let named = ["idempotent", "open_world", "record_arguments", "callable"];
                for (name, on) in named.iter().zip(flags) {
                    if on {
                        args.push((*name).to_owned());
                    }
                }
                if flags[4] {
                    args.push("description = \"Looks a user up.\"".to_owned());
                }
                if flags[5] {
                    args.push("redact = [id]".to_owned());
                }
                let tool_id = match (id, domain) {
                    (Some(id), _) => id,
                    (None, Some(domain)) => format!("{domain}.get"),
                    (None, None) => "get".to_owned(),
                };
                (
                    Just(args).prop_shuffle(),
                    Just(separator),
                    Just(trailing),
                    Just(tool_id),
                )
            },
        )
        .prop_map(|(args, separator, trailing, tool_id)| {
            let comma = if trailing { "," } else { "" };
            (format!("{}{comma}", args.join(&separator)), tool_id)
        })
        .boxed()
}

// -------------------------------------------------------------------------------------------------
// The properties
// -------------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    #[test]
    fn tool_attribute_on_any_tokens(args in any_args(), item in tool_item()) {
        let Some(input) = input("tool", &args, &item) else {
            return Err(TestCaseError::reject("does not lex"));
        };
        check(expand::tool_attribute, &input)?;
    }

    #[test]
    fn toolset_attribute_on_any_tokens(
        args in prop_oneof![any_args(), Just("domain = \"users\"".to_owned())],
        item in toolset_item(),
    ) {
        let Some(input) = input("toolset", &args, &item) else {
            return Err(TestCaseError::reject("does not lex"));
        };
        check(toolset::toolset_attribute, &input)?;
    }

    #[test]
    fn sound_declarations_expand_without_error((args, tool_id) in sound_declaration()) {
        let item = "/// Looks a user up.\nfn get(id: u64) -> Result<u64, E> { Ok(id) }";
        let input = input("tool", &args, item).expect("a sound declaration lexes");
        let errors = check(expand::tool_attribute, &input)?;
        prop_assert!(errors.is_empty(), "{} gives {:?}", args, errors);
        let output = expand::tool_attribute(input.args.clone(), input.item.clone()).to_string();
        let id_literal = format!("{tool_id:?}");
        prop_assert!(output.contains(&id_literal), "no {} in {}", id_literal, output);
    }
}

/// The properties hold of inputs picked by hand, too, and the checks catch what they are meant to.
#[test]
fn hand_picked_inputs() {
    let expand_tool = |args: &str, item: &str| {
        let input = input("tool", args, item).expect("lexes");
        check(expand::tool_attribute, &input).expect("the properties hold")
    };
    assert!(expand_tool("risk = \"READ_ONLY\"", FIXED_ITEMS[0]).is_empty());
    let errors = expand_tool("risk = \"READ_ONLY\", risk = \"READ_ONLY\"", FIXED_ITEMS[0]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("given twice"), "{errors:?}");
    // A missing risk is reported on the attribute itself.
    assert_eq!(expand_tool("", FIXED_ITEMS[0]).len(), 1);
    // An item that does not parse: one error, the input kept.
    assert_eq!(expand_tool("risk = \"READ_ONLY\"", "fn () {}").len(), 1);

    // An error spanned outside the attribute and the item fails the check.
    let outside = input("tool", "x", "fn f() {}").expect("lexes");
    let stray: TokenStream = "stray".parse().expect("lexes");
    let stray_span = stray.into_iter().next().expect("a token").span();
    assert!(!within(stray_span, &outside.args_range) && !within(stray_span, &outside.item_range));
    let misplaced = |_: TokenStream, _: TokenStream| -> TokenStream {
        let stray: TokenStream = "stray".parse().expect("lexes");
        let span = stray.into_iter().next().expect("a token").span();
        syn::Error::new(span, "misplaced").into_compile_error()
    };
    assert!(check(misplaced, &outside).is_err());
    let panicking = |_: TokenStream, _: TokenStream| -> TokenStream { panic!("boom") };
    assert!(check(panicking, &outside).is_err());
}
