//! An operator's policy file against Cedar: the same rules, the same requests, the same answers.
//!
//! For each size N (10, 100 and 1,000 rules), one policy is generated as a toolgate policy file and as
//! N equivalent Cedar policies. Its rules are spread over principals (`[principals.pK]`, 20 rules each)
//! and 50 callable tools (`pol.t00` … `pol.t49`, each `fn(host: String, amount: i64, region: String)`
//! with an empty body), five kinds in turn:
//!
//! | toolgate | Cedar |
//! | --- | --- |
//! | `deny = ["pol.tJ"]` | `forbid(principal == User::"pK", action == Action::"call", resource == Tool::"pol.tJ");` |
//! | `ask = ["pol.tJ"]` (the gate has no approver: refused) | the same `forbid` |
//! | `refuse = ["prod-*", "*.prod.*"]` on `host` | `forbid(..) when { context.host like "prod-*" \|\| .. };` |
//! | `min = 1`, `max = M` on `amount` | `forbid(..) when { context.amount < 1 \|\| context.amount > M };` |
//! | `one_of = [..]` on `region` | `forbid(..) unless { [..].contains(context.region) };` |
//!
//! and Cedar has one `permit(principal, action, resource);` besides, since the code allows every one
//! of these tools in the gate's mode.
//!
//! 256 requests (a principal, a tool, the arguments) are drawn for each N, most of them on the tools the
//! principal's rules name. Before anything is measured, every request is decided three ways, which must
//! agree: by toolgate (allowed when the body runs, else the refusal's code), by Cedar's `Authorizer`,
//! and by the rules as generated (which also says which refusal code toolgate must give).
//!
//! Each iteration decides the 256 requests, one after the other; a decision's time is the iteration's
//! divided by 256:
//!
//! - `toolgate_call`: `registry().call(&gate, id, args.clone())` on the principal's gate (built once
//!   per principal, following the policy): the decision and the call;
//! - `toolgate_no_policy`: the same calls through a gate that follows no policy (every call runs): the
//!   call by name without any rule;
//! - `toolgate_verdict`: `gate.verdict(manifest)`: the table's decision alone (deny and ask rules, not
//!   the argument rules, which need the arguments);
//! - `cedar`: `Authorizer::is_authorized` on a request made beforehand (Cedar's best case: nothing is
//!   parsed or built per decision);
//! - `cedar_from_json`: the request made per decision from the same JSON arguments
//!   (`Context::from_json_value` on a clone), as a server that receives them must.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::str::FromStr;
use std::sync::OnceLock;

use cedar_policy::{Authorizer, Context, Decision, Entities, EntityUid, PolicySet, Request};
use divan::Bencher;
use divan::counter::ItemsCount;
use serde_json::{Value, json};
use toolgate::policy::Verdict;
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::registry::ToolManifest;
use toolgate::{Denied, Gate, Mode, registry, tool};
use toolgate_benches::ready;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("count") {
        std::process::exit(count(&args[1..]));
    }
    divan::main();
}

/// `policy count WAY N ROUNDS`: decides the requests of size `N` `ROUNDS` times over, one way, and
/// nothing else, for counting instructions with callgrind (`benches/policy-instructions.sh` runs it with
/// `ROUNDS = 0` and more, and divides the difference by the decisions).
fn count(args: &[String]) -> i32 {
    let (Some(way), Some(Ok(n)), Some(Ok(rounds))) = (
        args.first(),
        args.get(1).map(|n| n.parse::<usize>()),
        args.get(2).map(|r| r.parse::<usize>()),
    ) else {
        eprintln!(
            "usage: policy count WAY N ROUNDS (WAY: {})",
            WAYS.join(", ")
        );
        return 2;
    };
    let Some(decide) = WAYS.iter().position(|w| w == way).map(|i| DECIDE[i]) else {
        eprintln!("no way {way:?}: one of {}", WAYS.join(", "));
        return 2;
    };
    if !SIZES.contains(&n) {
        eprintln!("no size {n}: one of {SIZES:?}");
        return 2;
    }
    let setup = Setup::get(n);
    for _ in 0..rounds {
        for request in &setup.prepared {
            black_box(decide(setup, black_box(request)));
        }
    }
    0
}

/// The ways of deciding a request, by name, each in [`DECIDE`] at the same place.
const WAYS: [&str; 5] = [
    "toolgate_call",
    "toolgate_no_policy",
    "toolgate_verdict",
    "cedar",
    "cedar_from_json",
];
const DECIDE: [fn(&Setup, &Prepared) -> bool; 5] = [
    toolgate_call_one,
    toolgate_no_policy_one,
    toolgate_verdict_one,
    cedar_one,
    cedar_from_json_one,
];

/// The sizes measured, in rules.
const SIZES: [usize; 3] = [10, 100, 1000];
/// Rules per principal's table.
const RULES_PER_PRINCIPAL: usize = 20;
/// The requests of each size, decided in turn.
const REQUESTS: usize = 256;
/// The gates' mode: every `pol.*` tool runs in it.
const MODE: Mode = Mode::PartialAuto;

macro_rules! tools {
    ($($name:ident)*) => {
        $(
            /// A tool of the policy benchmark.
            #[tool(risk = "LOW_WRITE", domain = "pol", callable)]
            fn $name(host: String, amount: i64, region: String) -> Result<(), Denied> {
                let _ = (host, amount, region);
                Ok(())
            }
        )*
        /// Every tool's id, in order.
        const TOOLS: &[&str] = &[$(concat!("pol.", stringify!($name))),*];
    };
}

tools! {
    t00 t01 t02 t03 t04 t05 t06 t07 t08 t09 t10 t11 t12 t13 t14 t15 t16 t17 t18 t19 t20 t21 t22 t23 t24
    t25 t26 t27 t28 t29 t30 t31 t32 t33 t34 t35 t36 t37 t38 t39 t40 t41 t42 t43 t44 t45 t46 t47 t48 t49
}

/// What one rule says, as generated.
#[derive(Debug, Clone)]
enum Kind {
    Deny,
    Ask,
    RefuseHost(&'static [&'static str]),
    AmountRange { min: i64, max: i64 },
    RegionOneOf(&'static [&'static str]),
}

#[derive(Debug, Clone)]
struct Rule {
    principal: usize,
    tool: usize,
    kind: Kind,
}

/// One request: who, which tool, with what.
struct Call {
    principal: usize,
    tool: usize,
    host: &'static str,
    amount: i64,
    region: &'static str,
}

impl Call {
    fn arguments(&self) -> Value {
        json!({"host": self.host, "amount": self.amount, "region": self.region})
    }
}

const HOSTS: [&str; 5] = ["db1", "prod-db", "db.prod.eu", "api", "cache.eu"];
const AMOUNTS: [i64; 5] = [0, 5, 40, 90, 500];
const REGIONS: [&str; 3] = ["eu", "us", "ap"];
const GLOBS: &[&str] = &["prod-*", "*.prod.*"];
const ONE_OF: [&[&str]; 2] = [&["eu", "us"], &["eu"]];

/// The rules of a policy of `n` rules.
fn rules(n: usize) -> Vec<Rule> {
    (0..n)
        .map(|i| {
            let (principal, r) = (i / RULES_PER_PRINCIPAL, i % RULES_PER_PRINCIPAL);
            // Distinct tools within a principal's table, so that no rule is dead.
            let tool = (principal * 7 + r) % TOOLS.len();
            let kind = match r % 5 {
                0 => Kind::Deny,
                1 => Kind::Ask,
                2 => Kind::RefuseHost(GLOBS),
                3 => Kind::AmountRange {
                    min: 1,
                    max: 10 * (1 + (principal + r / 5) as i64 % 10),
                },
                _ => Kind::RegionOneOf(ONE_OF[(principal + r / 5) % 2]),
            };
            Rule {
                principal,
                tool,
                kind,
            }
        })
        .collect()
}

fn principal_name(k: usize) -> String {
    format!("p{k}")
}

/// The rules as a toolgate policy file.
fn policy_file(rules: &[Rule]) -> String {
    let mut by_principal: BTreeMap<usize, Vec<&Rule>> = BTreeMap::new();
    for rule in rules {
        by_principal.entry(rule.principal).or_default().push(rule);
    }
    let quoted = |items: &[&str]| {
        items
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = String::from("format = 1\n");
    for (principal, rules) in by_principal {
        let name = principal_name(principal);
        let ids = |want: fn(&Kind) -> bool| {
            let ids: Vec<&str> = rules
                .iter()
                .filter(|r| want(&r.kind))
                .map(|r| TOOLS[r.tool])
                .collect();
            quoted(&ids)
        };
        writeln!(text, "\n[principals.{name}]").unwrap();
        writeln!(text, "deny = [{}]", ids(|k| matches!(k, Kind::Deny))).unwrap();
        writeln!(text, "ask = [{}]", ids(|k| matches!(k, Kind::Ask))).unwrap();
        for rule in &rules {
            let (parameter, test) = match &rule.kind {
                Kind::Deny | Kind::Ask => continue,
                Kind::RefuseHost(globs) => ("host", format!("refuse = [{}]", quoted(globs))),
                Kind::AmountRange { min, max } => ("amount", format!("min = {min}\nmax = {max}")),
                Kind::RegionOneOf(values) => ("region", format!("one_of = [{}]", quoted(values))),
            };
            writeln!(
                text,
                "\n[[principals.{name}.arguments]]\ntool = \"{}\"\nparameter = \"{parameter}\"\n{test}",
                TOOLS[rule.tool]
            )
            .unwrap();
        }
    }
    text
}

/// The rules as Cedar policies, and the `permit` of everything the code allows.
fn cedar_policies(rules: &[Rule]) -> String {
    let mut text = String::from("permit(principal, action, resource);\n");
    for rule in rules {
        let scope = format!(
            "forbid(principal == User::\"{}\", action == Action::\"call\", resource == Tool::\"{}\")",
            principal_name(rule.principal),
            TOOLS[rule.tool]
        );
        let condition = match &rule.kind {
            Kind::Deny | Kind::Ask => String::new(),
            Kind::RefuseHost(globs) => {
                let likes: Vec<String> = globs
                    .iter()
                    .map(|g| format!("context.host like \"{g}\""))
                    .collect();
                format!(" when {{ {} }}", likes.join(" || "))
            }
            Kind::AmountRange { min, max } => {
                format!(" when {{ context.amount < {min} || context.amount > {max} }}")
            }
            Kind::RegionOneOf(values) => {
                let set: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
                format!(
                    " unless {{ [{}].contains(context.region) }}",
                    set.join(", ")
                )
            }
        };
        writeln!(text, "{scope}{condition};").unwrap();
    }
    text
}

/// What the generated rules say of `call`: `None` when it runs, else the code toolgate refuses it with.
fn expected(rules: &[Rule], call: &Call) -> Option<&'static str> {
    let mut refusal = None;
    for rule in rules
        .iter()
        .filter(|r| r.principal == call.principal && r.tool == call.tool)
    {
        let code = match &rule.kind {
            Kind::Deny => Some("DENY_LISTED"),
            Kind::Ask => Some("APPROVAL_REQUIRED"),
            Kind::RefuseHost(globs) => globs
                .iter()
                .any(|g| glob(g, call.host))
                .then_some("ARGUMENT_REFUSED"),
            Kind::AmountRange { min, max } => {
                (call.amount < *min || call.amount > *max).then_some("ARGUMENT_REFUSED")
            }
            Kind::RegionOneOf(values) => {
                (!values.contains(&call.region)).then_some("ARGUMENT_REFUSED")
            }
        };
        refusal = refusal.or(code);
    }
    refusal
}

/// `*` matches any text; everything else itself.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len()).any(|i| rest.is_char_boundary(i) && glob(tail, &rest[i..]))
        }
    }
}

/// A small deterministic generator (xorshift), so that every run draws the same requests.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The requests of a policy over `principals` principals: three in four on a tool the principal's
/// rules name, the rest on any tool.
fn calls(rules: &[Rule], principals: usize) -> Vec<Call> {
    let mut draw = Draw(0x9e37_79b9_7f4a_7c15);
    (0..REQUESTS)
        .map(|_| {
            let principal = draw.below(principals);
            let named: Vec<usize> = rules
                .iter()
                .filter(|r| r.principal == principal)
                .map(|r| r.tool)
                .collect();
            let tool = if draw.below(4) < 3 {
                named[draw.below(named.len())]
            } else {
                draw.below(TOOLS.len())
            };
            Call {
                principal,
                tool,
                host: HOSTS[draw.below(HOSTS.len())],
                amount: AMOUNTS[draw.below(AMOUNTS.len())],
                region: REGIONS[draw.below(REGIONS.len())],
            }
        })
        .collect()
}

/// One request, ready for each side.
struct Prepared {
    gate: usize,
    id: &'static str,
    manifest: &'static ToolManifest,
    arguments: Value,
    principal: EntityUid,
    resource: EntityUid,
    request: Request,
}

/// Everything one size needs, made and cross-checked once.
struct Setup {
    gates: Vec<Gate>,
    bare: Gate,
    prepared: Vec<Prepared>,
    policies: PolicySet,
    entities: Entities,
    authorizer: Authorizer,
    action: EntityUid,
    refused: usize,
}

fn uid(kind: &str, id: &str) -> EntityUid {
    EntityUid::from_str(&format!("{kind}::{id:?}")).expect("an entity uid")
}

impl Setup {
    fn new(n: usize) -> Setup {
        let rules = rules(n);
        let principals = n.div_ceil(RULES_PER_PRINCIPAL);
        let text = policy_file(&rules);
        let file = PolicyFile::parse("bench.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let live = LivePolicy::new(file);
        let gates: Vec<Gate> = (0..principals)
            .map(|k| {
                Gate::builder()
                    .mode(MODE)
                    .principal(principal_name(k))
                    .agent("bench")
                    .policy(live.clone())
                    .build()
                    .expect("the benchmark's gate")
            })
            .collect();
        let bare = Gate::new(MODE).expect("the benchmark's gate");

        let cedar = cedar_policies(&rules);
        let policies = PolicySet::from_str(&cedar).unwrap_or_else(|e| panic!("{e:?}\n{cedar}"));
        assert_eq!(
            policies.policies().count(),
            n + 1,
            "N forbids and one permit"
        );
        let authorizer = Authorizer::new();
        let entities = Entities::empty();
        let action = uid("Action", "call");

        let calls = calls(&rules, principals);
        let mut prepared = Vec::with_capacity(calls.len());
        let mut refused = 0;
        for call in &calls {
            let id = TOOLS[call.tool];
            let arguments = call.arguments();
            let principal = uid("User", &principal_name(call.principal));
            let resource = uid("Tool", id);
            let context =
                Context::from_json_value(arguments.clone(), None).expect("the context of a call");
            let request = Request::new(
                principal.clone(),
                action.clone(),
                resource.clone(),
                context,
                None,
            )
            .expect("a request");

            let want = expected(&rules, call);
            let toolgate =
                match ready(registry().call(&gates[call.principal], id, arguments.clone())) {
                    Ok(_) => None,
                    Err(error) => Some(error.code().to_owned()),
                };
            let cedar = authorizer.is_authorized(&request, &policies, &entities);
            let args = &arguments;
            let who = principal_name(call.principal);
            assert_eq!(
                toolgate.as_deref(),
                want,
                "toolgate's answer to {who} calling {id} with {args} is not what the file says"
            );
            assert_eq!(
                cedar.decision() == Decision::Allow,
                want.is_none(),
                "Cedar's answer to {who} calling {id} with {args} is not what its policies say: \
                 {cedar:?}"
            );
            assert!(
                ready(registry().call(&bare, id, arguments.clone())).is_ok(),
                "{id} runs without a policy"
            );
            refused += usize::from(want.is_some());
            prepared.push(Prepared {
                gate: call.principal,
                id,
                manifest: registry().manifest(id).expect("a linked tool"),
                arguments,
                principal,
                resource,
                request,
            });
        }
        Setup {
            gates,
            bare,
            prepared,
            policies,
            entities,
            authorizer,
            action,
            refused,
        }
    }

    fn get(n: usize) -> &'static Setup {
        static SETUPS: [OnceLock<Setup>; SIZES.len()] = [const { OnceLock::new() }; SIZES.len()];
        let at = SIZES.iter().position(|&s| s == n).expect("a measured size");
        SETUPS[at].get_or_init(|| {
            let setup = Setup::new(n);
            eprintln!(
                "N = {n}: {} requests, {} refused, {} allowed; toolgate, Cedar and the rules agree on each",
                setup.prepared.len(),
                setup.refused,
                setup.prepared.len() - setup.refused
            );
            setup
        })
    }
}

/// `registry().call` on the principal's gate, which follows the policy: the decision and the call.
#[inline(never)]
fn toolgate_call_one(setup: &Setup, request: &Prepared) -> bool {
    let arguments = request.arguments.clone();
    ready(registry().call(&setup.gates[request.gate], request.id, arguments)).is_ok()
}

/// The same call through a gate that follows no policy.
#[inline(never)]
fn toolgate_no_policy_one(setup: &Setup, request: &Prepared) -> bool {
    let arguments = request.arguments.clone();
    ready(registry().call(&setup.bare, request.id, arguments)).is_ok()
}

/// The table's verdict alone: deny and ask rules, not argument rules.
#[inline(never)]
fn toolgate_verdict_one(setup: &Setup, request: &Prepared) -> bool {
    setup.gates[request.gate].verdict(request.manifest) == Some(Verdict::Allow)
}

/// Cedar on a request made beforehand.
#[inline(never)]
fn cedar_one(setup: &Setup, request: &Prepared) -> bool {
    let response =
        setup
            .authorizer
            .is_authorized(&request.request, &setup.policies, &setup.entities);
    response.decision() == Decision::Allow
}

/// Cedar on a request made from the JSON arguments.
#[inline(never)]
fn cedar_from_json_one(setup: &Setup, request: &Prepared) -> bool {
    let context = Context::from_json_value(request.arguments.clone(), None).expect("a context");
    let request = Request::new(
        request.principal.clone(),
        setup.action.clone(),
        request.resource.clone(),
        context,
        None,
    )
    .expect("a request");
    let response = setup
        .authorizer
        .is_authorized(&request, &setup.policies, &setup.entities);
    response.decision() == Decision::Allow
}

/// Each iteration decides every request once, in order: divide its time by `REQUESTS` for the time
/// of one decision (divan's `items/s` column counts them).
fn decide_all(bencher: Bencher, n: usize, decide: fn(&Setup, &Prepared) -> bool) {
    let setup = Setup::get(n);
    bencher.counter(ItemsCount::new(REQUESTS)).bench_local(|| {
        for request in &setup.prepared {
            black_box(decide(setup, black_box(request)));
        }
    });
}

#[divan::bench(args = SIZES)]
fn toolgate_call(bencher: Bencher, n: usize) {
    decide_all(bencher, n, toolgate_call_one);
}

#[divan::bench(args = SIZES)]
fn toolgate_no_policy(bencher: Bencher, n: usize) {
    decide_all(bencher, n, toolgate_no_policy_one);
}

#[divan::bench(args = SIZES)]
fn toolgate_verdict(bencher: Bencher, n: usize) {
    decide_all(bencher, n, toolgate_verdict_one);
}

#[divan::bench(args = SIZES)]
fn cedar(bencher: Bencher, n: usize) {
    decide_all(bencher, n, cedar_one);
}

#[divan::bench(args = SIZES)]
fn cedar_from_json(bencher: Bencher, n: usize) {
    decide_all(bencher, n, cedar_from_json_one);
}
