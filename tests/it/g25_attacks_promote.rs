//! Attacks on `PolicyFile::promote` and the application's `policy promote` (docs/policy_file.md,
//! "Shadow rules: logged only", "One command turns a rule on"): a place that could name another rule
//! or table (quoted, dotted and inline keys, escapes, comments, look-alike and dotted principal
//! names, identical rules, inline arrays of tables), CRLF and a BOM, the size limit, links planted at
//! the file's name; then a promotion meeting a gate that follows the file live while a call waits.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolgate::audit::{AuditRecord, MemorySink, Stage};
use toolgate::policy_file::{Direction, LivePolicy, PolicyFile};
use toolgate::{Approval, ApprovalRequest, Approver, Denied, Gate, Mode, registry, tool};

use crate::common::Scratch;

/// Read a page.
#[tool(risk = "READ_ONLY", domain = "g25p", callable)]
fn fetch(url: String) -> Result<String, Denied> {
    Ok(url)
}

/// Refund an amount.
#[tool(risk = "LOW_WRITE", domain = "g25p", callable, record_arguments)]
fn refund(amount: u32) -> Result<u32, Denied> {
    Ok(amount)
}

/// Wipe a host.
#[tool(risk = "HIGH_WRITE", domain = "g25p", callable)]
fn wipe(host: String) -> Result<String, Denied> {
    Ok(host)
}

fn policy(text: &str) -> PolicyFile {
    PolicyFile::parse("ops.toml", text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// `line:column` (1-based, in characters) of the `nth` (0-based) occurrence of `needle` in `text`.
fn place_of(text: &str, needle: &str, nth: usize) -> String {
    let (at, _) = text
        .match_indices(needle)
        .nth(nth)
        .unwrap_or_else(|| panic!("no {nth}th {needle:?} in {text:?}"));
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[start..].chars().count() + 1;
    format!("{line}:{column}")
}

fn call(gate: &Gate, id: &str, arguments: Value) -> Result<Value, String> {
    registry()
        .call(gate, id, arguments)
        .now()
        .expect("a sync tool answers at once")
        .map_err(|e| e.code().to_owned())
}

/// A gate of `principal` in FULL_AUTO, approving what asks, following `file`.
fn gate_of(principal: &str, file: PolicyFile) -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .principal(principal)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .policy(LivePolicy::new(file))
        .build()
        .unwrap()
}

/// Promotes the `deny "g25p.wipe"` logged only in `file` and checks the promise: the rule is
/// enforced for `principal` (a gate of it refuses `g25p.wipe`, still runs `g25p.fetch`), the file
/// no longer logs it only, nothing widens, and every line of `kept` is still in the file as written.
fn assert_wipe_deny_promoted(file: &str, principal: &str, kept: &[&str]) -> String {
    // Logged only before: the gate runs the call.
    assert!(
        call(
            &gate_of(principal, policy(file)),
            "g25p.wipe",
            json!({"host": "web-1"})
        )
        .is_ok(),
        "the shadow rule changed a call before it was promoted:\n{file}"
    );
    let last = file.matches("\"g25p.wipe\"").count() - 1;
    let place = place_of(file, "\"g25p.wipe\"", last);
    let promoted = PolicyFile::promote("ops.toml", file, &place)
        .unwrap_or_else(|e| panic!("{place} was not promoted: {e}\n{file}"));
    let after = policy(&promoted.text);
    let diff = policy(file).diff(&after);
    assert!(!diff.widens(), "{diff}\n{}", promoted.text);
    assert!(
        diff.changes
            .iter()
            .any(|c| c.direction == Direction::Narrows),
        "nothing narrowed:\n{diff}\n{}",
        promoted.text
    );
    let gate = gate_of(principal, after);
    assert_eq!(
        call(&gate, "g25p.wipe", json!({"host": "web-1"})),
        Err("DENY_LISTED".to_owned()),
        "not enforced for {principal}:\n{}",
        promoted.text
    );
    assert!(
        call(&gate, "g25p.fetch", json!({"url": "u"})).is_ok(),
        "{}",
        promoted.text
    );
    for line in kept {
        assert!(
            promoted.text.contains(line),
            "{line:?} was not kept as written:\n{}",
            promoted.text
        );
    }
    promoted.text
}

// ---------------------------------------------------------------------------------------------
// The place and the shapes TOML allows for one table.

#[test]
fn a25_p01_a_shadow_table_with_a_quoted_key_is_promoted_to_its_scope() {
    assert_wipe_deny_promoted(
        "format = 1\n[defaults]\nask = [\"g25p.refund\"] # kept\n[shadow.\"defaults\"]\ndeny = [\"g25p.wipe\"]\n",
        "alice",
        &["# kept"],
    );
}

#[test]
fn a25_p02_a_shadow_table_written_with_dotted_keys_is_promoted() {
    assert_wipe_deny_promoted(
        "format = 1\n[shadow]\ndefaults.deny = [\"g25p.wipe\"]\n",
        "alice",
        &[],
    );
    assert_wipe_deny_promoted(
        "format = 1\nshadow.defaults.deny = [\"g25p.wipe\"] # at the root\n[defaults]\nask = [\"g25p.refund\"]\n",
        "alice",
        &["ask = [\"g25p.refund\"]"],
    );
}

#[test]
fn a25_p19_a_comment_above_a_shadow_table_emptied_by_the_move_is_kept() {
    assert_wipe_deny_promoted(
        "format = 1\n# reviewed by ana, ticket 42\n[shadow.defaults]\ndeny = [\"g25p.wipe\"]\n",
        "alice",
        &["# reviewed by ana, ticket 42"],
    );
}

#[test]
fn a25_p03_a_shadow_table_written_inline_is_promoted() {
    assert_wipe_deny_promoted(
        "format = 1\nshadow = { defaults = { deny = [\"g25p.wipe\"] } }\n",
        "alice",
        &[],
    );
}

#[test]
fn a25_p04_a_shadow_key_written_with_a_unicode_escape_is_promoted() {
    assert_wipe_deny_promoted(
        "format = 1\n[shadow.\"defaul\\u0074s\"]\ndeny = [\"g25p.wipe\"]\n",
        "alice",
        &[],
    );
}

#[test]
fn a25_p05_an_enforced_table_written_inline_or_with_dotted_keys_takes_the_rule() {
    assert_wipe_deny_promoted(
        "format = 1\ndefaults = { ask = [\"g25p.refund\"] }\n[shadow.defaults]\ndeny = [\"g25p.wipe\"]\n",
        "alice",
        &[],
    );
    assert_wipe_deny_promoted(
        "format = 1\ndefaults.ask = [\"g25p.refund\"] # dotted\n[shadow.defaults]\ndeny = [\"g25p.wipe\"]\n",
        "alice",
        &["# dotted"],
    );
    assert_wipe_deny_promoted(
        "format = 1\n[principals]\nalice = { ask = [\"g25p.refund\"] }\n[shadow.principals.alice]\ndeny = [\"g25p.wipe\"]\n",
        "alice",
        &[],
    );
}

#[test]
fn a25_p06_comments_and_strings_that_read_as_table_headers_do_not_move_the_rule() {
    let text = assert_wipe_deny_promoted(
        "format = 1\n# [shadow.defaults]\n# deny = [\"g25p.wipe\"]\n[defaults]\n# [defaults]\nask = [\"g25p.refund\"] # [shadow.defaults]\n[shadow.defaults] # [defaults]\ndeny = [\"g25p.wipe\"]\n",
        "alice",
        &[
            "# [shadow.defaults]\n# deny = [\"g25p.wipe\"]\n",
            "# [defaults]\n",
            "# [shadow.defaults]",
        ],
    );
    // The place of the commented-out rule names no rule.
    let file = "format = 1\n# deny = [\"g25p.wipe\"]\n[shadow.defaults]\ndeny = [\"g25p.wipe\"]\n";
    let error = PolicyFile::promote("ops.toml", file, &place_of(file, "\"g25p.wipe\"", 0))
        .expect_err("a comment's place was promoted");
    assert!(
        error.to_string().contains("no rule of a [shadow] table"),
        "{error}\n{text}"
    );
}

#[test]
fn a25_p07_a_place_in_an_enforced_table_or_an_enforced_look_alike_changes_nothing() {
    let file = "format = 1\n[defaults]\ndeny = [\"g25p.wipe\"]\n[principals.alice]\nask = [\"g25p.refund\"]\n[shadow.principals.alice]\nask_at = \"LOW_WRITE\"\n";
    for place in [
        place_of(file, "\"g25p.wipe\"", 0),
        place_of(file, "\"g25p.refund\"", 0),
        "4:1".to_owned(),
        "6:1".to_owned(),
        "7:1".to_owned(),
        "99:1".to_owned(),
        "7:999".to_owned(),
    ] {
        assert!(
            PolicyFile::promote("ops.toml", file, &place).is_err(),
            "{place} was promoted"
        );
    }
}

#[test]
fn a25_p08_a_principal_whose_quoted_name_holds_a_dot_keeps_its_own_table() {
    // `ops.bot` is one principal; `[principals.ops]` is another. The rule must reach `ops.bot` and
    // leave `ops` as it was.
    let file = "format = 1\n[principals.ops]\nask = [\"g25p.refund\"]\n[shadow.principals.\"ops.bot\"]\ndeny = [\"g25p.wipe\"]\n";
    let text = assert_wipe_deny_promoted(
        file,
        "ops.bot",
        &["[principals.ops]\nask = [\"g25p.refund\"]"],
    );
    let ops = gate_of("ops", policy(&text));
    assert!(
        call(&ops, "g25p.wipe", json!({"host": "h"})).is_ok(),
        "the rule reached another principal:\n{text}"
    );
}

#[test]
fn a25_p09_a_shadow_principal_whose_name_reads_as_an_enforced_one_is_promoted_into_it_or_refused() {
    // `оlga` with a Cyrillic `о` reads as `olga`: a gate of `olga` follows both tables' rules.
    let file = "format = 1\n[principals.olga]\nask = [\"g25p.refund\"]\n[shadow.principals.\"\u{43e}lga\"]\ndeny = [\"g25p.wipe\"]\n";
    let before = match PolicyFile::parse("ops.toml", file) {
        Ok(before) => before,
        Err(e) => {
            eprintln!("a25_p09: the file does not check: {e}");
            return; // a file that does not check cannot be promoted: nothing to attack
        }
    };
    let place = place_of(file, "\"g25p.wipe\"", 0);
    match PolicyFile::promote("ops.toml", file, &place) {
        Err(e) => eprintln!("a25_p09: refused: {e}"),
        Ok(promoted) => {
            let after = policy(&promoted.text);
            assert!(!before.diff(&after).widens());
            let gate = gate_of("olga", after);
            assert_eq!(
                call(&gate, "g25p.wipe", json!({"host": "h"})),
                Err("DENY_LISTED".to_owned()),
                "{}",
                promoted.text
            );
            assert!(promoted.text.contains("ask = [\"g25p.refund\"]"));
        }
    }
}

#[test]
fn a25_p10_of_two_identical_argument_rules_the_one_at_the_place_moves() {
    let file = "format = 1\n[[shadow.defaults.arguments]] # first\ntool = \"g25p.refund\"\nparameter = \"amount\"\nmax = 50\n[[shadow.defaults.arguments]] # second\ntool = \"g25p.refund\"\nparameter = \"amount\"\nmax = 50\n";
    let Ok(before) = PolicyFile::parse("ops.toml", file) else {
        return;
    };
    let promoted = PolicyFile::promote("ops.toml", file, "6:1").unwrap_or_else(|e| panic!("{e}"));
    assert!(!before.diff(&promoted.file).widens());
    let text = promoted.text;
    // The first stays logged only, with its comment; the second is enforced.
    let first = text
        .find("# first")
        .expect("the first rule's comment is gone");
    let shadow = text
        .find("[[shadow.defaults.arguments]]")
        .expect("the first rule left the shadow table");
    assert!(shadow < first, "{text}");
    assert_eq!(
        text.matches("[[shadow.defaults.arguments]]").count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches("[[defaults.arguments]]").count(), 1, "{text}");
    let gate = gate_of("alice", policy(&text));
    assert_eq!(
        call(&gate, "g25p.refund", json!({"amount": 51})),
        Err("ARGUMENT_REFUSED".to_owned())
    );
}

#[test]
fn a25_p11_an_inline_array_of_argument_rules_moves_the_one_at_the_place_whole() {
    let file = "format = 1\n[shadow.defaults]\narguments = [{ tool = \"g25p.refund\", parameter = \"amount\", max = 50 }, { tool = \"g25p.wipe\", parameter = \"host\", refuse = [\"prod-*\"] }]\n";
    let before = policy(file);
    let place = place_of(file, "{ tool = \"g25p.wipe\"", 0);
    let promoted =
        PolicyFile::promote("ops.toml", file, &place).unwrap_or_else(|e| panic!("{place}: {e}"));
    assert!(!before.diff(&promoted.file).widens());
    let gate = gate_of("alice", policy(&promoted.text));
    assert_eq!(
        call(&gate, "g25p.wipe", json!({"host": "prod-1"})),
        Err("ARGUMENT_REFUSED".to_owned()),
        "{}",
        promoted.text
    );
    assert!(
        call(&gate, "g25p.refund", json!({"amount": 500})).is_ok(),
        "the other rule was enforced too:\n{}",
        promoted.text
    );
    assert!(promoted.text.contains("max = 50"), "{}", promoted.text);
}

#[test]
fn a25_p12_a_crlf_file_is_promoted_at_its_places() {
    let file = "format = 1\r\n# ops\r\n[defaults]\r\nask = [\"g25p.refund\"]\r\n[shadow.defaults]\r\ndeny = [\"g25p.wipe\", \"g25p.fetch\"]\r\n";
    let text = assert_wipe_deny_promoted(file, "alice", &["# ops"]);
    let gate = gate_of("alice", policy(&text));
    assert!(call(&gate, "g25p.fetch", json!({"url": "u"})).is_ok());
}

#[test]
fn a25_p12b_a_crlf_file_keeps_its_line_ends() {
    let file = "format = 1\r\n# ops\r\n[defaults]\r\nask = [\"g25p.refund\"]\r\n[shadow.defaults]\r\ndeny = [\"g25p.wipe\", \"g25p.fetch\"]\r\n";
    let text = assert_wipe_deny_promoted(file, "alice", &["# ops\r\n"]);
    assert!(
        !text.replace("\r\n", "").contains('\n'),
        "a bare LF was written into a CRLF file: {text:?}"
    );
    // The other pattern stays logged only.
    let gate = gate_of("alice", policy(&text));
    assert!(call(&gate, "g25p.fetch", json!({"url": "u"})).is_ok());
}

#[test]
fn a25_p13_a_file_with_a_bom_is_promoted_at_the_places_its_records_name() {
    let file = "\u{feff}format = 1\n[shadow.defaults]\ndeny = [\"g25p.wipe\"]\n";
    let Ok(_) = PolicyFile::parse("ops.toml", file) else {
        return; // a file that does not check cannot be promoted
    };
    // The place the gate names in its records is the place promote takes.
    let sink = MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .policy(LivePolicy::new(policy(file)))
        .audit(sink.clone())
        .build()
        .unwrap();
    call(&gate, "g25p.wipe", json!({"host": "h"})).unwrap();
    let named = last(&sink, "g25p.wipe", Stage::Enter)
        .rule_in_shadow
        .expect("the shadow rule was not recorded");
    let place = named
        .rsplit_once('(')
        .and_then(|(_, p)| p.strip_suffix(')'))
        .unwrap()
        .to_owned();
    let promoted = PolicyFile::promote("ops.toml", file, &place)
        .unwrap_or_else(|e| panic!("{place} ({named}): {e}"));
    assert!(promoted.text.starts_with('\u{feff}'), "the BOM was dropped");
    let gate = gate_of("alice", promoted.file);
    assert_eq!(
        call(&gate, "g25p.wipe", json!({"host": "h"})),
        Err("DENY_LISTED".to_owned())
    );
}

const MIB: usize = 1 << 20;

#[test]
fn a25_p14_a_promotion_never_writes_a_file_past_the_size_a_file_is_read_at() {
    // Just under 1 MiB, and the move adds a `[defaults]` header while the shadow table stays.
    let head = "format = 1\n[shadow.defaults]\ntaint = \"refuse\"\ndeny = [\"g25p.wipe\"]\n";
    let mut file = head.to_owned();
    let pad = MIB - file.len();
    file.push('#');
    file.push_str(&"x".repeat(pad - 2));
    file.push('\n');
    assert!(file.len() <= MIB);
    let before = policy(&file);
    match PolicyFile::promote("ops.toml", &file, "3:9") {
        Ok(promoted) if promoted.text.len() > MIB => panic!(
            "promote wrote a file of {} bytes, which no gate would read",
            promoted.text.len()
        ),
        Err(e) => eprintln!("a25_p14: refused: {e}"),
        Ok(promoted) => {
            assert!(
                promoted.text.len() <= MIB,
                "promote wrote a file of {} bytes, which no gate would read",
                promoted.text.len()
            );
            assert!(!before.diff(&promoted.file).widens());
            policy(&promoted.text);
        }
    }
    // Past it: refused.
    let mut big = head.to_owned();
    big.push('#');
    big.push_str(&"x".repeat(MIB));
    big.push('\n');
    assert!(PolicyFile::promote("ops.toml", &big, "4:9").is_err());
}

// ---------------------------------------------------------------------------------------------
// The application's command: links planted at the file's name.

#[test]
fn a25_p15_the_command_writes_no_file_through_a_symbolic_link_at_its_name() {
    let desk = crate::common::example("cli", "clap,policy-file");
    let dir = Scratch::new("promote-symlink");
    let text = "format = 1\n[shadow.defaults]\ndeny = [\"deploy.rollback\"]\n";
    let target = dir.path("elsewhere.toml");
    std::fs::write(&target, text).unwrap();
    let file = dir.path("ops.toml");
    std::os::unix::fs::symlink(&target, &file).unwrap();
    let (code, said) = crate::common::run_program(
        &desk,
        &["policy", "promote", &file.display().to_string(), "3:9"],
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        text,
        "written through a link (exit {code:?}): {said}"
    );
    assert_ne!(code, Some(0), "{said}");
}

#[test]
fn a25_p16_the_command_writes_no_file_with_a_second_name() {
    let desk = crate::common::example("cli", "clap,policy-file");
    let dir = Scratch::new("promote-hardlink");
    let text = "format = 1\n[shadow.defaults]\ndeny = [\"deploy.rollback\"]\n";
    let other = dir.path("kept-elsewhere.toml");
    std::fs::write(&other, text).unwrap();
    let file = dir.path("ops.toml");
    std::fs::hard_link(&other, &file).unwrap();
    let (code, said) = crate::common::run_program(
        &desk,
        &["policy", "promote", &file.display().to_string(), "3:9"],
    );
    assert_eq!(
        std::fs::read_to_string(&other).unwrap(),
        text,
        "the other name's bytes changed (exit {code:?}): {said}"
    );
}

#[test]
fn a25_p17_the_command_on_a_crlf_file_writes_it_with_its_line_ends() {
    let desk = crate::common::example("cli", "clap,policy-file");
    let dir = Scratch::new("promote-crlf");
    let file = dir.path("ops.toml");
    let text = "format = 1\r\n[defaults]\r\ndeny = [\"deploy.delete\"]\r\n[shadow.defaults]\r\ndeny = [\"deploy.rollback\"]\r\n";
    std::fs::write(&file, text).unwrap();
    let name = file.display().to_string();
    let (code, said) = crate::common::run_program(&desk, &["policy", "promote", &name, "5:9"]);
    assert_eq!(code, Some(0), "{said}");
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        written, "format = 1\r\n[defaults]\r\ndeny = [\"deploy.delete\", \"deploy.rollback\"]\r\n",
        "{said}"
    );
}

#[test]
fn a25_p18_the_command_refuses_a_file_that_does_not_check_and_leaves_it() {
    let desk = crate::common::example("cli", "clap,policy-file");
    let dir = Scratch::new("promote-unchecked");
    let file = dir.path("ops.toml");
    // The promotion itself would make the file fail its check: an `ask` on a tool denied.
    let text = "format = 1\n[defaults]\ndeny = [\"deploy.rollback\"]\n[shadow.defaults]\nask = [\"deploy.rollback\"]\n";
    std::fs::write(&file, text).unwrap();
    let name = file.display().to_string();
    let (code, said) = crate::common::run_program(&desk, &["policy", "promote", &name, "5:8"]);
    assert_ne!(code, Some(0), "{said}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "{said}");
}

// ---------------------------------------------------------------------------------------------
// A promotion meeting a gate that follows the file live.

fn last(sink: &MemorySink, tool: &str, stage: Stage) -> AuditRecord {
    sink.records()
        .into_iter()
        .rev()
        .find(|r| r.tool == tool && r.stage == stage)
        .unwrap_or_else(|| panic!("no {stage:?} record of {tool}"))
}

/// An approver that says when a request reached it and answers when told.
struct Held {
    reached: Mutex<mpsc::Sender<()>>,
    answer: Mutex<mpsc::Receiver<Approval>>,
}

impl Approver for Held {
    fn approve(&self, _request: &ApprovalRequest<'_>) -> Approval {
        self.reached.lock().unwrap().send(()).unwrap();
        self.answer.lock().unwrap().recv().unwrap()
    }
}

#[test]
fn a25_l01_a_call_waiting_for_its_approver_is_refused_by_the_rule_promoted_meanwhile() {
    let file = "format = 1\n[defaults]\nask_at = \"LOW_WRITE\"\n[shadow.defaults]\ndeny = [\"g25p.refund\"]\n";
    let sink = MemorySink::new();
    let live = LivePolicy::new(policy(file));
    let (reached_tx, reached) = mpsc::channel();
    let (answer, answer_rx) = mpsc::channel();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .principal("alice")
        .approver(Held {
            reached: Mutex::new(reached_tx),
            answer: Mutex::new(answer_rx),
        })
        .policy(live.clone())
        .audit(sink.clone())
        .build()
        .unwrap();

    // Logged only: the call runs, its record names the rule and its place.
    let runner = {
        let gate = gate.clone();
        std::thread::spawn(move || call(&gate, "g25p.refund", json!({"amount": 5})))
    };
    reached.recv().unwrap();
    answer.send(Approval::Approve).unwrap();
    assert_eq!(runner.join().unwrap(), Ok(json!(5)));
    let named = last(&sink, "g25p.refund", Stage::Enter)
        .rule_in_shadow
        .expect("what the shadow rule would have done is not recorded");
    assert_eq!(named, "refused (DENY_LISTED) by g25p.refund (ops.toml:5:9)");

    // A second call waits for its approver while the rule it names is promoted.
    let runner = {
        let gate = gate.clone();
        std::thread::spawn(move || call(&gate, "g25p.refund", json!({"amount": 6})))
    };
    reached.recv().unwrap();
    let place = named.rsplit_once('(').unwrap().1.trim_end_matches(')');
    let promoted = PolicyFile::promote("ops.toml", file, place).unwrap();
    assert!(live.replace(promoted.file, "ana"));
    answer.send(Approval::Approve).unwrap();
    assert_eq!(
        runner.join().unwrap(),
        Err("DENY_LISTED".to_owned()),
        "the call ran past the rule promoted before its commit point"
    );
    // A call not reached by the rule records no shadow ruling.
    call(&gate, "g25p.fetch", json!({"url": "u"})).unwrap();
    assert_eq!(last(&sink, "g25p.fetch", Stage::Enter).rule_in_shadow, None);
}

#[test]
fn a25_l02_a_promotion_written_to_the_file_reaches_a_gate_by_reload_and_only_that_rule() {
    let dir = Scratch::new("promote-reload");
    let path = dir.path("ops.toml");
    let file = "format = 1\n[shadow.defaults]\ndeny = [\"g25p.wipe\"]\nask_at = \"LOW_WRITE\"\n";
    std::fs::write(&path, file).unwrap();
    let live = LivePolicy::load(&path).unwrap();
    let sink = MemorySink::new();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let gate = {
        let asked = asked.clone();
        Gate::builder()
            .mode(Mode::FullAuto)
            .approver(move |r: &ApprovalRequest<'_>| {
                asked.lock().unwrap().push(r.tool.id.to_owned());
                Approval::Approve
            })
            .policy(live.clone())
            .audit(sink.clone())
            .build()
            .unwrap()
    };
    // Logged only: the refund runs without asking.
    call(&gate, "g25p.refund", json!({"amount": 1})).unwrap();
    assert!(asked.lock().unwrap().is_empty());
    let promoted =
        PolicyFile::promote(&path.display().to_string(), file, "3:9").unwrap_or_else(|e| {
            panic!("{e}");
        });
    std::fs::write(&path, &promoted.text).unwrap();
    assert!(live.reload("ana").unwrap());
    assert_eq!(
        call(&gate, "g25p.wipe", json!({"host": "h"})),
        Err("DENY_LISTED".to_owned())
    );
    // The ask_at stays logged only: the refund still runs without asking, recorded as it would.
    call(&gate, "g25p.refund", json!({"amount": 2})).unwrap();
    assert!(asked.lock().unwrap().is_empty(), "{}", promoted.text);
    assert!(
        last(&sink, "g25p.refund", Stage::Enter)
            .rule_in_shadow
            .is_some_and(|r| r.starts_with("asks by ask_at LOW_WRITE")),
        "{:?}",
        last(&sink, "g25p.refund", Stage::Enter).rule_in_shadow
    );
}
