//! A PostgreSQL server for the tests of the `postgres` feature: the one `TOOLGATE_TEST_POSTGRES` names
//! (`postgres://user@host:port/db`), or a throwaway cluster of Debian's `postgresql` binaries, made in
//! a temporary directory, listening on 127.0.0.1 at a free port, and removed when the test binary ends,
//! whether its tests pass, fail or it is killed (a watchdog process removes what a dead binary left).
//!
//! PostgreSQL will not run as root: as root, the cluster runs as the `postgres` user (or `nobody`).

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Names the server to test against, instead of a throwaway cluster.
pub const SERVER_ENV: &str = "TOOLGATE_TEST_POSTGRES";

const PREFIX: &str = "toolgate-pg-";

/// A throwaway cluster: stopped and removed when dropped.
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    run_as: Option<String>,
    options: Vec<String>,
    watchdog: Option<Child>,
}

impl Cluster {
    /// A new cluster, started; `options` are server settings (`fsync=off`).
    pub fn new(options: &[&str]) -> Cluster {
        Cluster::with_files(options, &[], None)
    }

    /// A new cluster whose data directory holds `files` (name, contents: certificates and keys, readable
    /// by the server's user alone) and, if given, `hba` as its `pg_hba.conf`, started with `options`.
    pub fn with_files(options: &[&str], files: &[(&str, &str)], hba: Option<&str>) -> Cluster {
        remove_leftovers();
        let bin = binaries().or_else(install).unwrap_or_else(|| {
            panic!(
                "no PostgreSQL binaries in /usr/lib/postgresql/*/bin: `apt-get install postgresql`, \
                 or name a server in {SERVER_ENV}"
            )
        });
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("sock")).expect("the cluster's directory");
        fs::write(dir.join("owner"), std::process::id().to_string()).expect("the owner file");
        let run_as = if is_root() {
            let user = ["postgres", "nobody"]
                .into_iter()
                .find(|user| status(Command::new("id").arg("-u").arg(user)))
                .expect("a user to run PostgreSQL as: postgres or nobody");
            assert!(
                status(Command::new("chown").arg("-R").arg(user).arg(&dir)),
                "chown of the cluster's directory"
            );
            Some(user.to_owned())
        } else {
            None
        };
        let mut cluster = Cluster {
            dir,
            bin,
            port: 0,
            run_as,
            options: options.iter().map(|o| (*o).to_owned()).collect(),
            watchdog: None,
        };
        cluster.watchdog = cluster.spawn_watchdog();
        let data = cluster.data();
        let initdb = cluster
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "toolgate",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .output()
            .expect("initdb runs");
        assert!(
            initdb.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let hba = hba.map(|hba| ("pg_hba.conf", hba));
        for (name, contents) in files.iter().copied().chain(hba) {
            cluster.write_private(&data.join(name), contents);
        }
        let mut tries = 0;
        loop {
            cluster.port = free_port();
            if cluster.try_start() {
                break;
            }
            tries += 1;
            assert!(tries < 3, "PostgreSQL did not start: {}", cluster.log());
        }
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Writes `contents` at `path`, mode 0600, owned by the user the server runs as.
    fn write_private(&self, path: &Path, contents: &str) {
        use std::os::unix::fs::PermissionsExt;
        fs::write(path, contents).expect("a file of the cluster");
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).expect("chmod 0600");
        if let Some(user) = &self.run_as {
            assert!(
                status(Command::new("chown").arg(user).arg(path)),
                "chown of {}",
                path.display()
            );
        }
    }

    /// The cluster's directory (its data directory in `data/`), removed with it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The key-value address of `database` over the cluster's Unix socket, which `pg_hba.conf` may
    /// treat apart from TCP.
    pub fn socket(&self, database: &str) -> String {
        format!(
            "host={} port={} user=toolgate dbname={database}",
            self.dir.join("sock").display(),
            self.port
        )
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(path);
                command
            }
            None => Command::new(path),
        }
    }

    /// `pg_ctl stop` of the cluster with the shutdown `mode`, waiting for it, its stdout discarded.
    fn pg_ctl_stop(&self, mode: &str) -> Command {
        let mut command = self.command("pg_ctl");
        command
            .arg("-D")
            .arg(self.data())
            .args(["-w", "-m", mode, "stop"])
            .stdout(Stdio::null());
        command
    }

    fn try_start(&self) -> bool {
        let mut options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {}",
            self.port,
            self.dir.join("sock").display()
        );
        for option in &self.options {
            options.push_str(" -c ");
            options.push_str(option);
        }
        self.command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-w", "-t", "30", "-o", &options, "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts the cluster again after [`Cluster::stop`], on the same port.
    pub fn start(&self) {
        assert!(
            self.try_start(),
            "PostgreSQL did not restart: {}",
            self.log()
        );
    }

    /// Stops the cluster (`pg_ctl stop -m fast`: connections are cut, what was committed stays).
    pub fn stop(&self) {
        let stopped = self.pg_ctl_stop("fast").status().is_ok_and(|s| s.success());
        assert!(stopped, "PostgreSQL did not stop: {}", self.log());
    }

    /// The process id of the cluster's postmaster, from its `postmaster.pid`.
    pub fn postmaster_pid(&self) -> u32 {
        let text = fs::read_to_string(self.data().join("postmaster.pid")).expect("postmaster.pid");
        text.lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .expect("a pid in postmaster.pid")
    }

    /// The URL of `database` on this cluster.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://toolgate@127.0.0.1:{}/{database}", self.port)
    }

    /// A new database with the schema `toolgate`, and its URL.
    pub fn database(&self, name: &str) -> String {
        let url = self.empty_database(name);
        migrate(&url);
        url
    }

    /// A new empty database, made over the cluster's socket, and its URL (over TCP).
    pub fn empty_database(&self, name: &str) -> String {
        let made = create_database(&self.socket("postgres"), name);
        with_database(&self.url("postgres"), &made)
    }

    /// A shell that outlives this process by as long as it takes to stop the cluster and remove its
    /// directory, should the process die without dropping it.
    fn spawn_watchdog(&self) -> Option<Child> {
        let stop = match &self.run_as {
            Some(user) => format!("runuser -u {user} -- "),
            None => String::new(),
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {stop}'{pg_ctl}' -D '{data}' -m immediate stop >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            pg_ctl = self.bin.join("pg_ctl").display(),
            data = self.data().display(),
            dir = self.dir.display(),
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl_stop("immediate").stderr(Stdio::null()).status();
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A new database for one test, on the server of [`SERVER_ENV`] or on this binary's cluster, with the
/// schema `toolgate` made by its owner (`toolgate::postgres::migrate`), and its URL.
pub fn database(name: &str) -> String {
    let url = empty_database(name);
    migrate(&url);
    url
}

/// [`database`] without the schema: a database nothing was made in yet.
pub fn empty_database(name: &str) -> String {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    match std::env::var(SERVER_ENV) {
        Ok(url) if !url.is_empty() => with_database(&url, &create_database(&url, name)),
        _ => SHARED
            .get_or_init(|| Cluster::new(&["fsync=off"]))
            .empty_database(name),
    }
}

/// Makes the schema `toolgate` in the database of `url`, as its owner.
pub fn migrate(url: &str) {
    toolgate::postgres::migrate(url, "toolgate")
        .unwrap_or_else(|e| panic!("cannot make the schema in {url}: {e}"));
}

/// The roles of the grants that the docs of `toolgate::postgres` give (section "Roles"), made in the
/// database of `url` (whose schema exists) with exactly those grants, under names of this process; the
/// URL of each. The server trusts local connections, so the roles need no password.
pub struct Roles {
    /// `toolgate_agent`: the gates' processes (store, budgets, sink, fleet).
    pub agent: String,
    /// `toolgate_operator`: `toolgate approvals` and `toolgate fleet`.
    pub operator: String,
    /// `toolgate_auditor`: `toolgate audit verify` and `promotion` of the trail.
    pub auditor: String,
    /// `toolgate_console`: the operator console.
    pub console: String,
}

pub fn documented_roles(url: &str) -> Roles {
    let docs = include_str!("../../runtime/src/postgres/mod.rs");
    let section = docs
        .split_once("//! # Roles")
        .expect("a Roles section in the docs of toolgate::postgres")
        .1;
    let script: String = section
        .split_once("//! ```sql\n")
        .expect("a SQL block in the Roles section")
        .1
        .split_once("//! ```")
        .expect("the SQL block ends")
        .0
        .lines()
        .map(|line| line.strip_prefix("//!").unwrap_or(line).trim_start())
        .filter(|line| !line.starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    let database = url.rsplit('/').next().unwrap_or_default().to_owned();
    let suffix = format!("{database}_{}", std::process::id());
    let names =
        ["agent", "operator", "auditor", "console"].map(|r| (r, format!("toolgate_{r}_{suffix}")));
    let mut sql = String::new();
    for (_, name) in &names {
        sql.push_str(&format!(
            "DROP ROLE IF EXISTS {name}; CREATE ROLE {name} LOGIN;\n"
        ));
    }
    let mut granted = script;
    for (role, name) in &names {
        granted = granted.replace(&format!("toolgate_{role}"), name);
    }
    assert!(granted.contains("GRANT"), "no grant in the docs: {granted}");
    sql.push_str(&granted);
    execute(url, &sql);
    let as_role = |name: &str| url.replacen("://toolgate@", &format!("://{name}@"), 1);
    Roles {
        agent: as_role(&names[0].1),
        operator: as_role(&names[1].1),
        auditor: as_role(&names[2].1),
        console: as_role(&names[3].1),
    }
}

/// Runs the statements of `sql` on the database of `url`.
pub fn execute(url: &str, sql: &str) {
    with_client(url, async |client| {
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    });
}

/// Creates (or empties) database `name` on the server of `url`, and returns the name it was given.
fn create_database(url: &str, name: &str) -> String {
    let name = format!("t_{}_{}", name, std::process::id());
    with_client(url, async |client| {
        for statement in [
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            format!("CREATE DATABASE {name}"),
        ] {
            client
                .batch_execute(&statement)
                .await
                .expect("a database for the test");
        }
    });
    name
}

/// `url` with its database replaced by `database`.
pub fn with_database(url: &str, database: &str) -> String {
    let (address, query) = url.split_once('?').unwrap_or((url, ""));
    let scheme_end = address.find("://").map_or(0, |i| i + 3);
    let base = match address[scheme_end..].find('/') {
        Some(slash) => &address[..scheme_end + slash],
        None => address,
    };
    if query.is_empty() {
        format!("{base}/{database}")
    } else {
        format!("{base}/{database}?{query}")
    }
}

/// Runs `sql` on the database of `url`, returning each row's columns as text (`None` for NULL).
pub fn query(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    with_client(url, async |client| {
        let mut rows = Vec::new();
        for message in client.simple_query(sql).await.expect("the query runs") {
            if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
                rows.push(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_owned))
                        .collect(),
                );
            }
        }
        rows
    })
}

/// What `work` makes of a new connection to the database of `url`, on a runtime of its own.
fn with_client<T>(url: &str, work: impl AsyncFnOnce(tokio_postgres::Client) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
        tokio::spawn(connection);
        work(client).await
    })
}

fn binaries() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
        .collect();
    versions.sort();
    versions.pop()
}

/// Installs Debian's `postgresql` package where the tests run as root with apt-get at hand (a fresh
/// machine, CI), once per process; `None` where that is not possible or fails.
fn install() -> Option<PathBuf> {
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(bin) = binaries() {
        return Some(bin);
    }
    if !is_root() || !status(Command::new("apt-get").arg("--version")) {
        return None;
    }
    eprintln!("installing Debian's postgresql package for the approval store's tests");
    let apt = |args: &[&str]| {
        status(
            Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    let _ = apt(&["update", "-qq"]);
    apt(&["install", "-y", "-qq", "postgresql"])
        .then(binaries)
        .flatten()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn status(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// Stops and removes the clusters of test binaries that died without their watchdog.
fn remove_leftovers() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let is_ours = dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(PREFIX));
        if !is_ours {
            continue;
        }
        // The name holds the owner's pid too: a cluster another thread is making has no owner file yet.
        let named = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n[PREFIX.len()..].split('-').next())
            .unwrap_or_default()
            .to_owned();
        let owner = fs::read_to_string(dir.join("owner")).unwrap_or(named);
        let alive = !owner.trim().is_empty() && Path::new("/proc").join(owner.trim()).exists();
        if alive {
            continue;
        }
        if let Some(pid) = fs::read_to_string(dir.join("data/postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next().map(str::to_owned))
        {
            let _ = Command::new("kill").args(["-QUIT", pid.trim()]).status();
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
