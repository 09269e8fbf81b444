//! Guarantee 11 across processes: `toolgate fleet lower` reaches every busy process and never raises a
//! running gate; a partition longer than the grace period holds every process at SHADOW; processes
//! joining a new fleet at once all join.

use crate::support::fleet::*;

#[test]
fn fleet_lower_reaches_every_busy_process_and_never_raises_a_running_gate() {
    let url = database("fleet");
    let scratch = common::Scratch::new("fleet-lower");
    let stop = scratch.path("stop");
    let mut procs: Vec<Proc> = (0..4)
        .map(|_| {
            Proc::spawn(
                "member",
                &url,
                &[
                    (FLEET, "payments".into()),
                    (STOP_FILE, stop.display().to_string()),
                    (TIMEOUT_MS, "30000".into()),
                ],
            )
        })
        .collect();
    for proc in &mut procs {
        assert_eq!(proc.expect("ready"), "PARTIAL_AUTO");
    }
    let status = toolgate_exits(
        &["fleet", "status", "--store", &url, "--fleet", "payments"],
        0,
    );
    assert_eq!(
        text(&status).matches("PARTIAL_AUTO").count(),
        4,
        "{}",
        text(&status)
    );

    std::thread::sleep(Duration::from_millis(300));
    let lowered_at = now_nanos();
    ana_changes_payments(&url, "lower", "SHADOW", "incident 42", 0);
    let mut slowest = 0u64;
    for proc in &mut procs {
        let line = proc.expect("mode ");
        let (mode, at) = line.split_once(' ').unwrap();
        assert_eq!(mode, "SHADOW");
        slowest = slowest.max(at.parse::<u64>().unwrap().saturating_sub(lowered_at));
    }
    eprintln!(
        "fleet lower: the last of 4 busy processes refused {:.1} ms after the command started",
        slowest as f64 / 1e6
    );

    // A raise through `lower` is refused and changes nothing.
    let raise = ana_changes_payments(&url, "lower", "PARTIAL_AUTO", "r", 1);
    assert!(text(&raise).contains("use raise"), "{}", text(&raise));

    // Raising the fleet does not raise a running gate; a gate joined after it starts under it.
    ana_changes_payments(&url, "raise", "FULL_AUTO", "resolved", 0);
    // Its subject is not a slow server: on a loaded machine, leaving the fleet may take more than the
    // default timeout, which would leave its row behind.
    let fleet = Fleet::builder()
        .timeout(Duration::from_secs(30))
        .connect(&url, "payments")
        .unwrap();
    let fresh = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    assert_eq!(fresh.mode(), Mode::PartialAuto);
    std::thread::sleep(Duration::from_millis(500));
    let status = toolgate(&["fleet", "status", "--store", &url, "--fleet", "payments"]);
    let shown = text(&status);
    assert!(
        shown.starts_with("fleet payments: FULL_AUTO (set by ana"),
        "{shown}"
    );
    assert_eq!(shown.matches("\tSHADOW\t").count(), 4, "{shown}");
    assert_eq!(shown.matches("\tPARTIAL_AUTO\t").count(), 1, "{shown}");

    std::fs::write(&stop, "").unwrap();
    for mut proc in procs {
        assert_eq!(proc.expect("result "), "ran_after_refusal=0");
        proc.wait();
    }
    // Every lowering is in the fleet's history.
    let changes = query(
        &url,
        "SELECT mode, changed_by, reason FROM toolgate.fleet_changes ORDER BY id",
    );
    assert_eq!(
        changes,
        [
            ["SHADOW", "ana", "incident 42"]
                .map(|v| Some(v.to_owned()))
                .to_vec(),
            ["FULL_AUTO", "ana", "resolved"]
                .map(|v| Some(v.to_owned()))
                .to_vec(),
        ]
    );
    drop(fresh);
    drop(fleet);
    // Processes that left are gone from the members.
    let left = query(&url, "SELECT count(*) FROM toolgate.fleet_members");
    assert_eq!(left[0][0].as_deref(), Some("0"));
}

#[test]
fn a_partition_longer_than_the_grace_period_holds_every_process_at_shadow() {
    let cluster = Cluster::new(&["fsync=off"]);
    let url = cluster.database("partition");
    let scratch = common::Scratch::new("fleet-partition");
    let stop = scratch.path("stop");
    let logs: Vec<PathBuf> = (0..2)
        .map(|i| scratch.path(&format!("audit-{i}.jsonl")))
        .collect();
    let mut procs: Vec<Proc> = logs
        .iter()
        .map(|log| {
            Proc::spawn(
                "member",
                &url,
                &[
                    (FLEET, "ops".into()),
                    (GRACE_MS, "1000".into()),
                    (THREADS, "2".into()),
                    (STOP_FILE, stop.display().to_string()),
                    (AUDIT_FILE, log.display().to_string()),
                ],
            )
        })
        .collect();
    for proc in &mut procs {
        assert_eq!(proc.expect("ready"), "PARTIAL_AUTO");
    }
    cluster.stop();
    for proc in &mut procs {
        assert!(proc.expect("mode ").starts_with("SHADOW "));
    }
    cluster.start();
    for proc in &mut procs {
        assert!(proc.expect("mode ").starts_with("PARTIAL_AUTO "));
    }
    std::fs::write(&stop, "").unwrap();
    for mut proc in procs {
        // Calls run again once the fleet is back: what ran while it was lost is read from the log.
        proc.expect("result ");
        proc.wait();
    }
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap();
        let records: Vec<AuditRecord> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let lost = records
            .iter()
            .position(|r| r.stage == Stage::FleetLost)
            .expect("the partition is audited");
        assert_eq!(records[lost].mode, Mode::Shadow);
        assert!(
            records[lost]
                .message
                .as_deref()
                .unwrap()
                .contains("not reached"),
            "{:?}",
            records[lost]
        );
        let back = records
            .iter()
            .position(|r| r.stage == Stage::FleetRejoined)
            .expect("the return is audited");
        assert!(back > lost);
        assert_eq!(records[back].mode, Mode::PartialAuto);
        // While cut off, no body ran: a call entered as the fleet was lost was refused at its last
        // re-check, before its body (its exit says so).
        for enter in records[lost..back]
            .iter()
            .filter(|r| r.stage == Stage::Enter)
        {
            let exit = records
                .iter()
                .find(|r| r.stage == Stage::Exit && r.gate == enter.gate && r.call == enter.call)
                .expect("every enter has its exit");
            assert_eq!(
                exit.outcome,
                Some(toolgate::audit::Outcome::Refused),
                "a call ran while the fleet was lost: {enter:?}"
            );
        }
        assert!(toolgate::audit::verify_file(log).unwrap().is_intact());
    }
}

// The first processes to join a fleet race to create its row: every one of them joins, and reads the
// fleet's mode, however their statements interleave.
#[test]
fn processes_joining_a_new_fleet_at_once_all_join() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let url = database("fleet_first_join");
    for round in 0..30 {
        let name = format!("first-{round}");
        let barrier = std::sync::Barrier::new(16);
        std::thread::scope(|scope| {
            let joins: Vec<_> = (0..16)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        // Sixteen connections at once on a loaded machine: the race is the
                        // subject, not how fast the server answers.
                        Fleet::builder()
                            .timeout(Duration::from_secs(30))
                            .connect(&url, &name)
                            .map(drop)
                    })
                })
                .collect();
            for join in joins {
                let joined = join.join().unwrap();
                assert!(joined.is_ok(), "round {round}: {joined:?}");
            }
        });
        let status = fleet::status(&url, "toolgate", &name).unwrap();
        assert_eq!(status.mode, Mode::FullAuto);
    }
}

/// `toolgate fleet VERB` of the fleet `payments` in the store of `url` to the mode `to`, by `ana` for
/// `reason`, which must exit with `code`.
#[track_caller]
fn ana_changes_payments(
    url: &str,
    verb: &str,
    to: &str,
    reason: &str,
    code: i32,
) -> std::process::Output {
    toolgate_exits(
        &[
            "fleet", verb, "--store", url, "--fleet", "payments", "--to", to, "--by", "ana",
            "--reason", reason,
        ],
        code,
    )
}
