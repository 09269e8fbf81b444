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
    let gate = fleet
        .join(Gate::builder().mode(Mode::FullAuto))
        .expect("joined");
    let stop_file = PathBuf::from(env(STOP_FILE));
    println!("ready");
    let (mut came, mut policy) = (String::new(), None::<String>);
    let mut first = true;
    for i in 0.. {
        if stop_file.exists() {
            break;
        }
        let now = match gate.run(|| work(i)) {
            Ok(_) => "ran".to_owned(),
            Err(denied) => denied.code().as_str().to_owned(),
        };
        if now != came {
            println!("came {now}");
            came = now;
        }
        let digest = gate.policy_digest().as_deref().map(str::to_owned);
        if first || digest != policy {
            println!("policy {}", digest.as_deref().unwrap_or("none"));
            policy = digest;
            first = false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(gate);
    drop(fleet);
}

/// `text` written to `name` in `scratch`, then applied to the fleet `ops` by `toolgate policy apply`.
fn apply(url: &str, scratch: &common::Scratch, name: &str, text: &str) -> std::process::Output {
    let file = scratch.path(name);
    std::fs::write(&file, text).unwrap();
    let path = file.display().to_string();
    toolgate(&[
        "policy", "apply", "--store", url, "--fleet", "ops", "--by", "ana", &path,
    ])
}

/// A member of the fleet `ops`, running until `stop` exists.
fn spawn_member(url: &str, stop: &std::path::Path) -> Proc {
    let vars = [
        (FLEET, "ops".to_owned()),
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

    // A file of the right shape that names a tool these processes do not link: each refuses it and
    // keeps denying.
    let foreign = "format = 1\n[defaults]\ndeny = [\"payments.refund\"]\n";
    let applied = apply(&url, &scratch, "foreign.toml", foreign);
    assert_eq!(applied.status.code(), Some(0), "{}", text(&applied));
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
