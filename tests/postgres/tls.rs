//! Every PostgreSQL connection over TLS, against a cluster that takes TCP connections over TLS alone
//! (`hostssl` lines only in its `pg_hba.conf`), its certificate authority, server certificate (for
//! `localhost`) and client certificate made here: each `sslmode`, each failure told by its cause, a
//! client certificate as the role's password, and a fleet of processes running against it.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use toolgate::postgres::{Fleet, PostgresSink, PostgresStore, Reader};
use toolgate::{Denied, Gate, Mode, tool};

use crate::common::postgres::{Cluster, empty_database, execute, query};
use crate::support::fleet::{CALLS, FLEET, Proc, STOP_FILE, THREADS, TIMEOUT_MS};
use crate::support::{text, toolgate, toolgate_exits};

/// The role whose `pg_hba.conf` line asks for a client certificate (`cert`), named in its subject.
const CERT_ROLE: &str = "toolgate_cert";

/// Something a gate allows at PARTIAL_AUTO, to see a call decided over TLS.
#[tool(risk = "LOW_WRITE", domain = "tls")]
fn ping() -> Result<(), Denied> {
    Ok(())
}

/// The TLS-only cluster of this binary, and the files a client names.
struct TlsServer {
    cluster: Cluster,
    /// The certificate authority that signed the server's and the client's certificates.
    ca: String,
    /// Another authority, which signed nothing the server shows.
    other_ca: String,
    client_cert: String,
    client_key: String,
}

fn authority(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

/// A certificate for `names` with the common name `common_name`, signed by `issuer`, and its key.
fn leaf(names: &[&str], common_name: &str, issuer: &Issuer<'_, KeyPair>) -> (String, String) {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn server() -> &'static TlsServer {
    static SERVER: OnceLock<TlsServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let (ca, issuer) = authority("toolgate test CA");
        let (other_ca, _) = authority("toolgate other CA");
        let (server_cert, server_key) = leaf(&["localhost"], "localhost", &issuer);
        let (client_cert, client_key) = leaf(&[], CERT_ROLE, &issuer);
        let hba = format!(
            "local all all trust\n\
             hostssl all {CERT_ROLE} 127.0.0.1/32 cert\n\
             hostssl all {CERT_ROLE} ::1/128 cert\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostssl all all ::1/128 trust\n"
        );
        let cluster = Cluster::with_files(
            &[
                "fsync=off",
                "ssl=on",
                "ssl_cert_file=server.crt",
                "ssl_key_file=server.key",
                "ssl_ca_file=root.crt",
            ],
            &[
                ("server.crt", &server_cert),
                ("server.key", &server_key),
                ("root.crt", &ca),
            ],
            Some(&hba),
        );
        let file = |name: &str, contents: &str| {
            let path = cluster.dir().join(name);
            std::fs::write(&path, contents).unwrap();
            path.display().to_string()
        };
        let server = TlsServer {
            ca: file("ca.pem", &ca),
            other_ca: file("other-ca.pem", &other_ca),
            client_cert: file("client.crt", &client_cert),
            client_key: file("client.key", &client_key),
            cluster,
        };
        execute(
            &server.cluster.socket("postgres"),
            &format!("CREATE ROLE {CERT_ROLE} LOGIN; GRANT toolgate TO {CERT_ROLE};"),
        );
        server
    })
}

impl TlsServer {
    /// A new database with the schema made over `verify-full` by `toolgate::postgres::migrate`; its
    /// name.
    fn database(&self, name: &str) -> String {
        let made = self.cluster.empty_database(name);
        let database = made.rsplit('/').next().unwrap().to_owned();
        toolgate::postgres::migrate(&self.verified(&database), "toolgate")
            .unwrap_or_else(|e| panic!("migrate over verify-full: {e}"));
        database
    }

    fn url(&self, host: &str, database: &str, params: &str) -> String {
        format!(
            "postgres://toolgate@{host}:{}/{database}?{params}",
            self.cluster.port()
        )
    }

    /// `database` at `localhost`, `verify-full` against the test authority.
    fn verified(&self, database: &str) -> String {
        self.url(
            "localhost",
            database,
            &format!("sslmode=verify-full&sslrootcert={}", self.ca),
        )
    }

    /// [`TlsServer::connections`] once they are `names` (a closed connection's backend may take a
    /// moment to leave), or as they are after 10 seconds.
    fn settled(&self, database: &str, names: &[&str]) -> Vec<(String, bool)> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let now = self.connections(database);
            let now_names: Vec<&str> = now.iter().map(|(name, _)| name.as_str()).collect();
            if now_names == names || std::time::Instant::now() > deadline {
                return now;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Each connection to `database` (this query's is to another): its application name and whether
    /// it is encrypted, by name.
    fn connections(&self, database: &str) -> Vec<(String, bool)> {
        query(
            &self.cluster.socket("postgres"),
            &format!(
                "SELECT a.application_name, s.ssl FROM pg_stat_activity a
                 JOIN pg_stat_ssl s ON s.pid = a.pid
                 WHERE a.datname = '{database}' ORDER BY 1"
            ),
        )
        .into_iter()
        .map(|row| {
            (
                row[0].clone().unwrap_or_default(),
                row[1].as_deref() == Some("t"),
            )
        })
        .collect()
    }
}

fn refusal<T: std::fmt::Debug, E: std::fmt::Display>(result: Result<T, E>) -> String {
    match result {
        Ok(connected) => panic!("connected: {connected:?}"),
        Err(error) => error.to_string(),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn every_part_connects_with_verify_full_and_each_connection_is_encrypted() {
    let tls = server();
    let database = tls.database("tls_parts");
    let url = tls.verified(&database);
    let store = PostgresStore::connect(&url).expect("the store over verify-full");
    let sink = PostgresSink::builder()
        .writer("tls-writer")
        .connect(&url)
        .expect("the sink over verify-full");
    let fleet = Fleet::connect(&url, "tls").expect("the fleet over verify-full");
    let gate = fleet
        .join(
            Gate::builder()
                .mode(Mode::PartialAuto)
                .audit(sink)
                .approval_store(store),
        )
        .unwrap();
    gate.run(ping).expect("a call decided over TLS");
    let runtime = runtime();
    let reader = runtime
        .block_on(Reader::connect(&url, "toolgate", Duration::from_secs(5)))
        .expect("the console's reader over verify-full");
    let fleets = runtime.block_on(reader.fleets()).unwrap();
    assert_eq!(fleets.len(), 1);

    let expected = [
        "toolgate",
        "toolgate-audit",
        "toolgate-console",
        "toolgate-fleet",
    ];
    let connections = tls.settled(&database, &expected);
    let names: Vec<&str> = connections.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, expected);
    assert!(
        connections.iter().all(|(_, encrypted)| *encrypted),
        "{connections:?}"
    );

    // The command, over the same URL: `migrate` and the fleet's status.
    toolgate_exits(&["migrate", "--store", &url], 0);
    let status = toolgate_exits(&["fleet", "status", "--store", &url, "--fleet", "tls"], 0);
    assert!(text(&status).contains("PARTIAL_AUTO"), "{}", text(&status));
    assert!(tls.verified(&database).contains("sslrootcert"));

    // No sslrootcert: the system's roots, which SSL_CERT_FILE names for a process.
    let system = tls.url("localhost", &database, "sslmode=verify-full");
    let with_system_roots = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["fleet", "status", "--store", &system, "--fleet", "tls"])
        .env("SSL_CERT_FILE", &tls.ca)
        .env_remove("SSL_CERT_DIR")
        .output()
        .unwrap();
    assert_eq!(
        with_system_roots.status.code(),
        Some(0),
        "{}",
        text(&with_system_roots)
    );
    drop(gate);
    drop(fleet);
}

#[test]
fn verify_ca_checks_the_chain_not_the_name_and_require_checks_nothing() {
    let tls = server();
    let database = tls.database("tls_modes");
    // verify-ca: by address, which the certificate does not name.
    let by_address = |params: &str| tls.url("127.0.0.1", &database, params);
    let store = PostgresStore::connect(&by_address(&format!(
        "sslmode=verify-ca&sslrootcert={}",
        tls.ca
    )))
    .expect("verify-ca does not check the name");
    drop(store);
    assert_eq!(
        refusal(PostgresStore::connect(&by_address(&format!(
            "sslmode=verify-ca&sslrootcert={}",
            tls.other_ca
        )))),
        format!(
            "unavailable: the server's certificate is not signed by a certificate authority of \
             sslrootcert {} (sslmode=verify-ca)",
            tls.other_ca
        )
    );
    // require: encrypted, the certificate unchecked, unless a root file is named (then as verify-ca).
    let store = PostgresStore::connect(&by_address("sslmode=require")).expect("require");
    assert_eq!(
        tls.settled(&database, &["toolgate"]),
        [("toolgate".to_owned(), true)]
    );
    drop(store);
    assert_eq!(
        refusal(PostgresStore::connect(&by_address(&format!(
            "sslmode=require&sslrootcert={}",
            tls.other_ca
        )))),
        format!(
            "unavailable: the server's certificate is not signed by a certificate authority of \
             sslrootcert {} (sslmode=require)",
            tls.other_ca
        )
    );
    // No sslmode is prefer: encrypted when the server offers TLS.
    let store = PostgresStore::connect(&by_address("application_name=preferred")).unwrap();
    assert_eq!(
        tls.settled(&database, &["preferred"]),
        [("preferred".to_owned(), true)]
    );
    drop(store);
}

#[test]
fn each_refusal_names_its_cause() {
    let tls = server();
    let database = tls.database("tls_refusals");
    let verified = |host: &str, ca: &str| {
        tls.url(
            host,
            &database,
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        )
    };

    // A host name the certificate does not hold, through each part and the command.
    let wrong_name = "the server's certificate is not valid for the host name 127.0.0.1 (it names \
                      localhost): sslmode=verify-full checks that the certificate names the host \
                      connected to";
    let by_address = verified("127.0.0.1", &tls.ca);
    assert_eq!(
        refusal(PostgresStore::connect(&by_address)),
        format!("unavailable: {wrong_name}")
    );
    assert_eq!(
        refusal(PostgresSink::connect(&by_address)),
        format!("unavailable: the audit trail: {wrong_name}")
    );
    assert_eq!(
        refusal(Fleet::connect(&by_address, "tls")),
        format!("unavailable: the fleet: {wrong_name}")
    );
    assert_eq!(
        refusal(runtime().block_on(Reader::connect(
            &by_address,
            "toolgate",
            Duration::from_secs(5)
        ))),
        format!("unavailable: {wrong_name}")
    );
    assert_eq!(
        refusal(toolgate::postgres::migrate(&by_address, "toolgate")),
        format!("unavailable: {wrong_name}")
    );
    let status = toolgate(&["fleet", "status", "--store", &by_address, "--fleet", "tls"]);
    assert_ne!(status.status.code(), Some(0));
    assert!(text(&status).contains(wrong_name), "{}", text(&status));

    // A certificate authority that signed nothing the server shows; the system's roots, which do
    // not hold the test's authority.
    assert_eq!(
        refusal(PostgresStore::connect(&verified(
            "localhost",
            &tls.other_ca
        ))),
        format!(
            "unavailable: the server's certificate is not signed by a certificate authority of \
             sslrootcert {} (sslmode=verify-full)",
            tls.other_ca
        )
    );
    let system = tls.url("localhost", &database, "sslmode=verify-full");
    let no_roots = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["fleet", "status", "--store", &system, "--fleet", "tls"])
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .output()
        .unwrap();
    assert!(
        text(&no_roots).contains(
            "the server's certificate is not signed by a certificate authority of the system's \
             roots (sslmode=verify-full)"
        ),
        "{}",
        text(&no_roots)
    );

    // A client that sends no TLS, to a server that takes TLS connections alone.
    assert_eq!(
        refusal(PostgresStore::connect(&tls.url(
            "127.0.0.1",
            &database,
            "sslmode=disable"
        ))),
        format!(
            "unavailable: the server takes only encrypted connections (no pg_hba.conf entry for \
             host \"127.0.0.1\", user \"toolgate\", database \"{database}\", no encryption), and \
             this one was not: set sslmode=verify-full"
        )
    );

    // require, against a server without TLS.
    let plain = empty_database("tls_plain");
    assert_eq!(
        refusal(PostgresStore::connect(&format!("{plain}?sslmode=require"))),
        "unavailable: the server at 127.0.0.1 does not offer TLS, and sslmode=require needs it"
    );
    assert_eq!(
        refusal(toolgate::postgres::migrate(
            &format!("{plain}?sslmode=verify-full&sslrootcert={}", tls.ca),
            "toolgate"
        )),
        "unavailable: the server at 127.0.0.1 does not offer TLS, and sslmode=verify-full needs it"
    );
}

#[test]
fn a_client_certificate_logs_in_the_role_it_names() {
    let tls = server();
    let database = tls.database("tls_client_cert");
    let as_cert_role = |params: &str| {
        format!(
            "postgres://{CERT_ROLE}@localhost:{}/{database}?sslmode=verify-full&sslrootcert={}{params}",
            tls.cluster.port(),
            tls.ca
        )
    };
    let store = PostgresStore::connect(&as_cert_role(&format!(
        "&sslcert={}&sslkey={}",
        tls.client_cert, tls.client_key
    )))
    .expect("the client certificate logs in");
    drop(store);
    let refused = refusal(PostgresStore::connect(&as_cert_role("")));
    assert!(
        refused.starts_with("unavailable: the server refused the connection: ")
            && refused.ends_with("(28000)")
            && refused.contains("certificate"),
        "{refused}"
    );
    // The key of another certificate.
    let (_, issuer) = authority("a third CA");
    let (_, stray_key) = leaf(&[], CERT_ROLE, &issuer);
    let stray = tls.cluster.dir().join("stray.key");
    std::fs::write(&stray, stray_key).unwrap();
    let refused = refusal(PostgresStore::connect(&as_cert_role(&format!(
        "&sslcert={}&sslkey={}",
        tls.client_cert,
        stray.display()
    ))));
    assert!(
        refused.starts_with(&format!(
            "unavailable: not configured: sslkey {} is not the key of sslcert {}",
            stray.display(),
            tls.client_cert
        )),
        "{refused}"
    );
}

#[test]
fn a_fleet_of_processes_runs_against_a_tls_only_server() {
    if std::env::var(crate::support::fleet::ROLE).is_ok() {
        return;
    }
    let tls = server();
    let database = tls.database("tls_fleet");
    let url = tls.verified(&database);
    let scratch = crate::common::Scratch::new("tls-fleet");
    let stop: PathBuf = scratch.path("stop");
    let member = || {
        Proc::spawn(
            "member",
            &url,
            &[
                (FLEET, "tls".into()),
                (STOP_FILE, stop.display().to_string()),
                (TIMEOUT_MS, "30000".into()),
            ],
        )
    };
    let mut members = [member(), member()];
    for member in &mut members {
        assert_eq!(member.expect("ready"), "PARTIAL_AUTO");
    }
    let mut writer = Proc::spawn(
        "writer",
        &url,
        &[
            (THREADS, "2".into()),
            (CALLS, "50".into()),
            (TIMEOUT_MS, "30000".into()),
        ],
    );
    assert_eq!(writer.expect("done "), "100");
    writer.wait();
    let connections = tls.settled(&database, &["toolgate-fleet", "toolgate-fleet"]);
    assert_eq!(
        connections
            .iter()
            .filter(|(name, _)| name == "toolgate-fleet")
            .count(),
        2,
        "{connections:?}"
    );
    assert!(connections.iter().all(|(_, encrypted)| *encrypted));

    toolgate_exits(
        &[
            "fleet", "lower", "--store", &url, "--fleet", "tls", "--to", "SHADOW", "--by", "ana",
            "--reason", "over TLS",
        ],
        0,
    );
    for member in &mut members {
        assert!(member.expect("mode ").starts_with("SHADOW "));
    }
    std::fs::write(&stop, "").unwrap();
    for mut member in members {
        assert_eq!(member.expect("result "), "ran_after_refusal=0");
        member.wait();
    }
    toolgate_exits(&["audit", "verify", &url], 0);
}

/// Whether connecting with `url` connected: each part that takes a URL (the store, the trail, the
/// fleet) and `migrate`; the parts that connected.
fn connected_parts(url: &str) -> Vec<&'static str> {
    let mut parts = Vec::new();
    if PostgresStore::connect(url).is_ok() {
        parts.push("store");
    }
    if PostgresSink::connect(url).is_ok() {
        parts.push("trail");
    }
    if Fleet::connect(url, "tls").is_ok() {
        parts.push("fleet");
    }
    if toolgate::postgres::migrate(url, "toolgate").is_ok() {
        parts.push("migrate");
    }
    parts
}

/// a4_t1. The attack: a URL whose `sslmode` asks for TLS but is written so that one reader of it may
/// take another mode: named twice with the stronger last (libpq takes the last), in capitals or
/// another spelling libpq refuses, percent-encoded in its value or its key (libpq decodes both), and
/// the key-value form. Against a server without TLS. Asserted (SECURITY.md: every connection "is
/// encrypted and checked as its URL's `sslmode` says"): no part connects in the clear.
#[test]
fn a4_t1_an_sslmode_asking_for_tls_in_another_spelling_never_connects_in_the_clear() {
    let plain = crate::common::postgres::database("a4_t1_plain");
    let (address, database) = plain.rsplit_once('/').unwrap();
    let port = address.rsplit_once(':').unwrap().1;
    assert_eq!(
        connected_parts(&format!("{plain}?sslmode=prefer")),
        ["store", "trail", "fleet", "migrate"],
        "the plain server takes connections in the clear"
    );
    let mut failures = Vec::new();
    for query in [
        "sslmode=prefer&sslmode=require",
        "sslmode=disable&sslmode=verify-full",
        "sslmode=REQUIRE",
        "sslmode=Verify-Full",
        "sslmode=verify_full",
        "sslmode=require%20",
        "sslmode=requir%65",
        "ssl%6dode=require",
        "sslmode=verify-ca&sslmode=prefer&sslmode=require",
    ] {
        let url = format!("{plain}?{query}");
        let parts = connected_parts(&url);
        if !parts.is_empty() {
            failures.push(format!("{query}: {parts:?} connected in the clear"));
        }
    }
    let key_value =
        format!("host=127.0.0.1 port={port} user=toolgate dbname={database} sslmode=require");
    let parts = connected_parts(&key_value);
    if !parts.is_empty() {
        failures.push(format!("{key_value}: {parts:?} connected in the clear"));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a4_t2. The attack: `sslmode=require` (or `verify-ca`) with a `sslrootcert` that names no
/// certificate: a file that does not exist, an empty file, a file of no PEM, a folder. Against the
/// TLS server. Asserted (docs/fleets.md: `require` with `sslrootcert=FILE` is as `verify-ca`): no
/// part connects; a root file that holds no root is not taken for none given.
#[test]
fn a4_t2_a_root_file_that_holds_no_root_is_not_taken_for_none() {
    let tls = server();
    let database = tls.database("a4_t2");
    let dir = tls.cluster.dir();
    let empty = dir.join("a4-empty.pem");
    std::fs::write(&empty, "").unwrap();
    let garbage = dir.join("a4-garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let folder = dir.join("a4-folder");
    let _ = std::fs::create_dir(&folder);
    let missing = dir.join("a4-missing.pem");
    let good = tls.url(
        "localhost",
        &database,
        &format!("sslmode=verify-full&sslrootcert={}", tls.ca),
    );
    assert_eq!(
        connected_parts(&good),
        ["store", "trail", "fleet", "migrate"]
    );
    let mut failures = Vec::new();
    for mode in ["require", "verify-ca", "verify-full"] {
        for root in [&missing, &empty, &garbage, &folder] {
            let url = tls.url(
                "localhost",
                &database,
                &format!("sslmode={mode}&sslrootcert={}", root.display()),
            );
            let parts = connected_parts(&url);
            if !parts.is_empty() {
                failures.push(format!(
                    "sslmode={mode} sslrootcert={}: {parts:?} connected, the certificate unchecked",
                    root.display()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a4_t3. The attack: `sslrootcert=system` with a mode weaker than `verify-full` (`require`,
/// `verify-ca`, `prefer`), against a server whose certificate no root of the system's store signed.
/// Asserted (docs/fleets.md: `system`, "as in libpq, needs `verify-full`"): no part connects, the
/// certificate unchecked.
#[test]
fn a4_t3_the_system_s_roots_with_a_weaker_mode_check_or_refuse() {
    let tls = server();
    let database = tls.database("a4_t3");
    let mut failures = Vec::new();
    for mode in ["prefer", "require", "verify-ca"] {
        let url = tls.url(
            "localhost",
            &database,
            &format!("sslmode={mode}&sslrootcert=system"),
        );
        let parts = connected_parts(&url);
        if !parts.is_empty() {
            failures.push(format!(
                "sslmode={mode} sslrootcert=system: {parts:?} connected, the certificate unchecked"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
