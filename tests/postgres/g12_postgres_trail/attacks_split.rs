//! Outside attacks on guarantees 8, 9 and 12 where two sinks meet: a gate writing each record to a
//! JSONL log and to the PostgreSQL trail, whose link to the server is cut (every byte dropped)
//! between two calls, then healed. The log is first or second.
//!
//! Asserted (guarantee 8: "one that refuses, fails or panics on it ... refuses the call: the sinks
//! before it get its exit ... the sinks after it never see the call"; 9 and 12: each verifies): no
//! body runs without its `enter` in both sinks, the call during the cut is refused
//! `AUDIT_UNAVAILABLE`, and afterwards the log and the trail verify, every `enter` with its `exit`.
//! A test that fails is an attack that got through.

use toolgate::audit::{JsonlSink, verify_file};

use crate::support::trail::*;

/// The records of the JSONL log at `path`.
fn log_records(path: &std::path::Path) -> Vec<AuditRecord> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn a4_12_s1_a_log_and_a_trail_split_by_a_cut_link_run_nothing_recorded_in_one_alone() {
    let url = database("a4_12_s1");
    let proxy = Proxy::new(&url);
    let scratch = common::Scratch::new("a4-12-s1");
    for (log_first, writer) in [(true, "a4s1-log-first"), (false, "a4s1-trail-first")] {
        let log = scratch.path(&format!("{writer}.jsonl"));
        let trail = sink(&proxy.url(&url), writer, Duration::from_millis(500));
        let file = JsonlSink::open(&log).unwrap();
        let builder = Gate::builder().mode(Mode::PartialAuto);
        let gate = if log_first {
            builder.audit(file).audit(trail)
        } else {
            builder.audit(trail).audit(file)
        }
        .build()
        .unwrap();
        gate.run(|| mark(format!("{writer}-before"))).unwrap();
        proxy.cut();
        let during = format!("{writer}-during");
        let cut = gate.run(|| mark(during.clone()));
        assert_eq!(refusal(&cut), Some("AUDIT_UNAVAILABLE"), "{writer}");
        assert!(
            !ran(&during),
            "{writer}: the body ran while the trail was cut"
        );
        proxy.heal();
        assert_eq!(
            runs_within_ten_seconds(&gate, &format!("{writer}-after"), 3),
            3
        );
        drop(gate);

        let report = verify_file(&log).unwrap();
        assert!(report.is_intact(), "{writer}: the log: {report}");
        let in_log = log_records(&log);
        let unpaired: Vec<_> = in_log
            .iter()
            .filter(|e| e.stage == Stage::Enter)
            .filter(|e| {
                !in_log
                    .iter()
                    .any(|x| x.stage == Stage::Exit && x.gate == e.gate && x.call == e.call)
            })
            .map(tag_of)
            .collect();
        assert!(
            unpaired.is_empty(),
            "{writer}: the log: enters without exits {unpaired:?}"
        );
        let entered_in_log: HashSet<String> = in_log
            .iter()
            .filter(|r| r.stage == Stage::Enter)
            .filter_map(tag_of)
            .collect();
        for tag in RAN.lock().unwrap().iter().filter(|t| t.starts_with(writer)) {
            assert!(
                entered_in_log.contains(tag),
                "{writer}: {tag} ran without its enter in the log"
            );
        }
        assert_every_run_entered(&url, writer, writer);
        assert_intact_and_paired(&url, writer, "an enter of the trail without its exit");
        if !log_first {
            assert!(
                !entered_in_log.contains(&during),
                "{writer}: the log, after the trail, saw the call the trail refused"
            );
        }
    }
}
