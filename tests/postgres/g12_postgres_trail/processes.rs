//! Guarantee 12 across processes: several processes write one audit table, each chain verifies; a
//! writer killed mid-call is interrupted, not tampered; a stopped server refuses calls and the chain
//! continues after it; async calls share commits.

use crate::support::fleet::*;

#[test]
fn four_processes_write_one_trail_each_chain_verifies() {
    let url = database("trail");
    let threads = 8;
    let calls = env_u64("TOOLGATE_PG_CALLS", 10_000);
    let started = Instant::now();
    let procs: Vec<Proc> = (0..4)
        .map(|_| {
            Proc::spawn(
                "writer",
                &url,
                &[
                    (THREADS, threads.to_string()),
                    (CALLS, calls.to_string()),
                    (TIMEOUT_MS, "30000".into()),
                ],
            )
        })
        .collect();
    let mut writers = Vec::new();
    for mut proc in procs {
        writers.push(proc.expect("writer "));
        assert_eq!(proc.expect("done "), (threads * calls).to_string());
        proc.wait();
    }
    let took = started.elapsed();
    let report = verify_trail(&url, "toolgate").expect("the trail reads");
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.writers.len(), 4);
    for writer in &writers {
        let chain = &report.writer(writer).expect("its chain").chain;
        assert_eq!(chain.records, 2 * threads * calls, "{writer}");
        assert_eq!(count_stage(&url, writer, "enter"), threads * calls);
        assert_eq!(count_stage(&url, writer, "exit"), threads * calls);
        assert!(report.writer(writer).unwrap().interrupted.is_empty());
    }
    eprintln!(
        "4 processes x {threads} threads x {calls} calls: {} records in {:.1} s",
        8 * threads * calls,
        took.as_secs_f64()
    );
    let verified = toolgate_exits(&["audit", "verify", &url], 0);
    assert!(text(&verified).starts_with("INTACT: 4 writer(s), 0 broken"));

    // A record changed in place, its hashes recomputed in its own row: the next row's prev_hash breaks.
    let writer = &writers[1];
    query(
        &url,
        &format!(
            "UPDATE toolgate.audit SET line = replace(line, '\"tool\":\"fleet.work\"', '\"tool\":\"fleet.wore\"')
             WHERE writer = '{writer}' AND seq = 10"
        ),
    );
    let tampered = toolgate_prints(
        &["audit", "verify", &url],
        1,
        "BROKEN: 4 writer(s), 1 broken",
    );
    assert!(tampered.contains("seq 10"), "{tampered}");
}

#[test]
fn a_writer_killed_mid_call_is_interrupted_not_tampered() {
    let url = database("killed");
    // One thread: when it hangs, no other call of its process is in flight.
    let mut doomed = Proc::spawn(
        "writer",
        &url,
        &[
            (THREADS, "1".into()),
            (CALLS, "300".into()),
            (HANG_AFTER, "100".into()),
        ],
    );
    let other = Proc::spawn(
        "writer",
        &url,
        &[(THREADS, "4".into()), (CALLS, "300".into())],
    );
    let doomed_name = doomed.expect("writer ");
    doomed.expect("hanging");
    // SIGKILL: no destructor, no flush, no exit record.
    doomed.child.kill().unwrap();
    doomed.child.wait().unwrap();
    let mut other = other;
    let other_name = other.expect("writer ");
    other.expect("done ");
    other.wait();

    let report = verify_trail(&url, "toolgate").expect("the trail reads");
    assert!(report.is_intact(), "{report}");
    let doomed_report = report.writer(&doomed_name).unwrap();
    assert_eq!(doomed_report.interrupted.len(), 1, "{report}");
    assert_eq!(doomed_report.interrupted[0].tool, "fleet.hang");
    let other_report = report.writer(&other_name).unwrap();
    assert!(other_report.interrupted.is_empty(), "{report}");
    assert_eq!(other_report.chain.records, 2 * 4 * 300);

    let verified = toolgate_exits(&["audit", "verify", &url], 0);
    assert!(
        text(&verified).contains("interrupted: call") && text(&verified).contains("fleet.hang"),
        "{}",
        text(&verified)
    );
    toolgate_prints(&["audit", "promotion", &url], 0, "PARTIAL_AUTO");
}

#[test]
fn a_stopped_server_refuses_calls_and_the_chain_continues_after_it() {
    let cluster = Cluster::new(&[]);
    let url = cluster.database("stopped");
    let sink = PostgresSink::builder()
        .writer("stopped-run")
        .timeout(Duration::from_secs(1))
        .connect(&url)
        .expect("the sink");
    let gate = audited(sink);
    let mut results = Vec::new();
    let mut n = 0;
    let mut call = |results: &mut Vec<Result<(), Denied>>| {
        results.push(gate.run(|| count(n)));
        n += 1;
    };
    for _ in 0..50 {
        call(&mut results);
    }
    cluster.stop();
    for _ in 0..5 {
        call(&mut results);
    }
    cluster.start();
    // The first calls after the restart may still find the old connection broken.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        call(&mut results);
        if results.last().unwrap().is_ok() || Instant::now() > deadline {
            break;
        }
    }
    for _ in 0..50 {
        call(&mut results);
    }
    drop(gate);

    let refused: Vec<&Denied> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(refused.len() >= 5, "the calls while stopped were refused");
    assert!(
        refused
            .iter()
            .all(|d| d.code() == DenialCode::AuditUnavailable.as_str()),
        "{refused:?}"
    );
    assert!(results[..50].iter().all(Result::is_ok));
    assert!(results[results.len() - 50..].iter().all(Result::is_ok));

    let report = verify_trail(&url, "toolgate").expect("the trail reads");
    assert!(report.is_intact(), "{report}");
    let chain = &report.writer("stopped-run").unwrap().chain;
    // Every body that ran has its enter record: none ran unaudited, none committed was lost.
    let lines = query(
        &url,
        "SELECT line FROM toolgate.audit WHERE writer = 'stopped-run' AND stage = 'enter'",
    );
    let entered: Vec<u64> = lines
        .iter()
        .map(|row| {
            let record: AuditRecord = serde_json::from_str(row[0].as_deref().unwrap()).unwrap();
            let arguments: serde_json::Value =
                serde_json::from_str(record.arguments.as_deref().unwrap()).unwrap();
            arguments["n"].as_u64().unwrap()
        })
        .collect();
    let counted = COUNTED.lock().unwrap().clone();
    assert_eq!(counted.len(), results.iter().filter(|r| r.is_ok()).count());
    for n in &counted {
        assert!(entered.contains(n), "call {n} ran without its enter record");
    }
    assert!(chain.records >= 2 * counted.len() as u64);
}

#[test]
fn async_calls_share_commits_on_a_small_runtime() {
    let url = database("grouped");
    let sink = PostgresSink::builder()
        .writer("async")
        .connect(&url)
        .expect("the sink");
    let gate = audited(sink);
    let commits = || -> u64 {
        query(
            &url,
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
        )[0][0]
            .as_deref()
            .unwrap()
            .parse()
            .unwrap()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = commits();
    let calls = 256u64;
    let results = runtime.block_on(async {
        let tasks: Vec<_> = (0..calls)
            .map(|n| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.scope(count_async(n)).await })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        results
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    drop(gate);
    // Statistics reach pg_stat_database a little after the commits.
    std::thread::sleep(Duration::from_millis(1500));
    let used = commits() - before;
    let report = verify_trail(&url, "toolgate").unwrap();
    assert_eq!(report.writer("async").unwrap().chain.records, 2 * calls);
    assert!(
        used < calls,
        "{calls} enter records were committed in {used} transactions: no group commit"
    );
}
