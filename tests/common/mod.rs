//! Helpers shared by the test binaries that `mod common;` them; each binary uses some of them.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

#[cfg(feature = "postgres")]
pub mod postgres;

/// A directory under Cargo's scratch space, named for the test binary, the calling file and the process,
/// removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    #[track_caller]
    pub fn new(name: &str) -> Scratch {
        let file = Path::new(std::panic::Location::caller().file());
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("test");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{}-{stem}-{}-{name}",
            env!("CARGO_CRATE_NAME"),
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// The directory itself.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// `name` inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Serializes the tests of one binary that share process-wide state (the counters of their tools, the
/// allocator's count); a test that panicked while holding it leaves it usable.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The binary of the example `name` (whose source is `source`, from the crate root), built with
/// `features` if it is missing or older than its source, next to the calling test binary:
/// `target/<profile>/deps/..` -> `target/<profile>/examples`.
pub fn example(name: &str, source: &str, features: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary is in target/<profile>/deps");
    let path = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
    let modified = |path: &Path| path.metadata().and_then(|m| m.modified()).ok();
    let stale = match (modified(&path), modified(&source)) {
        (Some(built), Some(source)) => built < source,
        _ => true,
    };
    if stale {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = std::process::Command::new(cargo);
        command.current_dir(env!("CARGO_MANIFEST_DIR")).args([
            "build",
            "--example",
            name,
            "--features",
            features,
        ]);
        if let Some(target_dir) = profile_dir.parent() {
            command.arg("--target-dir").arg(target_dir);
        }
        match profile_dir.file_name().and_then(|name| name.to_str()) {
            Some("debug") | None => {}
            Some("release") => {
                command.arg("--release");
            }
            Some(profile) => {
                command.args(["--profile", profile]);
            }
        }
        let status = command.status().expect("cargo runs");
        assert!(status.success(), "building the {name} example failed");
    }
    assert!(path.is_file(), "no example binary at {}", path.display());
    path
}
