//! Guarantee 18 across processes: `toolgate policy apply` narrows every joined process within the
//! fleet's bound; a policy a member cannot check is refused there and the one in force kept; removing
//! the policy gives back what the code allows, never more.

use crate::support::fleet::*;

/// A member of the fleet `ops` at FULL_AUTO: calls `fleet.work` every few milliseconds and prints
/// each change of what a call comes to (`came ran` or `came CODE`) and of the policy it follows
/// (`policy DIGEST` or `policy none`), until the stop file exists.
pub(crate) fn member() {
    let fleet = Fleet::builder()
        .timeout(Duration::from_millis(30_000))
        .poll_interval(Duration::from_millis(100))
        .connect(&env(URL), &env(FLEET))
        .expect("the fleet");
    let own = toolgate::policy_file::LivePolicy::none();
    let refused = fleet.join(Gate::builder().mode(Mode::FullAuto).policy(own));
    assert!(
        matches!(refused, Err(fleet::JoinError::OwnPolicy)),
        "{refused:?}"
    );
    let gate = match fleet.join(Gate::builder().mode(Mode::FullAuto)) {
        Ok(gate) => gate,
        Err(error) => {
            println!("refused {error}");
            return;
        }
    };
    let stop_file = PathBuf::from(env(STOP_FILE));
    println!("ready");
    // What a call came to and the policy it was decided under, printed as a pair ("came", then
    // "policy") whenever the pair changes: only a call the policy did not change across is a pair,
    // so a reader never sees a policy beside the outcome of the one before it.
    let mut seen: Option<(String, Option<String>)> = None;
    for i in 0.. {
        if stop_file.exists() {
            break;
        }
        let before = gate.policy_digest();
        let now = match gate.run(|| work(i)) {
            Ok(_) => "ran".to_owned(),
            Err(denied) => denied.code().as_str().to_owned(),
        };
        let digest = gate.policy_digest();
        if digest == before {
            let pair = (now, digest.as_deref().map(str::to_owned));
            if seen.as_ref() != Some(&pair) {
                println!("came {}", pair.0);
                println!("policy {}", pair.1.as_deref().unwrap_or("none"));
                seen = Some(pair);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(gate);
    drop(fleet);
}

/// `text` written to `name` in `scratch`, then applied to the fleet `ops` by `toolgate policy apply`.
fn apply(url: &str, scratch: &common::Scratch, name: &str, text: &str) -> std::process::Output {
    apply_to(url, "ops", scratch, name, text)
}

/// `text` written to `name` in `scratch`, then applied to the fleet `fleet`.
fn apply_to(
    url: &str,
    fleet: &str,
    scratch: &common::Scratch,
    name: &str,
    text: &str,
) -> std::process::Output {
    let file = scratch.path(name);
    std::fs::write(&file, text).unwrap();
    let path = file.display().to_string();
    toolgate(&[
        "policy", "apply", "--store", url, "--fleet", fleet, "--by", "ana", &path,
    ])
}

/// A member of the fleet `ops`, running until `stop` exists.
fn spawn_member(url: &str, stop: &std::path::Path) -> Proc {
    spawn_member_of(url, "ops", stop)
}

/// A member of the fleet `name`, running until `stop` exists.
fn spawn_member_of(url: &str, name: &str, stop: &std::path::Path) -> Proc {
    let vars = [
        (FLEET, name.to_owned()),
        (STOP_FILE, stop.display().to_string()),
    ];
    Proc::spawn("policy_member", url, &vars)
}

#[test]
fn policy_apply_narrows_every_process_and_a_policy_a_member_cannot_check_is_refused_there() {
    let url = database("fleet_policy");
    let scratch = common::Scratch::new("fleet-policy");
    let stop = scratch.path("stop");
    let mut procs: Vec<Proc> = (0..3).map(|_| spawn_member(&url, &stop)).collect();
    for proc in &mut procs {
        proc.expect("ready");
        assert_eq!(proc.expect("came "), "ran");
        assert_eq!(proc.expect("policy "), "none");
    }

    let deny = "format = 1\n[defaults]\ndeny = [\"fleet.work\"]\n";
    let applied = apply(&url, &scratch, "deny.toml", deny);
    assert_eq!(applied.status.code(), Some(0), "{}", text(&applied));
    let digest = toolgate::policy_file::PolicyFile::parse("x", deny)
        .unwrap()
        .digest()
        .to_owned();
    assert!(text(&applied).contains(&digest), "{}", text(&applied));
    for proc in &mut procs {
        assert_eq!(proc.expect("came "), "DENY_LISTED");
        assert_eq!(proc.expect("policy "), digest);
    }
    let status = toolgate(&["fleet", "status", "--store", &url, "--fleet", "ops"]);
    let shown = text(&status);
    assert!(
        shown.contains(&format!("policy {digest} (applied by ana)")),
        "{shown}"
    );
    // The heartbeat that reports it may lag the change: wait for every member's row to show it.
    let short = &digest[..12];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = toolgate(&["fleet", "status", "--store", &url, "--fleet", "ops"]);
        if text(&status)
            .lines()
            .filter(|line| line.ends_with(short))
            .count()
            == 3
        {
            break;
        }
        assert!(Instant::now() < deadline, "{}", text(&status));
        std::thread::sleep(Duration::from_millis(100));
    }

    // A file of the right shape that names a tool no member declares: the command refuses it before
    // storing it, and every member keeps denying.
    let foreign = "format = 1\n[defaults]\ndeny = [\"payments.refund\"]\n";
    let applied = apply(&url, &scratch, "foreign.toml", foreign);
    assert_eq!(applied.status.code(), Some(1), "{}", text(&applied));
    // The command itself refuses what is not a policy file at all.
    let garbage = "format = 1\n[defaults]\nallow = [\"fleet.work\"]\n";
    let refused = apply(&url, &scratch, "garbage.toml", garbage);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("unknown key `allow`"),
        "{}",
        text(&refused)
    );

    // Removing the policy gives back what the code allows.
    let removed = apply(&url, &scratch, "empty.toml", "");
    assert_eq!(removed.status.code(), Some(0), "{}", text(&removed));
    for proc in &mut procs {
        // Nothing changed between the deny and the removal: the foreign file was refused.
        assert_eq!(proc.expect("came "), "ran");
        assert_eq!(proc.expect("policy "), "none");
    }
    std::fs::write(&stop, "").unwrap();
    for proc in procs {
        proc.wait();
    }
}

/// The digest of the fleet's policy as stored (`policy apply`'s last text), and of the one in force
/// (the last a member accepted).
fn stored_digests(url: &str, fleet: &str) -> (Option<String>, Option<String>) {
    let rows = query(
        url,
        &format!(
            "SELECT policy_digest, accepted_digest FROM toolgate.fleets WHERE name = '{fleet}'"
        ),
    );
    (rows[0][0].clone(), rows[0][1].clone())
}

fn digest_of(text: &str) -> String {
    toolgate::policy_file::PolicyFile::parse("x", text)
        .unwrap()
        .digest()
        .to_owned()
}

/// Another member of `fleet` declares a tool the processes of this test do not link: a policy naming
/// it passes `policy apply`'s check, and only these processes can refuse it.
fn declare_foreign_tool(url: &str, fleet: &str) {
    query(
        url,
        &format!(
            "INSERT INTO toolgate.fleet_tools (fleet, id, names, parameters, redact, member)
             VALUES ('{fleet}', 'payments.refund', ARRAY['payments.refund'], NULL, '{{}}', 'other/1')"
        ),
    );
}

#[test]
fn a_refused_fleet_policy_never_leaves_a_restarted_process_under_no_policy() {
    let url = database("fleet_policy_fails_closed");
    let scratch = common::Scratch::new("fleet-policy-closed");
    let stop = scratch.path("stop");
    let mut first = spawn_member(&url, &stop);
    first.expect("ready");
    assert_eq!(first.expect("came "), "ran");
    assert_eq!(first.expect("policy "), "none");

    // Policy A, accepted by the member: `fleet.work` is denied.
    let a = "format = 1\n[defaults]\ndeny = [\"fleet.work\"]\n";
    let applied = apply(&url, &scratch, "a.toml", a);
    assert_eq!(applied.status.code(), Some(0), "{}", text(&applied));
    assert_eq!(first.expect("came "), "DENY_LISTED");
    assert_eq!(first.expect("policy "), digest_of(a));
    let deadline = Instant::now() + Duration::from_secs(60);
    while stored_digests(&url, "ops").1.as_deref() != Some(digest_of(a).as_str()) {
        assert!(
            Instant::now() < deadline,
            "policy A was never recorded as accepted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // B with a typo'd tool id: refused before it is stored, naming the tool it meant.
    let typo = "format = 1\n[defaults]\ndeny = [\"fleet.wrok\"]\n";
    let refused = apply(&url, &scratch, "typo.toml", typo);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("fleet.wrok") && text(&refused).contains("fleet.work"),
        "{}",
        text(&refused)
    );
    assert_eq!(
        stored_digests(&url, "ops"),
        (Some(digest_of(a)), Some(digest_of(a)))
    );

    // B that only a member can refuse: stored, never in force.
    declare_foreign_tool(&url, "ops");
    let foreign = "format = 1\n[defaults]\ndeny = [\"payments.refund\"]\n";
    let foreign_digest = query(
        &url,
        &format!(
            "SELECT encode(sha256(convert_to('{}', 'UTF8')), 'hex')",
            foreign.replace('\'', "''")
        ),
    )[0][0]
        .clone()
        .unwrap();
    let applied = apply(&url, &scratch, "foreign.toml", foreign);
    assert_eq!(applied.status.code(), Some(0), "{}", text(&applied));
    std::thread::sleep(Duration::from_millis(1_000));
    assert_eq!(
        stored_digests(&url, "ops"),
        (Some(foreign_digest.clone()), Some(digest_of(a)))
    );
    let status = toolgate(&["fleet", "status", "--store", &url, "--fleet", "ops"]);
    assert!(
        text(&status).contains(&format!("policy in force {}", digest_of(a))),
        "{}",
        text(&status)
    );

    // Killed and restarted, the member joins under A, the last accepted, never under no policy.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let mut again = spawn_member(&url, &stop);
    again.expect("ready");
    assert_eq!(again.expect("came "), "DENY_LISTED");
    assert_eq!(again.expect("policy "), digest_of(a));

    // A fleet with no accepted policy and a refused one: a joining process refuses to join, saying why.
    let mut fresh = spawn_member_of(&url, "fresh", &stop);
    fresh.expect("ready");
    assert_eq!(fresh.expect("policy "), "none");
    declare_foreign_tool(&url, "fresh");
    let applied = apply_to(&url, "fresh", &scratch, "fresh.toml", foreign);
    assert_eq!(applied.status.code(), Some(0), "{}", text(&applied));
    std::thread::sleep(Duration::from_millis(1_000));
    assert_eq!(stored_digests(&url, "fresh"), (Some(foreign_digest), None));
    fresh.child.kill().unwrap();
    fresh.child.wait().unwrap();
    let mut refused = spawn_member_of(&url, "fresh", &stop);
    let why = refused.expect("refused ");
    assert!(
        why.contains("does not check against this process's tools")
            && why.contains("payments.refund")
            && why.contains("no policy"),
        "{why}"
    );
    refused.child.wait().unwrap();

    std::fs::write(&stop, "").unwrap();
    again.wait();
}

/// The other ways a fleet's policy cannot be followed: `policy apply` while no member has declared its
/// tools is refused and stores nothing; a process that can check neither the policy applied last nor
/// the one in force does not join, and says why.
#[test]
fn a_policy_no_member_can_check_is_never_followed_as_no_policy() {
    let url = database("fleet_policy_unfollowable");
    let scratch = common::Scratch::new("fleet-policy-unfollowable");
    // Connected, no gate joined: no tool is declared yet.
    let fleet = Fleet::connect(&url, "bare").expect("the fleet");
    let deny = "format = 1\n[defaults]\ndeny = [\"fleet.work\"]\n";
    let refused = apply_to(&url, "bare", &scratch, "deny.toml", deny);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("has declared its tools"),
        "{}",
        text(&refused)
    );
    assert_eq!(stored_digests(&url, "bare"), (None, None));

    // Applied and in force, both naming a tool this process does not link (another member's).
    let foreign = "format = 1\n[defaults]\ndeny = [\"payments.refund\"]\n";
    let other = "format = 1\n[defaults]\nask = [\"payments.refund\"]\n";
    query(
        &url,
        &format!(
            "UPDATE toolgate.fleets SET policy = '{other}', policy_digest = 'b', policy_by = 'ana',
                 accepted_policy = '{foreign}', accepted_digest = 'a', accepted_by = 'ana'
             WHERE name = 'bare'"
        ),
    );
    drop(fleet);
    let fleet = Fleet::connect(&url, "bare").expect("the fleet");
    let refused = fleet
        .join(Gate::builder().mode(Mode::FullAuto))
        .expect_err("no gate joins under no policy");
    let why = refused.to_string();
    assert!(
        matches!(refused, fleet::JoinError::Policy(_))
            && why.contains("does not check against this process's tools")
            && why.contains("nor does the policy in force")
            && why.contains("payments.refund"),
        "{why}"
    );
    // The policy in force checks here: the process follows it.
    query(
        &url,
        &format!(
            "UPDATE toolgate.fleets SET accepted_policy = '{deny}', accepted_digest = 'c' WHERE name = 'bare'"
        ),
    );
    drop(fleet);
    let fleet = Fleet::connect(&url, "bare").expect("the fleet");
    let gate = fleet
        .join(Gate::builder().mode(Mode::FullAuto))
        .expect("joined under the policy in force");
    assert_eq!(
        gate.run(|| work(1)).unwrap_err().code(),
        DenialCode::DenyListed
    );
}
