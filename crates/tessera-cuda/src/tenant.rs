//! The process as a tenant: what it has of the daemon (its session, replaced whole
//! when a daemon that restarted re-adopts the program), its settings, and the book of
//! its allocations. What it does lives beside it, one concern a file: the launch gate
//! (`gate`), memory (`memory`), re-adoption after a restart (`readopt`).

use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_client::region::Region;
use tessera_client::{Client, TenantOptions};
use tessera_driver::CuResult;

/// `CUDA_ERROR_SYSTEM_NOT_READY`: what `cuInit` answers when the process cannot become
/// a tenant (no daemon, no ledger).
pub const SYSTEM_NOT_READY: CuResult =
    tessera_driver::sys::CUresult::CUDA_ERROR_SYSTEM_NOT_READY as CuResult;

/// One registration with one daemon: the connection (kept open for the process's life
/// or until that daemon goes; closing it ends the tenant), the tenant's id there, the
/// shared region the daemon made for it, and the slice request outstanding.
pub struct Session {
    /// The connection.
    pub(crate) client: Mutex<Client>,
    /// Its id at tesserad.
    pub(crate) id: u64,
    /// The shared region: its grant word is the launch gate's fast path, its lease
    /// words the memory's.
    pub(crate) region: Arc<Region>,
    /// The handle of the slice request outstanding, if any.
    pub(crate) outstanding: Mutex<Option<u64>>,
}

/// The process as a tenant.
pub struct Tenant {
    /// What it has of the daemon now: replaced whole when a daemon that restarted
    /// re-adopts the program (`readopt`).
    pub(crate) session: ArcSwap<Session>,
    /// The current session's region, for the launch path (see [`Tenant::region`]).
    pub(crate) fast_region: std::sync::atomic::AtomicPtr<Region>,
    /// How it registered, to register the same way again after a restart.
    pub(crate) options: TenantOptions,
    /// GPUs it asked for at registration.
    pub(crate) gpus_asked: u32,
    /// It may be moved to any GPU it sees (`TESSERA_MIGRATION`), and registered so.
    pub(crate) migratable: bool,
    /// The ledger record its reservations are held under (client id, and a descriptor
    /// this process keeps open for its life, so that they outlive a crash of the
    /// daemon), once it reserved anything.
    pub(crate) record: Mutex<Option<(u64, std::fs::File)>>,
    /// The daemon does not hand records over (an older one): not asked again until a
    /// daemon re-adopts the program.
    pub(crate) record_refused: AtomicBool,
    /// One re-adoption at a time, and when the last was tried.
    pub(crate) readopting: Mutex<Option<std::time::Instant>>,
    /// The slice a launch asks for.
    pub(crate) slice: Duration,
    /// The latest kernel launch: function, grid blocks, threads | dynamic shared << 32
    /// (relaxed stores on the launch path; read when a slice is asked for).
    pub(crate) last_launch: [AtomicU64; 3],
    /// Per function: (registers per thread, static shared bytes), asked of the driver
    /// once per distinct function.
    pub(crate) functions: Mutex<HashMap<u64, (u32, u32)>>,
    /// The current slice's accounting (FairGV §3.3): launches so far, GPU time
    /// accounted (ns), and the time measured for the launches [`RULE`] measures.
    pub(crate) launches: AtomicU64,
    pub(crate) accounted_ns: AtomicU64,
    /// The accounted time at which the slice's time is up: its length, pushed on by
    /// a length each time it is reached while no other tenant shares the GPU (the
    /// daemon renews such a slice instead of ending it).
    pub(crate) slice_end_ns: AtomicU64,
    /// The event marking where the program's queue stood at the last slice's end it
    /// went past alone (see `Tenant::pace`).
    pub(crate) pace_mark: Mutex<Option<usize>>,
    /// Set while the program waits at that mark: busy with the GPU, not idle, for the
    /// watcher (which would otherwise drain its queue and give the slice back).
    pub(crate) pacing: AtomicBool,
    /// Its latest synchronous calls (FairGV §3.2.3), published to the daemon after
    /// each ([`Tenant::note_sync_call`]).
    pub(crate) sync_calls: Mutex<tessera_core::interactive::CallWindow>,
    /// The clock those calls are timed on: the program's own, standing still while it
    /// waits for a slice.
    pub(crate) own_clock: tessera_core::interactive::OwnClock,
    pub(crate) measured_ns: AtomicU64,
    /// tesserad's socket, for the memory connection.
    pub(crate) socket: std::path::PathBuf,
    /// Connections for memory requests only (a reservation may wait for memory, and
    /// must not hold up the launch gate's connection meanwhile): each request takes an
    /// idle one, or opens one, and puts it back after — never holding the lock while it
    /// waits, so that a free from another thread is never stuck behind a thread's wait
    /// (which that free may be what ends). At most [`IDLE_MEMORY_CONNECTIONS`] are kept.
    pub(crate) memory: Mutex<Vec<Client>>,
    /// Its limit, bytes.
    pub limit: Option<u64>,
    /// The driver's ordinals of the GPUs it was placed on; the program's ordinal i is
    /// `placed[i]`.
    pub placed: Vec<i32>,
    /// The node's GPU (the daemon's and the ledger's index) behind each driver ordinal:
    /// the driver numbers the GPUs `CUDA_VISIBLE_DEVICES` shows it, from 0. Empty: the
    /// driver numbers them as the node does (a migratable program sees every GPU).
    pub nodes: Vec<u32>,
    /// The UUIDs of the GPUs in `nodes`, when the daemon knows them (to check the
    /// driver shows the program those GPUs, and to find them in NVML).
    pub uuids: Vec<String>,
    /// This process's pid as the daemon sees it, which NVML's process lists use (its
    /// own `getpid()` when the daemon does not say).
    pub node_pid: u32,
    /// How long a reservation waits for memory (`None`: for ever).
    pub(crate) wait: Option<Duration>,
    /// GPUs (bit i: GPU i) whose context memory the daemon reserved for this process;
    /// the allocation path's one load.
    pub(crate) contexts_done: AtomicU64,
    /// When (ns since the epoch) its last measured launch returned with nothing left
    /// in flight; 0 while a launch is under way or work may be in flight. The gate's
    /// watcher gives the slice back when this is older than [`SLICE_SPIN`].
    pub(crate) last_idle: AtomicU64,
    /// Launches went through since the last synchronisation (counted at the mean, not
    /// measured) and may still run: the gate is busy until the watcher has waited for
    /// them, so the slice is not handed on while they occupy the GPU.
    pub(crate) unsynced: AtomicBool,
    /// The context of the slice's first launch (a `CUcontext`), which the watcher
    /// synchronises from its own thread.
    pub(crate) context: AtomicU64,
    /// When (ns since the epoch) the first of the unsynced launches went through.
    pub(crate) unsynced_since: AtomicU64,
    /// GPU time of the slice's unsynced launches measured so far, ns.
    pub(crate) settled_ns: AtomicU64,
    /// One wait for the work in flight at a time (the program's or the watcher's).
    pub(crate) settling: Mutex<()>,
    pub(crate) book: Mutex<Book>,
}

#[derive(Default)]
pub(crate) struct Book {
    pub(crate) used: u64,
    /// What was allocated -> (GPU, bytes reserved).
    pub(crate) allocations: HashMap<Allocation, (u32, u64)>,
}

/// What an allocation is known by: device pointers, virtual-memory handles and arrays
/// are separate name spaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Allocation {
    /// A device pointer (`cuMemAlloc*`, freed by `cuMemFree*`).
    Pointer(u64),
    /// A physical allocation handle (`cuMemCreate`, released by `cuMemRelease`).
    Handle(u64),
    /// An array (`cuArrayCreate`, `cuArray3DCreate`, destroyed by `cuArrayDestroy`).
    Array(u64),
    /// A mipmapped array (`cuMipmappedArrayCreate`, destroyed by
    /// `cuMipmappedArrayDestroy`).
    Mipmapped(u64),
}

/// Memory leased from the daemon beyond what an allocation needs, and the most a
/// process keeps unused on a GPU: allocations within it need no request to the daemon.
/// The daemon takes unused leases back whenever a reservation through it does not fit
/// at once, so this much per process and GPU is the most memory idle in leases.
pub const LEASE_CHUNK: u64 = 64 << 20;

/// The launch gate's rule (`tessera_core::gate`, the one the simulator's program engine
/// runs too): the launches of a slice it measures, the hold before an idle slice is
/// given back, and what a slice's end charges.
pub const RULE: tessera_core::gate::SliceRule = tessera_core::gate::SliceRule::DEFAULT;

/// How long a slice's holder may have nothing in flight and launch nothing before the
/// gate gives the slice back ([`RULE`]'s hold).
pub const SLICE_SPIN: Duration = Duration::from_nanos(RULE.idle_hold.0);

impl Tenant {
    /// The node's GPU behind the driver's ordinal `gpu` (what the daemon and the
    /// ledger call it).
    #[inline]
    pub fn node(&self, gpu: u32) -> u32 {
        self.nodes.get(gpu as usize).copied().unwrap_or(gpu)
    }

    /// The session with the daemon now.
    #[inline]
    pub(crate) fn session(&self) -> arc_swap::Guard<Arc<Session>> {
        self.session.load()
    }

    /// The current session's region without a guard: the launch path's one load (an
    /// `ArcSwap` load costs a thread-local look-up, which in a preloaded library is a
    /// call to `__tls_get_addr`; the launch path measured 476 instructions a launch
    /// with two of them). Each region published here is leaked ([`publish_region`]):
    /// one per daemon that registers or re-adopts the program, so the reference never
    /// dangles and a restart costs one mapping's address space.
    #[inline]
    #[allow(unsafe_code)]
    pub(crate) fn region(&self) -> &'static Region {
        // SAFETY: `fast_region` only ever holds pointers from `publish_region`, which
        // leaks each one (never freed), so the region lives for the process's life.
        unsafe { &*self.fast_region.load(std::sync::atomic::Ordering::Acquire) }
    }

    /// Its id at tesserad (the current daemon's).
    pub fn id(&self) -> u64 {
        self.session.load().id
    }

    /// The node's GPUs the program was placed on.
    pub fn node_list(&self) -> Vec<u32> {
        self.placed.iter().map(|g| self.node(*g as u32)).collect()
    }

    /// How many GPUs the driver shows the program (a forked child's inherited view).
    pub(crate) fn driver_count(&self) -> usize {
        if self.nodes.is_empty() {
            self.placed.iter().map(|g| *g as usize + 1).max().unwrap_or(0)
        } else {
            self.nodes.len()
        }
    }
}

/// Leak a reference to `region` for [`Tenant::region`]: the pointer to store in
/// `fast_region`.
pub(crate) fn publish_region(region: &Arc<Region>) -> *mut Region {
    Arc::into_raw(Arc::clone(region)).cast_mut()
}
