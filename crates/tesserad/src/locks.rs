//! One daemon per socket, per ledger and per GPU: each is claimed with an exclusive,
//! non-blocking `flock` on a lock file that names its holder ("pid P socket S"), so a
//! second daemon is refused with the first one's pid and socket. The kernel drops a
//! dead daemon's locks; a stopping daemon removes its lock files.

use crate::DaemonError;
use rustix::fs::{FlockOperation, flock};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A claimed lock file, held until released or dropped.
#[derive(Debug)]
pub struct InstanceLock {
    file: File,
    path: PathBuf,
}

impl InstanceLock {
    /// Claim `path` for `what` (as an error names it: "socket /run/x.sock"), writing
    /// `holder` into it. A symlink there is refused; a file of another user is locked
    /// (so that user's daemon and this one exclude each other) but not written.
    pub fn claim(path: &Path, what: &str, holder: &str) -> Result<InstanceLock, DaemonError> {
        let open = |write: bool, create: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(write).custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
            if create {
                o.create_new(true).mode(0o644);
            }
            o.open(path)
        };
        let refused = |e: std::io::Error| {
            DaemonError::Unsafe(format!(
                "{} cannot be opened ({e}; a symlink there is refused)",
                path.display()
            ))
        };
        // ours, new or left by an earlier daemon of this user, is written; another
        // user's is only read and locked
        let (file, writable) = match open(true, true) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match open(true, false) {
                Ok(f) => (f, true),
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    (open(false, false).map_err(refused)?, false)
                }
                Err(e) => return Err(refused(e)),
            },
            Err(e) => {
                return Err(DaemonError::Io {
                    what: format!("creating {}", path.display()),
                    source: e,
                });
            }
        };
        let meta = file.metadata().map_err(|source| DaemonError::Io {
            what: format!("inspecting {}", path.display()),
            source,
        })?;
        if !meta.is_file() {
            return Err(DaemonError::Unsafe(format!("{} is not a regular file", path.display())));
        }
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            let holder = std::fs::read_to_string(path).unwrap_or_default();
            return Err(DaemonError::AlreadyRunning {
                what: what.to_string(),
                holder: holder.trim().to_string(),
            });
        }
        if writable && meta.uid() == rustix::process::geteuid().as_raw() {
            let _ = file.set_len(0);
            let _ = (&file).write_all(format!("{holder}\n").as_bytes());
        }
        Ok(InstanceLock { file, path: path.to_path_buf() })
    }

    /// Remove the lock file (while still holding it) and let go.
    pub fn release(self) {
        let ours =
            self.file.metadata().is_ok_and(|m| m.uid() == rustix::process::geteuid().as_raw());
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
