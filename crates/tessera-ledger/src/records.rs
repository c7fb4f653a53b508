//! Each client's own record, and how liveness is judged.
//!
//! A client (one ledger handle) is named by a random 64-bit id and owns a small file
//! `<ledger>.clients/<id>` on which it holds an exclusive `flock` for its whole life.
//! The kernel drops that lock when the last descriptor of it closes — when the process
//! exits, however it exits — so "is this client alive" is "is its record still locked",
//! which any process can ask with a non-blocking shared lock, whatever pid namespace
//! either of them lives in. Pids are never used to judge liveness (a pid means nothing
//! outside its namespace, and a container's pid 1 is every container's).
//!
//! The record also says what the client holds on each GPU and the ledger's
//! configuration, so that a ledger file that is corrupt, zeroed, truncated or replaced is
//! rebuilt from the live clients' records (schedGPU's integrity check, extended: the
//! paper re-initialised empty, which would grant live clients' memory twice).
//!
//! A record is written by its owner only, under the ledger's file lock; others read it
//! under the same lock. The descriptor is close-on-exec, so a program the client
//! `exec`s does not keep it alive; a child it `fork`s does, until that child exits too —
//! conservative: memory is kept, never granted twice.

use crate::access::Access;
use crate::layout::MAX_GPUS;
use bytemuck::{Pod, Zeroable};
use rustix::fs::{FlockOperation, flock};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

const RECORD_MAGIC: [u8; 8] = *b"TSCLIENT";
const RECORD_VERSION: u32 = 1;
/// Prefix of a record being created (renamed to its id once locked and written).
const NEW_PREFIX: &str = ".new-";

/// A client record's contents.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub(crate) struct RecordBody {
    magic: [u8; 8],
    version: u32,
    /// The client's pid as it saw it (informational).
    pub(crate) pid: u32,
    pub(crate) client: u64,
    pub(crate) gpu_count: u32,
    pub(crate) policy: u32,
    pub(crate) max_holders: u32,
    pub(crate) max_waiters: u32,
    /// The ledger's GPU capacities.
    pub(crate) gpus: [u64; MAX_GPUS],
    /// Bytes this client holds, per GPU.
    pub(crate) held: [u64; MAX_GPUS],
}

const HELD_OFFSET: u64 = std::mem::offset_of!(RecordBody, held) as u64;

/// The ledger configuration every record carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LedgerShape {
    pub(crate) gpus: Vec<u64>,
    pub(crate) policy: u32,
    pub(crate) max_holders: u32,
    pub(crate) max_waiters: u32,
}

impl RecordBody {
    pub(crate) fn shape(&self) -> LedgerShape {
        LedgerShape {
            gpus: self.gpus[..self.gpu_count as usize].to_vec(),
            policy: self.policy,
            max_holders: self.max_holders,
            max_waiters: self.max_waiters,
        }
    }

    fn is_valid(&self, client: u64) -> bool {
        self.magic == RECORD_MAGIC
            && self.version == RECORD_VERSION
            && self.client == client
            && (1..=MAX_GPUS as u32).contains(&self.gpu_count)
            && crate::layout::capacities_valid(self.max_holders, self.max_waiters)
    }
}

/// The directory of client records for the ledger at `ledger`.
pub(crate) fn dir_for(ledger: &Path) -> PathBuf {
    let mut name = ledger.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".clients");
    ledger.with_file_name(name)
}

/// Why the records directory cannot be used.
#[derive(Debug)]
pub(crate) enum DirError {
    Io(io::Error),
    Insecure(String),
}

/// Create the records directory with `access`'s mode, or check the existing one.
pub(crate) fn ensure_dir(dir: &Path, access: Access) -> Result<(), DirError> {
    for _ in 0..2 {
        match fs::symlink_metadata(dir) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(DirError::Insecure("is a symbolic link".into()));
            }
            Ok(meta) => {
                return access.refusal(&meta, true).map_or(Ok(()), |r| Err(DirError::Insecure(r)));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match fs::DirBuilder::new().mode(access.dir_mode() & 0o777).create(dir) {
                    Ok(()) => {
                        if let Some(gid) = access.gid() {
                            std::os::unix::fs::chown(dir, None, Some(gid)).map_err(DirError::Io)?;
                        }
                        // exact mode whatever the umask (and the setgid bit)
                        fs::set_permissions(dir, fs::Permissions::from_mode(access.dir_mode()))
                            .map_err(DirError::Io)?;
                        return Ok(());
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(DirError::Io(e)),
                }
            }
            Err(e) => return Err(DirError::Io(e)),
        }
    }
    Err(DirError::Io(io::Error::other("the records directory keeps changing")))
}

/// A random 64-bit id (never 0).
pub(crate) fn random_id() -> u64 {
    let mut buf = [0u8; 8];
    // getrandom never fails on Linux >= 3.17 for 8 bytes; fall back to time and pid
    if rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty()).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        buf = (t ^ (u64::from(std::process::id()) << 40)).to_le_bytes();
    }
    u64::from_le_bytes(buf).max(1)
}

/// Open `path` read-only without following a symlink.
fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).custom_flags(crate::access::open_flags()).open(path)
}

/// Non-blocking shared lock: Ok(true) if we got it (so nobody holds it exclusively: the
/// owner is gone), Ok(false) if the owner holds it.
fn owner_gone(file: &File) -> io::Result<bool> {
    match flock(file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            let _ = flock(file, FlockOperation::Unlock);
            Ok(true)
        }
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// This client's record, locked for the client's life.
#[derive(Debug)]
pub(crate) struct ClientRecord {
    file: File,
    path: PathBuf,
    pub(crate) client: u64,
}

impl ClientRecord {
    /// Create, lock and write a new record in `dir`. It appears under its final name
    /// only once locked, so no one can see it unlocked and take its client for dead.
    pub(crate) fn create(
        dir: &Path,
        access: Access,
        pid: u32,
        shape: &LedgerShape,
    ) -> io::Result<ClientRecord> {
        let client = random_id();
        let path = dir.join(client.to_string());
        let body = RecordBody {
            magic: RECORD_MAGIC,
            version: RECORD_VERSION,
            pid,
            client,
            gpu_count: shape.gpus.len() as u32,
            policy: shape.policy,
            max_holders: shape.max_holders,
            max_waiters: shape.max_waiters,
            gpus: std::array::from_fn(|g| shape.gpus.get(g).copied().unwrap_or(0)),
            held: [0; MAX_GPUS],
        };
        // locked before it appears under its name, so nobody takes its client for dead
        let file = access.create_atomically(
            &dir.join(format!("{NEW_PREFIX}{client}")),
            &path,
            |file| {
                flock(file, FlockOperation::NonBlockingLockExclusive)?;
                file.write_all_at(bytemuck::bytes_of(&body), 0)
            },
        )?;
        // a random 64-bit id already taken is as good as impossible; say so if it happens
        let file =
            file.ok_or_else(|| io::Error::new(io::ErrorKind::AlreadyExists, "client id taken"))?;
        Ok(ClientRecord { file, path, client })
    }

    /// Take over the live record of client `client` in `dir`, whose lock its owner, the
    /// program `owner` (its pid as the record names it), holds: a daemon that restarted
    /// adopts the handle its predecessor held for that program. The lock stays the
    /// program's, so the record lives exactly as long as the program. `Err`: why not.
    pub(crate) fn adopt(dir: &Path, client: u64, owner: u32) -> Result<ClientRecord, String> {
        let path = dir.join(client.to_string());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(crate::access::open_flags())
            .open(&path)
            .map_err(|e| format!("no record of client {client}: {e}"))?;
        let mut body = RecordBody::zeroed();
        file.read_exact_at(bytemuck::bytes_of_mut(&mut body), 0)
            .map_err(|e| format!("client {client}'s record cannot be read: {e}"))?;
        if !body.is_valid(client) {
            return Err(format!("client {client}'s record is not a valid record"));
        }
        if body.pid != owner {
            return Err(format!(
                "client {client}'s record belongs to pid {}, not to pid {owner}",
                body.pid
            ));
        }
        match owner_gone(&file) {
            Ok(false) => Ok(ClientRecord { file, path, client }),
            Ok(true) => Err(format!(
                "client {client}'s record is not held by any process: its program is gone"
            )),
            Err(e) => Err(format!("client {client}'s record cannot be checked: {e}")),
        }
    }

    /// A descriptor of the record that shares its lock (a duplicate of the same open
    /// file): while any process keeps one open the client counts as alive. A daemon
    /// hands it to the program it holds the handle for, so that the program's
    /// reservations outlive a crash of the daemon and end with the program.
    pub(crate) fn descriptor(&self) -> io::Result<std::os::fd::OwnedFd> {
        Ok(self.file.try_clone()?.into())
    }

    /// Record that this client now holds `bytes` on `gpu`.
    pub(crate) fn set(&self, gpu: usize, bytes: u64) {
        if let Err(e) = self.file.write_all_at(&bytes.to_le_bytes(), HELD_OFFSET + gpu as u64 * 8) {
            tracing::warn!(error = %e, path = %self.path.display(), "could not update this client's record");
        }
    }

    /// Remove the record (the lock goes when the handle is dropped).
    pub(crate) fn remove(&self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Answers "is client `id` alive": one non-blocking `flock` on its record, through a
/// descriptor kept open between checks for up to [`CACHED`] clients (so a small node
/// checks without `open`, and a handle never holds more than a few descriptors).
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    open: HashMap<u64, File>,
}

/// Record descriptors one handle keeps open between sanity checks.
const CACHED: usize = 16;

impl Liveness {
    /// Whether client `id` (with a record in `dir`) is alive. A missing record means
    /// dead (records are removed only by their owner at shutdown or by a sweep that
    /// found them unlocked); a record that cannot be checked counts as alive, since
    /// taking a live client for dead would grant its memory twice.
    pub(crate) fn is_alive(&mut self, dir: &Path, id: u64) -> bool {
        let uncached;
        let file = match self.open.get(&id) {
            Some(f) => f,
            None => match open_nofollow(&dir.join(id.to_string())) {
                Ok(f) if self.open.len() < CACHED => self.open.entry(id).or_insert(f),
                Ok(f) => {
                    uncached = f;
                    &uncached
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
                Err(e) => {
                    tracing::warn!(client = id, error = %e, "cannot check a client's record; keeping it alive");
                    return true;
                }
            },
        };
        match owner_gone(file) {
            Ok(gone) => !gone,
            Err(e) => {
                tracing::warn!(client = id, error = %e, "cannot lock-test a client's record; keeping it alive");
                true
            }
        }
    }

    /// Close descriptors of clients not in `keep`.
    pub(crate) fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        self.open.retain(|id, _| keep(*id));
    }
}

/// A live client's record, read during recovery.
#[derive(Clone, Debug)]
pub(crate) struct LiveRecord {
    pub(crate) body: RecordBody,
}

/// What a scan of the records directory found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub(crate) live: Vec<LiveRecord>,
    pub(crate) removed: usize,
}

/// Read every live client's record and remove the records of dead clients (including
/// those that never held anything) and of creators killed before renaming theirs.
pub(crate) fn scan(dir: &Path) -> Scan {
    let mut out = Scan::default();
    let Ok(entries) = fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let id = if let Some(rest) = name.strip_prefix(NEW_PREFIX) {
            rest.parse::<u64>().ok().map(|_| None)
        } else {
            name.parse::<u64>().ok().map(Some)
        };
        let Some(id) = id else { continue }; // not ours: leave it
        let Ok(file) = open_nofollow(&entry.path()) else { continue };
        match owner_gone(&file) {
            Ok(true) => {
                if fs::remove_file(entry.path()).is_ok() {
                    out.removed += 1;
                }
            }
            Ok(false) => {
                let Some(id) = id else { continue }; // being created right now
                let mut buf = [0u8; std::mem::size_of::<RecordBody>()];
                if file.read_exact_at(&mut buf, 0).is_ok() {
                    let body: RecordBody = bytemuck::pod_read_unaligned(&buf);
                    if body.is_valid(id) {
                        out.live.push(LiveRecord { body });
                    } else {
                        tracing::warn!(client = id, "a live client's record is malformed; ignored");
                    }
                }
            }
            Err(_) => {}
        }
    }
    out.live.sort_by_key(|r| r.body.client);
    out
}
