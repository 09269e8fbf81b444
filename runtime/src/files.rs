//! The files toolgate writes (keys, audit logs, their checkpoint files, lockfiles), opened without
//! following a symbolic link at their name: whoever can plant a link where one will be written must
//! not choose where it is written. A link there is refused, with an error that names it; links in the
//! directories above are the directory owner's business, as for any file. A file toolgate creates
//! beside one a user names (a checkpoint file) is created new, and appended to again only while it
//! has that one name: a hard link planted there would have it write into a file kept elsewhere. That
//! is checked when it is opened and again before each append, so that a link made, or another file
//! renamed onto its name, while it is open is seen too.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Opens `path` with `options`, never through a symbolic link at its last component (`O_NOFOLLOW`,
/// and `O_CREAT | O_EXCL` refuses one too): one there, dangling or not, is an error saying so.
pub(crate) fn open(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(options, libc::O_NOFOLLOW);
    options.open(path).map_err(|error| linked(path, error))
}

/// Opens the existing file `path` that toolgate created, to append to it, as [`open`] does, refusing
/// a regular file with more than one name (hard links): one planted at `path`, to a file someone keeps
/// elsewhere, would otherwise get toolgate's writes. Create such a file with `create_new`.
#[cfg(feature = "checkpoints")]
pub(crate) fn open_own(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    let file = open(options, path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let meta = file.metadata()?;
        if meta.is_file() && meta.nlink() != 1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "it has {} names (hard links), and a file toolgate created is appended to only \
                     under its one name: a link planted there would have it write into a file kept \
                     elsewhere; remove the other names, or copy it to a file of its own",
                    meta.nlink()
                ),
            ));
        }
    }
    Ok(file)
}

/// Whether `file`, opened at `path` with [`open_own`] or created new there, is still the file `path`
/// names and has no other name, checked before each append: a hard link made since it was opened, or
/// another file renamed onto `path`, would have the write land in a file kept elsewhere, or in one no
/// folder names. An error naming which, for the caller to refuse the write as any failed one.
#[cfg(feature = "checkpoints")]
pub(crate) fn still_own(file: &File, path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let held = file.metadata()?;
        let refused = |what: String| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{what} since it was opened, and a file toolgate created is appended to only \
                     under its one name"
                ),
            )
        };
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(refused(
                    "its name names no file (removed or renamed)".to_owned(),
                ));
            }
            Err(e) => return Err(e),
            Ok(named) if (named.dev(), named.ino()) != (held.dev(), held.ino()) => {
                return Err(refused(
                    "its name names another file (one renamed or put in its place)".to_owned(),
                ));
            }
            Ok(_) => {}
        }
        if held.nlink() != 1 {
            return Err(refused(format!(
                "it has {} names (hard links), a link having been made to it",
                held.nlink()
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = (file, path);
    Ok(())
}

/// Creates `path` with `bytes`, synced, refusing an existing file or link (mode `mode` on Unix).
pub(crate) fn create_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = open(&mut options, path)?;
    file.write_all(bytes).and_then(|()| file.sync_all())
}

/// Replaces `path` with `bytes` through a new temporary file beside it and a rename, so that a reader
/// never sees half a file. A link at `path` is refused rather than replaced, a link at the temporary
/// name is never followed, and a rename never writes to where a link points.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    refuse_link(path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = path.with_file_name(name);
    create_new(&tmp, bytes, 0o644)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// An error if `path` is a symbolic link (dangling or not).
pub(crate) fn refuse_link(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(link_error(path)),
        _ => Ok(()),
    }
}

/// `error` from opening `path`, said again where `path` is a symbolic link.
fn linked(path: &Path, error: io::Error) -> io::Error {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => link_error(path),
        _ => error,
    }
}

/// The error for a link at `path`; callers name the path, as for any error of theirs.
fn link_error(path: &Path) -> io::Error {
    let target = std::fs::read_link(path)
        .map(|t| format!(" to {}", t.display()))
        .unwrap_or_default();
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "it is a symbolic link{target}, and a file is never written through a link at its name; \
             remove the link, or give the path of a file that is not one"
        ),
    )
}
