//! Guarantee 12 with checkpoints (guarantee 10 per writer): a signed trail shows a rewrite, a cut and a
//! swapped checkpoint; a signed sink continues its series and refuses a forged one.

use crate::support::fleet::*;

#[test]
fn a_signed_trail_shows_a_rewrite_a_cut_and_a_swapped_checkpoint() {
    let scratch = common::Scratch::new("signed-trail");

    let (url, public) = signed_trail("signed", &scratch);
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(0), "{shown}");
    // 100 records each: a checkpoint once 10 more are committed, and a final one over the last.
    let checkpoints = query(
        &url,
        "SELECT writer, count(*), count(*) FILTER (WHERE checkpoint LIKE '%\"final\":true%'),
             max(head_seq)
         FROM toolgate.audit_checkpoints GROUP BY writer ORDER BY writer",
    );
    for (row, writer) in checkpoints.iter().zip(["a", "b"]) {
        let row: Vec<&str> = row.iter().map(|v| v.as_deref().unwrap()).collect();
        assert_eq!(row[0], writer);
        assert!(row[1].parse::<u32>().unwrap() >= 9, "{row:?}");
        assert_eq!(row[2..], ["1", "100"], "{row:?}");
    }

    // A record changed, every hash after it recomputed: the chain verifies, the checkpoints do not.
    rewrite_with_recomputed_hashes(&url, 25);
    assert_chain_intact_signed_code(&url, &public, 6, "a rewritten chain");

    // Records cut from the end, before the last checkpoint.
    let (url, public) = signed_trail("cut", &scratch);
    query(
        &url,
        "DELETE FROM toolgate.audit WHERE writer = 'a' AND seq > 55",
    );
    assert_chain_intact_signed_code(&url, &public, 7, "a chain cut short");

    // A checkpoint of writer b put in the place of writer a's: signed, but not a's.
    let (url, public) = signed_trail("swapped", &scratch);
    query(
        &url,
        "UPDATE toolgate.audit_checkpoints SET checkpoint =
             (SELECT checkpoint FROM toolgate.audit_checkpoints WHERE writer = 'b' AND seq = 3)
         WHERE writer = 'a' AND seq = 3",
    );
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(5), "a swapped checkpoint: {shown}");
    // Named as such, or, where b's checkpoint 3 covers another head than a's row says, as an edited row.
    assert!(
        shown.contains("names another writer (b)") || shown.contains("the row was edited"),
        "{shown}"
    );

    // A writer whose records are gone but whose checkpoints remain.
    let (url, public) = signed_trail("gone", &scratch);
    query(&url, "DELETE FROM toolgate.audit WHERE writer = 'b'");
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(7), "a writer deleted whole: {shown}");

    // Another key's signatures.
    let (url, _) = signed_trail("otherkey", &scratch);
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(5), "the wrong key: {shown}");
}

#[test]
fn a_signed_sink_continues_its_series_and_refuses_a_forged_one() {
    let url = database("continued");
    let scratch = common::Scratch::new("signed-continued");
    let key = SigningKey::generate().unwrap();
    let public = scratch.path("key.pub");
    std::fs::write(&public, key.public_key().to_public_key_pem()).unwrap();
    let checkpoints = Checkpoints::new(key).every_records(7);
    for round in 0..3 {
        let sink = PostgresSink::builder()
            .writer("w")
            .checkpoints(checkpoints.clone())
            .connect(&url)
            .unwrap();
        let gate = audited(sink);
        for n in 0..20 {
            gate.run(|| work(round * 100 + n)).unwrap();
        }
    }
    let (code, shown) = verify_signed(&url, &public);
    assert_eq!(code, Some(0), "three sinks, one series: {shown}");

    // The last checkpoint forged (its head changed): a new sink refuses to continue the series.
    query(
        &url,
        "UPDATE toolgate.audit_checkpoints SET checkpoint = replace(checkpoint, '\"final\":true', '\"final\":false')
         WHERE writer = 'w' AND seq = (SELECT max(seq) FROM toolgate.audit_checkpoints)",
    );
    let refused = PostgresSink::builder()
        .writer("w")
        .checkpoints(checkpoints)
        .connect(&url)
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("last checkpoint of writer \"w\""),
        "{refused}"
    );
}

/// Asserts that the trail of `url` verifies as a chain, and that its verification with the public key
/// in `public` exits with `code` (`what` the checkpoints show).
#[track_caller]
fn assert_chain_intact_signed_code(url: &str, public: &std::path::Path, code: i32, what: &str) {
    assert!(verify_trail(url, "toolgate").unwrap().is_intact());
    let (exit, shown) = verify_signed(url, public);
    assert_eq!(exit, Some(code), "{what}: {shown}");
}
