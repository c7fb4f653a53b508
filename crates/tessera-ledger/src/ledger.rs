//! The ledger's life cycle (schedGPU §4): init, pre-allocation, post-free, shutdown,
//! with the sanity check (release what dead clients hold), the integrity check (repair
//! a damaged file from the live clients' records) and waiter notification.
//!
//! Invariants, kept under the ledger file's `flock`:
//! - per GPU, granted bytes = the sum of its holder rows, and never above its capacity;
//! - a holder or waiter row is removed only by its own client or once its client's
//!   record lock is free (the client is gone, in whatever pid namespace it ran);
//! - a file that is not a sound ledger is never reset while a live client has a record:
//!   it is rebuilt from the records; a file that is not a ledger at all is refused;
//! - a sound state is not believed when it is older than one a client saw (every
//!   commit bumps its generation; a handle remembers the newest it read or wrote), nor
//!   when, at an open or after the file was replaced, it lacks memory a live client's
//!   record says it holds: it is rebuilt from the records. (An open handle that has not
//!   used the ledger since an old copy was written in place cannot tell; the next open
//!   or any holder's next request rebuilds it.)
//! - the sanity check runs when memory or a table is short, when `status` asks, and at
//!   most every [`RECHECK`] for waiters — never on the path of a request that fits.

use crate::access::Access;
pub use crate::error::LedgerError;
use crate::file::{FileError, LedgerFile, Opened};
use crate::layout::{
    CopyFault, DEFAULT_HOLDERS, DEFAULT_WAITERS, GpuRow, Header, HolderRow, MAGIC, MAX_GPUS,
    MAX_TABLE, PAGE, State, VERSION, WAIT_TIMED, WaiterRow, capacities_valid, older,
};
use crate::records::{self, ClientRecord, LedgerShape, LiveRecord, Liveness};
use rustix::thread::futex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tessera_core::Bytes;
use tessera_core::policies::memsafe::{
    NotificationPolicy, Waiter, admits_immediately, select_grants,
};

mod attach;
mod locked;

use attach::{Found, attach, examine, repair, resolve_gpus};
use locked::Locked;

/// Where a rebuild takes the ledger's configuration from when no live client has a
/// record of it.
type Fallback<'a> = &'a dyn Fn() -> Result<LedgerShape, LedgerError>;

/// Default location: in tmpfs, so the ledger lives in memory.
pub const DEFAULT_PATH: &str = "/dev/shm/tessera-ledger";

/// A waiter re-checks the ledger at least this often even if nobody wakes it, and the
/// waiters of a ledger together run the sanity check at most this often, so that a
/// holder that died silently cannot leave them asleep for long, nor can many waiters
/// burn a core checking.
pub const RECHECK: Duration = Duration::from_millis(50);

/// The records directory is cleaned of dead clients' records (those that held nothing
/// are in no row, so no sanity check meets them) at most this often, by opens.
const JANITOR_EVERY: Duration = Duration::from_secs(1);

/// How a pre-allocation waits when memory is short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Fail at once with [`LedgerError::NotAvailableNow`].
    NoWait,
    /// Wait up to this long, then fail with [`LedgerError::TimedOut`].
    Timeout(Duration),
    /// Wait until granted.
    Forever,
}

/// Where the GPUs of a new ledger come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuSource {
    /// These capacities, GPU 0 first.
    Explicit(Vec<Bytes>),
    /// Ask NVML (loaded at run time) for the devices and their memory.
    Nvml,
}

/// How to open (or create) a ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerConfig {
    /// The shared file.
    pub path: PathBuf,
    /// GPUs, used only when the ledger is created.
    pub gpus: GpuSource,
    /// Notification policy, used only when the ledger is created.
    pub policy: NotificationPolicy,
    /// This client's priority, for the priority policies; higher first.
    pub priority: u8,
    /// Who may use the ledger; checked on every open.
    pub access: Access,
    /// Holder table capacity ((client, GPU) reservations), used only when created.
    pub max_holders: u32,
    /// Waiter table capacity (requests waiting at once), used only when created.
    pub max_waiters: u32,
}

impl LedgerConfig {
    /// A private ledger at `path` with FIFO notification, priority 0 and the default
    /// table capacities.
    pub fn new(path: impl Into<PathBuf>, gpus: GpuSource) -> LedgerConfig {
        LedgerConfig {
            path: path.into(),
            gpus,
            policy: NotificationPolicy::Fifo,
            priority: 0,
            access: Access::Owner,
            max_holders: DEFAULT_HOLDERS,
            max_waiters: DEFAULT_WAITERS,
        }
    }
}

/// One GPU in a [`LedgerStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuStatus {
    /// Capacity.
    pub total: u64,
    /// Granted.
    pub used: u64,
    /// Requests waiting for it.
    pub waiting: usize,
}

/// One reservation in a [`LedgerStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The holding client's id.
    pub client: u64,
    /// Its pid as it saw it (in its own pid namespace).
    pub pid: u32,
    /// GPU.
    pub gpu: u32,
    /// Bytes.
    pub bytes: u64,
}

/// What the ledger holds, after a sanity check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerStatus {
    /// Notification policy.
    pub policy: NotificationPolicy,
    /// Per GPU.
    pub gpus: Vec<GpuStatus>,
    /// Itemised reservations.
    pub holdings: Vec<Holding>,
    /// Holder table capacity.
    pub max_holders: u32,
    /// Waiter table capacity.
    pub max_waiters: u32,
}

/// This process's state of one handle, behind its mutex: `flock` does not exclude two
/// threads using one open file, so the mutex serialises this process's threads.
#[derive(Debug)]
struct Local {
    /// Shared with threads asleep on its futex word while it is swapped for a new file.
    file: Arc<LedgerFile>,
    header: Header,
    liveness: Liveness,
    /// Body length last read, so that one `pread` usually fetches the whole state.
    body_guess: usize,
    /// The newest generation this handle read or wrote: a file older than it was
    /// replaced by an old copy.
    seen: u32,
}

/// How far a rebuilt ledger's generation jumps past the newest one its rebuilder knew
/// of, so that no handle that read the old file takes the new one for an old copy.
const GENERATION_JUMP: u32 = 1 << 20;

/// Whether `state` lacks memory a live client's record says it holds: a state older
/// than the clients (an old copy written back, or an empty ledger put in its place).
/// The other way round is normal: a notifier grants a waiter memory before the waiter
/// records it.
fn behind_records(state: &State, live: &[LiveRecord]) -> bool {
    let mut in_state: HashMap<(u64, u32), u64> = HashMap::new();
    for h in &state.holders {
        *in_state.entry((h.client, h.gpu)).or_default() += h.bytes;
    }
    live.iter().any(|r| {
        r.body.held.iter().enumerate().any(|(gpu, &held)| {
            held > in_state.get(&(r.body.client, gpu as u32)).copied().unwrap_or(0)
        })
    })
}

/// Bytes of `state`'s body, plus room for a few more rows.
fn body_len(state: &State) -> usize {
    std::mem::size_of::<crate::layout::BodyHead>()
        + (state.holders.len() + 4) * std::mem::size_of::<HolderRow>()
        + (state.waiters.len() + 4) * std::mem::size_of::<WaiterRow>()
}

/// A client's handle on the shared ledger. Operations lock the ledger file; a handle may
/// be shared between threads.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    records_dir: PathBuf,
    access: Access,
    /// The pid that opened the handle: a forked child must open its own.
    pid: u32,
    /// The pid the handle's rows and record name as their holder: the opener's own,
    /// or the program a daemon holds the handle for ([`Ledger::open_for`]), so that
    /// a refusal names the program, not the daemon.
    owner: u32,
    priority: u8,
    /// The ledger's configuration, to rebuild it if no live record has one.
    shape: LedgerShape,
    record: ClientRecord,
    local: Mutex<Local>,
    closed: bool,
}

fn policy_code(p: NotificationPolicy) -> u32 {
    NotificationPolicy::ALL.iter().position(|x| *x == p).unwrap_or(0) as u32
}

fn policy_from_code(c: u32) -> NotificationPolicy {
    NotificationPolicy::ALL.get(c as usize).copied().unwrap_or_default()
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Whether the wall-clock stamp `then` is at least `every` ago (or in the future: the
/// clock was set back).
fn due(then: u64, every: Duration) -> bool {
    now_ns().abs_diff(then) >= every.as_nanos() as u64
}

impl Ledger {
    /// Init (schedGPU §4): open the ledger at `cfg.path` — creating it from `cfg` if
    /// there is none, repairing it from the live clients' records if it is damaged —
    /// and register this client.
    pub fn open(cfg: &LedgerConfig) -> Result<Ledger, LedgerError> {
        Ledger::open_for(cfg, std::process::id())
    }

    /// [`Ledger::open`] for a daemon holding the handle on behalf of the program
    /// `owner` (its pid as the opener sees it): the handle's rows and record name that
    /// pid, so that `status` and a deadlock's refusal name the program.
    pub fn open_for(cfg: &LedgerConfig, owner: u32) -> Result<Ledger, LedgerError> {
        Ledger::attach_client(cfg, owner, None)
    }

    /// A handle on the live client `client` whose record names `owner` and is held by
    /// that program (see [`Ledger::record_descriptor`]): what a daemon that restarted
    /// uses to take back the reservations its predecessor made for the program, which
    /// the ledger kept since the program kept its record alive. The record's lock stays
    /// the program's; dropping the handle releases everything it holds, as for any.
    pub fn adopt(cfg: &LedgerConfig, client: u64, owner: u32) -> Result<Ledger, LedgerError> {
        Ledger::attach_client(cfg, owner, Some(client))
    }

    /// A descriptor of this handle's record sharing its lock: the client stays alive —
    /// its reservations held — while any process keeps it open. A daemon hands it to
    /// the program it holds the handle for.
    pub fn record_descriptor(&self) -> Result<std::os::fd::OwnedFd, LedgerError> {
        self.record.descriptor().map_err(|source| LedgerError::Io {
            what: "duplicating the record of",
            path: self.records_dir.join(self.record.client.to_string()),
            source,
        })
    }

    /// What this handle holds, per GPU (GPUs it holds nothing on left out).
    pub fn held(&self) -> Result<Vec<(u32, u64)>, LedgerError> {
        let l = self.locked()?;
        let me = self.record.client;
        Ok(l.state.holders.iter().filter(|h| h.client == me).map(|h| (h.gpu, h.bytes)).collect())
    }

    fn attach_client(
        cfg: &LedgerConfig,
        owner: u32,
        adopt: Option<u64>,
    ) -> Result<Ledger, LedgerError> {
        if !capacities_valid(cfg.max_holders, cfg.max_waiters) {
            return Err(LedgerError::BadConfig(format!(
                "table capacities must be 1..={MAX_TABLE}, got {} holders and {} waiters",
                cfg.max_holders, cfg.max_waiters
            )));
        }
        let pid = std::process::id();
        let records_dir = records::dir_for(&cfg.path);
        let fallback = || -> Result<LedgerShape, LedgerError> {
            Ok(LedgerShape {
                gpus: resolve_gpus(&cfg.gpus)?,
                policy: policy_code(cfg.policy),
                max_holders: cfg.max_holders,
                max_waiters: cfg.max_waiters,
            })
        };
        let (file, header, mut state) =
            attach(&cfg.path, &records_dir, cfg.access, &fallback, None)?;
        // from here the file is locked; every exit unlocks it
        let result = (|| {
            let shape = LedgerShape {
                gpus: state.gpus.iter().map(|g| g.total).collect(),
                policy: state.policy,
                max_holders: header.max_holders,
                max_waiters: header.max_waiters,
            };
            let io = |what, source| LedgerError::Io { what, path: records_dir.clone(), source };
            records::ensure_dir(&records_dir, cfg.access)
                .map_err(|e| dir_error(&records_dir, e))?;
            if due(state.last_janitor_ns, JANITOR_EVERY) {
                let scan = records::scan(&records_dir);
                if scan.removed > 0 {
                    tracing::debug!(removed = scan.removed, "removed dead clients' records");
                }
                state.last_janitor_ns = now_ns();
                file.write_state(&header, &state).map_err(|e| io("writing", e))?;
            }
            let record = match adopt {
                None => ClientRecord::create(&records_dir, cfg.access, owner, &shape)
                    .map_err(|e| io("creating this client's record in", e))?,
                Some(client) => ClientRecord::adopt(&records_dir, client, owner)
                    .map_err(|reason| LedgerError::NotAdoptable { client, reason })?,
            };
            Ok(Ledger {
                path: cfg.path.clone(),
                records_dir: records_dir.clone(),
                access: cfg.access,
                pid,
                owner,
                priority: cfg.priority,
                shape,
                record,
                local: Mutex::new(Local {
                    file: Arc::new(file),
                    header,
                    liveness: Liveness::default(),
                    body_guess: body_len(&state),
                    seen: state.generation,
                }),
                closed: false,
            })
        })();
        // on error the file (and its lock) is dropped with it
        if let Ok(l) = &result {
            l.local.lock().unwrap_or_else(|p| p.into_inner()).file.unlock();
        }
        result
    }

    /// Whether this process opened the handle (false in a forked child).
    pub fn opened_by_this_process(&self) -> bool {
        std::process::id() == self.pid
    }

    /// This handle's client id (its record's name).
    pub fn client_id(&self) -> u64 {
        self.record.client
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn locked(&self) -> Result<Locked<'_>, LedgerError> {
        // a forked child shares our record's lock and our open file (so our flock would
        // not exclude it) and would act under our identity: it must open its own handle
        if std::process::id() != self.pid {
            return Err(LedgerError::UsedAfterFork);
        }
        let mut local = self.local.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        local.file.lock().map_err(|source| LedgerError::Io {
            what: "locking",
            path: self.path.clone(),
            source,
        })?;
        if local.file.is_linked() {
            let found = examine(&local.file, local.body_guess);
            let state = match found {
                Found::Sound(header, state) if !older(state.generation, local.seen) => {
                    local.header = header;
                    local.body_guess = body_len(&state);
                    local.seen = state.generation;
                    Ok(state)
                }
                Found::OtherVersion(found) => {
                    Err(LedgerError::Incompatible { path: self.path.clone(), found })
                }
                found => {
                    // damaged under us, or older than what this handle last read or
                    // wrote (an old copy written over the file): whatever it holds,
                    // our and the other live clients' records say what is held
                    if let Found::Sound(_, state) = &found {
                        tracing::error!(path = %self.path.display(), found = state.generation, seen = local.seen, "the ledger file holds an older state than this client saw: rebuilding it from the live clients' records");
                    }
                    let fallback = || Ok(self.shape.clone());
                    let live = records::scan(&self.records_dir).live;
                    let generation = local.seen.wrapping_add(GENERATION_JUMP);
                    repair(&local.file, &self.path, live, &fallback, generation).map(|(h, s)| {
                        local.header = h;
                        local.seen = s.generation;
                        s
                    })
                }
            };
            return match state {
                Ok(state) => Ok(Locked { ledger: self, local, state, wake: false }),
                Err(e) => {
                    local.file.unlock();
                    Err(e)
                }
            };
        }
        // the file was unlinked or replaced: move to whatever is at the path now (made
        // from the records, ours included, if nothing is)
        local.file.unlock();
        tracing::warn!(path = %self.path.display(), "the ledger file was removed or replaced; moving to the one at its path");
        let fallback = || Ok(self.shape.clone());
        let (file, header, state) =
            attach(&self.path, &self.records_dir, self.access, &fallback, Some(local.seen))?;
        local.file = Arc::new(file);
        local.header = header;
        local.seen = state.generation;
        Ok(Locked { ledger: self, local, state, wake: false })
    }

    /// Pre-allocation (schedGPU's `preCudaMalloc`): reserve `bytes` on `gpu` before
    /// allocating them, waiting as `wait` says when they are not free.
    pub fn pre_alloc(&self, gpu: u32, bytes: u64, wait: Wait) -> Result<(), LedgerError> {
        self.pre_alloc_unless(gpu, bytes, wait, &AtomicBool::new(false))
    }

    /// [`Ledger::pre_alloc`] that gives up, leaving the queue, with
    /// [`LedgerError::Cancelled`] once `cancel` is set (seen within [`RECHECK`]): for a
    /// daemon waiting on behalf of a program that may go away meanwhile.
    pub fn pre_alloc_unless(
        &self,
        gpu: u32,
        bytes: u64,
        wait: Wait,
        cancel: &AtomicBool,
    ) -> Result<(), LedgerError> {
        // a timeout too long to represent is as good as forever
        let deadline = match wait {
            Wait::Timeout(t) => Instant::now().checked_add(t),
            _ => None,
        };
        let mut l = self.locked()?;
        let row = l.check_gpu(gpu)?;
        if bytes > row.total {
            return Err(LedgerError::ExceedsCapacity {
                gpu,
                requested: bytes,
                capacity: row.total,
            });
        }
        let me = self.record.client;
        // what this client holds counts against it: waiting for memory only it holds
        // would never end (the deadlock check below leaves the asker's own holdings
        // out), so such a wait fails at once (a request that does not wait is answered
        // at once anyway, as not available now)
        let held = l.holder_index(gpu, me).map_or(0, |i| l.state.holders[i].bytes);
        if wait != Wait::NoWait && bytes > row.total.saturating_sub(held) {
            return Err(LedgerError::NeverFits {
                gpu,
                requested: bytes,
                held,
                capacity: row.total,
            });
        }
        let mut ticket: Option<u64> = None; // our waiter row's seq, once queued
        loop {
            match ticket {
                None => {
                    // the sanity check runs only when memory or the table is short
                    // (schedGPU), and then before refusing or queueing
                    match self.try_admit(&mut l, gpu, bytes) {
                        Ok(true) => return Ok(()),
                        Ok(false) | Err(LedgerError::TableFull { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    l.sweep();
                    l.commit()?;
                    if self.try_admit(&mut l, gpu, bytes)? {
                        return Ok(());
                    }
                    if wait == Wait::NoWait {
                        return Err(LedgerError::NotAvailableNow { gpu, requested: bytes });
                    }
                    if wait == Wait::Forever
                        && let Some(holders) =
                            crate::deadlock::would_deadlock(&l.state, me, gpu, bytes)
                    {
                        return Err(LedgerError::WouldDeadlock { gpu, requested: bytes, holders });
                    }
                    if l.state.waiters.len() >= l.state.max_waiters as usize {
                        return Err(LedgerError::TableFull {
                            table: "waiter",
                            capacity: l.state.max_waiters,
                        });
                    }
                    let seq = l.state.next_seq;
                    l.state.next_seq += 1;
                    l.state.waiters.push(WaiterRow {
                        client: me,
                        gpu,
                        pid: self.owner,
                        bytes,
                        seq,
                        priority: u16::from(self.priority),
                        flags: if matches!(wait, Wait::Timeout(_)) { WAIT_TIMED } else { 0 },
                        granted: 0,
                    });
                    l.commit()?;
                    ticket = Some(seq);
                }
                Some(seq) => {
                    let mine = l.state.waiters.iter().position(|w| {
                        w.seq == seq && w.client == me && w.gpu == gpu && w.bytes == bytes
                    });
                    match mine {
                        Some(i) if l.state.waiters[i].granted != 0 => {
                            l.state.waiters.remove(i);
                            let held =
                                l.holder_index(gpu, me).map_or(0, |h| l.state.holders[h].bytes);
                            l.commit()?;
                            self.record.set(gpu as usize, held);
                            return Ok(());
                        }
                        Some(_) => {
                            // still waiting: our own notification pass, and the sanity
                            // check if no waiter ran it lately, in case the process that
                            // should have woken us died
                            let swept = due(l.state.last_sweep_ns, RECHECK);
                            if swept {
                                l.sweep();
                            }
                            l.notify_all();
                            if swept || l.wake {
                                l.commit()?;
                            }
                            let granted = l
                                .state
                                .waiters
                                .iter()
                                .any(|w| w.seq == seq && w.client == me && w.granted != 0);
                            if granted {
                                continue; // take it under the same lock
                            }
                            let cancelled = cancel.load(Ordering::Relaxed);
                            if cancelled || deadline.is_some_and(|d| Instant::now() >= d) {
                                l.state.waiters.retain(|w| !(w.seq == seq && w.client == me));
                                // leaving the queue may unblock those behind (FIFO)
                                l.notify(gpu);
                                l.commit()?;
                                return Err(if cancelled {
                                    LedgerError::Cancelled { gpu, requested: bytes }
                                } else {
                                    LedgerError::TimedOut { gpu, requested: bytes }
                                });
                            }
                        }
                        None => {
                            // the ledger was rebuilt and our request lost: queue again
                            ticket = None;
                            continue;
                        }
                    }
                }
            }
            // sleep until woken, the deadline, or the periodic re-check
            let seen = l.local.file.wake_value();
            let file = l.local.file.clone();
            drop(l);
            let mut nap = RECHECK;
            if let Some(d) = deadline {
                nap = nap.min(d.saturating_duration_since(Instant::now()));
            }
            let ts = rustix::time::Timespec {
                tv_sec: nap.as_secs() as i64,
                tv_nsec: i64::from(nap.subsec_nanos()),
            };
            if let Err(rustix::io::Errno::FAULT) =
                futex::wait(file.wake_word(), futex::Flags::empty(), seen, Some(&ts))
            {
                // the file was truncated under us; the next lock repairs it
                std::thread::sleep(nap);
            }
            l = self.locked()?;
        }
    }

    /// Wake the threads waiting for memory on this ledger (this handle's and everyone's)
    /// so that each looks again now: after a caller set the `cancel` flag of a wait
    /// ([`Ledger::pre_alloc_unless`]), that wait ends — its rows gone — at once instead
    /// of within [`RECHECK`]. Never blocks: if this handle is busy, a thread of it is
    /// looking already.
    pub fn nudge(&self) {
        if let Ok(local) = self.local.try_lock() {
            let _ = futex::wake(local.file.wake_word(), futex::Flags::empty(), i32::MAX as u32);
        }
    }

    /// Grant at once if the policy lets this request through now.
    fn try_admit(&self, l: &mut Locked<'_>, gpu: u32, bytes: u64) -> Result<bool, LedgerError> {
        let row = l.state.gpus[gpu as usize];
        let policy = policy_from_code(l.state.policy);
        let waiting: Vec<Waiter> = l
            .state
            .waiters
            .iter()
            .filter(|w| w.granted == 0 && w.gpu == gpu)
            .map(|w| Waiter {
                bytes: Bytes(w.bytes),
                priority: w.priority.min(255) as u8,
                seq: w.seq,
            })
            .collect();
        if !admits_immediately(
            policy,
            Bytes(row.total - row.used),
            Bytes(bytes),
            self.priority,
            &waiting,
        ) {
            return Ok(false);
        }
        let held = l.add_holding(gpu, self.record.client, self.owner, bytes)?;
        l.commit()?;
        self.record.set(gpu as usize, held);
        Ok(true)
    }

    /// Post-free (schedGPU's `postCudaFree`): return `bytes` on `gpu` after freeing
    /// them, and notify waiters. Freeing more than this handle holds is an error and
    /// changes nothing.
    pub fn post_free(&self, gpu: u32, bytes: u64) -> Result<(), LedgerError> {
        let mut l = self.locked()?;
        l.check_gpu(gpu)?;
        let i = l.holder_index(gpu, self.record.client);
        let held = i.map_or(0, |i| l.state.holders[i].bytes);
        if bytes > held {
            return Err(LedgerError::OverFree { gpu, held, freed: bytes });
        }
        if let Some(i) = i {
            l.state.holders[i].bytes -= bytes;
            if l.state.holders[i].bytes == 0 {
                l.state.holders.swap_remove(i);
            }
            l.state.gpus[gpu as usize].used -= bytes;
        }
        // no sanity check here: a grant to a waiter that died meanwhile is released by
        // the next check, which runs as soon as anyone is short of memory
        l.notify(gpu);
        l.commit()?;
        self.record.set(gpu as usize, held - bytes);
        Ok(())
    }

    /// The ledger as it stands, after a sanity check (so nothing is reported held by a
    /// dead client) and a clean-up of dead clients' records.
    pub fn status(&self) -> Result<LedgerStatus, LedgerError> {
        let mut l = self.locked()?;
        l.sweep();
        let scan = records::scan(&self.records_dir);
        if scan.removed > 0 {
            tracing::debug!(removed = scan.removed, "removed dead clients' records");
        }
        l.state.last_janitor_ns = now_ns();
        l.commit()?;
        Ok(l.status())
    }

    /// Shutdown (schedGPU §4): release whatever this handle still holds, notify
    /// waiters, and remove this handle's record. Dropping a handle does the same,
    /// ignoring errors.
    pub fn shutdown(mut self) -> Result<(), LedgerError> {
        self.closed = true;
        self.release_all()
    }

    fn release_all(&self) -> Result<(), LedgerError> {
        let me = self.record.client;
        let mut l = self.locked()?;
        let mut touched = vec![false; l.state.gpus.len()];
        let gpus = &mut l.state.gpus;
        l.state.holders.retain(|h| {
            if h.client == me {
                gpus[h.gpu as usize].used -= h.bytes;
                touched[h.gpu as usize] = true;
            }
            h.client != me
        });
        l.state.waiters.retain(|w| w.client != me);
        for g in (0..touched.len()).filter(|&g| touched[g]) {
            l.notify(g as u32);
        }
        l.commit()?;
        for g in 0..MAX_GPUS {
            self.record.set(g, 0);
        }
        self.record.remove();
        Ok(())
    }

    /// For tests: overwrite the state's checksum, as a writer killed mid-write would
    /// leave it.
    #[cfg(test)]
    pub(crate) fn tear_primary(&self) {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&self.path).unwrap();
        f.write_all_at(&0xdead_beefu32.to_le_bytes(), crate::layout::COPIES).unwrap();
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        // in a forked child the handle is the parent's: leave its books alone
        if !self.closed
            && std::process::id() == self.pid
            && let Err(e) = self.release_all()
        {
            tracing::warn!(error = %e, "ledger shutdown on drop failed; the sanity check will release this client's memory when it exits");
        }
    }
}

fn dir_error(dir: &Path, e: records::DirError) -> LedgerError {
    match e {
        records::DirError::Io(source) => LedgerError::Io {
            what: "preparing the records directory",
            path: dir.to_path_buf(),
            source,
        },
        records::DirError::Insecure(reason) => {
            LedgerError::Insecure { path: dir.to_path_buf(), reason }
        }
    }
}

fn file_error(path: &Path, e: FileError) -> LedgerError {
    match e {
        FileError::Io(what, source) => LedgerError::Io { what, path: path.to_path_buf(), source },
        FileError::Insecure(reason) => LedgerError::Insecure { path: path.to_path_buf(), reason },
    }
}

/// Open the ledger at `path` — creating it (from the live records, or `fallback`) if
/// there is none, repairing it if it is damaged — and return it locked, with its state.
/// Remove the ledger at `path` and its records directory if no live client uses it
/// (a daemon that stops leaves nothing behind; a ledger other programs still use
/// stays). Whether it was removed. A client opening it meanwhile finds it gone and
/// makes a new one.
pub fn remove_if_unused(path: &Path, access: Access) -> Result<bool, LedgerError> {
    let file = match LedgerFile::open(path, access).map_err(|e| file_error(path, e))? {
        Opened::File(f) => f,
        Opened::Missing => return Ok(false),
    };
    file.lock().map_err(|source| LedgerError::Io { what: "locking", path: path.into(), source })?;
    let records_dir = records::dir_for(path);
    // only a sound ledger: anything else at the path is not ours to delete
    let unused = file.is_at(path)
        && matches!(examine(&file, 4096), Found::Sound(..))
        && records::scan(&records_dir).live.is_empty();
    if unused {
        let _ = std::fs::remove_file(path);
        // only dead clients' records were there, and the scan removed them
        let _ = std::fs::remove_dir(&records_dir);
    }
    file.unlock();
    Ok(unused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_state_is_rebuilt_from_the_records() {
        let path = std::env::temp_dir().join(format!("tessera-ledger-torn-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let cfg = LedgerConfig::new(&path, GpuSource::Explicit(vec![Bytes(1000)]));
        let a = Ledger::open(&cfg).unwrap();
        a.pre_alloc(0, 400, Wait::NoWait).unwrap();
        a.tear_primary();
        let s = a.status().unwrap();
        assert_eq!(s.gpus[0].used, 400, "a's record held the last completed operation");
        let l = a.locked().unwrap();
        assert!(matches!(l.local.file.read_state(64), Some((_, Ok(_)))), "repaired on disk");
        drop(l);
        drop(a);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir_all(records::dir_for(&path));
    }
}
