//! Guarantee 12 through outages: an `enter` commit that is cancelled, times out or is cut off refuses
//! its call; `exit` records written during an outage are not lost; a writer's name is held by one sink.

use crate::support::trail::*;

/// f01: an async tool whose `enter` commit is held up (the audit table locked by another session) is
/// cancelled: its future dropped while the commit is pending; the lock is then released so that the
/// `enter` may still commit. Guarantee: the body never runs, and every `enter` gets its `exit`
/// (`cancelled` or `refused`), so `verify` reports no interrupted call for a process that did not die.
/// The same for a future dropped while its body awaits.
#[test]
fn f01_async_call_cancelled_while_its_enter_commit_is_pending() {
    let url = database("f01");
    let rt = runtime();
    let gate = audited_gate(&url, "f01", Duration::from_secs(10));
    rt.block_on(gate.scope(mark_async("f01-warm".into())))
        .unwrap();
    let held = Held::new(&url, "LOCK TABLE toolgate.audit IN EXCLUSIVE MODE");
    let cancelled = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_millis(500),
            gate.scope(mark_async("f01-cancelled".into())),
        )
        .await
    });
    assert!(cancelled.is_err(), "the commit was held up: {cancelled:?}");
    drop(held);
    // Cancelled while its body awaits.
    let in_body = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_millis(300),
            gate.scope(sleep_async("f01-in-body".into())),
        )
        .await
    });
    assert!(in_body.is_err());
    rt.block_on(gate.scope(mark_async("f01-after".into())))
        .unwrap();
    drop(gate);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!ran("f01-cancelled:started"), "a cancelled call's body ran");
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let unpaired = unpaired_enters(&url, "f01");
    assert!(
        unpaired.is_empty(),
        "enter records without an exit in a process that did not die: {unpaired:?}"
    );
    assert!(
        report.writer("f01").unwrap().interrupted.is_empty(),
        "{report}"
    );
    let exits: Vec<Option<Outcome>> = records(&url, "f01")
        .iter()
        .filter(|r| r.stage == Stage::Exit)
        .map(|r| r.outcome)
        .collect();
    assert!(exits.contains(&Some(Outcome::Cancelled)), "{exits:?}");
}

/// f02: a sync call whose `enter` commit outlasts the sink's timeout while the INSERT stays queued in
/// the server (the table locked), then the lock is released so the queued statement may still commit.
/// Guarantee: that call is refused `AUDIT_UNAVAILABLE` with its body not run; the sink continues its
/// chain (no fork, no duplicate seq, the trail verifies); every body that ran has its committed
/// `enter`.
#[test]
fn f02_enter_commit_timing_out_while_the_insert_stays_queued() {
    let url = database("f02");
    let gate = audited_gate(&url, "f02", Duration::from_millis(500));
    gate.run(|| mark("f02-warm".into())).unwrap();
    let held = Held::new(&url, "LOCK TABLE toolgate.audit IN EXCLUSIVE MODE");
    let started = Instant::now();
    let refused = gate.run(|| mark("f02-timed-out".into()));
    assert_eq!(
        refusal(&refused),
        Some(DenialCode::AuditUnavailable.as_str())
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the timeout held"
    );
    // A second call while still locked.
    let refused2 = gate.run(|| mark("f02-timed-out-2".into()));
    assert!(refused2.is_err());
    std::thread::sleep(Duration::from_millis(700));
    drop(held);
    assert_eq!(
        runs_within(&gate, "f02-after", 30, Duration::from_secs(15)),
        30,
        "the sink continued after the lock was released"
    );
    drop(gate);
    assert!(!ran("f02-timed-out") && !ran("f02-timed-out-2"));
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    assert_every_run_entered(&url, "f02", "f02-");
}

/// f03: the writer name's advisory lock dies with the sink's connection (an attacker or a network blip
/// terminates the backend); a second sink then takes the same name while the first is still alive,
/// and both keep writing. Guarantee: one writer per name, never a forked chain: once the second sink
/// holds the name, the first writes nothing more (its calls are refused), and the trail verifies.
#[test]
fn f03_writer_name_taken_over_after_the_first_sinks_connection_dies() {
    let url = database("f03");
    let first = audited_gate(&url, "shared", Duration::from_secs(1));
    first.run(|| mark("f03-first-0".into())).unwrap();
    terminate_backends(&url);
    std::thread::sleep(Duration::from_millis(200));
    let second = PostgresSink::builder()
        .writer("shared")
        .timeout(Duration::from_secs(1))
        .connect(&url);
    let mut first_after = 0;
    let mut second_ok = 0;
    if let Ok(second) = second {
        let second = audited(second);
        for i in 0..20 {
            if first.run(|| mark(format!("f03-first-{}", i + 1))).is_ok() {
                first_after += 1;
            }
            if second.run(|| mark(format!("f03-second-{i}"))).is_ok() {
                second_ok += 1;
            }
        }
        drop(second);
    } else {
        for i in 0..20 {
            if first.run(|| mark(format!("f03-first-{}", i + 1))).is_ok() {
                first_after += 1;
            }
        }
    }
    drop(first);
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "one name, two writers: {report}");
    assert!(
        first_after == 0 || second_ok == 0,
        "two live sinks wrote one chain: first {first_after} calls, second {second_ok} calls"
    );
    assert_every_run_entered(&url, "shared", "f03-");
}

/// f14: a call's `enter` is committed and its body runs; the link to the server is cut while the body
/// runs, so its `exit` is written into a sink that cannot commit; the link is healed. Guarantee: every
/// `enter` gets its `exit` ("queued and committed with the next group"), so a process that did not die
/// leaves no interrupted call.
#[test]
fn f14_exit_record_written_during_an_outage_is_not_lost() {
    let (url, proxy, gate) = warm_gate_behind_proxy("f14", Duration::from_millis(500));
    let (go, call) = call_held_in_its_body(&gate, "f14-body");
    proxy.cut();
    go.send(()).unwrap();
    assert!(call.join().unwrap().is_ok());
    std::thread::sleep(Duration::from_millis(1500));
    proxy.heal();
    assert_eq!(runs_within_ten_seconds(&gate, "f14-after", 5), 5);
    drop(gate);
    assert_intact_and_paired(
        &url,
        "f14",
        "exit records lost with a failed group; verify reports them as interrupted",
    );
}

/// f22: a sink blackholed mid-run (bytes dropped, no reset). Guarantee: the call is refused
/// `AUDIT_UNAVAILABLE` within about the sink's timeout, never hangs, never runs its body; after the
/// link heals the chain continues and verifies.
#[test]
fn f22_sink_behind_a_black_hole_refuses_in_time_and_continues() {
    let (url, proxy, gate) = warm_gate_behind_proxy("f22", Duration::from_millis(500));
    proxy.cut();
    let (tx, rx) = mpsc::channel();
    let g = gate.clone();
    std::thread::spawn(move || {
        let started = Instant::now();
        let r = g.run(|| mark("f22-cut".into()));
        let _ = tx.send((r, started.elapsed()));
    });
    let (result, took) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a call hung behind a black-holed sink");
    assert_eq!(
        refusal(&result),
        Some(DenialCode::AuditUnavailable.as_str())
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(!ran("f22-cut"));
    proxy.heal();
    assert_eq!(
        runs_within_ten_seconds(&gate, "f22-after", 5),
        5,
        "the sink never continued"
    );
    drop(gate);
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
}

/// f25: as f14, but the outage is the sink's backend terminated (`pg_terminate_backend`, a clean error
/// at once rather than a black hole) while the body runs. Guarantee: every `enter` gets its `exit`;
/// a process that did not die leaves no interrupted call.
#[test]
fn f25_exit_record_written_after_the_connection_was_terminated_is_not_lost() {
    let url = database("f25");
    let gate = audited_gate(&url, "f25", Duration::from_secs(2));
    gate.run(|| mark("f25-warm".into())).unwrap();
    let (go, call) = call_held_in_its_body(&gate, "f25-body");
    terminate_backends(&url);
    std::thread::sleep(Duration::from_millis(100));
    go.send(()).unwrap();
    assert!(call.join().unwrap().is_ok());
    assert_eq!(runs_within_ten_seconds(&gate, "f25-after", 5), 5);
    drop(gate);
    assert_intact_and_paired(
        &url,
        "f25",
        "an exit record was lost with its connection; verify reports the call as interrupted",
    );
}

/// f26: a process writing as `killed` is SIGKILLed inside a body; a new process takes the same writer
/// name. Guarantee: the name is free once its holder is gone (the new sink continues the chain, no
/// fork), `verify` reports the killed call as interrupted, not as tampering, and the trail is intact.
#[test]
fn f26_a_killed_writer_is_interrupted_and_its_name_continues() {
    use std::io::BufRead;
    let url = database("f26");
    let mut child = hanging_writer()
        .env(ROLE, "hang")
        .env(CHILD_URL, &url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let hanging = lines.any(|l| l.is_ok_and(|l| l.contains("hanging")));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(hanging, "the child never reached its body");
    let mut again = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while again.is_none() && Instant::now() < deadline {
        again = PostgresSink::builder().writer("killed").connect(&url).ok();
        if again.is_none() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(again.expect("the killed writer's name is free again"))
        .build()
        .unwrap();
    for i in 0..10 {
        gate.run(|| mark(format!("f26-again-{i}"))).unwrap();
    }
    drop(gate);
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let w = report.writer("killed").unwrap();
    assert_eq!(w.chain.records, 2 * 10 + 1 + 2 * 10, "{report}");
    assert_eq!(w.interrupted.len(), 1, "{report}");
    assert_eq!(w.interrupted[0].tool, "fa.hang_forever");
    toolgate_exits(&["audit", "verify", &url], 0);
}

/// f28: four threads call through one sink (group commit) while its link is cut for a second and
/// healed. Guarantee: no body runs whose `enter` is not committed, every refusal is
/// `AUDIT_UNAVAILABLE`, and the chain verifies.
#[test]
fn f28_group_commit_under_a_black_hole_runs_no_body_unaudited() {
    let url = database("f28");
    let proxy = Proxy::new(&url);
    let gate = audited_gate(&proxy.url(&url), "f28", Duration::from_millis(400));
    let stop = Arc::new(AtomicBool::new(false));
    let codes = Arc::new(Mutex::new(HashSet::new()));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (gate, stop, codes) = (gate.clone(), stop.clone(), codes.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    if let Err(d) = gate.run(|| mark(format!("f28-{t}-{i}"))) {
                        codes.lock().unwrap().insert(d.code().as_str());
                    }
                    i += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    proxy.cut();
    std::thread::sleep(Duration::from_millis(1000));
    proxy.heal();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    drop(gate);
    let codes = codes.lock().unwrap().clone();
    assert!(
        codes
            .iter()
            .all(|c| *c == DenialCode::AuditUnavailable.as_str()),
        "{codes:?}"
    );
    assert!(!codes.is_empty(), "the cut refused nothing");
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    let entered: HashSet<String> = records(&url, "f28")
        .iter()
        .filter(|r| r.stage == Stage::Enter)
        .filter_map(tag_of)
        .collect();
    let ran_tags: Vec<String> = RAN
        .lock()
        .unwrap()
        .iter()
        .filter(|t| t.starts_with("f28-"))
        .cloned()
        .collect();
    assert!(ran_tags.len() > 10);
    let unaudited: Vec<&String> = ran_tags.iter().filter(|t| !entered.contains(*t)).collect();
    assert!(unaudited.is_empty(), "bodies ran unaudited: {unaudited:?}");
}

/// f29: a signed sink (a checkpoint every 3 records) whose commits time out behind a black hole, then
/// continue. Guarantee: a checkpoint is written only over committed records, so no outage makes an
/// intact trail look rewritten or cut: `verify --public-key` exits 0 after a clean shutdown.
#[test]
fn f29_signed_sink_through_an_outage_still_verifies_with_its_key() {
    let url = database("f29");
    let scratch = common::Scratch::new("f29");
    let proxy = Proxy::new(&url);
    let key = SigningKey::generate().unwrap();
    let file = scratch.path("f29.pub");
    std::fs::write(&file, key.public_key().to_public_key_pem()).unwrap();
    let checkpoints = Checkpoints::new(key).every_records(3);
    // The first connection creates the schema: on a loaded machine it may take longer than 400 ms.
    let connect = || {
        PostgresSink::builder()
            .writer("f29")
            .timeout(Duration::from_millis(400))
            .checkpoints(checkpoints.clone())
            .connect(&proxy.url(&url))
    };
    let sink = (0..9)
        .find_map(|_| {
            connect()
                .inspect_err(|_| std::thread::sleep(Duration::from_millis(200)))
                .ok()
        })
        .unwrap_or_else(|| connect().unwrap());
    let gate = audited(sink);
    for i in 0..10 {
        gate.run(|| mark(format!("f29-a{i}"))).unwrap();
    }
    proxy.cut();
    for i in 0..3 {
        let _ = gate.run(|| mark(format!("f29-b{i}")));
    }
    proxy.heal();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut oks = 0;
    let mut i = 0;
    while oks < 10 && Instant::now() < deadline {
        if gate.run(|| mark(format!("f29-c{i}"))).is_ok() {
            oks += 1;
        }
        i += 1;
    }
    assert_eq!(oks, 10);
    drop(gate);
    let (code, shown) = verify_signed(&url, &file);
    assert_eq!(code, Some(0), "{shown}");
}
