//! Helpers shared by the test binaries that `mod common;` them; each binary uses some of them.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

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
