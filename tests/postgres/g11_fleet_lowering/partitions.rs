//! Guarantee 11 through partitions (a proxy that drops every byte or cuts the link), dropped handles,
//! concurrent lowerings and rows raised by SQL: nothing raises a running gate, a lowering made during
//! an outage applies after it, and a lost fleet is never hidden.

use crate::support::trail::*;

/// f10: the fleet is lowered to SHADOW, then raised to FULL_AUTO (running gates stay at SHADOW), then
/// the process loses the fleet for longer than the grace period and gets it back. Guarantee: a running
/// gate is never raised by its fleet: coming back from a partition must not apply the raise.
#[test]
fn f10_raise_then_partition_and_rejoin_does_not_raise_a_running_gate() {
    let (url, proxy, _fleet, gate) = member_behind_proxy("f10", 400);
    fleet::lower(&url, "toolgate", "f10", Mode::Shadow, "ana", "incident").unwrap();
    assert!(eventually(Duration::from_secs(2), || gate.mode() == Mode::Shadow));
    fleet::raise(&url, "toolgate", "f10", Mode::FullAuto, "ana", "resolved").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(gate.mode(), Mode::Shadow, "raised by `raise` directly");
    proxy.cut();
    std::thread::sleep(Duration::from_millis(1500));
    proxy.heal();
    // Whatever the gate does once back, it must never go above SHADOW.
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let mode = gate.mode();
        if !seen.contains(&mode) {
            seen.push(mode);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        seen,
        [Mode::Shadow],
        "a partition and a rejoin raised a running gate past its fleet's lowering"
    );
    assert!(gate.run(|| mark("f10-after".into())).is_err());
    assert!(!ran("f10-after"));
}

/// f11: while the process has lost its fleet (acting as SHADOW), the application lowers its gate to
/// ADVISORY, then asks for PARTIAL_AUTO. Guarantee: a gate's mode is only ever lowered: the second
/// request changes nothing, and once the fleet is back the gate runs at ADVISORY at most (if the
/// lowering was accepted), never at its old PARTIAL_AUTO.
#[test]
fn f11_gate_lower_during_a_partition_is_not_undone_by_the_rejoin() {
    let (_url, proxy, _fleet, gate) = member_behind_proxy("f11", 300);
    assert_eq!(gate.mode(), Mode::PartialAuto);
    proxy.cut();
    assert!(
        eventually(Duration::from_secs(3), || gate.mode() == Mode::Shadow),
        "the partition was never noticed"
    );
    let to_advisory = gate.lower(Mode::Advisory);
    let to_partial = gate.lower(Mode::PartialAuto);
    assert_eq!(gate.mode(), Mode::Shadow);
    proxy.heal();
    assert!(
        eventually(Duration::from_secs(5), || gate.mode() != Mode::Shadow) || to_advisory.is_err(),
        "the gate never came back"
    );
    std::thread::sleep(Duration::from_millis(300));
    let mode = gate.mode();
    if to_advisory.is_ok() {
        assert!(
            mode <= Mode::Advisory,
            "lowered to ADVISORY during the partition (Ok), back at {mode} after it \
             (lower(PARTIAL_AUTO) gave {to_partial:?})"
        );
    } else {
        // Refused as a raise from SHADOW: then the gate runs as before, but nothing raised it either.
        assert!(mode <= Mode::PartialAuto);
        assert!(to_partial.is_err() || mode <= Mode::PartialAuto);
    }
    if mode <= Mode::Advisory {
        assert!(gate.run(|| mark("f11-after".into())).is_err());
    }
}

/// f12: a black-hole partition (bytes dropped, no reset): the member's reads hang rather than fail.
/// Guarantee: past the grace period the gate acts as SHADOW; a lowering made while it was cut off
/// (ADVISORY) applies when it is back, never its old PARTIAL_AUTO.
#[test]
fn f12_black_hole_partition_is_noticed_and_a_lowering_during_it_applies_after() {
    let (url, proxy, _fleet, gate) = member_behind_proxy("f12", 500);
    proxy.cut();
    let noticed = Instant::now();
    assert!(
        eventually(Duration::from_secs(4), || gate.mode() == Mode::Shadow),
        "a black-holed member still runs at {} after 4 s (grace 500 ms)",
        gate.mode()
    );
    eprintln!("black hole noticed after {:?}", noticed.elapsed());
    fleet::lower(
        &url,
        "toolgate",
        "f12",
        Mode::Advisory,
        "ana",
        "during the cut",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    proxy.heal();
    assert!(
        eventually(Duration::from_secs(6), || gate.mode() != Mode::Shadow),
        "the member never rejoined"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        gate.mode(),
        Mode::Advisory,
        "a lowering made during the partition did not apply on rejoin"
    );
}

/// f13: the gate's audit sink and its fleet reach the same server through one link, which is cut past
/// the grace period and healed. Guarantee: the partition is audited (`fleet_lost`, then
/// `fleet_rejoined`): records that nothing waits on are queued and committed with a later group, so a
/// partition cannot be hidden by the very outage that caused it; the trail verifies.
#[test]
fn f13_partition_is_not_hidden_when_the_sink_shares_the_lost_server() {
    assert_partition_audited("f13", |gate| {
        let during = gate.run(|| mark("f13-during".into()));
        assert!(during.is_err());
    });
    assert!(!ran("f13-during"));
}

/// f15: the `Fleet` handle is dropped while a gate it joined keeps running, then the fleet is lowered.
/// Guarantee: a gate joined to a fleet runs at the lower of its own mode and the fleet's; a lowering
/// reaches it within a second (or, not knowing its fleet any more, it acts as SHADOW past the grace
/// period). It must not silently leave the fleet and keep running.
#[test]
fn f15_fleet_handle_dropped_while_its_gate_runs() {
    let url = database("f15");
    let fleet = member_fleet(&url, "f15", 400);
    let gate = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    drop(fleet);
    std::thread::sleep(Duration::from_millis(200));
    fleet::lower(&url, "toolgate", "f15", Mode::Shadow, "ana", "incident").unwrap();
    let reached = eventually(Duration::from_millis(1500), || gate.mode() == Mode::Shadow);
    let ran_after = gate.run(|| mark("f15-after".into())).is_ok();
    let listed = fleet::status(&url, "toolgate", "f15")
        .unwrap()
        .members
        .iter()
        .any(|m| m.gate == gate.id());
    assert!(
        reached && !ran_after,
        "the fleet was lowered to SHADOW; its gate still runs at {} (a call ran: {ran_after}; \
         the gate listed in fleet_members: {listed})",
        gate.mode()
    );
}

/// f16: a clone of a joined gate, and a wider unjoined gate entered inside it. Guarantee: every clone
/// goes down with the fleet, and nested gates intersect: FULL_AUTO inside a fleet-lowered gate runs
/// nothing the fleet's mode refuses.
#[test]
fn f16_clone_and_nested_wider_gate_under_a_lowered_fleet() {
    let url = database("f16");
    let fleet = member_fleet(&url, "f16", 1000);
    let gate = fleet.join(Gate::builder().mode(Mode::FullAuto)).unwrap();
    let clone = gate.clone();
    let inner = Gate::new(Mode::FullAuto).unwrap();
    fleet::lower(&url, "toolgate", "f16", Mode::Advisory, "ana", "x").unwrap();
    assert!(eventually(Duration::from_millis(1500), || clone.mode()
        == Mode::Advisory));
    let nested = clone.run(|| inner.run(|| mark("f16-nested".into())));
    assert_eq!(refusal(&nested), Some(DenialCode::ModeNotAllowed.as_str()));
    let other_thread = std::thread::spawn(move || clone.run(|| mark("f16-thread".into())))
        .join()
        .unwrap();
    assert!(other_thread.is_err());
    assert!(!ran("f16-nested") && !ran("f16-thread"));
    drop(gate);
}

/// f17: a joined gate with the PostgreSQL sink; a call's `enter` commit is held up (table locked),
/// and the fleet is lowered to SHADOW meanwhile. Guarantee: the mode is read again as the last step
/// before the body: the call is refused with the lowered mode's code, its body never runs, and its
/// `enter` is closed by an `exit` of outcome `refused`.
#[test]
fn f17_fleet_lowered_while_the_enter_commit_is_pending() {
    let url = database("f17");
    let fleet = member_fleet(&url, "f17", 5000);
    let gate = fleet
        .join(Gate::builder().mode(Mode::PartialAuto).audit(sink(
            &url,
            "f17",
            Duration::from_secs(10),
        )))
        .unwrap();
    gate.run(|| mark("f17-warm".into())).unwrap();
    let held = Held::new(&url, "LOCK TABLE toolgate.audit IN EXCLUSIVE MODE");
    let g = gate.clone();
    let call = std::thread::spawn(move || g.run(|| mark("f17-held".into())));
    std::thread::sleep(Duration::from_millis(300));
    fleet::lower(&url, "toolgate", "f17", Mode::Shadow, "ana", "incident").unwrap();
    assert!(eventually(Duration::from_millis(1500), || gate.mode() == Mode::Shadow));
    drop(held);
    let result = call.join().unwrap();
    assert_eq!(
        refusal(&result),
        Some(DenialCode::ModeNotAllowed.as_str()),
        "{result:?}"
    );
    assert!(!ran("f17-held"));
    drop(gate);
    drop(fleet);
    let all = records(&url, "f17");
    let enter = all
        .iter()
        .find(|r| r.stage == Stage::Enter && tag_of(r).as_deref() == Some("f17-held"));
    if let Some(enter) = enter {
        let exit = all
            .iter()
            .find(|r| r.stage == Stage::Exit && r.gate == enter.gate && r.call == enter.call)
            .expect("its enter has an exit");
        assert_eq!(exit.outcome, Some(Outcome::Refused));
    }
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
}

/// f18: two operators lower the same fleet at once, to ADVISORY and to SHADOW. Guarantee: `lower`
/// never raises a fleet ("asking for a mode above the fleet's is refused"): whatever the interleaving,
/// the fleet ends at SHADOW, and its history ends with the mode it holds.
#[test]
fn f18_concurrent_lowers_never_leave_the_fleet_raised() {
    let url = database("f18");
    let fleet = member_fleet(&url, "f18", 1000);
    drop(fleet);
    let mut bad = Vec::new();
    for round in 0..25 {
        fleet::raise(&url, "toolgate", "f18", Mode::FullAuto, "ana", "reset").unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let threads: Vec<_> = [Mode::Advisory, Mode::Shadow]
            .into_iter()
            .map(|to| {
                let (url, barrier) = (url.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    fleet::lower(&url, "toolgate", "f18", to, "op", "race").map(|_| ())
                })
            })
            .collect();
        for t in threads {
            let _ = t.join().unwrap();
        }
        let status = fleet::status(&url, "toolgate", "f18").unwrap();
        let last = query(
            &url,
            "SELECT mode FROM toolgate.fleet_changes WHERE fleet = 'f18' ORDER BY id DESC LIMIT 1",
        )[0][0]
            .clone()
            .unwrap();
        if status.mode != Mode::Shadow || last != status.mode.to_string() {
            bad.push(format!(
                "round {round}: fleet {} history {last}",
                status.mode
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// f19: a full-access attacker sets the fleet's row back to FULL_AUTO (and deletes it, so that it
/// would be created again at FULL_AUTO), and notifies the channel. Guarantee: a running gate's mode is
/// never raised by its fleet, whatever the row says.
#[test]
fn f19_fleet_row_raised_or_deleted_by_sql_does_not_raise_a_running_gate() {
    let url = database("f19");
    let fleet = member_fleet(&url, "f19", 1000);
    let gate = fleet.join(Gate::builder().mode(Mode::FullAuto)).unwrap();
    fleet::lower(&url, "toolgate", "f19", Mode::Advisory, "ana", "x").unwrap();
    assert!(eventually(Duration::from_millis(1500), || gate.mode()
        == Mode::Advisory));
    query(
        &url,
        "UPDATE toolgate.fleets SET mode = 'FULL_AUTO' WHERE name = 'f19'; NOTIFY toolgate_fleet, 'f19'",
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(gate.mode(), Mode::Advisory, "raised by an UPDATE");
    query(
        &url,
        "DELETE FROM toolgate.fleets WHERE name = 'f19'; NOTIFY toolgate_fleet, 'f19'",
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(gate.mode(), Mode::Advisory, "raised by a DELETE");
    assert!(gate.run(|| mark("f19-after".into())).is_err());
}

/// f20: two `Fleet` handles of the same fleet in one process (the same member name), each joining a
/// gate; the second handle is dropped. Guarantee ("Seen"): each joined gate is a row of
/// `fleet_members`: the first gate, still joined, stays listed by `status`, and still goes down with
/// the fleet.
#[test]
fn f20_second_fleet_handle_dropped_does_not_hide_the_first_ones_gate() {
    let url = database("f20");
    let first = member_fleet(&url, "f20", 1000);
    let kept = first.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    let second = member_fleet(&url, "f20", 1000);
    let other = second
        .join(Gate::builder().mode(Mode::PartialAuto))
        .unwrap();
    drop(other);
    drop(second);
    std::thread::sleep(Duration::from_millis(800));
    let status = fleet::status(&url, "toolgate", "f20").unwrap();
    assert!(
        status.members.iter().any(|m| m.gate == kept.id()),
        "a joined gate vanished from the fleet's members: {:?}",
        status
            .members
            .iter()
            .map(|m| (&m.member, m.gate))
            .collect::<Vec<_>>()
    );
    fleet::lower(&url, "toolgate", "f20", Mode::Shadow, "ana", "x").unwrap();
    assert!(eventually(Duration::from_millis(1500), || kept.mode() == Mode::Shadow));
    drop(kept);
    drop(first);
}

/// f37: the application drops its last gate and its fleet handle while the fleet's thread waits on
/// a write of `fleet_members` (the table locked by another session). Guarantee: a process that drops
/// its fleet has left it when the drop returns, its rows gone; the membership never ends on the
/// fleet's own thread, where nothing waits for the leave.
#[test]
fn f37_dropping_the_last_gate_during_a_heartbeat_leaves_before_the_drop_returns() {
    let url = database("f37");
    let fleet = Fleet::builder()
        .poll_interval(Duration::from_millis(50))
        .timeout(Duration::from_secs(30))
        .connect(&url, "f37")
        .unwrap();
    let gate = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    let released = Arc::new(AtomicBool::new(false));
    let locker = std::thread::spawn({
        let (url, released) = (url.clone(), Arc::clone(&released));
        move || {
            common::postgres::execute(
                &url,
                "BEGIN; LOCK TABLE toolgate.fleet_members IN ACCESS EXCLUSIVE MODE; \
                 SELECT pg_sleep(1.5); COMMIT;",
            );
            released.store(true, Ordering::SeqCst);
        }
    });
    let waiting = eventually(Duration::from_secs(10), || {
        !query(
            &url,
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%INSERT INTO \"toolgate\".fleet_members%'",
        )
        .is_empty()
    });
    assert!(waiting, "the fleet's heartbeat never waited on the lock");
    drop(gate);
    drop(fleet);
    let waited = released.load(Ordering::SeqCst);
    let rows = query(
        &url,
        "SELECT count(*) FROM toolgate.fleet_members WHERE fleet = 'f37'",
    );
    locker.join().unwrap();
    assert!(
        waited && rows[0][0].as_deref() == Some("0"),
        "the drop returned before the process left its fleet (the lock still held: {}); \
         rows left in fleet_members: {:?}",
        !waited,
        rows[0][0]
    );
}

/// f21: a member that loses the fleet for longer than the grace period: `toolgate fleet status` must
/// show it as partitioned or SHADOW, never as a healthy PARTIAL_AUTO member heard from just now; and a
/// gate that joins while the fleet cannot be read is not started (`JoinError::Fleet`).
#[test]
fn f21_join_while_the_fleet_cannot_be_read_is_refused() {
    let url = database("f21");
    let proxy = Proxy::new(&url);
    let via = proxy.url(&url);
    let fleet = member_fleet(&via, "f21", 400);
    let first = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    proxy.cut();
    assert!(eventually(Duration::from_secs(4), || first.mode() == Mode::Shadow));
    let started = Instant::now();
    let joined = fleet.join(Gate::builder().mode(Mode::PartialAuto));
    let joined_mode = joined.as_ref().ok().map(Gate::mode);
    assert!(
        joined.is_err() || joined_mode == Some(Mode::Shadow),
        "a gate joined while the fleet was lost runs at {joined_mode:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "join hung");
    let status = fleet::status(&url, "toolgate", "f21").unwrap();
    for m in &status.members {
        if m.gate == first.id() {
            assert!(
                m.partitioned || m.mode == Mode::Shadow || m.last_contact_ms >= 400,
                "a lost member looks healthy: {:?} {:?} {}",
                m.mode,
                m.partitioned,
                m.last_contact_ms
            );
        }
    }
    proxy.heal();
}

/// f27: an audited gate lowered by the application (`lower_by`) while its sink's link is a black
/// hole; the link heals. Guarantee: every lowering is an audit record (`mode_lowered`, by whom): a
/// lowering cannot be hidden by the outage it happened in.
#[test]
fn f27_a_lowering_during_an_outage_is_not_lost_from_the_trail() {
    let (url, proxy, gate) = warm_gate_behind_proxy("f27", Duration::from_millis(500));
    proxy.cut();
    gate.lower_by(Mode::Advisory, "ana").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    proxy.heal();
    gate.lower_by(Mode::Shadow, "bob").unwrap();
    // A flush: dropping the sink waits for what is queued.
    drop(gate);
    let lowered: Vec<Mode> = records(&url, "f27")
        .iter()
        .filter(|r| r.stage == Stage::ModeLowered)
        .map(|r| r.mode)
        .collect();
    assert!(
        lowered.len() == 2,
        "mode_lowered records in the trail: {lowered:?} (two lowerings were made)"
    );
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
}

/// f31: f13 with a longer outage: the link stays cut for 2 s after the gate went to SHADOW, longer
/// than the sink's timeout (500 ms), so the group carrying `fleet_lost` times out rather than failing
/// on a closed connection. Guarantee: the partition is audited (`fleet_lost`, then `fleet_rejoined`)
/// whatever the outage looks like; it cannot be hidden.
#[test]
fn f31_a_long_partition_is_not_hidden_when_the_sink_shares_the_lost_server() {
    assert_partition_audited("f31", |_| std::thread::sleep(Duration::from_secs(2)));
}

/// f33: the fleet's server frozen (SIGSTOP on the postmaster and its backends: connections stay open,
/// nothing answers) while a thread keeps calling through a joined gate; grace 1 s, statement timeout
/// 5 s. Guarantee: once the grace period has passed without a read, the gate is SHADOW: no body runs
/// later than the freeze plus the grace (plus a slack of 700 ms, generous for a loaded 2-core machine,
/// far below the 4 s by which a read bounded only by the timeout would overrun). The bound is checked
/// on the times the bodies record, and the gate comes back once the server runs again.
#[test]
fn f33_a_frozen_server_holds_the_gate_at_shadow_once_the_grace_has_passed() {
    let cluster = common::postgres::Cluster::new(&["fsync=off"]);
    let url = cluster.database("f33");
    let grace = Duration::from_secs(1);
    let fleet = Fleet::builder()
        .grace(grace)
        .poll_interval(Duration::from_millis(100))
        .timeout(Duration::from_secs(5))
        .connect(&url, "f33")
        .unwrap();
    let gate = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let caller = {
        let (gate, stop) = (gate.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let _ = gate.run(stamp);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    assert!(eventually(Duration::from_secs(5), || STAMPS
        .lock()
        .unwrap()
        .len()
        > 20));
    // The last read that can succeed is before this instant.
    let frozen_at = Instant::now();
    let frozen = Frozen::postmaster(cluster.postmaster_pid());
    let shadow = eventually(Duration::from_secs(8), || gate.mode() == Mode::Shadow);
    std::thread::sleep(Duration::from_secs(1));
    let thawed_at = Instant::now();
    drop(frozen);
    let slack = Duration::from_millis(700);
    let late: Vec<Duration> = STAMPS
        .lock()
        .unwrap()
        .iter()
        .filter(|at| **at > frozen_at + grace + slack && **at < thawed_at)
        .map(|at| at.duration_since(frozen_at))
        .collect();
    assert!(
        shadow,
        "the gate never went to SHADOW while its server was frozen"
    );
    assert!(
        late.is_empty(),
        "{} bodies ran after the grace period ({grace:?} + {slack:?} slack) with the server frozen, \
         from {:?} to {:?} after the freeze",
        late.len(),
        late.first(),
        late.last()
    );
    assert!(
        eventually(Duration::from_secs(15), || gate.mode() == Mode::PartialAuto),
        "the gate never came back"
    );
    stop.store(true, Ordering::SeqCst);
    caller.join().unwrap();
    drop(gate);
    drop(fleet);
}

/// A gate whose audit sink (writer `name`) and fleet `name` reach the server through one link: the link
/// is cut until the gate acts as SHADOW and `while_cut` is done, then healed. Asserts that the gate
/// rejoins, and that the trail holds `fleet_lost` then `fleet_rejoined` and verifies.
#[track_caller]
fn assert_partition_audited(name: &str, while_cut: impl FnOnce(&Gate)) {
    let url = database(name);
    let proxy = Proxy::new(&url);
    let via = proxy.url(&url);
    let fleet = member_fleet(&via, name, 400);
    let gate = fleet
        .join(Gate::builder().mode(Mode::PartialAuto).audit(sink(
            &via,
            name,
            Duration::from_millis(500),
        )))
        .unwrap();
    gate.run(|| mark(format!("{name}-before"))).unwrap();
    proxy.cut();
    assert!(eventually(Duration::from_secs(4), || gate.mode() == Mode::Shadow));
    while_cut(&gate);
    proxy.heal();
    assert!(
        eventually(Duration::from_secs(8), || gate.mode() == Mode::PartialAuto),
        "never rejoined"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while gate.run(|| mark(format!("{name}-after"))).is_err() && Instant::now() < deadline {}
    drop(gate);
    drop(fleet);
    let stages: Vec<Stage> = records(&url, name).iter().map(|r| r.stage).collect();
    let lost = stages.iter().position(|s| *s == Stage::FleetLost);
    let back = stages.iter().position(|s| *s == Stage::FleetRejoined);
    assert!(
        lost.is_some() && back.is_some() && lost < back,
        "the partition is missing from the trail: {stages:?}"
    );
    assert!(verify_trail(&url, "toolgate").unwrap().is_intact());
}
