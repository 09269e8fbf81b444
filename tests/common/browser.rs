//! A headless Chromium driven over WebDriver: Debian's `chromedriver` started on a free port, a
//! fantoccini client connected to it, and both ended when dropped, whether the test passes or panics.
//!
//! Chromium runs in a process group of its own with chromedriver, and with a profile in a temporary
//! directory, so that dropping the browser kills every process it started and removes what it wrote.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::ops::Deref;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

/// Names a directory to save the screenshots of [`Browser::screenshot`] in; none are taken without it.
pub const SCREENSHOTS_ENV: &str = "TOOLGATE_SCREENSHOTS";

/// How long chromedriver and Chromium may take to start.
const START_WITHIN: Duration = Duration::from_secs(30);

/// A headless Chromium and its chromedriver; derefs to the WebDriver client.
pub struct Browser {
    client: Option<Client>,
    driver: Child,
    profile: PathBuf,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium (1280×900), or fails the test with what to install.
    pub async fn start() -> Browser {
        let (Some(chromedriver), Some(chromium)) = programs().or_else(install).unzip() else {
            panic!(
                "the browser tests need Chromium and its WebDriver: \
                 `apt-get install chromium chromium-driver`"
            );
        };
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let profile = std::env::temp_dir().join(format!(
            "toolgate-chromium-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&profile);
        fs::create_dir_all(&profile).expect("a profile directory for Chromium");
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: Chromium's processes are chromedriver's children, all killed at once.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let mut browser = Browser {
            client: None,
            driver,
            profile,
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = browser.driver.try_wait() {
                panic!("chromedriver exited at its start: {status}");
            }
            assert!(
                started.elapsed() < START_WITHIN,
                "chromedriver did not listen on port {port} within {START_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut args = vec![
            "--headless=new".to_owned(),
            "--disable-gpu".to_owned(),
            "--window-size=1280,900".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--no-first-run".to_owned(),
            format!("--user-data-dir={}", browser.profile.display()),
        ];
        if is_root() {
            // Chromium's sandbox refuses to run as root.
            args.push("--no-sandbox".to_owned());
        }
        let capabilities = serde_json::json!({
            "goog:chromeOptions": { "binary": chromium, "args": args },
        });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!("an object")
        };
        let mut builder = ClientBuilder::new(HttpConnector::new());
        builder.capabilities(capabilities);
        let webdriver = format!("http://127.0.0.1:{port}");
        let connect = builder.connect(&webdriver);
        let client = match tokio::time::timeout(START_WITHIN, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => panic!("Chromium did not start under chromedriver: {e}"),
            Err(_) => panic!("Chromium did not start within {START_WITHIN:?}"),
        };
        browser.client = Some(client);
        browser
    }

    /// Saves a screenshot of the page as `name.png` in the directory of [`SCREENSHOTS_ENV`], when set.
    pub async fn save_screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os(SCREENSHOTS_ENV).filter(|dir| !dir.is_empty()) else {
            return;
        };
        let png = Client::screenshot(self)
            .await
            .unwrap_or_else(|e| panic!("a screenshot of {name}: {e}"));
        save_png(Path::new(&dir), name, &png);
    }

    /// Quits Chromium through WebDriver; dropping the browser then only stops chromedriver.
    pub async fn close(mut self) {
        if let Some(client) = self.client.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), client.close()).await;
        }
    }
}

impl Deref for Browser {
    type Target = Client;

    fn deref(&self) -> &Client {
        self.client.as_ref().expect("a connected browser")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The group's id is chromedriver's: every process of this browser, and nothing else.
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = fs::remove_dir_all(&self.profile);
    }
}

/// Writes `png` as `name.png` in `dir`, made if missing.
pub fn save_png(dir: &Path, name: &str, png: &[u8]) {
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
    let path = dir.join(format!("{name}.png"));
    fs::write(&path, png).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// chromedriver and Chromium, where they are installed.
fn programs() -> Option<(PathBuf, PathBuf)> {
    Some((program("chromedriver")?, program("chromium")?))
}

/// Debian's `chromium` and `chromium-driver`, installed with apt-get where they are missing and the
/// tests run as root (as the PostgreSQL tests install `postgresql`).
fn install() -> Option<(PathBuf, PathBuf)> {
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(found) = programs() {
        return Some(found);
    }
    if !is_root() {
        return None;
    }
    eprintln!("installing Debian's chromium and chromium-driver for the console's browser tests");
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    let _ = apt(&["update", "-qq"]);
    apt(&["install", "-y", "-qq", "chromium", "chromium-driver"])
        .then(programs)
        .flatten()
}

/// `/usr/bin/NAME` where Debian installs it, else `NAME` on the PATH.
fn program(name: &str) -> Option<PathBuf> {
    let debian = Path::new("/usr/bin").join(name);
    if debian.is_file() {
        return Some(debian);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}
