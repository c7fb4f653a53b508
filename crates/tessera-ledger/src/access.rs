//! Who may use a ledger, and the checks that keep everyone else out.
//!
//! Threat model: the users of one ledger trust each other not to tamper with its files
//! (they could as well lie about what they allocate); everyone else is kept out. A
//! ledger is either private to one user ([`Access::Owner`]: files `0600`, directory
//! `0700`) or shared by the members of one group ([`Access::Group`]: `0660` / `2770`,
//! group-owned). On open, the ledger file and its records directory must be what this
//! access says — a regular file (never a symlink), owned by us (or, for a group ledger,
//! by the group) and not writable by anyone outside — or the open is refused with
//! [`LedgerError::Insecure`](crate::LedgerError::Insecure), so that a file another user
//! created first (in world-writable `/dev/shm`) is never trusted.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Open flags for every file of a ledger: never through a symlink, never inherited by
/// a program the client `exec`s.
pub(crate) fn open_flags() -> i32 {
    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32
}

/// Who may use a ledger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// Only this process's effective user.
    #[default]
    Owner,
    /// The members of this group (gid).
    Group(u32),
}

impl Access {
    /// Mode of the ledger file and the client records.
    pub(crate) fn file_mode(self) -> u32 {
        match self {
            Access::Owner => 0o600,
            Access::Group(_) => 0o660,
        }
    }

    /// Mode of the records directory (setgid for a group, so records inherit it).
    pub(crate) fn dir_mode(self) -> u32 {
        match self {
            Access::Owner => 0o700,
            Access::Group(_) => 0o2770,
        }
    }

    /// The group to give new files, if any.
    pub(crate) fn gid(self) -> Option<u32> {
        match self {
            Access::Owner => None,
            Access::Group(g) => Some(g),
        }
    }

    /// Make a file appear whole or not at all: create `tmp` exclusively with this
    /// access's mode and group (whatever the umask), let `fill` write it, then rename
    /// it to `path` unless something is there already. `Ok(None)`: `path` existed. The
    /// temporary file never outlives a failure or a lost race.
    pub(crate) fn create_atomically(
        self,
        tmp: &Path,
        path: &Path,
        fill: impl FnOnce(&File) -> io::Result<()>,
    ) -> io::Result<Option<File>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(self.file_mode())
            .custom_flags(open_flags())
            .open(tmp)?;
        let made = (|| {
            if let Some(gid) = self.gid() {
                std::os::unix::fs::fchown(&file, None, Some(gid))?;
            }
            file.set_permissions(std::fs::Permissions::from_mode(self.file_mode()))?;
            fill(&file)?;
            match rustix::fs::renameat_with(
                rustix::fs::CWD,
                tmp,
                rustix::fs::CWD,
                path,
                rustix::fs::RenameFlags::NOREPLACE,
            ) {
                Ok(()) => Ok(true),
                Err(rustix::io::Errno::EXIST) => Ok(false),
                Err(e) => Err(io::Error::from(e)),
            }
        })();
        match made {
            Ok(true) => Ok(Some(file)),
            other => {
                let _ = std::fs::remove_file(tmp);
                other.map(|_| None)
            }
        }
    }

    /// Why `meta` (of `what`, already known not to be a symlink) is not acceptable, if
    /// it is not.
    pub(crate) fn refusal(self, meta: &Metadata, want_dir: bool) -> Option<String> {
        if want_dir && !meta.is_dir() {
            return Some("is not a directory".into());
        }
        if !want_dir && !meta.is_file() {
            return Some("is not a regular file".into());
        }
        let mode = meta.permissions().mode() & 0o7777;
        let euid = rustix::process::geteuid().as_raw();
        match self {
            Access::Owner => {
                if meta.uid() != euid {
                    return Some(format!(
                        "belongs to uid {} and this process runs as uid {euid} (another user may have created it first; \
                         remove it, or share a ledger through a group)",
                        meta.uid()
                    ));
                }
                if mode & 0o022 != 0 {
                    return Some(format!("is writable by other users (mode {mode:o})"));
                }
            }
            Access::Group(gid) => {
                if meta.gid() != gid {
                    return Some(format!(
                        "belongs to group {} and the ledger's group is {gid}",
                        meta.gid()
                    ));
                }
                if mode & 0o002 != 0 {
                    return Some(format!(
                        "is writable by users outside group {gid} (mode {mode:o})"
                    ));
                }
            }
        }
        None
    }
}

/// A group given by name (looked up in `/etc/group`) or number.
pub fn resolve_group(name_or_gid: &str) -> Option<u32> {
    let s = name_or_gid.trim();
    if let Ok(gid) = s.parse() {
        return Some(gid);
    }
    let text = std::fs::read_to_string(Path::new("/etc/group")).ok()?;
    text.lines().find_map(|line| {
        let mut f = line.split(':');
        (f.next()? == s).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_resolve_by_number_and_by_name() {
        assert_eq!(resolve_group("1234"), Some(1234));
        assert_eq!(resolve_group("root"), Some(0));
        assert_eq!(resolve_group("no-such-group-here"), None);
    }

    #[test]
    fn foreign_and_open_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("tessera-access-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("f");
        std::fs::write(&f, b"x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let meta = std::fs::metadata(&f).unwrap();
        assert_eq!(Access::Owner.refusal(&meta, false), None);
        assert!(Access::Owner.refusal(&meta, true).is_some(), "a file is not a directory");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        let meta = std::fs::metadata(&f).unwrap();
        assert!(Access::Owner.refusal(&meta, false).unwrap().contains("writable"));
        assert!(Access::Group(meta.gid() + 1).refusal(&meta, false).unwrap().contains("group"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
