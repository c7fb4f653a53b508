//! The memory desk: interposed programs reserve GPU memory in the node's ledger through
//! the daemon (`Reserve`, `Unreserve`, `MemoryInfo` on the control socket), so that the
//! programs of every user on the node share one ledger without any of them opening its
//! file. Each tenant gets a ledger handle of its own (a client of the ledger, with its
//! own record), opened by the daemon when the tenant first reserves: the ledger's books,
//! its FIFO queue and its deadlock detection see one client per program, and closing
//! the tenant (its program exited or was killed, its Slurm job ended) releases what it
//! held. A tenant's reservations can be changed only through a connection of the
//! tenant's own uid, and never beyond what it holds or its declared limit.
//!
//! Programs lease memory in chunks and allocate from their leases without asking (the
//! unused part of a lease is a word per GPU in the program's shared region). Before a
//! reservation that does not fit at once waits or is refused, the desk takes back every
//! tenant's unused lease on that GPU and returns it to the ledger; and while anyone
//! waits, the desk's lease watcher takes back, every [`LEASE_WATCH`], whatever a program
//! frees into its lease on a GPU someone waits for — so that a waiter is never refused,
//! nor kept waiting, for memory that sits unused in a lease.
//!
//! A tenant reserves only on the GPUs it is placed on (a Slurm job's tenant: its job's
//! GPUs), and a job's memory entitlement is counted per GPU.
//!
//! Ledger operations take the ledger file's lock and may wait for memory, so none runs
//! on the control loop or the core: each request runs on a thread of its own, at most
//! [`MAX_IN_FLIGHT`] at once. Requests that may wait are capped lower, per uid
//! ([`MAX_WAITS_PER_UID`]) and for the node ([`MAX_WAITS`]), so that one user's waits
//! leave room for everyone else's requests and for every free (beyond a cap a request
//! is refused with `NoCapacity`).

mod job;

pub use job::{Entitlement, JobMemory};

use crate::events::{EventLog, NodeEvent};
use crate::metrics::NodeMetrics;
use crate::server::ReplyTo;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tessera_client::proto::{ErrorCode, Reply, Request};
use tessera_client::region::Region;
use tessera_ledger::{Ledger, LedgerConfig, LedgerError, Wait};

/// Memory requests being carried out at once (each on a thread; most wait for memory).
pub const MAX_IN_FLIGHT: usize = 1024;

/// Requests that may wait (a reservation with a wait), of all users together: the rest
/// of [`MAX_IN_FLIGHT`] is kept for requests that never wait (frees, queries, no-wait
/// reservations), so that waits can never crowd out the free that would end them.
pub const MAX_WAITS: usize = 896;

/// Requests that may wait, of one uid: a quarter of the node's, so that one user's
/// waits leave room for at least three others'.
pub const MAX_WAITS_PER_UID: usize = MAX_WAITS / 4;

/// How often the lease watcher looks at the leases of GPUs someone waits for.
pub const LEASE_WATCH: Duration = Duration::from_millis(5);

/// The desk, shared by the control loop (requests), the core (tenants come and go) and
/// the threads carrying requests out.
#[derive(Debug)]
pub struct MemoryDesk {
    /// How to open a tenant's handle on the node's ledger.
    ledger: LedgerConfig,
    tenants: Mutex<HashMap<u64, Arc<TenantMemory>>>,
    /// Slurm jobs' shared memory, while any of their tenants is open.
    jobs: Mutex<HashMap<u64, Arc<JobMemory>>>,
    in_flight: AtomicUsize,
    /// Requests that may wait, in all and per uid.
    waits: Mutex<Waits>,
    /// Whether the lease watcher thread runs (it stops once nobody waits).
    watching: AtomicBool,
    /// Bytes a program's context takes on each GPU it uses.
    context_bytes: u64,
    /// Bytes asked for by reservations waiting now, per GPU (the metrics).
    waiting: Mutex<HashMap<u32, u64>>,
    /// Where memory waits and refusals are logged.
    events: Arc<EventLog>,
    /// Where refusals are counted, when metrics are exported.
    metrics: Option<Arc<NodeMetrics>>,
}

/// Requests that may wait, being carried out.
#[derive(Debug, Default)]
struct Waits {
    all: usize,
    per_uid: HashMap<u32, usize>,
}

/// One tenant's memory, as the desk keeps it.
#[derive(Debug)]
struct TenantMemory {
    uid: u32,
    /// Its program's pid, as the daemon sees it: the ledger's rows name it.
    pid: u32,
    /// The GPUs it may reserve on: those it is placed on (a job's tenant: the job's).
    /// Empty: any (a client that lets the policy dispatch anywhere).
    gpus: Mutex<Vec<u32>>,
    /// Its shared region, whose lease words it allocates from.
    region: Option<Arc<Region>>,
    /// Its declared memory, when it declared one: reservations never exceed it.
    limit: Option<u64>,
    /// Its ledger handle, opened on first use (`Err`: why it cannot be).
    handle: OnceLock<Result<Ledger, String>>,
    /// Bytes held through the desk for allocations, per GPU.
    held: Mutex<HashMap<u32, u64>>,
    /// The Slurm job it belongs to, whose memory entitlement its reservations share
    /// with the job's other tenants.
    job: Option<Arc<JobMemory>>,
    /// GPUs whose context memory is reserved (beside `held`, outside the limit).
    contexts: Mutex<std::collections::HashSet<u32>>,
    /// Set when the tenant closes: its waits give up, and what it is granted after that
    /// is returned at once.
    closed: AtomicBool,
}

impl TenantMemory {
    fn ledger(&self, config: &LedgerConfig) -> Result<&Ledger, String> {
        self.handle
            .get_or_init(|| Ledger::open_for(config, self.pid).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }

    fn held_total(&self) -> u64 {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).values().sum()
    }

    /// Whether it may reserve on `gpu`; `Err`: why not.
    fn may_use(&self, tenant: u64, gpu: u32) -> Result<(), String> {
        let gpus = self.gpus.lock().unwrap_or_else(|p| p.into_inner());
        if gpus.is_empty() || gpus.contains(&gpu) {
            return Ok(());
        }
        Err(match &self.job {
            Some(job) => format!(
                "tenant {tenant} belongs to Slurm job {}, whose GPUs are {gpus:?}: it cannot reserve on GPU {gpu}",
                job.job
            ),
            None => format!(
                "tenant {tenant} is placed on GPU(s) {gpus:?}: it cannot reserve on GPU {gpu}"
            ),
        })
    }
}

impl Drop for TenantMemory {
    /// The tenant's handle goes, and with it everything it held in the ledger: its
    /// job's share of the entitlement comes back too.
    fn drop(&mut self) {
        if let Some(job) = &self.job {
            for (gpu, bytes) in self.held.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                job.give_back(*gpu, *bytes);
            }
        }
    }
}

/// A request's `wait_ms` as a ledger wait.
fn wait_of(wait_ms: Option<u64>) -> Wait {
    match wait_ms {
        None => Wait::Forever,
        Some(0) => Wait::NoWait,
        Some(ms) => Wait::Timeout(Duration::from_millis(ms)),
    }
}

/// The answer to a reservation the ledger refused.
fn ledger_refusal(tenant: u64, e: LedgerError) -> Reply {
    match e {
        LedgerError::NoSuchGpu { .. } => refused(ErrorCode::BadRequest, e.to_string()),
        LedgerError::WouldDeadlock { gpu, requested, holders } => refused(
            ErrorCode::NoMemory,
            format!(
                "waiting for {requested} bytes on GPU {gpu} would deadlock: the memory is held by {}, which wait(s) for memory this program holds",
                programs(&holders)
            ),
        ),
        LedgerError::NotAvailableNow { .. }
        | LedgerError::TimedOut { .. }
        | LedgerError::ExceedsCapacity { .. }
        | LedgerError::NeverFits { .. }
        | LedgerError::Cancelled { .. } => refused(ErrorCode::NoMemory, e.to_string()),
        e => {
            tracing::error!(tenant, error = %e, "the ledger failed a reservation");
            refused(ErrorCode::NoCapacity, format!("the node's ledger: {e}"))
        }
    }
}

/// The programs `pids` (as the daemon sees them), each with its command line, for a
/// message: "pid 41 (python train.py), pid 42 (./serve)".
fn programs(pids: &[u32]) -> String {
    pids.iter()
        .map(|pid| match command_of(*pid) {
            Some(cmd) => format!("pid {pid} ({cmd})"),
            None => format!("pid {pid}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A process's command line, shortened for a message; `None` when it cannot be read
/// (gone, or hidden from the daemon).
pub(crate) fn command_of(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut cmd = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    if cmd.is_empty() {
        cmd = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim().to_string();
    }
    if cmd.chars().count() > 80 {
        cmd = cmd.chars().take(77).collect::<String>() + "...";
    }
    Some(cmd)
}

fn refused(code: ErrorCode, message: impl Into<String>) -> Reply {
    Reply::Error { code, message: message.into() }
}

impl MemoryDesk {
    /// A desk reserving in the ledger `ledger` describes (the daemon's own).
    pub fn new(ledger: LedgerConfig, context_bytes: u64) -> MemoryDesk {
        MemoryDesk {
            ledger,
            tenants: Mutex::new(HashMap::new()),
            jobs: Mutex::new(HashMap::new()),
            in_flight: AtomicUsize::new(0),
            waits: Mutex::new(Waits::default()),
            watching: AtomicBool::new(false),
            context_bytes,
            waiting: Mutex::new(HashMap::new()),
            events: Arc::new(EventLog::new(None).expect("a log without a file always opens")),
            metrics: None,
        }
    }

    /// Log memory waits and refusals to `events`, count refusals in `metrics`.
    pub fn with_observers(
        mut self,
        events: Arc<EventLog>,
        metrics: Option<Arc<NodeMetrics>>,
    ) -> MemoryDesk {
        self.events = events;
        self.metrics = metrics;
        self
    }

    /// Bytes asked for by reservations waiting now, per GPU.
    pub fn waiting_bytes(&self) -> HashMap<u32, u64> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Wait for `bytes` on `gpu` for `tenant` as `wait` says, logged as a memory wait
    /// and its end, and counted in the bytes waited for.
    fn wait_for(
        self: &Arc<Self>,
        (tenant, uid, t): (u64, u32, &TenantMemory),
        ledger: &Ledger,
        gpu: u32,
        bytes: u64,
        wait: Wait,
    ) -> Result<(), LedgerError> {
        let (free, waiting_before) = match ledger.status() {
            Ok(s) => s
                .gpus
                .get(gpu as usize)
                .map_or((0, 0), |g| (g.total.saturating_sub(g.used), g.waiting)),
            Err(_) => (0, 0),
        };
        self.events
            .record(Some(uid), NodeEvent::MemoryWait { tenant, gpu, bytes, free, waiting_before });
        let began = std::time::Instant::now();
        *self.waiting.lock().unwrap_or_else(|p| p.into_inner()).entry(gpu).or_default() += bytes;
        self.watch_leases();
        let granted = ledger.pre_alloc_unless(gpu, bytes, wait, &t.closed);
        if let Some(w) = self.waiting.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&gpu) {
            *w = w.saturating_sub(bytes);
        }
        self.events.record(
            Some(uid),
            NodeEvent::MemoryWaitEnded {
                tenant,
                gpu,
                bytes,
                waited_ms: began.elapsed().as_secs_f64() * 1e3,
                granted: granted.is_ok(),
                reason: granted.as_ref().err().map(|e| e.to_string()),
            },
        );
        granted
    }

    fn tenants(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<TenantMemory>>> {
        self.tenants.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A tenant of `uid` was registered by its program `pid`, with `declared` bytes (0:
    /// no limit), placed on `gpus` (empty: any), its connection's shared region
    /// `region` holding its leases; `job`: the Slurm job it belongs to and the job's
    /// memory entitlement, which its reservations share with the job's other tenants.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        &self,
        tenant: u64,
        uid: u32,
        pid: u32,
        declared: u64,
        gpus: Vec<u32>,
        region: Option<Arc<Region>>,
        job: Option<Entitlement>,
    ) {
        let job = job.map(|e| {
            let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            jobs.retain(|_, j| Arc::strong_count(j) > 1);
            jobs.entry(e.job)
                .or_insert_with(|| {
                    Arc::new(JobMemory {
                        job: e.job,
                        entitled: e.total,
                        per_gpu: e.per_gpu.iter().copied().collect(),
                        held: Default::default(),
                    })
                })
                .clone()
        });
        self.tenants().insert(
            tenant,
            Arc::new(TenantMemory {
                uid,
                pid,
                gpus: Mutex::new(gpus),
                region,
                job,
                limit: (declared > 0).then_some(declared),
                handle: OnceLock::new(),
                held: Mutex::new(HashMap::new()),
                contexts: Mutex::new(std::collections::HashSet::new()),
                closed: AtomicBool::new(false),
            }),
        );
    }

    /// Each tenant's client id in the ledger, for those that reserved anything (their
    /// holdings in a ledger status are theirs).
    pub fn ledger_clients(&self) -> HashMap<u64, u64> {
        self.tenants()
            .iter()
            .filter_map(|(t, m)| Some((*t, m.handle.get()?.as_ref().ok()?.client_id())))
            .collect()
    }

    /// The tenant was placed anew (a policy gave it a home GPU): it reserves only there
    /// from now on.
    pub fn place(&self, tenant: u64, gpus: Vec<u32>) {
        if let Some(t) = self.tenants().get(&tenant) {
            *t.gpus.lock().unwrap_or_else(|p| p.into_inner()) = gpus;
        }
    }

    /// The daemon moved the tenant to `gpu` (DCUDA's balancer): it may reserve there
    /// too (its program moves its reservations there before returning those it leaves).
    pub fn allow(&self, tenant: u64, gpu: u32) {
        if let Some(t) = self.tenants().get(&tenant) {
            let mut gpus = t.gpus.lock().unwrap_or_else(|p| p.into_inner());
            if !gpus.is_empty() && !gpus.contains(&gpu) {
                gpus.push(gpu);
            }
        }
    }

    /// A tenant closed: its waits give up and its handle, once no request uses it, is
    /// dropped — which releases everything it held in the ledger.
    pub fn close(&self, tenant: u64) {
        if let Some(t) = self.tenants().remove(&tenant) {
            t.closed.store(true, Ordering::Relaxed);
            // its waits see the flag now, not at their next periodic look
            if let Some(Ok(ledger)) = t.handle.get() {
                ledger.nudge();
            }
            // dropping the handle releases what it held under the ledger's lock, which
            // any process can hold: never on the caller's thread (the core's)
            let dropped =
                std::thread::Builder::new().name("memory-close".into()).spawn(move || drop(t));
            if let Err(e) = dropped {
                tracing::warn!(tenant, error = %e, "released a tenant's memory on the core thread");
            }
        }
    }

    /// Carry out a memory request of a connection of `uid`, answering `reply` from a
    /// thread of its own.
    pub fn submit(self: &Arc<Self>, uid: u32, pid: u32, request: Request, reply: ReplyTo) {
        let may_wait = match &request {
            Request::Reserve { wait_ms, lease, .. } => !lease && *wait_ms != Some(0),
            Request::ReserveContext { wait_ms, .. } => *wait_ms != Some(0),
            _ => false,
        };
        if may_wait && let Err(why) = self.start_wait(uid) {
            reply.send(refused(ErrorCode::NoCapacity, why));
            return;
        }
        if self.in_flight.fetch_add(1, Ordering::Relaxed) >= MAX_IN_FLIGHT {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            if may_wait {
                self.end_wait(uid);
            }
            reply.send(refused(
                ErrorCode::NoCapacity,
                format!("{MAX_IN_FLIGHT} memory requests are being served; try again"),
            ));
            return;
        }
        let desk = self.clone();
        let spawned = std::thread::Builder::new().name("memory".into()).spawn(move || {
            let kind = request.kind();
            let (answer, fd) = match request {
                Request::KeepLedgerRecord { tenant } => match desk.record_of(uid, tenant) {
                    Ok((client, fd)) => (Reply::LedgerRecord { client }, Some(fd)),
                    Err((code, message)) => (refused(code, message), None),
                },
                request => (desk.carry_out(uid, request), None),
            };
            if let Reply::Error { code, message } = &answer {
                if let Some(m) = &desk.metrics {
                    m.refusals.get_or_create(&crate::metrics::reason(*code)).inc();
                }
                desk.events.record(
                    Some(uid),
                    NodeEvent::Refused { pid, request: kind, code: *code, reason: message.clone() },
                );
            }
            desk.in_flight.fetch_sub(1, Ordering::Relaxed);
            if may_wait {
                desk.end_wait(uid);
            }
            match fd {
                Some(fd) => reply.send_with_fd(answer, fd),
                None => reply.send(answer),
            }
        });
        if let Err(e) = spawned {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            if may_wait {
                self.end_wait(uid);
            }
            tracing::error!(error = %e, "cannot start a thread for a memory request");
        }
    }

    /// Count a request that may wait, within the node's and `uid`'s caps.
    fn start_wait(&self, uid: u32) -> Result<(), String> {
        let mut w = self.waits.lock().unwrap_or_else(|p| p.into_inner());
        let mine = w.per_uid.get(&uid).copied().unwrap_or(0);
        if mine >= MAX_WAITS_PER_UID {
            return Err(format!(
                "uid {uid} has {mine} memory requests that may wait being served (at most {MAX_WAITS_PER_UID} per user); try again"
            ));
        }
        if w.all >= MAX_WAITS {
            return Err(format!(
                "{MAX_WAITS} memory requests that may wait are being served; try again"
            ));
        }
        w.all += 1;
        *w.per_uid.entry(uid).or_default() += 1;
        Ok(())
    }

    fn end_wait(&self, uid: u32) {
        let mut w = self.waits.lock().unwrap_or_else(|p| p.into_inner());
        w.all = w.all.saturating_sub(1);
        if let Some(n) = w.per_uid.get_mut(&uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                w.per_uid.remove(&uid);
            }
        }
    }

    /// Start the lease watcher unless it runs: while anyone waits for memory, it takes
    /// back, every [`LEASE_WATCH`], the unused leases on the GPUs waited for, so that
    /// memory a program frees into its lease reaches a waiter at once instead of when
    /// the program exits.
    fn watch_leases(self: &Arc<Self>) {
        if self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let desk = Arc::downgrade(self);
        let spawned = std::thread::Builder::new().name("leases".into()).spawn(move || {
            loop {
                std::thread::sleep(LEASE_WATCH);
                let Some(desk) = desk.upgrade() else { return };
                let gpus: Vec<u32> = desk
                    .waiting_bytes()
                    .into_iter()
                    .filter(|(_, b)| *b > 0)
                    .map(|(g, _)| g)
                    .collect();
                if gpus.is_empty() {
                    desk.watching.store(false, Ordering::Release);
                    // a wait that began after the look and before the store started no
                    // watcher: look once more
                    if desk.waiting_bytes().values().all(|b| *b == 0)
                        || desk.watching.swap(true, Ordering::AcqRel)
                    {
                        return;
                    }
                    continue;
                }
                for gpu in gpus {
                    desk.reclaim_leases(gpu);
                }
            }
        });
        if let Err(e) = spawned {
            self.watching.store(false, Ordering::Release);
            tracing::error!(error = %e, "cannot start the lease watcher");
        }
    }

    /// Take back every tenant's unused lease on `gpu` and return it to the ledger (what a
    /// region's word claims is bounded by what the tenant holds there).
    fn reclaim_leases(&self, gpu: u32) {
        let tenants: Vec<(u64, Arc<TenantMemory>)> =
            self.tenants().iter().map(|(id, t)| (*id, t.clone())).collect();
        for (id, t) in tenants {
            let Some(region) = &t.region else { continue };
            if region.lease_unused(gpu) == 0 {
                continue;
            }
            let Ok(ledger) = t.ledger(&self.ledger) else { continue };
            let mut held = t.held.lock().unwrap_or_else(|p| p.into_inner());
            let has = held.get(&gpu).copied().unwrap_or(0);
            let back = region.lease_reclaim(gpu).min(has);
            if back > 0 && ledger.post_free(gpu, back).is_ok() {
                held.insert(gpu, has - back);
                if let Some(job) = &t.job {
                    job.give_back(gpu, back);
                }
                tracing::debug!(tenant = id, gpu, bytes = back, "took back an unused lease");
            }
        }
    }

    /// The tenant, if it is open and of `uid`.
    fn tenant_of(&self, uid: u32, tenant: u64) -> Result<Arc<TenantMemory>, (ErrorCode, String)> {
        match self.tenants().get(&tenant) {
            Some(t) if t.uid == uid => Ok(t.clone()),
            Some(_) => {
                Err((ErrorCode::Forbidden, format!("tenant {tenant} belongs to another user")))
            }
            None => Err((ErrorCode::UnknownTenant, format!("no open tenant {tenant}"))),
        }
    }

    /// The ledger record of `tenant`'s reservations, for its program to keep open
    /// (opening the tenant's handle if it has none yet).
    fn record_of(&self, uid: u32, tenant: u64) -> Result<(u64, OwnedFd), (ErrorCode, String)> {
        let t = self.tenant_of(uid, tenant)?;
        let ledger = t
            .ledger(&self.ledger)
            .map_err(|why| (ErrorCode::NoCapacity, format!("the node's ledger: {why}")))?;
        let fd = ledger
            .record_descriptor()
            .map_err(|e| (ErrorCode::NoCapacity, format!("the node's ledger: {e}")))?;
        Ok((ledger.client_id(), fd))
    }

    /// `Adopt`: give `tenant` the handle on the ledger client `client` a previous
    /// daemon held for the same program, with what it holds.
    fn adopt(&self, tenant: u64, t: &TenantMemory, client: u64, contexts: &[u32]) -> Reply {
        if t.handle.get().is_some() {
            return refused(
                ErrorCode::BadRequest,
                format!("tenant {tenant} has reserved memory of its own already: adopt first"),
            );
        }
        let adopted = match Ledger::adopt(&self.ledger, client, t.pid) {
            Ok(l) => l,
            Err(e @ LedgerError::NotAdoptable { .. }) => {
                return refused(ErrorCode::Forbidden, e.to_string());
            }
            Err(e) => return refused(ErrorCode::NoCapacity, format!("the node's ledger: {e}")),
        };
        if t.handle.set(Ok(adopted)).is_err() {
            return refused(ErrorCode::BadRequest, format!("tenant {tenant} reserved meanwhile"));
        }
        let Ok(ledger) = t.ledger(&self.ledger) else {
            return refused(ErrorCode::NoCapacity, "the adopted handle is gone");
        };
        let held = match ledger.held() {
            Ok(h) => h,
            Err(e) => return refused(ErrorCode::NoCapacity, format!("the node's ledger: {e}")),
        };
        let mut books = t.held.lock().unwrap_or_else(|p| p.into_inner());
        let mut reserved = t.contexts.lock().unwrap_or_else(|p| p.into_inner());
        for &(gpu, bytes) in &held {
            // the context's part is held beside the allocations, as when reserved anew
            let context = if contexts.contains(&gpu) && bytes >= self.context_bytes {
                reserved.insert(gpu);
                self.context_bytes
            } else {
                0
            };
            books.insert(gpu, bytes - context);
            if let Some(job) = &t.job {
                job.count(gpu, bytes - context);
            }
        }
        tracing::info!(
            tenant,
            client,
            pid = t.pid,
            ?held,
            "adopted the reservations of a program the previous daemon served"
        );
        Reply::Adopted { held }
    }

    fn carry_out(self: &Arc<Self>, uid: u32, request: Request) -> Reply {
        let (tenant, t) = match &request {
            Request::Reserve { tenant, .. }
            | Request::ReserveContext { tenant, .. }
            | Request::Unreserve { tenant, .. }
            | Request::MemoryInfo { tenant, .. }
            | Request::Adopt { tenant, .. } => match self.tenant_of(uid, *tenant) {
                Ok(t) => (*tenant, t),
                Err((code, message)) => return refused(code, message),
            },
            _ => return refused(ErrorCode::BadRequest, "not a memory request"),
        };
        if let Request::Adopt { client, contexts, .. } = &request {
            return self.adopt(tenant, &t, *client, contexts);
        }
        let ledger = match t.ledger(&self.ledger) {
            Ok(l) => l,
            Err(why) => {
                tracing::error!(tenant, error = %why, "cannot open the ledger for a tenant");
                return refused(ErrorCode::NoCapacity, format!("the node's ledger: {why}"));
            }
        };
        match request {
            Request::Reserve { gpu, bytes, wait_ms, lease, .. } => {
                if let Err(why) = t.may_use(tenant, gpu) {
                    return refused(ErrorCode::Forbidden, why);
                }
                if let Some(limit) = t.limit
                    && t.held_total().saturating_add(bytes) > limit
                {
                    return refused(
                        ErrorCode::NoMemory,
                        format!(
                            "{bytes} bytes more would exceed tenant {tenant}'s limit of {limit} bytes"
                        ),
                    );
                }
                if let Some(job) = &t.job
                    && let Err(why) = job.take(gpu, bytes)
                {
                    return refused(ErrorCode::NoMemory, why);
                }
                let not_now = |g: &Result<(), LedgerError>| {
                    matches!(g, Err(LedgerError::NotAvailableNow { .. }))
                };
                let mut granted = ledger.pre_alloc(gpu, bytes, Wait::NoWait);
                if not_now(&granted) && !lease {
                    // memory unused in leases goes back to the ledger before anyone waits
                    // or is refused for it
                    self.reclaim_leases(gpu);
                    granted = ledger.pre_alloc(gpu, bytes, Wait::NoWait);
                    let wait = wait_of(wait_ms);
                    if not_now(&granted) && wait != Wait::NoWait {
                        granted = self.wait_for((tenant, uid, &t), ledger, gpu, bytes, wait);
                    }
                }
                match granted {
                    Ok(()) => {
                        *t.held
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .entry(gpu)
                            .or_default() += bytes;
                        Reply::Reserved { gpu, bytes }
                    }
                    Err(e) => {
                        if let Some(job) = &t.job {
                            job.give_back(gpu, bytes);
                        }
                        ledger_refusal(tenant, e)
                    }
                }
            }
            Request::ReserveContext { gpu, wait_ms, .. } => {
                if let Err(why) = t.may_use(tenant, gpu) {
                    return refused(ErrorCode::Forbidden, why);
                }
                // one at a time per tenant, so that two threads' first allocations on
                // a GPU reserve its context once
                let mut contexts = t.contexts.lock().unwrap_or_else(|p| p.into_inner());
                let bytes = self.context_bytes;
                if contexts.contains(&gpu) || bytes == 0 {
                    return Reply::Reserved { gpu, bytes: 0 };
                }
                let mut granted = ledger.pre_alloc(gpu, bytes, Wait::NoWait);
                let wait = wait_of(wait_ms);
                if matches!(granted, Err(LedgerError::NotAvailableNow { .. }))
                    && wait != Wait::NoWait
                {
                    granted = self.wait_for((tenant, uid, &t), ledger, gpu, bytes, wait);
                }
                match granted {
                    Ok(()) => {
                        contexts.insert(gpu);
                        Reply::Reserved { gpu, bytes }
                    }
                    Err(e) => ledger_refusal(tenant, e),
                }
            }
            Request::Unreserve { gpu, bytes, .. } => {
                let mut held = t.held.lock().unwrap_or_else(|p| p.into_inner());
                let has = held.get(&gpu).copied().unwrap_or(0);
                if bytes > has {
                    return refused(
                        ErrorCode::BadRequest,
                        format!("tenant {tenant} holds {has} bytes on GPU {gpu}, not {bytes}"),
                    );
                }
                match ledger.post_free(gpu, bytes) {
                    Ok(()) => {
                        held.insert(gpu, has - bytes);
                        if let Some(job) = &t.job {
                            job.give_back(gpu, bytes);
                        }
                        Reply::Unreserved { gpu, bytes }
                    }
                    Err(e) => {
                        tracing::error!(tenant, error = %e, "the ledger failed a release");
                        refused(ErrorCode::NoCapacity, format!("the node's ledger: {e}"))
                    }
                }
            }
            Request::MemoryInfo { gpu, .. } => match (t.limit, &t.job) {
                // a job's tenant: what is left of the job's entitlement (and of its own
                // limit, if it declared one)
                (limit, Some(job)) => {
                    let cap = job.per_gpu.get(&gpu).copied().unwrap_or(0);
                    let here = job.held().get(&gpu).copied().unwrap_or(0);
                    let job_free =
                        cap.saturating_sub(here).min(job.entitled.saturating_sub(job.held_total()));
                    let own = limit.map_or(u64::MAX, |l| l.saturating_sub(t.held_total()));
                    Reply::Memory {
                        free: job_free.min(own),
                        total: limit.map_or(cap, |l| l.min(cap)),
                    }
                }
                (Some(limit), None) => {
                    Reply::Memory { free: limit.saturating_sub(t.held_total()), total: limit }
                }
                (None, None) => match ledger.status() {
                    Ok(s) => match s.gpus.get(gpu as usize) {
                        Some(g) => {
                            Reply::Memory { free: g.total.saturating_sub(g.used), total: g.total }
                        }
                        None => refused(ErrorCode::BadRequest, format!("no GPU {gpu}")),
                    },
                    Err(e) => refused(ErrorCode::NoCapacity, format!("the node's ledger: {e}")),
                },
            },
            _ => refused(ErrorCode::BadRequest, "not a memory request"),
        }
    }
}
