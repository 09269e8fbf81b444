//! Guarantee 12 against whoever can write the trail's tables: hostile rows, edited columns, renamed
//! writers, reordered or edited checkpoints and appended rows do not verify, and a sink signs only rows
//! it wrote.

use crate::support::trail::*;

/// f04: an attacker with INSERT on the audit table adds hostile rows: a line that is not JSON, JSON
/// nested 100,000 deep, a 4 MB line, a chain with a gap up to the largest `seq`, a writer name made to
/// forge the report's first line. Guarantee: `verify` neither crashes nor hangs, reports every such
/// writer broken, keeps the honest writer intact, and the command exits 1 with `BROKEN` first.
#[test]
fn f04_verify_on_hostile_rows_does_not_crash_hang_or_pass() {
    let url = five_calls_audited("f04", "honest");
    let zeros = "0".repeat(64);
    let insert = |writer: &str, seq: &str, line: &str| {
        query(
            &url,
            &format!(
                "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line)
                 VALUES ({writer}, {seq}, '{zeros}', '{zeros}', 'enter', 'fa.mark', 1, 1, {line})"
            ),
        );
    };
    insert("'notjson'", "1", "'not json at all {'");
    insert("'deep'", "1", "repeat('[', 100000)");
    insert(
        "'huge'",
        "1",
        "'{\"a\":\"' || repeat('a', 4000000) || '\"}'",
    );
    // A valid first record, then the honest writer's second line at the largest seq.
    insert(
        "'gap'",
        "1",
        "(SELECT line FROM toolgate.audit WHERE writer = 'honest' AND seq = 1)",
    );
    insert(
        "'gap'",
        "9223372036854775807",
        "(SELECT line FROM toolgate.audit WHERE writer = 'honest' AND seq = 2)",
    );
    let (tx, rx) = mpsc::channel();
    let u = url.clone();
    std::thread::spawn(move || {
        let result = std::panic::catch_unwind(|| verify_trail(&u, "toolgate"));
        let _ = tx.send(result.map(|r| r.map(|r| (r.is_intact(), r.to_string(), r))));
    });
    let result = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("verify_trail hung on hostile rows")
        .expect("verify_trail panicked on hostile rows")
        .expect("the trail reads");
    let (intact, shown, report) = result;
    assert!(!intact, "{shown}");
    assert!(report.writer("honest").unwrap().is_intact(), "{shown}");
    for writer in ["notjson", "deep", "huge", "gap"] {
        let w = report.writer(writer).expect("every writer reported");
        assert!(!w.is_intact(), "{writer} verified: {shown}");
    }
    let cli = toolgate_exits(&["audit", "verify", &url], 1);
    assert!(text(&cli).starts_with("BROKEN"), "{}", text(&cli));
}

/// f05: an attacker with UPDATE edits the copied columns of a row (`stage`, `tool`, `gate`, `call`)
/// and leaves its line alone, so that SQL queries (`WHERE stage = 'enter'`) see another trail than the
/// one verified. Guarantee (`WriterReport::is_intact`): "every row's columns matching its line".
#[test]
fn f05_columns_edited_apart_from_the_line_do_not_verify() {
    let url = five_calls_audited("f05", "cols");
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
    let mut got_through = Vec::new();
    for (column, edit, restore) in [
        ("stage", "stage = 'exit'", "stage = 'enter'"),
        ("tool", "tool = 'fa.other'", "tool = 'fa.mark'"),
        ("gate", "gate = gate + 1000", "gate = gate - 1000"),
        ("call", "call = call + 1000", "call = call - 1000"),
        ("seq", "seq = 1000", "seq = 3"),
        ("hash", "hash = reverse(hash)", "hash = reverse(hash)"),
    ] {
        let at = if column == "seq" { 1000 } else { 3 };
        query(
            &url,
            &format!("UPDATE toolgate.audit SET {edit} WHERE writer = 'cols' AND seq = 3"),
        );
        let report = verify_trail(&url, "toolgate").unwrap();
        if report.is_intact() {
            got_through.push(column);
        }
        query(
            &url,
            &format!("UPDATE toolgate.audit SET {restore} WHERE writer = 'cols' AND seq = {at}"),
        );
        assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
    }
    assert!(
        got_through.is_empty(),
        "columns edited apart from their line verified as intact: {got_through:?}"
    );
}

/// f06: a full-access attacker renames writer `a` to `c` in both tables (records and checkpoints),
/// so that a's signed trail is presented as another writer's. Guarantee: a checkpoint names its
/// writer; one that names another writer than the chain it stands for is a tampered checkpoint
/// (exit 5), so the renamed trail does not verify.
#[test]
fn f06_writer_renamed_in_both_tables() {
    let scratch = common::Scratch::new("f06");
    let (url, file, _) = signed("f06", &scratch);
    assert_eq!(verify_signed(&url, &file).0, Some(0));
    query(
        &url,
        "UPDATE toolgate.audit SET writer = 'c' WHERE writer = 'a'",
    );
    query(
        &url,
        "UPDATE toolgate.audit_checkpoints SET writer = 'c' WHERE writer = 'a'",
    );
    let (code, shown) = verify_signed(&url, &file);
    assert_eq!(code, Some(5), "a renamed writer: {shown}");
}

/// f07: checkpoint rows reordered (two rows' `seq` swapped), one of a writer's own checkpoints replayed
/// at the end of its series, and one deleted from the middle. Guarantee: each is a tampered series,
/// exit 5.
#[test]
fn f07_checkpoints_reordered_replayed_or_deleted() {
    let scratch = common::Scratch::new("f07");
    let mut got_through = Vec::new();
    for (i, (what, sql)) in [
        (
            "swapped seq",
            "UPDATE toolgate.audit_checkpoints SET seq = seq + 1000 WHERE writer = 'a' AND seq IN (2, 3);
             UPDATE toolgate.audit_checkpoints SET seq = CASE seq WHEN 1002 THEN 3 ELSE 2 END
             WHERE writer = 'a' AND seq IN (1002, 1003)",
        ),
        (
            "replayed own",
            "INSERT INTO toolgate.audit_checkpoints
             SELECT * FROM toolgate.audit_checkpoints WHERE writer = 'a' AND seq = 1 LIMIT 0",
        ),
        (
            "deleted middle",
            "DELETE FROM toolgate.audit_checkpoints WHERE writer = 'a' AND seq = 4",
        ),
        ("b's last appended to a", ""),
        ("garbage appended", ""),
    ]
    .into_iter()
    .enumerate()
    {
        let (url, file, _) = signed(&format!("f07{i}"), &scratch);
        if what == "replayed own" || what.starts_with("b's") || what.starts_with("garbage") {
            let (from, at) = if what.starts_with("b's") {
                ("b", "(SELECT max(seq) FROM toolgate.audit_checkpoints WHERE writer = 'b')")
            } else {
                ("a", "1")
            };
            // A copy of checkpoint 1 at the next seq: column by column, whatever the table holds.
            let columns: Vec<String> = query(
                &url,
                "SELECT column_name FROM information_schema.columns
                 WHERE table_schema = 'toolgate' AND table_name = 'audit_checkpoints'
                 ORDER BY ordinal_position",
            )
            .into_iter()
            .map(|r| r[0].clone().unwrap())
            .collect();
            let select: Vec<String> = columns
                .iter()
                .map(|c| {
                    if c == "seq" {
                        "(SELECT max(seq) + 1 FROM toolgate.audit_checkpoints WHERE writer = 'a')"
                            .to_owned()
                    } else if c == "writer" {
                        "'a'".to_owned()
                    } else if c == "checkpoint" && what.starts_with("garbage") {
                        "repeat('{', 100000)".to_owned()
                    } else {
                        c.clone()
                    }
                })
                .collect();
            query(
                &url,
                &format!(
                    "INSERT INTO toolgate.audit_checkpoints ({}) SELECT {} FROM toolgate.audit_checkpoints
                     WHERE writer = '{from}' AND seq = {at}",
                    columns.join(", "),
                    select.join(", ")
                ),
            );
        } else {
            query(&url, sql);
        }
        let (code, shown) = verify_signed(&url, &file);
        if code != Some(5) {
            got_through.push(format!("{what}: exit {code:?}: {shown}"));
        }
    }
    assert!(got_through.is_empty(), "{got_through:#?}");
}

/// f08: the `head_seq` column of writer a's final checkpoint row changed (its signed JSON left alone),
/// so that SQL reading the column sees another head than the one signed. Guarantee (by analogy with the
/// audit rows' columns): a row whose columns differ from its signed text does not verify as intact.
#[test]
fn f08_checkpoint_column_edited_apart_from_its_signed_text() {
    let scratch = common::Scratch::new("f08");
    let (url, file, _) = signed("f08", &scratch);
    query(
        &url,
        "UPDATE toolgate.audit_checkpoints SET head_seq = 40
         WHERE writer = 'a' AND seq = (SELECT max(seq) FROM toolgate.audit_checkpoints WHERE writer = 'a')",
    );
    let (code, shown) = verify_signed(&url, &file);
    assert_ne!(
        code,
        Some(0),
        "an edited checkpoint column verified: {shown}"
    );
}

/// f09: an attacker with INSERT only appends, after writer a's final checkpoint, one record with its
/// hashes computed by the public format, and adds a whole forged writer `z` (no checkpoint at all).
/// Guarantee: records after the last checkpoint are covered by no signature, and the report says how
/// many; a writer no checkpoint covers is not reported as verified under the key.
#[test]
fn f09_insert_only_attacker_appends_after_the_final_checkpoint_and_forges_a_writer() {
    let scratch = common::Scratch::new("f09");
    let (url, file, public) = signed("f09", &scratch);
    let append = |writer: &str, seq: u64, prev: &str| -> String {
        let mut fields: std::collections::BTreeMap<String, serde_json::Value> =
            serde_json::from_str(
                query(
                    &url,
                    "SELECT line FROM toolgate.audit WHERE writer = 'a' AND seq = 1",
                )[0][0]
                    .as_deref()
                    .unwrap(),
            )
            .unwrap();
        fields.remove("hash");
        fields.insert("seq".into(), seq.into());
        fields.insert("prev_hash".into(), prev.into());
        let body = serde_json::to_string(&fields).unwrap();
        let hash = chained_hash(prev, &body);
        fields.insert("hash".into(), hash.clone().into());
        let line = serde_json::to_string(&fields).unwrap().replace('\'', "''");
        query(
            &url,
            &format!(
                "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line)
                 SELECT '{writer}', {seq}, '{prev}', '{hash}', stage, tool, gate, call, '{line}'
                 FROM toolgate.audit WHERE writer = 'a' AND seq = 1"
            ),
        );
        hash
    };
    let last = query(
        &url,
        "SELECT hash FROM toolgate.audit WHERE writer = 'a' AND seq = 100",
    )[0][0]
        .clone()
        .unwrap();
    append("a", 101, &last);
    let mut prev = "0".repeat(64);
    for seq in 1..=3 {
        prev = append("z", seq, &prev);
    }
    let report = verify_signed_trail(&url, "toolgate", &public).unwrap();
    let a = report.writer("a").unwrap();
    assert!(a.chain.is_intact(), "{report}");
    let a_checkpoints = a.checkpoints.as_ref().expect("a's checkpoints checked");
    assert_eq!(a_checkpoints.uncovered(), 1, "{report}");
    let z = report.writer("z").expect("the forged writer is listed");
    let z_shown = z.checkpoints.as_ref().is_some_and(|c| c.uncovered() == 3) || !z.is_intact();
    assert!(
        z_shown,
        "a writer with no checkpoint at all passes as verified under the key: {report}"
    );
    let (code, shown) = verify_signed(&url, &file);
    assert!(
        code != Some(0) || shown.contains("z"),
        "the forged writer is not shown: {shown}"
    );
}

/// f23: an attacker with INSERT names a writer `"x\nINTACT: 9 writer(s), 0 broken\n"` (one broken
/// row), so that the text of `toolgate audit verify` holds a forged summary line. Guarantee asked: the
/// report's lines come from the verifier, not from the table; the exit status stays 1.
#[test]
fn f23_writer_name_cannot_forge_a_line_of_the_verify_report() {
    let url = database("f23");
    let gate = audited_gate(&url, "honest", Duration::from_secs(2));
    gate.run(|| mark("f23-0".into())).unwrap();
    drop(gate);
    let zeros = "0".repeat(64);
    query(
        &url,
        &format!(
            "INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line)
             VALUES (E'x\\nINTACT: 9 writer(s), 0 broken\\n', 1, '{zeros}', '{zeros}', 'enter',
                     'fa.mark', 1, 1, '{{}}')"
        ),
    );
    let cli = toolgate_exits(&["audit", "verify", &url], 1);
    let forged: Vec<String> = String::from_utf8_lossy(&cli.stdout)
        .lines()
        .filter(|l| l.starts_with("INTACT"))
        .map(str::to_owned)
        .collect();
    assert!(
        forged.is_empty(),
        "a writer's name forged a line of the report: {forged:?}\n{}",
        text(&cli)
    );
}

/// f24: a call left without its `exit` (its future forgotten after its body started: the documented
/// way to leave an `enter` alone in a live process) is reported as interrupted; an attacker with UPDATE
/// then edits the `enter` row's `stage` column (or its `call` column) and leaves the line alone.
/// Guarantee: the trail is either reported as edited (not intact) or still reports the interrupted
/// call; the interruption cannot vanish from a trail that verifies.
#[test]
fn f24_column_edit_cannot_hide_an_interrupted_call() {
    let url = database("f24");
    let rt = runtime();
    let gate = audited_gate(&url, "f24", Duration::from_secs(2));
    {
        let _entered = rt.enter();
        let mut future = Box::pin(gate.scope(sleep_async("f24-leak".into())));
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ran("f24-leak") && Instant::now() < deadline {
            let _ = future.as_mut().poll(&mut cx);
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(ran("f24-leak"));
        std::mem::forget(future);
    }
    gate.run(|| mark("f24-after".into())).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let interrupted = &report.writer("f24").unwrap().interrupted;
    assert_eq!(interrupted.len(), 1, "{report}");
    let seq = interrupted[0].seq;
    let mut hidden = Vec::new();
    for (edit, restore) in [
        ("stage = 'exit'", "stage = 'enter'"),
        ("call = call + 1000", "call = call - 1000"),
        ("tool = 'fa.mark'", "tool = 'fa.sleep_async'"),
    ] {
        query(
            &url,
            &format!("UPDATE toolgate.audit SET {edit} WHERE writer = 'f24' AND seq = {seq}"),
        );
        let report = verify_trail(&url, "toolgate").unwrap();
        let w = report.writer("f24").unwrap();
        if w.is_intact() && w.interrupted.is_empty() {
            hidden.push(edit);
        }
        query(
            &url,
            &format!("UPDATE toolgate.audit SET {restore} WHERE writer = 'f24' AND seq = {seq}"),
        );
    }
    assert!(
        hidden.is_empty(),
        "an interrupted call vanished from a trail that verifies: {hidden:?}"
    );
}

/// f34: a live signed writer (`payments-1`); a second role with only `SELECT` and `INSERT` appends a
/// correctly hashed `enter` and `exit` of a `wire_money` approved by `cfo` to its chain, so that the
/// writer's next commit would fail and it would reload its chain from the table. Guarantee: a writer
/// name belongs to the role that first used it: the server refuses the rows, and the writer goes on.
#[test]
fn f34_another_role_cannot_append_to_a_live_writers_chain() {
    let (_scratch, url, gate, key_file, honest) = live_payments_writer("f34");
    let mallory = trail_role(&url, "f34_mallory");
    let forged = forge_wire_money(&url, &mallory, "payments-1");
    assert!(
        forged.is_err(),
        "a role with INSERT wrote rows under another role's writer name"
    );
    assert!(
        forged
            .as_ref()
            .unwrap_err()
            .contains("belongs to another role"),
        "{forged:?}"
    );
    assert_eq!(last_seq(&url, "payments-1"), honest);
    gate.run(|| mark("f34-after".into())).unwrap();
    drop(gate);
    let (code, shown) = verify_signed(&url, &key_file);
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        !shown.contains("wire_money") && !shown.contains("not covered"),
        "{shown}"
    );
}

/// f36: f34's rows written by the writer's own role (another process that shares it), which the
/// server cannot tell from the writer. The writer's next commit fails on them and it reloads its chain
/// from the table. Guarantee: a writer never adopts rows it cannot account for: it refuses every call
/// (`AUDIT_UNAVAILABLE`, saying why) rather than chain on them or sign them, so no checkpoint covers
/// them and `verify --public-key` reports them as not covered, never as signed.
#[test]
fn f36_rows_a_live_writer_did_not_write_are_never_signed() {
    let (_scratch, url, gate, key_file, honest) = live_payments_writer("f36");
    forge_wire_money(&url, &url, "payments-1").unwrap();
    let mut refused = Vec::new();
    for n in 0..5 {
        let result = gate.run(|| mark(format!("f36-after-{n}")));
        refused.push((refusal(&result), ran(&format!("f36-after-{n}"))));
    }
    let last_error = gate.run(|| mark("f36-last".into())).unwrap_err();
    drop(gate);
    let signed = signed_through(&url, "payments-1");
    assert!(
        signed > 0 && signed <= honest,
        "a checkpoint signed rows the writer did not write: through {signed}, its own end at {honest}"
    );
    assert!(
        refused
            .iter()
            .all(|(code, ran)| *code == Some("AUDIT_UNAVAILABLE") && !ran),
        "the writer went on after rows it did not write: {refused:?}"
    );
    assert!(
        last_error.to_string().contains("did not write"),
        "the refusal does not say why: {last_error}"
    );
    assert_eq!(last_seq(&url, "payments-1"), honest + 2);
    let (_, shown) = verify_signed(&url, &key_file);
    let uncovered = honest + 2 - signed;
    assert!(
        shown.contains(&format!("not covered: {uncovered} records")),
        "{shown}"
    );
}

/// f35: a signed writer (`ledger`) stops cleanly (final checkpoint). A sink without the key, on a
/// second role with only `SELECT` and `INSERT`, writes under its name; then the owner starts again
/// with its key. Guarantee: a writer name is bound to its role and its key at first use: a sink
/// without the key (on any role) or with another key is refused; rows appended after the owner's last
/// checkpoint anyway (by its own role, in SQL) are not adopted: the owner, restarted with its key,
/// refuses to continue the chain, and no checkpoint covers them.
#[test]
fn f35_a_keyless_sink_cannot_write_as_a_stopped_signed_writer_nor_be_signed_for() {
    let scratch = common::Scratch::new("f35");
    let url = database("f35");
    let (key_file, checkpoints) = trail_key(&scratch, "f35");
    let owner = |url: &str| {
        PostgresSink::builder()
            .writer("ledger")
            .checkpoints(checkpoints.clone())
            .connect(url)
    };
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(owner(&url).unwrap())
        .build()
        .unwrap();
    for n in 0..5 {
        gate.run(|| mark(format!("f35-{n}"))).unwrap();
    }
    drop(gate);
    let honest = last_seq(&url, "ledger");
    assert_eq!(signed_through(&url, "ledger"), honest);
    let mallory = trail_role(&url, "f35_mallory");
    let mut got_through = Vec::new();
    let keyless = |via: &str| PostgresSink::builder().writer("ledger").connect(via);
    if let Ok(sink) = keyless(&mallory) {
        let gate = audited(sink);
        for n in 0..3 {
            let _ = gate.run(|| mark(format!("f35-mallory-{n}")));
        }
        got_through.push("a keyless sink on another role took the writer's name");
    }
    if keyless(&url).is_ok() {
        got_through.push("a keyless sink on the owner's role took the writer's name");
    }
    let (_, other_key) = trail_key(&scratch, "f35-other");
    let other = PostgresSink::builder()
        .writer("ledger")
        .checkpoints(other_key)
        .connect(&url);
    if other.is_ok() {
        got_through.push("a sink with another key took the writer's name");
    }
    drop(other);
    if last_seq(&url, "ledger") == honest {
        // Rows under its name anyway, from its own role.
        forge_wire_money(&url, &url, "ledger").unwrap();
    }
    match owner(&url) {
        Ok(sink) => {
            let gate = audited(sink);
            for n in 0..2 {
                let _ = gate.run(|| mark(format!("f35-owner-{n}")));
            }
            got_through.push("the owner continued a chain with rows it did not write");
        }
        Err(error) => assert!(
            error
                .to_string()
                .contains("not covered by its last checkpoint"),
            "{error}"
        ),
    }
    if signed_through(&url, "ledger") != honest {
        got_through.push("a checkpoint signed rows the owner did not write");
    }
    let (_, shown) = verify_signed(&url, &key_file);
    assert!(got_through.is_empty(), "{got_through:#?}\n{shown}");
    assert!(shown.contains("not covered: 2 records"), "{shown}");
}

/// A new database `name` whose writer `writer` (its gate dropped) made five calls, `{name}-0` to
/// `{name}-4`: its URL.
fn five_calls_audited(name: &str, writer: &str) -> String {
    let url = database(name);
    let gate = audited_gate(&url, writer, Duration::from_secs(2));
    for i in 0..5 {
        gate.run(|| mark(format!("{name}-{i}"))).unwrap();
    }
    url
}

/// A new database `name` with the live signed writer `payments-1`: its scratch folder, URL, gate,
/// public key's file, and the last `seq` it wrote.
fn live_payments_writer(name: &str) -> (common::Scratch, String, Gate, std::path::PathBuf, u64) {
    let scratch = common::Scratch::new(name);
    let url = database(name);
    let (gate, key_file) = live_signed_writer(&scratch, &url, "payments-1");
    let honest = last_seq(&url, "payments-1");
    (scratch, url, gate, key_file, honest)
}
