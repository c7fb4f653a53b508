//! The ledger's life cycle (schedGPU §4): init, pre-allocation, post-free, shutdown,
//! with the sanity check, the integrity check and waiter notification.

use crate::layout::{GpuRow, HolderRow, MAGIC, MAX_GPUS, State, VERSION, WaiterRow};
use crate::process::ProcessId;
use crate::records::{self, ClientRecord};
use crate::shm::Mapping;
use rustix::fs::{FlockOperation, flock};
use rustix::thread::futex;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tessera_core::Bytes;
use tessera_core::policies::memsafe::{
    NotificationPolicy, Waiter, admits_immediately, select_grants,
};

/// Default location: in tmpfs, so the ledger lives in memory.
pub const DEFAULT_PATH: &str = "/dev/shm/tessera-ledger";

/// A waiter re-checks the ledger at least this often even if nobody wakes it, so that a
/// notifier killed mid-way or a holder that died silently cannot leave it asleep.
const RECHECK: Duration = Duration::from_millis(50);

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
}

/// Errors a client can act on; each has a stable C error code (see `ffi`).
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Non-blocking request and the memory is not free now.
    #[error("{requested} bytes are not available now on GPU {gpu}")]
    NotAvailableNow {
        /// GPU.
        gpu: u32,
        /// Bytes asked for.
        requested: u64,
    },
    /// The request waited its whole timeout.
    #[error("timed out waiting for {requested} bytes on GPU {gpu}")]
    TimedOut {
        /// GPU.
        gpu: u32,
        /// Bytes asked for.
        requested: u64,
    },
    /// More than the GPU's total memory: can never be granted.
    #[error("{requested} bytes exceed GPU {gpu}'s total memory of {capacity} bytes")]
    ExceedsCapacity {
        /// GPU.
        gpu: u32,
        /// Bytes asked for.
        requested: u64,
        /// The GPU's capacity.
        capacity: u64,
    },
    /// No such GPU in this ledger.
    #[error("GPU {gpu} does not exist (the ledger has {count})")]
    NoSuchGpu {
        /// GPU asked for.
        gpu: u32,
        /// GPUs in the ledger.
        count: u32,
    },
    /// Freeing more than this client holds; nothing was changed.
    #[error("cannot free {freed} bytes on GPU {gpu}: this client holds {held}")]
    OverFree {
        /// GPU.
        gpu: u32,
        /// Bytes this client holds there.
        held: u64,
        /// Bytes it tried to free.
        freed: u64,
    },
    /// The ledger's tables are full (too many holders or waiters).
    #[error("the ledger's {0} table is full")]
    TableFull(&'static str),
    /// The ledger could not be created: no GPU description.
    #[error("no GPUs to describe: {0}")]
    NoGpus(String),
    /// The file belongs to another layout version.
    #[error(
        "{path} holds an incompatible ledger (layout version {found}, this library reads {VERSION})"
    )]
    Incompatible {
        /// The file.
        path: PathBuf,
        /// Version found.
        found: u32,
    },
    /// The handle was opened by the parent of this (forked) process.
    #[error("this ledger handle was opened before fork(); open a new one in the child")]
    UsedAfterFork,
    /// An I/O error on the ledger's files.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
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
    /// The holder.
    pub process: ProcessId,
    /// Its ledger handle.
    pub handle: u32,
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
}

static NEXT_HANDLE: AtomicU32 = AtomicU32::new(1);

/// A client's handle on the shared ledger. Operations lock the ledger file; a handle may
/// be shared between threads.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    file: File,
    map: Mapping,
    me: ProcessId,
    handle: u32,
    priority: u8,
    /// GPU capacities and policy, to rebuild the ledger if both copies are corrupt.
    gpus: Vec<u64>,
    policy: NotificationPolicy,
    records_dir: PathBuf,
    /// Serialises this process's threads: `flock` does not exclude two threads using one
    /// open file. Also holds this handle's client record.
    local: Mutex<ClientRecord>,
    closed: bool,
}

fn policy_code(p: NotificationPolicy) -> u32 {
    NotificationPolicy::ALL.iter().position(|x| *x == p).unwrap_or(0) as u32
}

fn policy_from_code(c: u32) -> NotificationPolicy {
    NotificationPolicy::ALL.get(c as usize).copied().unwrap_or_default()
}

fn fresh_state(gpus: &[u64], policy: NotificationPolicy) -> State {
    let mut s = State {
        magic: MAGIC,
        version: VERSION,
        gpu_count: gpus.len() as u32,
        policy: policy_code(policy),
        ..State::default()
    };
    for (row, total) in s.gpus.iter_mut().zip(gpus) {
        *row = GpuRow { total: *total, used: 0 };
    }
    s
}

/// What the caller of [`Ledger::locked`] finds.
struct Locked<'a> {
    ledger: &'a Ledger,
    state: State,
    record: MutexGuard<'a, ClientRecord>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = flock(&self.ledger.file, FlockOperation::Unlock);
    }
}

impl Locked<'_> {
    fn commit(&self) {
        self.ledger.map.store(&self.state);
    }

    fn holder_index(&self, gpu: u32, me: ProcessId, handle: u32) -> Option<usize> {
        self.state.holders.iter().position(|h| {
            h.in_use != 0
                && h.gpu == gpu
                && h.pid == me.pid
                && h.start_time == me.start_time
                && h.handle == handle
        })
    }

    fn add_holding(
        &mut self,
        gpu: u32,
        id: ProcessId,
        handle: u32,
        bytes: u64,
    ) -> Result<u64, LedgerError> {
        let i = match self.holder_index(gpu, id, handle) {
            Some(i) => i,
            None => {
                let i = self
                    .state
                    .holders
                    .iter()
                    .position(|h| h.in_use == 0)
                    .ok_or(LedgerError::TableFull("holder"))?;
                self.state.holders[i] = HolderRow {
                    in_use: 1,
                    gpu,
                    pid: id.pid,
                    handle,
                    start_time: id.start_time,
                    bytes: 0,
                };
                i
            }
        };
        self.state.holders[i].bytes += bytes;
        self.state.gpus[gpu as usize].used += bytes;
        Ok(self.state.holders[i].bytes)
    }

    /// The sanity check (schedGPU §3): release what dead processes hold, drop their
    /// waiting requests and their record files. Returns whether the ledger changed (the
    /// caller commits and runs the notification policy).
    fn sweep(&mut self) -> bool {
        let mut alive: BTreeMap<ProcessId, bool> = BTreeMap::new();
        let mut is_alive = |pid, start_time| {
            *alive.entry(ProcessId { pid, start_time }).or_insert_with_key(|id| id.is_alive())
        };
        let mut changed = false;
        for h in self.state.holders.iter_mut().filter(|h| h.in_use != 0) {
            if !is_alive(h.pid, h.start_time) {
                tracing::info!(
                    pid = h.pid,
                    gpu = h.gpu,
                    bytes = h.bytes,
                    "released memory of a dead process"
                );
                self.state.gpus[h.gpu as usize].used -= h.bytes;
                let _ = std::fs::remove_file(records::file_for(
                    &self.ledger.records_dir,
                    ProcessId { pid: h.pid, start_time: h.start_time },
                    h.handle,
                ));
                *h = HolderRow::default();
                changed = true;
            }
        }
        for w in self.state.waiters.iter_mut().filter(|w| w.in_use != 0) {
            if !is_alive(w.pid, w.start_time) {
                *w = WaiterRow::default();
                changed = true;
            }
        }
        changed
    }

    /// Grant memory on `gpu` to waiters as the notification policy decides. Returns
    /// whether anyone was granted (and so must be woken).
    fn notify(&mut self, gpu: u32) -> bool {
        let row = self.state.gpus[gpu as usize];
        let idx: Vec<usize> = (0..self.state.waiters.len())
            .filter(|&i| {
                let w = &self.state.waiters[i];
                w.in_use != 0 && w.granted == 0 && w.gpu == gpu
            })
            .collect();
        let views: Vec<Waiter> = idx
            .iter()
            .map(|&i| {
                let w = &self.state.waiters[i];
                Waiter { bytes: Bytes(w.bytes), priority: w.priority.min(255) as u8, seq: w.seq }
            })
            .collect();
        let policy = policy_from_code(self.state.policy);
        let mut any = false;
        for k in select_grants(policy, Bytes(row.total - row.used), &views) {
            let w = self.state.waiters[idx[k]];
            let id = ProcessId { pid: w.pid, start_time: w.start_time };
            if self.add_holding(gpu, id, w.handle, w.bytes).is_ok() {
                self.state.waiters[idx[k]].granted = 1;
                any = true;
            }
        }
        any
    }

    fn notify_all(&mut self) -> bool {
        let mut any = false;
        for g in 0..self.state.gpu_count {
            any |= self.notify(g);
        }
        any
    }

    fn check_gpu(&self, gpu: u32) -> Result<GpuRow, LedgerError> {
        if gpu >= self.state.gpu_count {
            return Err(LedgerError::NoSuchGpu { gpu, count: self.state.gpu_count });
        }
        Ok(self.state.gpus[gpu as usize])
    }
}

impl Ledger {
    /// Init (schedGPU §4): map the ledger at `cfg.path`, creating it from `cfg.gpus` if it
    /// does not exist, and check its integrity.
    pub fn open(cfg: &LedgerConfig) -> Result<Ledger, LedgerError> {
        let io = |what, source| LedgerError::Io { what, path: cfg.path.clone(), source };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&cfg.path)
            .map_err(|e| io("opening", e))?;
        lock_file(&file).map_err(|e| io("locking", e))?;
        let opened = Self::open_locked(cfg, file);
        if let Ok(ledger) = &opened {
            let _ = flock(&ledger.file, FlockOperation::Unlock);
        }
        opened
    }

    fn open_locked(cfg: &LedgerConfig, file: File) -> Result<Ledger, LedgerError> {
        let io = |what, source| LedgerError::Io { what, path: cfg.path.clone(), source };
        let map = Mapping::new(&file).map_err(|e| io("mapping", e))?;
        let me = ProcessId::current().map_err(|e| io("identifying this process for", e))?;
        let records_dir = records::dir_for(&cfg.path);
        let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
        let (primary, pcrc, backup, bcrc) = map.load();
        let fresh = primary.magic == [0; 8] && backup.magic == [0; 8];
        let (gpus, policy) = if fresh {
            (resolve_gpus(&cfg.gpus)?, cfg.policy)
        } else {
            let sound = |s: &State, crc: u32| s.crc() == crc && s.is_consistent();
            if !sound(&primary, pcrc) && !sound(&backup, bcrc) {
                // a file of another layout version has another size, so its checksum
                // cannot match ours: refuse on the version field alone, never overwrite
                if let Some(s) = [&primary, &backup]
                    .into_iter()
                    .find(|s| s.magic == MAGIC && s.version != VERSION)
                {
                    return Err(LedgerError::Incompatible {
                        path: cfg.path.clone(),
                        found: s.version,
                    });
                }
            }
            let good = [(&primary, pcrc), (&backup, bcrc)]
                .into_iter()
                .find(|(s, c)| s.crc() == *c && s.is_consistent());
            match good {
                Some((s, _)) => (
                    s.gpus[..s.gpu_count as usize].iter().map(|g| g.total).collect(),
                    policy_from_code(s.policy),
                ),
                // both copies bad: the GPU description must come from the config
                None => (resolve_gpus(&cfg.gpus)?, cfg.policy),
            }
        };
        // created only once nothing can fail, so that a refused open leaves no file
        let record = ClientRecord::open(&records_dir, me, handle)
            .map_err(|e| io("creating the client record beside", e))?;
        let ledger = Ledger {
            path: cfg.path.clone(),
            file,
            map,
            me,
            handle,
            priority: cfg.priority,
            gpus,
            policy,
            records_dir,
            local: Mutex::new(record),
            closed: false,
        };
        if fresh {
            ledger.map.store(&fresh_state(&ledger.gpus, ledger.policy));
            tracing::info!(path = %cfg.path.display(), gpus = ?ledger.gpus, policy = ?ledger.policy, "created ledger");
        } else {
            let _ = ledger.verified_state(); // the integrity check, repairing if needed
        }
        Ok(ledger)
    }

    /// This handle's process identity.
    pub fn process(&self) -> ProcessId {
        self.me
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The integrity check: the primary copy if sound; else the backup; else a ledger
    /// rebuilt from the live clients' own records. Writes back whatever it repaired.
    /// Call with the file lock held.
    fn verified_state(&self) -> State {
        let (primary, pcrc, backup, bcrc) = self.map.load();
        if primary.crc() == pcrc && primary.is_consistent() {
            if backup != primary || bcrc != pcrc {
                self.map.store(&primary); // a writer died between the copies
            }
            return primary;
        }
        if backup.crc() == bcrc && backup.is_consistent() {
            tracing::warn!(path = %self.path.display(), "ledger primary copy corrupt; restored from the backup");
            self.map.store(&backup);
            return backup;
        }
        let mut state = fresh_state(&self.gpus, self.policy);
        // tickets still held by waiting threads must not be handed out again
        state.next_seq = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1 << 40, |d| d.as_nanos() as u64);
        let mut clients = 0;
        let mut dropped = 0u64;
        for (id, held) in records::live_records(&self.records_dir) {
            clients += 1;
            for (gpu, &bytes) in held.iter().enumerate().take(self.gpus.len()) {
                let (pid_handle, bytes) = (id, bytes);
                if bytes == 0 {
                    continue;
                }
                let row = &mut state.gpus[gpu];
                let slot = state.holders.iter().position(|h| h.in_use == 0);
                match slot {
                    Some(i) if row.used + bytes <= row.total => {
                        row.used += bytes;
                        state.holders[i] = HolderRow {
                            in_use: 1,
                            gpu: gpu as u32,
                            pid: pid_handle.process.pid,
                            handle: pid_handle.handle,
                            start_time: pid_handle.process.start_time,
                            bytes,
                        };
                    }
                    _ => dropped += bytes,
                }
            }
        }
        tracing::error!(
            path = %self.path.display(),
            clients,
            dropped_bytes = dropped,
            "ledger and its backup are corrupt: rebuilt from the records of {clients} live clients; \
             waiting requests were lost (their clients re-queue), and {dropped} recorded bytes could not be placed"
        );
        self.map.store(&state);
        state
    }

    fn locked(&self) -> Result<Locked<'_>, LedgerError> {
        // a forked child shares our open file description (so our flock would not exclude
        // it) and would act under our identity: it must open its own handle
        if std::process::id() != self.me.pid {
            return Err(LedgerError::UsedAfterFork);
        }
        let record = self.local.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        lock_file(&self.file).map_err(|source| LedgerError::Io {
            what: "locking",
            path: self.path.clone(),
            source,
        })?;
        let state = self.verified_state();
        Ok(Locked { ledger: self, state, record })
    }

    fn wake_all(&self) {
        let word = self.map.wake_word();
        word.fetch_add(1, Ordering::SeqCst);
        let _ = futex::wake(word, futex::Flags::empty(), i32::MAX as u32);
    }

    /// Pre-allocation (schedGPU's `preCudaMalloc`): reserve `bytes` on `gpu` before
    /// allocating them, waiting as `wait` says when they are not free.
    pub fn pre_alloc(&self, gpu: u32, bytes: u64, wait: Wait) -> Result<(), LedgerError> {
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
        let mut ticket: Option<u64> = None; // our waiter row's seq, once queued
        loop {
            match ticket {
                None => {
                    if self.try_admit(&mut l, gpu, bytes)? {
                        return Ok(());
                    }
                    // the sanity check, before waiting
                    if l.sweep() {
                        let woke = l.notify_all();
                        l.commit();
                        if woke {
                            self.wake_all();
                        }
                        if self.try_admit(&mut l, gpu, bytes)? {
                            return Ok(());
                        }
                    }
                    if wait == Wait::NoWait {
                        return Err(LedgerError::NotAvailableNow { gpu, requested: bytes });
                    }
                    let slot = l
                        .state
                        .waiters
                        .iter()
                        .position(|w| w.in_use == 0)
                        .ok_or(LedgerError::TableFull("waiter"))?;
                    let seq = l.state.next_seq;
                    l.state.next_seq += 1;
                    l.state.waiters[slot] = WaiterRow {
                        in_use: 1,
                        gpu,
                        pid: self.me.pid,
                        priority: u32::from(self.priority),
                        start_time: self.me.start_time,
                        bytes,
                        seq,
                        granted: 0,
                        handle: self.handle,
                    };
                    l.commit();
                    ticket = Some(seq);
                }
                Some(seq) => {
                    let mine = l.state.waiters.iter().position(|w| {
                        w.in_use != 0
                            && w.seq == seq
                            && w.pid == self.me.pid
                            && w.handle == self.handle
                            && w.gpu == gpu
                            && w.bytes == bytes
                    });
                    match mine {
                        Some(i) if l.state.waiters[i].granted != 0 => {
                            l.state.waiters[i] = WaiterRow::default();
                            let held = l
                                .holder_index(gpu, self.me, self.handle)
                                .map_or(0, |h| l.state.holders[h].bytes);
                            l.commit();
                            l.record.set(gpu as usize, held);
                            return Ok(());
                        }
                        Some(i) => {
                            // still waiting: sanity check, then our own notification
                            // pass, in case the process that should have woken us died
                            if l.sweep() | l.notify_all() {
                                l.commit();
                                self.wake_all();
                                continue; // re-examine our row under the same lock
                            }
                            if deadline.is_some_and(|d| Instant::now() >= d) {
                                l.state.waiters[i] = WaiterRow::default();
                                // leaving the queue may unblock those behind (FIFO)
                                let woke = l.notify(gpu);
                                l.commit();
                                drop(l);
                                if woke {
                                    self.wake_all();
                                }
                                return Err(LedgerError::TimedOut { gpu, requested: bytes });
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
            let seen = self.map.wake_word().load(Ordering::SeqCst);
            drop(l);
            let mut nap = RECHECK;
            if let Some(d) = deadline {
                nap = nap.min(d.saturating_duration_since(Instant::now()));
            }
            let ts = rustix::time::Timespec {
                tv_sec: nap.as_secs() as i64,
                tv_nsec: i64::from(nap.subsec_nanos()),
            };
            let _ = futex::wait(self.map.wake_word(), futex::Flags::empty(), seen, Some(&ts));
            l = self.locked()?;
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
            .filter(|w| w.in_use != 0 && w.granted == 0 && w.gpu == gpu)
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
        let held = l.add_holding(gpu, self.me, self.handle, bytes)?;
        l.commit();
        l.record.set(gpu as usize, held);
        Ok(true)
    }

    /// Post-free (schedGPU's `postCudaFree`): return `bytes` on `gpu` after freeing
    /// them, and notify waiters. Freeing more than this handle holds is an error and
    /// changes nothing.
    pub fn post_free(&self, gpu: u32, bytes: u64) -> Result<(), LedgerError> {
        let mut l = self.locked()?;
        l.check_gpu(gpu)?;
        let i = l.holder_index(gpu, self.me, self.handle);
        let held = i.map_or(0, |i| l.state.holders[i].bytes);
        if bytes > held {
            return Err(LedgerError::OverFree { gpu, held, freed: bytes });
        }
        if let Some(i) = i {
            l.state.holders[i].bytes -= bytes;
            if l.state.holders[i].bytes == 0 {
                l.state.holders[i] = HolderRow::default();
            }
            l.state.gpus[gpu as usize].used -= bytes;
        }
        l.sweep(); // never grant to a dead waiter
        let woke = l.notify(gpu);
        l.commit();
        l.record.set(gpu as usize, held - bytes);
        drop(l);
        if woke {
            self.wake_all();
        }
        Ok(())
    }

    /// The ledger as it stands, after a sanity check (so nothing is reported held by a
    /// dead process).
    pub fn status(&self) -> Result<LedgerStatus, LedgerError> {
        let mut l = self.locked()?;
        if l.sweep() {
            let woke = l.notify_all();
            l.commit();
            if woke {
                self.wake_all();
            }
        }
        let s = &l.state;
        Ok(LedgerStatus {
            policy: policy_from_code(s.policy),
            gpus: (0..s.gpu_count as usize)
                .map(|g| GpuStatus {
                    total: s.gpus[g].total,
                    used: s.gpus[g].used,
                    waiting: s
                        .waiters
                        .iter()
                        .filter(|w| w.in_use != 0 && w.granted == 0 && w.gpu as usize == g)
                        .count(),
                })
                .collect(),
            holdings: s
                .holders
                .iter()
                .filter(|h| h.in_use != 0)
                .map(|h| Holding {
                    process: ProcessId { pid: h.pid, start_time: h.start_time },
                    handle: h.handle,
                    gpu: h.gpu,
                    bytes: h.bytes,
                })
                .collect(),
        })
    }

    /// Shutdown (schedGPU §4): release whatever this handle still holds, run the sanity
    /// check, notify waiters, and remove this handle's record. Dropping a handle does
    /// the same, ignoring errors.
    pub fn shutdown(mut self) -> Result<(), LedgerError> {
        self.closed = true;
        self.release_all()
    }

    fn release_all(&self) -> Result<(), LedgerError> {
        let mut l = self.locked()?;
        for h in l.state.holders.iter_mut() {
            if h.in_use != 0
                && h.pid == self.me.pid
                && h.start_time == self.me.start_time
                && h.handle == self.handle
            {
                l.state.gpus[h.gpu as usize].used -= h.bytes;
                *h = HolderRow::default();
            }
        }
        for w in l.state.waiters.iter_mut() {
            if w.in_use != 0 && w.pid == self.me.pid && w.handle == self.handle {
                *w = WaiterRow::default();
            }
        }
        l.sweep();
        let woke = l.notify_all();
        l.commit();
        for g in 0..MAX_GPUS {
            l.record.set(g, 0);
        }
        drop(l);
        if woke {
            self.wake_all();
        }
        let _ = std::fs::remove_file(records::file_for(&self.records_dir, self.me, self.handle));
        Ok(())
    }

    /// For tests: overwrite the primary copy with garbage-checksummed bytes, as a process
    /// killed mid-write would leave it.
    #[cfg(test)]
    pub(crate) fn tear_primary(&self) {
        let l = self.locked().unwrap();
        let mut s = l.state;
        s.gpus[0].used ^= 0xdead;
        self.map.store_primary_only(&s, 0);
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if !self.closed
            && let Err(e) = self.release_all()
        {
            tracing::warn!(error = %e, "ledger shutdown on drop failed; the sanity check will release this process's memory when it exits");
        }
    }
}

fn lock_file(file: &File) -> std::io::Result<()> {
    loop {
        match flock(file, FlockOperation::LockExclusive) {
            Err(rustix::io::Errno::INTR) => continue,
            other => return other.map_err(Into::into),
        }
    }
}

fn resolve_gpus(source: &GpuSource) -> Result<Vec<u64>, LedgerError> {
    let gpus = match source {
        GpuSource::Explicit(g) => g.iter().map(|b| b.0).collect::<Vec<_>>(),
        GpuSource::Nvml => crate::nvml::gpu_memory().map_err(LedgerError::NoGpus)?,
    };
    if gpus.is_empty() || gpus.len() > MAX_GPUS || gpus.contains(&0) {
        return Err(LedgerError::NoGpus(format!(
            "need 1..={MAX_GPUS} GPUs of non-zero memory, got {gpus:?}"
        )));
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_primary_is_restored_from_the_backup() {
        let path = std::env::temp_dir().join(format!("tessera-ledger-torn-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let cfg = LedgerConfig {
            path: path.clone(),
            gpus: GpuSource::Explicit(vec![Bytes(1000)]),
            policy: NotificationPolicy::Fifo,
            priority: 0,
        };
        let a = Ledger::open(&cfg).unwrap();
        a.pre_alloc(0, 400, Wait::NoWait).unwrap();
        a.tear_primary();
        let s = a.status().unwrap();
        assert_eq!(s.gpus[0].used, 400, "the backup held the last completed operation");
        let (p, pc, b, bc) = a.map.load();
        assert_eq!((p, pc), (b, bc), "both copies repaired");
        assert_eq!(p.crc(), pc);
        drop(a);
        let _ = std::fs::remove_file(&path);
    }
}
