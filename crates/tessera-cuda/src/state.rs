//! What the interposer knows: the settings, the real driver, and — once `cuInit` has
//! made the process a tenant — its connection to tesserad, the ledger and the book of
//! its allocations.

use crate::config::{Class, Config, MemoryWait, OnNoDaemon};
use crate::real::RealDriver;
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tessera_client::proto::{ErrorCode, TenantClass};
use tessera_client::region::{LaunchFacts, reason};
use tessera_client::region::{Region, epoch_ns};
use tessera_client::{Client, TenantOptions};
use tessera_client::{ClientError, Outcome};
use tessera_driver::{CuResult, status};

/// The process's interposer state, built on first use.
pub struct State {
    /// The settings, or why they are unusable.
    pub config: Result<Config, String>,
    /// The real driver, or why it cannot be loaded.
    pub real: Result<RealDriver, String>,
    /// Set by the first successful `cuInit`.
    pub mode: OnceLock<Mode>,
    /// Serialises the first `cuInit` (registration happens once).
    pub init_lock: Mutex<()>,
    /// A forked child's own mode, with the fork generation it belongs to.
    forked: Mutex<Option<(u64, &'static Mode)>>,
    log: Mutex<Option<std::fs::File>>,
}

/// Managed (a tenant) or not.
pub enum Mode {
    /// A tenant of tesserad, its memory admitted by the ledger.
    Managed(Box<Tenant>),
    /// Without a daemon, as `TESSERA_ON_NO_DAEMON=passthrough` allows.
    Unmanaged,
}

/// The process as a tenant.
pub struct Tenant {
    /// Its connection, kept open for the process's life (closing it ends the tenant).
    client: Mutex<Client>,
    /// Its id at tesserad.
    id: u64,
    /// The shared region: its grant word is the launch gate's fast path.
    region: Arc<Region>,
    /// The slice a launch asks for.
    slice: Duration,
    /// The handle of the slice request outstanding, if any.
    outstanding: Mutex<Option<u64>>,
    /// The latest kernel launch: function, grid blocks, threads | dynamic shared << 32
    /// (relaxed stores on the launch path; read when a slice is asked for).
    last_launch: [AtomicU64; 3],
    /// Per function: (registers per thread, static shared bytes), asked of the driver
    /// once per distinct function.
    functions: Mutex<HashMap<u64, (u32, u32)>>,
    /// The current slice's accounting (FairGV §3.3): launches so far, GPU time
    /// accounted (ns), and the time measured for the first [`MEASURED_LAUNCHES`].
    launches: AtomicU64,
    accounted_ns: AtomicU64,
    measured_ns: AtomicU64,
    /// tesserad's socket, for the memory connection.
    socket: std::path::PathBuf,
    /// A second connection, for memory requests only (a reservation may wait for
    /// memory, and must not hold up the launch gate's connection meanwhile); opened on
    /// first use and again if the daemon closed it while idle.
    memory: Mutex<Option<Client>>,
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
    wait: Option<Duration>,
    /// GPUs (bit i: GPU i) whose context memory the daemon reserved for this process;
    /// the allocation path's one load.
    contexts_done: AtomicU64,
    /// When (ns since the epoch) its last measured launch returned with nothing left
    /// in flight; 0 while a launch is under way or work may be in flight. The gate's
    /// watcher gives the slice back when this is older than [`SLICE_SPIN`].
    last_idle: AtomicU64,
    /// Launches went through since the last synchronisation (counted at the mean, not
    /// measured) and may still run: the gate is busy until the watcher has waited for
    /// them, so the slice is not handed on while they occupy the GPU.
    unsynced: AtomicBool,
    /// The context of the slice's first launch (a `CUcontext`), which the watcher
    /// synchronises from its own thread.
    context: AtomicU64,
    /// When (ns since the epoch) the first of the unsynced launches went through.
    unsynced_since: AtomicU64,
    /// GPU time of the slice's unsynced launches measured so far, ns.
    settled_ns: AtomicU64,
    /// One wait for the work in flight at a time (the program's or the watcher's).
    settling: Mutex<()>,
    book: Mutex<Book>,
}

#[derive(Default)]
struct Book {
    used: u64,
    /// What was allocated -> (GPU, bytes reserved).
    allocations: HashMap<Allocation, (u32, u64)>,
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

static STATE: OnceLock<State> = OnceLock::new();

/// The state, built on first use.
pub fn state() -> &'static State {
    STATE.get_or_init(|| {
        let config = Config::from_env().map_err(|e| e.to_string());
        let driver = config
            .as_ref()
            .map(|c| c.driver.clone())
            .unwrap_or_else(|_| std::path::PathBuf::from("libcuda.so.1"));
        let log = config
            .as_ref()
            .ok()
            .and_then(|c| c.log.as_ref())
            .and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok());
        State {
            config,
            real: RealDriver::open(&driver),
            mode: OnceLock::new(),
            init_lock: Mutex::new(()),
            forked: Mutex::new(None),
            log: Mutex::new(log),
        }
    })
}

/// One line on stderr, prefixed, for what the application must be told.
pub fn complain(message: &str) {
    let _ = writeln!(std::io::stderr(), "tessera: {message}");
}

/// [`complain`], once per process: for conditions every later call would repeat.
fn complain_once(flag: &std::sync::atomic::AtomicBool, message: &str) {
    if !flag.swap(true, std::sync::atomic::Ordering::Relaxed) {
        complain(message);
    }
}

/// Whether an allocation over the program's own limit was reported.
static OVER_LIMIT_REPORTED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether the daemon's departure was reported.
static GONE_REPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl State {
    /// Append a line to the log file, if one was asked for.
    pub fn log(&self, line: std::fmt::Arguments<'_>) {
        if let Ok(mut guard) = self.log.lock()
            && let Some(f) = guard.as_mut()
        {
            let _ = writeln!(f, "{line}");
        }
    }

    /// The tenant, if `cuInit` made the process one. In a child forked from a tenant,
    /// the child's own tenant, registered on its first call here: a child never uses
    /// its parent's connection or ring.
    #[inline]
    pub fn tenant(&self) -> Option<&Tenant> {
        let generation = crate::real::fork_generation();
        let mode = if generation == 0 { self.mode.get() } else { self.forked_mode(generation) };
        match mode {
            Some(Mode::Managed(t)) => Some(t),
            _ => None,
        }
    }

    /// The mode of a forked child (fork generation `generation`): unmanaged if its
    /// parent was, else a tenant of its own, registered now if not yet.
    #[cold]
    fn forked_mode(&self, generation: u64) -> Option<&Mode> {
        static UNMANAGED: Mode = Mode::Unmanaged;
        let parent = self.mode.get()?;
        if !matches!(parent, Mode::Managed(_)) {
            return Some(parent);
        }
        let mut slot = self.forked.lock().ok()?;
        if let Some((g, mode)) = *slot
            && g == generation
        {
            return Some(mode);
        }
        // the driver the child inherited numbers the GPUs its parent was given
        let Some(Mode::Managed(p)) = self.mode.get() else { return Some(parent) };
        let inherited = Binding::Inherited { nodes: p.nodes.clone(), count: p.driver_count() };
        let mode: &'static Mode = match self.register(inherited) {
            Ok(Mode::Managed(t)) => {
                self.log(format_args!("forked: tenant {} on {:?}", t.id, t.placed));
                Box::leak(Box::new(Mode::Managed(t)))
            }
            Ok(Mode::Unmanaged) | Err(_) => {
                complain(
                    "this forked process could not become a tenant of its own; its CUDA calls run unmanaged",
                );
                &UNMANAGED
            }
        };
        *slot = Some((generation, mode));
        Some(mode)
    }

    /// Become a tenant, before the real `cuInit`: the driver reads
    /// `CUDA_VISIBLE_DEVICES` when it initialises, and is then told the GPUs the daemon
    /// chose (unless the program may migrate). The `cuInit` hook then checks that the
    /// driver shows the program those GPUs.
    pub fn become_tenant(&self) -> Result<(), CuResult> {
        if self.mode.get().is_some() {
            return Ok(());
        }
        let migratable = self.config.as_ref().is_ok_and(|c| c.migration);
        let mode =
            self.register(if migratable { Binding::NodeOrder } else { Binding::Restrict })?;
        let managed = matches!(mode, Mode::Managed(_));
        let _ = self.mode.set(mode);
        if managed {
            // the gate's watcher: gives back a slice its holder leaves idle
            let _ = std::thread::Builder::new().name("tessera-gate".into()).spawn(|| {
                let mut quiet = (0, 0);
                loop {
                    let Some(t) = state().tenant() else { return };
                    let held = t.granted().is_some() || t.in_flight();
                    t.watch(&mut quiet);
                    std::thread::sleep(if held {
                        Duration::from_micros(500)
                    } else {
                        Duration::from_millis(5)
                    });
                }
            });
        }
        Ok(())
    }

    /// Register with the daemon: the tenant (or, without a daemon and with
    /// passthrough allowed, unmanaged), its GPUs bound to the driver's ordinals as
    /// `binding` says.
    fn register(&self, binding: Binding) -> Result<Mode, CuResult> {
        let config = match &self.config {
            Ok(c) => c,
            Err(e) => {
                complain(&format!("bad setting: {e}"));
                return Err(status::INVALID_VALUE);
            }
        };
        let options = TenantOptions {
            class: match config.class {
                Class::UserFacing => TenantClass::UserFacing,
                Class::Batch => TenantClass::Batch,
            },
            sla: config.sla,
            weight: config.weight,
            priority: config.priority,
            memory: config.memory.unwrap_or(0),
            job: config.slurm_job,
        };
        // the daemon places the program among the GPUs it may see (a forked child's
        // are its parent's, which the inherited variable names)
        let visible = std::env::var("CUDA_VISIBLE_DEVICES")
            .ok()
            .map(|v| v.split(',').map(|e| e.trim().to_string()).collect::<Vec<_>>());
        let registered = Client::connect(&config.socket).and_then(|mut c| {
            let placement = c.register_within(options, config.gpus, visible)?;
            Ok((c, placement))
        });
        let (client, placement) = match (registered, config.on_no_daemon) {
            (Ok(x), _) => x,
            (Err(e @ ClientError::Refused { .. }), _) => {
                complain(&format!("tesserad refused this program: {e}"));
                return Err(status::NO_DEVICE);
            }
            (Err(e), OnNoDaemon::Passthrough) => {
                complain(&format!(
                    "no tesserad at {} ({e}): running unmanaged (TESSERA_ON_NO_DAEMON=passthrough)",
                    config.socket.display()
                ));
                return Ok(Mode::Unmanaged);
            }
            (Err(e), OnNoDaemon::Fail) => {
                complain(&format!(
                    "no tesserad at {} ({e}); start it, set TESSERA_SOCKET, or set TESSERA_ON_NO_DAEMON=passthrough to run unmanaged",
                    config.socket.display()
                ));
                return Err(SYSTEM_NOT_READY);
            }
        };
        let id = placement.tenant;
        // memory is reserved in the node's ledger through the daemon, which holds it
        // for this tenant: programs of every user share the one ledger, and none opens
        // its file
        let wait = match config.wait {
            MemoryWait::Forever => None,
            MemoryWait::NoWait => Some(Duration::ZERO),
            MemoryWait::Timeout(d) => Some(d),
        };
        let (placed, nodes, uuids) = match binding {
            Binding::Restrict => {
                // the driver will number exactly these GPUs from 0, in this order: by
                // UUID where the daemon knows them (whatever the driver's own order),
                // else by the index the daemon and the driver share
                let list = if placement.uuids.len() == placement.gpus.len() {
                    placement.uuids.join(",")
                } else {
                    placement.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                };
                crate::real::show_driver_only(&list);
                let placed: Vec<i32> = (0..placement.gpus.len() as i32).collect();
                (placed, placement.gpus.clone(), placement.uuids.clone())
            }
            Binding::NodeOrder => (
                placement.gpus.iter().filter_map(|g| i32::try_from(*g).ok()).collect(),
                Vec::new(),
                Vec::new(),
            ),
            Binding::Inherited { nodes, count } => {
                let placed = if nodes.is_empty() {
                    placement
                        .gpus
                        .iter()
                        .filter(|g| (**g as usize) < count)
                        .filter_map(|g| i32::try_from(*g).ok())
                        .collect()
                } else {
                    placement
                        .gpus
                        .iter()
                        .filter_map(|g| nodes.iter().position(|n| n == g))
                        .filter_map(|i| i32::try_from(i).ok())
                        .collect()
                };
                (placed, nodes, Vec::new())
            }
        };
        if placed.is_empty() {
            complain("tesserad placed this program on no GPU the driver has");
            return Err(status::NO_DEVICE);
        }
        let Some(region) = client.region() else {
            complain("tesserad gave no shared region");
            return Err(SYSTEM_NOT_READY);
        };
        self.log(format_args!("tenant {id} on {placed:?} (node GPUs {:?})", placement.gpus));
        crate::real::watch_fork(client.socket_fd());
        Ok(Mode::Managed(Box::new(Tenant {
            client: Mutex::new(client),
            id,
            region,
            slice: config.slice,
            outstanding: Mutex::new(None),
            last_launch: Default::default(),
            functions: Mutex::new(HashMap::new()),
            launches: AtomicU64::new(0),
            accounted_ns: AtomicU64::new(0),
            measured_ns: AtomicU64::new(0),
            socket: config.socket.clone(),
            memory: Mutex::new(None),
            contexts_done: AtomicU64::new(0),
            last_idle: AtomicU64::new(0),
            unsynced: AtomicBool::new(false),
            context: AtomicU64::new(0),
            unsynced_since: AtomicU64::new(0),
            settled_ns: AtomicU64::new(0),
            settling: Mutex::new(()),
            limit: config.memory,
            placed,
            nodes,
            uuids,
            node_pid: if placement.pid != 0 { placement.pid } else { std::process::id() },
            wait,
            book: Mutex::new(Book::default()),
        })))
    }
}

/// How a tenant's GPUs relate to the driver's ordinals.
enum Binding {
    /// The driver is not initialised yet: it is told to show exactly the placed GPUs
    /// (`CUDA_VISIBLE_DEVICES`), so its ordinals are the program's.
    Restrict,
    /// The driver numbers the node's GPUs as the daemon does (a migratable program,
    /// which the balancer may move to any of them).
    NodeOrder,
    /// A forked child: the driver it inherited shows the node GPUs `nodes` (empty:
    /// in node order), `count` of them.
    Inherited { nodes: Vec<u32>, count: usize },
}

/// Memory leased from the daemon beyond what an allocation needs, and the most a
/// process keeps unused on a GPU: allocations within it need no request to the daemon.
/// The daemon takes unused leases back whenever a reservation through it does not fit
/// at once, so this much per process and GPU is the most memory idle in leases.
pub const LEASE_CHUNK: u64 = 64 << 20;

/// How long a slice's holder may have nothing in flight and launch nothing before the
/// gate gives the slice back (FairGV §3.2.2's spin budget).
pub const SLICE_SPIN: Duration = Duration::from_millis(2);

/// Launches of a slice measured by synchronising after them (FairGV §3.3: "only for
/// the first 5 requests of a slice"); the rest are inferred from their mean.
pub const MEASURED_LAUNCHES: u64 = 5;

/// Who waits for a tenant's work in flight: the program's thread (its current
/// context) or the gate's watcher (the context of the unsynced launches).
#[derive(Clone, Copy)]
enum Waiter {
    Program,
    Watcher,
}

/// When [`Tenant::give_back`] gives the slice back, checked once no other thread
/// settles.
#[derive(Clone, Copy)]
enum GiveBack {
    /// Always: the slice's time is used.
    Now,
    /// If launches counted at the mean may still run.
    InFlight,
    /// If the slice is held and nothing may run.
    Idle,
}

/// `CUDA_ERROR_SYSTEM_NOT_READY`: what `cuInit` answers when the process cannot become
/// a tenant (no daemon, no ledger).
pub const SYSTEM_NOT_READY: CuResult =
    tessera_driver::sys::CUresult::CUDA_ERROR_SYSTEM_NOT_READY as CuResult;

impl Tenant {
    /// The node's GPU behind the driver's ordinal `gpu` (what the daemon and the
    /// ledger call it).
    #[inline]
    pub fn node(&self, gpu: u32) -> u32 {
        self.nodes.get(gpu as usize).copied().unwrap_or(gpu)
    }

    /// Its id at tesserad.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Per node GPU, the fraction of the daemon's last busy window
    /// (`proto::BUSY_WINDOW_MS`) that GPU ran this tenant's work, as the daemon charged
    /// it; GPUs it was not charged on are absent.
    pub fn recent_busy(&self) -> Result<HashMap<u32, f64>, CuResult> {
        let filter = tessera_client::StatusFilter { tenant: Some(self.id), ..Default::default() };
        let report = self.desk(|c| c.status_where(filter)).map_err(|e| {
            complain(&format!("cannot ask tesserad for this tenant's GPU time: {e}"));
            status::UNKNOWN
        })?;
        Ok(report
            .tenants
            .iter()
            .filter(|t| t.tenant == self.id)
            .flat_map(|t| t.gpu_busy.iter().map(|b| (b.gpu, b.busy)))
            .collect())
    }

    /// The node's GPUs the program was placed on.
    pub fn node_list(&self) -> Vec<u32> {
        self.placed.iter().map(|g| self.node(*g as u32)).collect()
    }

    /// How many GPUs the driver shows the program (a forked child's inherited view).
    fn driver_count(&self) -> usize {
        if self.nodes.is_empty() {
            self.placed.iter().map(|g| *g as usize + 1).max().unwrap_or(0)
        } else {
            self.nodes.len()
        }
    }

    /// Note a launch's shape for the daemon's monitor (three relaxed stores).
    #[inline]
    pub fn note_launch(&self, function: u64, grid_blocks: u64, threads: u32, dynamic_shared: u32) {
        self.last_launch[0].store(function, Ordering::Relaxed);
        self.last_launch[1].store(grid_blocks, Ordering::Relaxed);
        self.last_launch[2]
            .store(u64::from(threads) | u64::from(dynamic_shared) << 32, Ordering::Relaxed);
    }

    /// The latest launch's facts, with the function's registers and static shared
    /// memory (asked of the driver once per function).
    fn launch_facts(&self) -> Option<LaunchFacts> {
        let function = self.last_launch[0].load(Ordering::Relaxed);
        let grid_blocks = self.last_launch[1].load(Ordering::Relaxed);
        let block = self.last_launch[2].load(Ordering::Relaxed);
        if function == 0 || grid_blocks == 0 {
            return None;
        }
        let (registers, static_shared) = {
            let mut cache = self.functions.lock().ok()?;
            *cache.entry(function).or_insert_with(|| {
                let kernel_on = crate::hooks::kernel_device(function);
                let facts = crate::real::function_resources(function, kernel_on);
                state().log(format_args!(
                    "{} {function:#x}: {} registers, {} static shared bytes",
                    if kernel_on.is_some() { "kernel" } else { "function" },
                    facts.0,
                    facts.1
                ));
                facts
            })
        };
        Some(LaunchFacts {
            grid_blocks,
            threads_per_block: (block & 0xffff_ffff) as u32,
            registers_per_thread: registers,
            shared_per_block: static_shared.saturating_add((block >> 32) as u32),
        })
    }

    /// Account a launch that went through (FairGV §3.3's collaborative accounting):
    /// the first [`MEASURED_LAUNCHES`] of a slice are measured by synchronising after
    /// them; later ones are counted at the measured mean, and the gate stays busy
    /// until they are waited for — by the slice's end here, or by the watcher — which
    /// measures them too. Once the slice's time is used, wait for the last launches
    /// and give the slice back, reporting the measured time: the policy charges what
    /// the tenant really used, not what it held or what the mean predicted.
    #[inline]
    pub fn after_launch(&self) {
        let n = self.launches.fetch_add(1, Ordering::Relaxed);
        let add = if n < MEASURED_LAUNCHES && !crate::hooks::capture::open() {
            let t0 = std::time::Instant::now();
            // the slice lasts until this launch is done, however long it runs
            self.region.set_gate_busy(true);
            crate::real::synchronize();
            let dt = t0.elapsed().as_nanos() as u64;
            self.unsynced.store(false, Ordering::Relaxed);
            self.last_idle.store(epoch_ns(), Ordering::Relaxed);
            if self.region.granted().is_none() {
                // the kernel ran past the slice it was launched in, whose end the
                // daemon deferred until now: the whole measured time is owed, charged
                // as the slice ends (FairGV §3.3.2)
                self.region.add_owed(dt);
                self.give_back(Waiter::Program, GiveBack::Now);
                return;
            }
            self.region.set_gate_busy(false);
            self.measured_ns.fetch_add(dt, Ordering::Relaxed);
            dt
        } else {
            // a launch recorded into a capture runs nothing now (the capture is asked
            // only at the first unsynchronised launch, not on every launch)
            if !self.unsynced.load(Ordering::Relaxed) && !crate::hooks::capture::open() {
                self.unsynced_since.store(epoch_ns(), Ordering::Relaxed);
                self.context.store(crate::real::current_context(), Ordering::Relaxed);
                self.unsynced.store(true, Ordering::Relaxed);
                self.region.set_gate_busy(true);
            }
            self.measured_ns.load(Ordering::Relaxed) / MEASURED_LAUNCHES
        };
        let used = self.accounted_ns.fetch_add(add, Ordering::Relaxed) + add;
        // what the daemon charges when the slice ends with nothing in flight, if it is
        // not given back first
        self.region.set_slice_used(used, n >= MEASURED_LAUNCHES);
        if used >= self.slice.as_nanos() as u64 {
            self.give_back(Waiter::Program, GiveBack::Now);
        }
    }

    /// Wait for this process's work in flight (the gate busy meanwhile, so the daemon
    /// does not hand the GPU on under it) and measure it: the GPU time its slice has
    /// used, and the time its work ran on after the slice had ended, which is owed. The
    /// launches counted at the mean since the last wait are measured as the time from
    /// the first of them until all are done (idle gaps among them included: at most
    /// [`SLICE_SPIN`] each, after which the watcher waits for them). The caller holds
    /// `settling`.
    fn settle(&self, waiter: Waiter) -> u64 {
        self.region.set_gate_busy(true);
        let t0 = epoch_ns();
        let begin = if self.unsynced.load(Ordering::Relaxed) {
            self.unsynced_since.load(Ordering::Relaxed).min(t0)
        } else {
            t0
        };
        match waiter {
            Waiter::Program => crate::real::synchronize(),
            Waiter::Watcher => {
                crate::real::synchronize_context(self.context.load(Ordering::Relaxed))
            }
        }
        let done = epoch_ns().max(t0);
        self.unsynced.store(false, Ordering::Relaxed);
        let ran = done - begin;
        let open = self.region.granted().is_some();
        // the part of the wait after the daemon ended the slice
        let after = if open { 0 } else { done - self.region.closed_at().clamp(begin, done) };
        let used = self.measured_ns.load(Ordering::Relaxed)
            + self.settled_ns.fetch_add(ran - after, Ordering::Relaxed)
            + (ran - after);
        // from now on the measured figure is the slice's
        self.accounted_ns.store(used, Ordering::Relaxed);
        self.region.set_slice_used(used, false);
        if after > 0 {
            self.region.add_owed(after);
        }
        used
    }

    /// Give the slice back, its last charge measured (see [`Tenant::settle`]), if
    /// `when` still holds once no other thread settles. A slice whose time was up
    /// meanwhile is released too: the daemon kept the GPU for it while the gate was
    /// busy, and ends it on this word rather than on its next look.
    #[cold]
    fn give_back(&self, waiter: Waiter, when: GiveBack) {
        let Ok(_one) = self.settling.lock() else { return };
        let go = match when {
            GiveBack::Now => true,
            GiveBack::InFlight => self.in_flight(),
            GiveBack::Idle => !self.in_flight() && self.region.granted().is_some(),
        };
        if !go {
            return;
        }
        let used = self.settle(waiter);
        if let (Ok(mut client), Ok(outstanding)) = (self.client.lock(), self.outstanding.lock())
            && let Some(h) = *outstanding
        {
            // a failure here means the daemon is gone, which the next launch reports; a
            // release of a slice already ended is ignored
            let _ = client.release_slice(h, Duration::from_nanos(used), true);
        }
        self.region.set_gate_busy(false);
    }

    /// The GPU of the slice held now, if any.
    pub fn granted(&self) -> Option<u32> {
        self.region.granted()
    }

    /// The launch gate: return once the tenant holds a slice of a GPU. Inside a slice
    /// this is one atomic load; outside, it asks the daemon for a slice (one
    /// outstanding request per process) and waits — futex on the grant word — until
    /// the policy grants one. `Err` if the daemon went away.
    #[inline]
    pub fn acquire(&self) -> Result<(), CuResult> {
        // a launch is under way: the slice is in use
        self.last_idle.store(0, Ordering::Relaxed);
        if self.region.granted().is_some() {
            return Ok(());
        }
        self.acquire_slow()
    }

    /// Whether launches counted at the mean may still run.
    pub fn in_flight(&self) -> bool {
        self.unsynced.load(Ordering::Relaxed)
    }

    /// One look by the gate's watcher thread (`quiet`: the launch count it saw last,
    /// and since when). Launches in flight unmeasured are waited for and measured
    /// once the slice has ended, or once none has arrived for [`SLICE_SPIN`]; a slice
    /// whose holder has nothing in flight and launched nothing for [`SLICE_SPIN`] is
    /// given back (work conserving, FairGV §3.2.2), so the GPU goes to whoever wants
    /// it — a program that launches once and then computes on the CPU does not keep it
    /// for the whole slice.
    pub fn watch(&self, quiet: &mut (u64, u64)) {
        let now = epoch_ns();
        let spin = SLICE_SPIN.as_nanos() as u64;
        if self.unsynced.load(Ordering::Relaxed) {
            let launches = self.launches.load(Ordering::Relaxed);
            if self.region.granted().is_some() && launches != quiet.0 {
                *quiet = (launches, now);
            } else if self.region.granted().is_none() {
                state().log(format_args!("work runs past its slice: measured, then owed"));
                self.give_back(Waiter::Watcher, GiveBack::InFlight);
            } else if now.saturating_sub(quiet.1) >= spin
                && let Ok(_one) = self.settling.lock()
                && self.in_flight()
            {
                // nothing launched for the spin budget: wait for what runs, so that the
                // slice is given back once nothing does
                self.settle(Waiter::Watcher);
                self.last_idle.store(epoch_ns(), Ordering::Relaxed);
                self.region.set_gate_busy(false);
            }
            return;
        }
        let idle = self.last_idle.load(Ordering::Relaxed);
        if idle == 0 || self.region.granted().is_none() || now.saturating_sub(idle) < spin {
            return;
        }
        // claimed: a launch starting now (which clears it) keeps the slice instead
        if self.last_idle.compare_exchange(idle, 0, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return;
        }
        state()
            .log(format_args!("idle for {SLICE_SPIN:?} with nothing in flight: slice given back"));
        self.give_back(Waiter::Watcher, GiveBack::Idle);
    }

    #[cold]
    fn acquire_slow(&self) -> Result<(), CuResult> {
        // the last slice's work still running is measured (and owed) before the next
        // slice, which it must not be counted in
        self.give_back(Waiter::Program, GiveBack::InFlight);
        loop {
            self.request_slice()?;
            if self.region.wait_grant(Duration::from_millis(100)) {
                return Ok(());
            }
            if self.region.is_closed() {
                complain_once(
                    &GONE_REPORTED,
                    "tesserad went away: kernel launches fail from now on",
                );
                return Err(SYSTEM_NOT_READY);
            }
        }
    }

    /// Make sure a slice request is outstanding: the previous one's completion (its
    /// slice ended) is collected, and a new one submitted if none is pending.
    fn request_slice(&self) -> Result<(), CuResult> {
        // not while the watcher gives the last slice back (its release names it)
        let _one = self.settling.lock().map_err(|_| status::UNKNOWN)?;
        let mut client = self.client.lock().map_err(|_| status::UNKNOWN)?;
        let mut outstanding = self.outstanding.lock().map_err(|_| status::UNKNOWN)?;
        let gone = |why: &str| {
            complain_once(
                &GONE_REPORTED,
                &format!("tesserad went away ({why}): kernel launches fail from now on"),
            );
            SYSTEM_NOT_READY
        };
        if let Some(h) = *outstanding {
            match client.wait(h, Duration::ZERO) {
                // the slice ended (done), or the daemon gives no more
                Ok(c) if c.outcome == Outcome::Cancelled(reason::SHUTDOWN) => {
                    return Err(gone("it is shutting down"));
                }
                Ok(_) => *outstanding = None,
                Err(ClientError::TimedOut) => {}
                Err(e) => return Err(gone(&e.to_string())),
            }
        }
        if outstanding.is_none() {
            match client.submit_slice(self.id, self.slice, self.launch_facts()) {
                Ok(h) => {
                    // a new slice: its accounting starts from nothing
                    self.launches.store(0, Ordering::Relaxed);
                    self.accounted_ns.store(0, Ordering::Relaxed);
                    self.measured_ns.store(0, Ordering::Relaxed);
                    self.settled_ns.store(0, Ordering::Relaxed);
                    self.region.set_slice_used(0, false);
                    *outstanding = Some(h)
                }
                Err(e) => return Err(gone(&e.to_string())),
            }
        }
        Ok(())
    }

    /// A memory request on the memory connection, connecting (again) when needed: a
    /// control connection the daemon closed while it was idle is opened anew once.
    fn desk<R>(
        &self,
        call: impl Fn(&mut Client) -> Result<R, ClientError>,
    ) -> Result<R, ClientError> {
        let mut conn = self.memory.lock().map_err(|_| ClientError::Protocol("poisoned".into()))?;
        for attempt in 0..2 {
            if conn.is_none() {
                *conn = Some(Client::connect_control(&self.socket)?);
            }
            let Some(c) = conn.as_mut() else { continue };
            match call(c) {
                Err(ClientError::Connect(_) | ClientError::DaemonGone) if attempt == 0 => {
                    *conn = None;
                }
                other => return other,
            }
        }
        Err(ClientError::DaemonGone)
    }

    /// Reserve `bytes` on `gpu` before the real allocation: within the tenant's limit,
    /// then in the node's ledger through the daemon (waiting as the settings say).
    /// `Err` is the CUDA error the application gets.
    pub fn reserve(&self, gpu: u32, bytes: u64) -> Result<(), CuResult> {
        {
            let mut book = self.book.lock().map_err(|_| status::UNKNOWN)?;
            if let Some(limit) = self.limit
                && book.used.saturating_add(bytes) > limit
            {
                complain_once(
                    &OVER_LIMIT_REPORTED,
                    &format!(
                        "an allocation of {} MiB is refused: this program's limit is {} MiB (TESSERA_MEMORY) and it holds {} MiB (said once)",
                        bytes >> 20,
                        limit >> 20,
                        book.used >> 20
                    ),
                );
                return Err(status::OUT_OF_MEMORY);
            }
            book.used += bytes;
        }
        // the fast path: from this process's lease on the GPU, without asking anyone
        if self.region.lease_take(self.node(gpu), bytes) {
            return Ok(());
        }
        // what is left of the lease counts towards it; the rest is asked of the daemon:
        // with one more chunk of lease if that fits at once (within the limit), else
        // exactly what is missing, waiting as the settings say
        let have = self.region.lease_reclaim(self.node(gpu));
        if have >= bytes {
            // another thread returned memory meanwhile
            self.return_to_lease(gpu, have - bytes);
            return Ok(());
        }
        let missing = bytes - have;
        let room = self.limit.map_or(u64::MAX, |limit| {
            limit.saturating_sub(self.book.lock().map_or(limit, |b| b.used))
        });
        let chunk = LEASE_CHUNK.min(room);
        if chunk > 0
            && self
                .desk(|c| {
                    c.reserve(self.id, self.node(gpu), missing + chunk, Some(Duration::ZERO), true)
                })
                .is_ok()
        {
            self.return_to_lease(gpu, chunk);
            return Ok(());
        }
        match self.desk(|c| c.reserve(self.id, self.node(gpu), missing, self.wait, false)) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.return_to_lease(gpu, have);
                if let Ok(mut book) = self.book.lock() {
                    book.used -= bytes;
                }
                match &e {
                    // not fitting is the answer the program expects; a deadlock is
                    // not, so it is told why
                    ClientError::Refused { code: ErrorCode::NoMemory, message }
                        if !message.contains("deadlock") => {}
                    ClientError::Refused { code: ErrorCode::NoMemory, message } => {
                        complain(&format!("allocation refused: {message}"));
                    }
                    other => complain(&format!("the memory reservation failed: {other}")),
                }
                Err(status::OUT_OF_MEMORY)
            }
        }
    }

    /// Make sure the memory this process's context takes on `gpu` is reserved (once per
    /// GPU; the daemon says how much): a real context takes a few hundred MiB before
    /// the first allocation, which admission must not promise to anyone else.
    #[inline]
    pub fn reserve_context(&self, gpu: u32) -> Result<(), CuResult> {
        if gpu < 64 && self.contexts_done.load(Ordering::Relaxed) & (1 << gpu) != 0 {
            return Ok(());
        }
        self.reserve_context_slow(gpu)
    }

    /// The daemon reserves a context once per tenant and GPU (a second request reserves
    /// nothing), so threads racing here need no lock of their own.
    #[cold]
    fn reserve_context_slow(&self, gpu: u32) -> Result<(), CuResult> {
        match self.desk(|c| c.reserve_context(self.id, self.node(gpu), self.wait)) {
            Ok(bytes) => {
                state().log(format_args!("context on {gpu}: {bytes} reserved"));
                if gpu < 64 {
                    self.contexts_done.fetch_or(1 << gpu, Ordering::Relaxed);
                }
                Ok(())
            }
            Err(e) => {
                complain(&format!("the memory for a context on GPU {gpu} was refused: {e}"));
                Err(status::OUT_OF_MEMORY)
            }
        }
    }

    /// The real allocation did not happen: undo [`Tenant::reserve`].
    pub fn unreserve(&self, gpu: u32, bytes: u64) {
        if let Ok(mut book) = self.book.lock() {
            book.used -= bytes;
        }
        self.return_to_lease(gpu, bytes);
    }

    /// Memory no longer allocated goes back to the GPU's lease; beyond one chunk
    /// unused, it goes back to the daemon.
    fn return_to_lease(&self, gpu: u32, bytes: u64) {
        let excess = self.region.lease_return(self.node(gpu), bytes, LEASE_CHUNK);
        if excess > 0 {
            self.give_back_memory(gpu, excess);
        }
    }

    /// Return a reservation to the daemon; a failure (the daemon is gone, and with it
    /// every reservation) is logged only.
    fn give_back_memory(&self, gpu: u32, bytes: u64) {
        if let Err(e) = self.desk(|c| c.unreserve(self.id, self.node(gpu), bytes)) {
            state().log(format_args!("unreserve {bytes} on {gpu} failed: {e}"));
        }
    }

    /// The real allocation `what` succeeded.
    pub fn record(&self, what: Allocation, gpu: u32, bytes: u64) {
        if let Ok(mut book) = self.book.lock() {
            book.allocations.insert(what, (gpu, bytes));
        }
    }

    /// `what` was freed: return its reservation. Allocations the interposer did not
    /// make change nothing.
    pub fn release(&self, what: Allocation) {
        let freed = self.book.lock().ok().and_then(|mut b| {
            let (gpu, bytes) = b.allocations.remove(&what)?;
            b.used -= bytes;
            Some((gpu, bytes))
        });
        if let Some((gpu, bytes)) = freed {
            self.return_to_lease(gpu, bytes);
        }
    }

    /// Move every reservation held on `from` to `to` (a migration, DCUDA §3.4): the
    /// target is reserved first, so that on a refusal nothing changes and the program
    /// stays where it is; then the source is returned. The bytes moved, or the error.
    pub fn move_reservations(&self, from: u32, to: u32) -> Result<u64, CuResult> {
        let bytes: u64 = {
            let book = self.book.lock().map_err(|_| status::UNKNOWN)?;
            book.allocations.values().filter(|(g, _)| *g == from).map(|(_, b)| b).sum()
        };
        if bytes > 0 {
            self.desk(|c| c.reserve(self.id, self.node(to), bytes, Some(Duration::ZERO), false))
                .map_err(|_| status::OUT_OF_MEMORY)?;
            self.give_back_memory(from, bytes);
        }
        if let Ok(mut book) = self.book.lock() {
            for (gpu, _) in book.allocations.values_mut() {
                if *gpu == from {
                    *gpu = to;
                }
            }
        }
        Ok(bytes)
    }

    /// (free, total) as the tenant should see them on `gpu`: its limit and its use
    /// when it has a limit, else the GPU's capacity and what the ledger has not granted.
    pub fn memory_info(&self, gpu: u32) -> Option<(u64, u64)> {
        let used = self.book.lock().ok()?.used;
        match self.limit {
            Some(limit) => Some((limit.saturating_sub(used), limit)),
            // what the ledger has not granted, and this process's own unused lease
            None => {
                self.desk(|c| c.memory_info(self.id, self.node(gpu))).ok().map(|(free, total)| {
                    ((free + self.region.lease_unused(self.node(gpu))).min(total), total)
                })
            }
        }
    }
}
