//! The core loop: one thread owns the policy and every table. It polls the clients'
//! request rings, drains its mailbox (control requests, executor reports), feeds the
//! policy events with the emulated clock's time, and carries out the policy's actions.
//! When there is nothing to do it spins briefly, then sleeps on the doorbell futex.

use crate::executor::{Command, Executor};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_client::proto::{
    BUSY_WINDOW_MS, BalanceSummary, ErrorCode, EventReport, GpuBusy, GpuReport, MigrationReport,
    ModelReport, Reply, RunningReport, STATUS_EVENTS, STATUS_PAGE, ServingSummary, StatusReport,
    TenantClass, TenantReport, Totals,
};
use tessera_client::region::{
    Doorbell, LaunchFacts, Region, RequestDesc, ResponseDesc, daemon_state, op, reason, status,
};
use tessera_core::action::TaskEndReason;
use tessera_core::event::ExecutionFailure;
use tessera_core::model::LaunchInfo;
use tessera_core::policies::dcuda::{DcudaReport, LoadState, MoveReason};
use tessera_core::{
    Action, Bytes, Event, GpuId, Nanos, PerMille, Placement, Policy, ServiceClass, TaskId,
    TaskSpec, TenantId, TenantSpec,
};
use tessera_gpu::occupancy;
use tessera_ledger::{Ledger, Wait};

mod admission;
mod control;
mod follow;
mod host_load;
mod jobs;
mod placement;
mod pods;
mod report;
mod rings;
mod tasks;

use admission::LedgerWorker;
use report::StatusQuery;

/// A client connection's id.
pub type ConnId = u64;

/// Messages to the core loop.
#[derive(Debug)]
pub enum Msg {
    /// A client opened rings.
    Connected {
        /// Connection.
        conn: ConnId,
        /// Its region.
        region: Arc<Region>,
        /// Its own doorbell (the client has the other end of the same eventfd).
        bell: Doorbell,
        /// Peer pid (SO_PEERCRED).
        pid: u32,
        /// Peer uid.
        uid: u32,
    },
    /// A control request, answered on `reply`.
    Control {
        /// Connection (identity from the kernel, not from the message).
        conn: ConnId,
        /// Peer pid.
        pid: u32,
        /// Peer uid.
        uid: u32,
        /// The request.
        request: tessera_client::proto::Request,
        /// Where to answer.
        reply: crate::server::ReplyTo,
    },
    /// The connection closed (or its process died).
    Disconnected {
        /// Connection.
        conn: ConnId,
    },
    /// A GPU finished a task.
    Finished {
        /// GPU.
        gpu: GpuId,
        /// Task.
        task: TaskId,
        /// Emulated run time.
        ran_for: Nanos,
        /// Output bytes written.
        out_len: u32,
    },
    /// A GPU's executor failed a task.
    Failed {
        /// GPU.
        gpu: GpuId,
        /// Task.
        task: TaskId,
        /// How long it ran before failing.
        ran_for: Nanos,
        /// Why.
        reason: String,
    },
    /// A GPU finished resetting.
    ResetDone {
        /// GPU.
        gpu: GpuId,
    },
    /// The ledger's answer to a task's memory admission (see `admission`).
    Admitted {
        /// The task.
        task: TaskId,
        /// Which admission of it.
        ticket: u64,
        /// Where.
        gpu: GpuId,
        /// How much was asked.
        bytes: u64,
        /// Why it was refused (`None`: granted).
        refused: Option<String>,
    },
    /// A metrics scrape: bring the metrics up to date, then say so on `done`.
    Scrape {
        /// Answered when the metrics are current.
        done: std::sync::mpsc::SyncSender<()>,
    },
    /// Drain and stop.
    Shutdown,
}

/// The core's mailbox: a channel plus the doorbell, so that a sender wakes a sleeping
/// core, and a count of pending messages that the core checks before sleeping.
#[derive(Clone, Debug)]
pub struct Mailbox {
    tx: Sender<Msg>,
    pending: Arc<AtomicUsize>,
    bell: Arc<Doorbell>,
    /// Private to the daemon: whether the core sleeps (clients see per-region copies).
    sleeping: Arc<std::sync::atomic::AtomicBool>,
}

impl Mailbox {
    /// A mailbox and its receiving end.
    pub fn new(bell: Arc<Doorbell>) -> (Mailbox, Receiver<Msg>) {
        let (tx, rx) = std::sync::mpsc::channel();
        (
            Mailbox {
                tx,
                pending: Arc::new(AtomicUsize::new(0)),
                bell,
                sleeping: Default::default(),
            },
            rx,
        )
    }

    /// Send and wake the core.
    pub fn send(&self, m: Msg) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        if self.tx.send(m).is_err() {
            self.pending.fetch_sub(1, Ordering::SeqCst);
        }
        if self.sleeping.load(Ordering::SeqCst) {
            self.bell.ring();
        }
    }
}

/// The window over which `status` reports each tenant's received share of GPU time.
const SHARE_WINDOW: Nanos = Nanos(10_000_000_000);

/// GPU time charged to a tenant (see `Core::charge`).
#[derive(Clone, Copy, Debug)]
struct Charge {
    /// When (the daemon's time); the charged time ran up to then.
    at: Nanos,
    tenant: TenantId,
    /// The node's GPU it ran on, when known.
    gpu: Option<u32>,
    ran: Nanos,
}

/// Emulated time: wall time since start times the speed-up.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
    speedup: f64,
}

impl Clock {
    /// Start now.
    pub fn new(speedup: f64) -> Clock {
        Clock { start: Instant::now(), speedup }
    }
    /// Emulated now.
    pub fn now(&self) -> Nanos {
        Nanos((self.start.elapsed().as_nanos() as f64 * self.speedup) as u64)
    }
    /// Emulated time per wall time.
    pub fn speedup(&self) -> f64 {
        self.speedup
    }
    /// Wall duration of an emulated span.
    pub fn wall(&self, span: Nanos) -> Duration {
        Duration::from_nanos((span.0 as f64 / self.speedup) as u64)
    }
    /// Emulated span of a wall duration.
    pub fn emulated(&self, wall: Duration) -> Nanos {
        Nanos((wall.as_nanos() as f64 * self.speedup) as u64)
    }
}

struct Conn {
    region: Arc<Region>,
    /// This client's doorbell, watched edge-triggered and never read: the client
    /// shares its open file (and so its O_NONBLOCK flag and its counter), so a read
    /// could block the core on whatever the client did to it.
    bell: Doorbell,
    /// Rings in the current one-second window that found no request.
    spurious: u32,
    window: Instant,
    /// A client ringing without requests is not listened to until then.
    muted_until: Option<Instant>,
    /// Its connection is being closed for breaking the ring protocol (logged once).
    kicked: std::cell::Cell<bool>,
    pid: u32,
    uid: u32,
    alive: bool,
    tenants: BTreeSet<TenantId>,
    tasks: usize,
}

struct TenantInfo {
    conn: ConnId,
    uid: u32,
    /// Its labels in the metrics (when they are exported).
    labels: Option<crate::metrics::TenantLabels>,
    class: ServiceClass,
    open: bool,
    /// Tasks of this tenant the daemon still tracks (queued or running).
    tasks: usize,
    queued: u64,
    done: u64,
    met: u64,
    not_done: u64,
    /// The GPUs it was placed on (interposed programs see only these).
    placed: Vec<u32>,
    /// Its latest kernel's demand, from the interposer's launch facts.
    demand: Option<f64>,
    /// GPU time charged to it: its completed tasks' run times, and its slices' time as
    /// its launch gate accounted it.
    gpu_time: Nanos,
    /// The device memory it declared at registration (what a migration moves).
    declared: u64,
    /// The Slurm job it belongs to.
    job: Option<u64>,
    /// Its weight for fair sharing.
    weight: u32,
    /// Time its tasks waited in the queue, in all.
    waiting: Nanos,
}

struct TaskInfo {
    conn: ConnId,
    uid: u32,
    seq: u64,
    tenant: TenantId,
    work: Nanos,
    memory: u64,
    in_len: u32,
    out_len: u32,
    submitted: Nanos,
    started: Option<(GpuId, Nanos)>,
    /// A launch-gate slice: nothing runs for it; while dispatched, the client's grant
    /// word names the GPU.
    slice: bool,
    /// Of a slice renewed while its holder had the GPU to itself: the GPU time its gate
    /// accounted (`slice_used`, cumulative over the renewals) charged so far, ns.
    charged: u64,
    /// Of such a slice: the time its renewed legs held and did not charge (a later
    /// charge, of work the gate accounted ahead, may use it).
    slack: Nanos,
}

struct GpuRt {
    /// Tasks running on it (several when the policy co-locates), in dispatch order.
    running: Vec<TaskId>,
    /// Since when anything has run on it (NVSMI's busy time).
    busy_since: Option<Instant>,
    busy_total: Duration,
    resetting: bool,
    memory: u64,
    pool: &'static str,
    /// Open tenants placed on it.
    placed: usize,
    /// Its partitions' shares (inference serving; empty: whole).
    partitions: Vec<PerMille>,
    /// Batches running on it (inference serving), for the interference they cause.
    batches: Vec<RunningBatch>,
    /// Its UUID, when the driver told it (emulated GPUs have none).
    uuid: Option<String>,
}

impl GpuRt {
    /// Time anything has run on it since the daemon started (NVSMI's busy time).
    fn busy(&self) -> Duration {
        self.busy_total + self.busy_since.map_or(Duration::ZERO, |s| s.elapsed())
    }
}

/// A batch of inference requests running on a GPU.
#[derive(Clone, Copy, Debug)]
struct RunningBatch {
    partition: Option<u32>,
    tenant: TenantId,
    requests: u32,
    share_permille: u32,
    /// When the model says it ends (emulated time).
    ends: Nanos,
}

/// The core's state.
pub struct Core {
    /// Whether the host's CPUs are oversubscribed: then nothing spins.
    host: host_load::HostLoad,
    /// GPU-centric coscheduling's boosts in force (a cell: slices end where the core
    /// is borrowed shared).
    cosched: std::cell::RefCell<crate::cosched::Coscheduler>,
    /// Where the core waits on a busy host: its latest client's CPU.
    follow: follow::Follow,
    /// Tasks run over the socket (`RunTask`), by connection and their sequence number
    /// (from [`rings::SOCKET_SEQ`] up): where to answer when they end.
    socket_tasks:
        std::cell::RefCell<std::collections::HashMap<(ConnId, u64), crate::server::ReplyTo>>,
    next_socket_seq: u64,
    /// To close a misbehaving client's connection.
    connections: Arc<crate::server::Connections>,
    /// The daemon's effective uid: its clients of that uid see every tenant.
    daemon_uid: u32,
    /// Wakes the sleeping core: the mailbox's private doorbell (data 0) and every
    /// client's own doorbell (data = its connection id).
    epoll: std::os::fd::OwnedFd,
    policy: Box<dyn Policy>,
    clock: Clock,
    rx: Receiver<Msg>,
    mailbox: Mailbox,
    exec: Executor,
    /// The node's ledger, through its worker thread (see `admission`).
    ledger: Option<LedgerWorker>,
    /// Tasks whose memory admission the ledger has not answered yet: the admission's
    /// ticket, and the batch they run in.
    admitting: BTreeMap<TaskId, (u64, Option<(Nanos, f64)>)>,
    next_ticket: u64,
    /// Tenants' memory reservations made through the daemon (see `memory`).
    desk: Option<Arc<crate::memory::MemoryDesk>>,
    conns: BTreeMap<ConnId, Conn>,
    /// The rings the loop polls: those busy lately (a request within [`ACTIVE`]) or
    /// whose doorbell rang. Every other ring's daemon-sleeping flag is set, so its
    /// client rings its doorbell with its next request: an idle connection costs the
    /// loop nothing, however many there are. (ring, its region, when it last had work)
    active: Vec<(ConnId, Arc<Region>, Instant)>,
    /// Connections whose doorbell is muted, until when.
    muted: Vec<ConnId>,
    /// Slices past their time whose holder still waits for its launch: (slice, GPU,
    /// its time), looked at on each pass until the holder reports or stops waiting.
    overrunning: Vec<(TaskId, GpuId, Nanos)>,
    tenants: BTreeMap<TenantId, TenantInfo>,
    tasks: BTreeMap<TaskId, TaskInfo>,
    by_seq: BTreeMap<(ConnId, u64), TaskId>,
    gpus: Vec<GpuRt>,
    internal: VecDeque<Event>,
    next_task: u64,
    next_tenant: u64,
    totals: Totals,
    draining: bool,
    started: Instant,
    executor_name: String,
    policy_name: String,
    /// The ledger's path, for the status (`tessera doctor` checks the running daemon's).
    ledger_path: Option<String>,
    slot_bytes: u32,
    limits: Limits,
    drain_started: Option<Instant>,
    uid_use: BTreeMap<u32, UidUse>,
    /// Inference serving (`policy = "gpulets"`, or registered models under `node`).
    inference: Option<crate::inference::Inference>,
    /// Every tenant must register a model (`policy = "gpulets"`).
    models_only: bool,
    /// DCUDA's balancer (`balance = "dcuda"`): what it publishes, and its migrations'
    /// pause.
    balance: Option<(Arc<Mutex<DcudaReport>>, Nanos)>,
    /// Migrations under way: when each tenant arrives on its new GPU.
    arriving: Vec<(Nanos, TenantId, GpuId)>,
    /// A migrated tenant's data still to come over PCIe: the time it adds to its first
    /// task on the new GPU (moved on demand while that task runs).
    transfer: BTreeMap<TenantId, Nanos>,
    /// PCIe bandwidth for migrated data, bytes per second.
    pcie_bytes_per_s: f64,
    /// GPU time charged over the last [`SHARE_WINDOW`]: when, to whom, on which GPU
    /// (if known) and how much.
    charges: VecDeque<Charge>,
    /// Slurm jobs running on this node.
    jobs: BTreeMap<u64, crate::slurm::Job>,
    /// Registrations waiting for their job's memory (`over_entitlement = "wait"`).
    parked: Vec<Parked>,
    /// Where decisions are logged (see `events`).
    events: Arc<crate::events::EventLog>,
    /// The metrics, when exported (`[metrics] listen`).
    metrics: Option<Arc<crate::metrics::NodeMetrics>>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("policy", &self.policy.label())
            .field("tasks", &self.tasks.len())
            .finish()
    }
}

/// Limits the core enforces on what clients send.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Ring slots per client: the most tasks a client may have in flight.
    pub slots: u32,
    /// Data bytes per slot.
    pub slot_bytes: u32,
    /// Longest task cost accepted.
    pub max_task: Nanos,
    /// How long a drain waits for running tasks (wall time).
    pub drain_timeout: Duration,
    /// Who besides root and the daemon's user may register user-facing tenants.
    pub user_facing_uids: Vec<u32>,
    /// Tasks one uid may have queued or running.
    pub max_tasks_per_uid: u32,
    /// Declared GPU time one uid may have queued or running.
    pub max_gpu_per_uid: Nanos,
    /// Open tenants per connection.
    pub max_tenants_per_conn: u32,
    /// Open tenants per uid.
    pub max_tenants_per_uid: u32,
    /// What becomes of a departed tenant's running tasks.
    pub departed_running: crate::config::Departed,
    /// How Slurm jobs become tenants.
    pub slurm: crate::config::SlurmSection,
    /// Why this daemon takes no Slurm jobs, if it does not (its policy cannot keep a
    /// job's tasks on the job's GPUs).
    pub slurm_refusal: Option<String>,
    /// Processes in another pid namespace register with a pod allocation's token only
    /// (`[kubernetes] require_token_in_containers`).
    pub require_token_in_containers: bool,
    /// Block rather than spin on an oversubscribed host (`block_when_busy`).
    pub block_when_busy: bool,
    /// GPU-centric coscheduling of interactive tenants (`coscheduling`).
    pub coscheduling: bool,
}

/// Slurm jobs listed in one status reply.
const JOBS_IN_STATUS: usize = 64;

/// Registrations one Slurm job may have waiting for its memory: bounds the work each
/// retry does and what one job can make the daemon hold.
const MAX_PARKED_PER_JOB: usize = 64;

/// A registration waiting for room in its Slurm job's memory entitlement.
struct Parked {
    job: u64,
    conn: ConnId,
    pid: u32,
    uid: u32,
    request: tessera_client::proto::Request,
    reply: crate::server::ReplyTo,
}

/// What one uid holds in the daemon, for its quotas.
#[derive(Clone, Copy, Debug, Default)]
struct UidUse {
    tasks: u32,
    gpu: Nanos,
    tenants: u32,
}

/// Spin this long without work before sleeping on the doorbell (on a quiet host).
const SPIN: Duration = Duration::from_micros(20);

/// A ring without a request for this long leaves the polled list (see `Core::active`).
const ACTIVE: Duration = Duration::from_millis(5);
/// Of the spin, how long before it starts yielding the core at each turn.
const PURE_SPIN: Duration = Duration::from_micros(2);

/// A client whose doorbell rings more often than this per second with nothing in its
/// ring is muted for [`MUTE`]: its requests are still served, at the core's own pace.
const SPURIOUS_PER_SECOND: u32 = 200;
const MUTE: Duration = Duration::from_millis(500);

fn listen(epoll: &std::os::fd::OwnedFd, bell: &Doorbell, data: u64, edge: bool) {
    use rustix::event::epoll;
    let mut flags = epoll::EventFlags::IN;
    if edge {
        flags |= epoll::EventFlags::ET;
    }
    if let Err(e) = epoll::add(epoll, bell.as_fd(), epoll::EventData::new_u64(data), flags) {
        tracing::error!(error = %e, data, "cannot watch a doorbell");
    }
}

impl Core {
    /// A core over `gpu_memory` (one entry per GPU).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        connections: Arc<crate::server::Connections>,
        policy: Box<dyn Policy>,
        clock: Clock,
        rx: Receiver<Msg>,
        mailbox: Mailbox,
        exec: Executor,
        ledger: Option<Ledger>,
        gpu_memory: &[Bytes],
        executor_name: String,
        limits: Limits,
    ) -> Core {
        let epoll = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)
            .expect("epoll_create1 cannot fail on Linux but for lack of memory or descriptors");
        listen(&epoll, &mailbox.bell, 0, false);
        let worker_mailbox = mailbox.clone();
        Core {
            host: host_load::HostLoad::new(),
            cosched: std::cell::RefCell::new(crate::cosched::Coscheduler::new(limits.coscheduling)),
            follow: follow::Follow::new(exec.thread_ids()),
            socket_tasks: Default::default(),
            next_socket_seq: 0,
            connections,
            daemon_uid: rustix::process::geteuid().as_raw(),
            epoll,
            policy,
            clock,
            rx,
            mailbox,
            exec,
            ledger: ledger.and_then(|l| match LedgerWorker::start(l, worker_mailbox) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the ledger's thread: task memory is not admitted");
                    None
                }
            }),
            admitting: BTreeMap::new(),
            next_ticket: 0,
            desk: None,
            conns: BTreeMap::new(),
            active: Vec::new(),
            muted: Vec::new(),
            overrunning: Vec::new(),
            tenants: BTreeMap::new(),
            tasks: BTreeMap::new(),
            by_seq: BTreeMap::new(),
            gpus: gpu_memory
                .iter()
                .map(|m| GpuRt {
                    running: Vec::new(),
                    busy_since: None,
                    busy_total: Duration::ZERO,
                    resetting: false,
                    memory: m.0,
                    pool: "shared",
                    placed: 0,
                    partitions: Vec::new(),
                    batches: Vec::new(),
                    uuid: None,
                })
                .collect(),
            internal: VecDeque::new(),
            next_task: 0,
            next_tenant: 1,
            totals: Totals::default(),
            draining: false,
            started: Instant::now(),
            policy_name: String::new(),
            ledger_path: None,
            executor_name,
            slot_bytes: limits.slot_bytes,
            limits,
            drain_started: None,
            uid_use: BTreeMap::new(),
            inference: None,
            models_only: false,
            balance: None,
            arriving: Vec::new(),
            transfer: BTreeMap::new(),
            pcie_bytes_per_s: 12e9,
            charges: VecDeque::new(),
            jobs: BTreeMap::new(),
            parked: Vec::new(),
            events: Arc::new(
                crate::events::EventLog::new(None).expect("a log without a file always opens"),
            ),
            metrics: None,
        }
    }

    /// Log decisions to `events`, and count them in `metrics` when exported.
    pub fn with_observers(
        mut self,
        events: Arc<crate::events::EventLog>,
        metrics: Option<Arc<crate::metrics::NodeMetrics>>,
    ) -> Core {
        self.events = events;
        self.metrics = metrics;
        self
    }

    /// Log `event`, about a tenant of `uid` (`None`: the node's own).
    fn log(&self, uid: Option<u32>, event: crate::events::NodeEvent) {
        self.events.record(uid, event);
    }

    /// Tell `desk` of tenants as they register and close (their memory reservations).
    pub fn with_memory_desk(mut self, desk: Arc<crate::memory::MemoryDesk>) -> Core {
        self.desk = Some(desk);
        self
    }

    /// The policy's name as the operator wrote it (`fair`, `flexy-pid`), for status.
    pub fn with_policy_name(mut self, name: &str) -> Core {
        self.policy_name = name.to_string();
        self
    }

    /// The ledger's path, as the status reports it.
    pub fn with_ledger_path(mut self, path: &std::path::Path) -> Core {
        self.ledger_path = Some(path.display().to_string());
        self
    }

    /// The GPUs' UUIDs, by index, as the driver told them (none for emulated GPUs).
    pub fn with_uuids(mut self, uuids: Vec<Option<String>>) -> Core {
        for (g, uuid) in self.gpus.iter_mut().zip(uuids) {
            g.uuid = uuid;
        }
        self
    }

    /// Serve inference models with `inference` (the gpulets or node policy's state);
    /// with `models_only` (gpulets), every tenant must register a model and Slurm jobs
    /// are refused, else (node) a model is optional.
    pub fn with_inference(
        mut self,
        inference: Option<crate::inference::Inference>,
        models_only: bool,
    ) -> Core {
        self.inference = inference;
        self.models_only = models_only;
        self
    }

    /// Balance with DCUDA, whose policy publishes to `report`; a migration pauses its
    /// tenant for `pause`.
    pub fn with_balance(
        mut self,
        balance: Option<(Arc<Mutex<DcudaReport>>, Nanos)>,
        pcie_bytes_per_s: f64,
    ) -> Core {
        self.balance = balance;
        self.pcie_bytes_per_s = pcie_bytes_per_s;
        self
    }

    /// Charge `tenant` GPU time it used on `gpu` (`None`: the one GPU it was placed on,
    /// if it has one): its total, its metrics counter, and the window of recent
    /// charges behind the received shares and GPU busy fractions of `status`.
    fn charge(&mut self, tenant: TenantId, gpu: Option<GpuId>, ran: Nanos) {
        let mut on = gpu.map(|g| g.0);
        if let Some(t) = self.tenants.get_mut(&tenant) {
            t.gpu_time += ran;
            if let (Some(m), Some(l)) = (&self.metrics, &t.labels) {
                m.tenant_gpu_seconds.get_or_create(l).inc_by(ran.0 as f64 / 1e9);
            }
            if let (None, [only]) = (on, t.placed.as_slice()) {
                on = Some(*only);
            }
        }
        let now = self.clock.now();
        self.charges.push_back(Charge { at: now, tenant, gpu: on, ran });
        while self.charges.front().is_some_and(|c| now.saturating_sub(c.at) > SHARE_WINDOW) {
            self.charges.pop_front();
        }
    }

    /// Migrations whose pause is over arrive.
    fn migrations_arrive(&mut self) -> bool {
        let now = self.clock.now();
        let (due, later): (Vec<_>, Vec<_>) =
            self.arriving.drain(..).partition(|(at, _, _)| *at <= now);
        self.arriving = later;
        let any = !due.is_empty();
        for (_, tenant, to) in due {
            self.deliver(Event::MigrationDone { tenant, to });
        }
        any
    }

    /// Run until shut down and drained.
    pub fn run(mut self) {
        let tick = self.policy.tick_interval();
        let mut next_tick = tick.map(|t| self.clock.now() + t);
        let mut idle_since: Option<Instant> = None;
        loop {
            let pass = Instant::now();
            // what happens on each pass, in order
            let worked = self.read_mailbox()
                | self.look_at_doorbells()
                | self.poll_rings()
                | self.migrations_arrive()
                | self.overrun_slices()
                | self.tick(&mut next_tick, tick);
            if self.drained() {
                break;
            }
            if worked {
                idle_since = None;
                self.host.reset();
                if let Some(m) = &self.metrics {
                    m.loop_latency.observe(pass.elapsed().as_secs_f64());
                }
            } else if self.spin(&mut idle_since) {
                self.sleep(next_tick);
                idle_since = None;
                self.host.reset();
            }
        }
        // answer what arrived during the last pass, then tell every client we are gone
        self.poll_rings();
        for c in self.conns.values() {
            c.region.mark_closed();
        }
        tracing::info!("core drained; stopping executors");
        self.exec.stop();
    }

    /// Control requests, disconnections and executor reports.
    fn read_mailbox(&mut self) -> bool {
        let mut worked = false;
        while let Ok(m) = self.rx.try_recv() {
            self.mailbox.pending.fetch_sub(1, Ordering::SeqCst);
            self.handle(m);
            worked = true;
        }
        worked
    }

    /// Quiet rings whose clients rang their doorbells become active (never blocking).
    fn look_at_doorbells(&mut self) -> bool {
        if self.active.len() < self.conns.len() {
            self.wait_for_bells(Duration::ZERO);
        }
        false
    }

    /// The policy's periodic tick, when it asks for one and it is due.
    fn tick(&mut self, next_tick: &mut Option<Nanos>, period: Option<Nanos>) -> bool {
        if let (Some(t), Some(period)) = (*next_tick, period)
            && self.clock.now() >= t
        {
            self.deliver(Event::Tick);
            *next_tick = Some(self.clock.now() + period);
            return true;
        }
        false
    }

    /// Whether a drain is over: nothing runs (anything queued was cancelled when its
    /// tenant left), or it outlasted `drain_timeout` (what still runs is abandoned).
    fn drained(&mut self) -> bool {
        if self.draining
            && self.tasks.values().all(|t| t.started.is_none())
            && self.gpus.iter().all(|g| !g.resetting)
        {
            return true;
        }
        if self.drain_started.is_some_and(|t| t.elapsed() > self.limits.drain_timeout) {
            self.abandon_running();
            return true;
        }
        false
    }

    /// Nothing to do: on a quiet host, spin [`SPIN`] (a pure spin first; then giving
    /// the core to a runnable client at each turn: a client woken onto the core's own
    /// CPU would otherwise wait out the spin); on a busy host, not at all — a yield
    /// there hands the CPU to a CPU-bound thread for a whole time slice (see
    /// [`host_load`]). Whether the core should sleep now.
    fn spin(&mut self, idle_since: &mut Option<Instant>) -> bool {
        let now = Instant::now();
        if self.limits.block_when_busy && self.host.busy(now, true) {
            return true;
        }
        let idle = now.saturating_duration_since(*idle_since.get_or_insert(now));
        if idle < PURE_SPIN {
            std::hint::spin_loop();
        } else if idle < SPIN {
            std::thread::yield_now();
        }
        idle >= SPIN
    }

    /// What a ring the core polls says to its client: that the core polls it
    /// (`POLLING`: no doorbell, a spin pays) on a quiet host; `BUSY` on a busy one.
    fn awake_state(&mut self) -> u32 {
        if self.limits.block_when_busy && self.host.busy(Instant::now(), false) {
            daemon_state::BUSY
        } else {
            daemon_state::POLLING
        }
    }

    /// What a ring says while the core sleeps: `ASLEEP`, or `BUSY` on a busy host.
    fn asleep_state(&mut self) -> u32 {
        if self.limits.block_when_busy && self.host.busy(Instant::now(), false) {
            daemon_state::BUSY
        } else {
            daemon_state::ASLEEP
        }
    }

    /// Sleep on the doorbells until something happens, the policy's next tick or the
    /// next migration's arrival (at most 100 ms). Every ring goes quiet with the core:
    /// each client rings its doorbell with its next request, which makes its ring
    /// active again.
    fn sleep(&mut self, next_tick: Option<Nanos>) {
        let next_arrival = self.arriving.iter().map(|(at, _, _)| *at).min();
        let wake = match (next_tick, next_arrival) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = wake.map_or(Duration::from_millis(100), |t| {
            self.clock.wall(t.saturating_sub(self.clock.now())).min(Duration::from_millis(100))
        });
        self.mailbox.sleeping.store(true, Ordering::SeqCst);
        let asleep = self.asleep_state();
        for (_, r, _) in &self.active {
            r.set_daemon_state(asleep);
        }
        let pending = self.active.iter().any(|(_, r, _)| r.has_requests());
        if pending {
            // a request came in as the core was going to sleep: it stays awake, and
            // the active rings stay polled (their clients need not ring, on a quiet
            // host)
            let awake = self.awake_state();
            for (_, r, _) in &self.active {
                r.set_daemon_state(awake);
            }
        } else {
            self.active.clear();
            if self.mailbox.pending.load(Ordering::SeqCst) == 0 {
                self.follow.before_sleep(asleep == daemon_state::BUSY);
                self.wait_for_bells(timeout.max(Duration::from_micros(100)));
            }
        }
        self.mailbox.sleeping.store(false, Ordering::SeqCst);
    }

    /// Wait on the doorbells until one rings or `timeout` (zero: only look): a ringing
    /// client's ring becomes active. The core never reads a client's doorbell (see
    /// [`Conn::bell`]), which is edge-triggered; it reads only its private one, which
    /// no client holds.
    fn wait_for_bells(&mut self, timeout: Duration) {
        use rustix::event::epoll;
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut events = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 64];
        let Ok((ready, _)) = epoll::wait(&self.epoll, &mut events, Some(&ts)) else { return };
        let now = Instant::now();
        // on a busy host clients ring with every request, the core awake or not
        let awake = self.awake_state();
        for ev in ready.iter() {
            let data = ev.data.u64();
            if data == 0 {
                self.mailbox.bell.drain();
                continue;
            }
            let Some(c) = self.conns.get_mut(&data) else { continue };
            if c.region.has_requests() {
                if !self.active.iter().any(|(id, _, _)| *id == data) {
                    c.region.set_daemon_state(awake);
                    self.active.push((data, c.region.clone(), now));
                }
                continue;
            }
            if awake == daemon_state::BUSY {
                // its request was served while the core was awake: not spurious
                continue;
            }
            if now.duration_since(c.window) > Duration::from_secs(1) {
                c.window = now;
                c.spurious = 0;
            }
            c.spurious += 1;
            if c.spurious > SPURIOUS_PER_SECOND && c.muted_until.is_none() {
                tracing::warn!(
                    conn = data,
                    pid = c.pid,
                    "client rings its doorbell with nothing to do; muted for a while"
                );
                let _ = epoll::delete(&self.epoll, c.bell.as_fd());
                c.muted_until = Some(now + MUTE);
                self.muted.push(data);
            }
        }
        let conns = &mut self.conns;
        let epoll = &self.epoll;
        let mut unmuted = Vec::new();
        self.muted.retain(|id| {
            let Some(c) = conns.get_mut(id) else { return false };
            if !c.alive {
                return false;
            }
            if c.muted_until.is_some_and(|t| now >= t) {
                c.muted_until = None;
                c.spurious = 0;
                c.window = now;
                listen(epoll, &c.bell, *id, true);
                unmuted.push((*id, c.region.clone()));
                return false;
            }
            true
        });
        // whatever it asked while muted (its rings went unheard) is polled now
        for (id, region) in unmuted {
            if !self.active.iter().any(|(a, _, _)| *a == id) {
                region.set_daemon_state(awake);
                self.active.push((id, region, now));
            }
        }
    }

    /// The drain timed out: reset the GPUs still running tasks and end those tasks with
    /// reason `shutdown`, so that a task of any length cannot hold the daemon up.
    fn abandon_running(&mut self) {
        tracing::warn!("drain timed out: resetting GPUs that still run tasks");
        for g in 0..self.gpus.len() {
            let gpu = GpuId(g as u32);
            let running = std::mem::take(&mut self.gpus[g].running);
            if running.is_empty() {
                continue;
            }
            self.exec.send(gpu, Command::Reset);
            for task in running {
                let Some(info) = self.tasks.remove(&task) else { continue };
                self.close_gate(&info);
                self.return_task_memory(task, gpu, info.memory);
                self.totals.cancelled += 1;
                self.respond(
                    info.conn,
                    ResponseDesc {
                        seq: info.seq,
                        status: status::CANCELLED,
                        reason: reason::SHUTDOWN,
                        gpu: g as u32,
                        ..Default::default()
                    },
                );
                self.forget(&info);
            }
        }
    }

    /// Tell the policy, carry out its actions, then any events those produced.
    fn deliver(&mut self, e: Event) {
        self.internal.push_back(e);
        while let Some(e) = self.internal.pop_front() {
            let mut actions = Vec::new();
            self.policy.on_event(self.clock.now(), &e, &mut actions);
            for a in actions {
                self.apply(a);
            }
        }
    }

    fn apply(&mut self, a: Action) {
        match a {
            Action::Dispatch { task, placement } => self.dispatch(task, placement.gpu),
            Action::EndTask { task, reason: why } => {
                let Some(info) = self.tasks.remove(&task) else { return };
                self.forget(&info);
                let (st, code) = match why {
                    _ if self.draining => (status::CANCELLED, reason::SHUTDOWN),
                    TaskEndReason::TenantLeft => (status::CANCELLED, reason::TENANT_CLOSED),
                    TaskEndReason::CancelledByClient => {
                        (status::CANCELLED, reason::CANCELLED_BY_CLIENT)
                    }
                    TaskEndReason::Shutdown => (status::CANCELLED, reason::SHUTDOWN),
                    TaskEndReason::UnknownTenant => (status::FAILED, reason::UNKNOWN_TENANT),
                    TaskEndReason::Unschedulable(_) => (status::FAILED, reason::UNSCHEDULABLE),
                    TaskEndReason::Dropped => (status::FAILED, reason::DROPPED),
                };
                if st == status::CANCELLED {
                    self.totals.cancelled += 1;
                } else {
                    self.totals.failed += 1;
                }
                if let Some(t) = self.tenants.get_mut(&info.tenant) {
                    t.not_done += 1;
                    t.queued = t.queued.saturating_sub(1);
                }
                self.respond(
                    info.conn,
                    ResponseDesc {
                        seq: info.seq,
                        status: st,
                        reason: code,
                        gpu: u32::MAX,
                        ..Default::default()
                    },
                );
                self.gc_tenant(info.tenant);
            }
            Action::ResetGpu { gpu, killed } => {
                let Some(g) = self.gpus.get_mut(gpu.0 as usize) else { return };
                if let Some(since) = g.busy_since.take() {
                    g.busy_total += since.elapsed();
                }
                g.running.clear();
                g.resetting = true;
                self.totals.resets += 1;
                self.log(
                    None,
                    crate::events::NodeEvent::Reset { gpu: gpu.0, killed: killed.len() },
                );
                // the policy re-queued the killed tasks (or ended those of departed
                // tenants, answered through EndTask)
                for task in killed {
                    if let Some(info) = self.tasks.get(&task) {
                        self.close_gate(info);
                    }
                    let Some(info) = self.tasks.get_mut(&task) else { continue };
                    info.started = None;
                    let memory = info.memory;
                    if let Some(t) = self.tenants.get_mut(&info.tenant) {
                        t.queued += 1;
                    }
                    self.return_task_memory(task, gpu, memory);
                }
                self.exec.send(gpu, Command::Reset);
            }
            Action::SetPools { user_facing } => {
                let before: Vec<&str> = self.gpus.iter().map(|g| g.pool).collect();
                // every GPU not named serves batch work
                for rt in &mut self.gpus {
                    rt.pool = "batch";
                }
                for g in &user_facing {
                    if let Some(rt) = self.gpus.get_mut(g.0 as usize) {
                        rt.pool = "user_facing";
                    }
                }
                if self.gpus.iter().map(|g| g.pool).ne(before) {
                    let user_facing = user_facing.iter().map(|g| g.0).collect();
                    self.log(None, crate::events::NodeEvent::Pool { user_facing });
                }
            }
            Action::Repartition { gpu, shares } if self.inference.is_some() => {
                // emulated partitions: a share of the GPU's demand, ready at once (see
                // `inference`); batches already running finish where they are
                if let Some(g) = self.gpus.get_mut(gpu.0 as usize) {
                    g.partitions = shares;
                    let partitions = g.partitions.iter().map(|p| u32::from(p.0) / 10).collect();
                    self.internal.push_back(Event::RepartitionDone { gpu });
                    self.log(
                        None,
                        crate::events::NodeEvent::Repartition { gpu: gpu.0, partitions },
                    );
                }
            }
            Action::Migrate { tenant, from, to } if self.balance.is_some() => {
                // DCUDA §3.4: the policy moves a tenant only between its tasks, so
                // nothing of it runs on `from` and, its reservations being per task, it
                // holds no memory there; the context moves in the pause, and its data
                // would follow on demand while it runs on `to`
                let pause = self.balance.as_ref().map_or(Nanos::ZERO, |(_, p)| *p);
                self.totals.migrations += 1;
                // the program's reservations follow it there
                if let Some(desk) = &self.desk {
                    desk.allow(tenant.0, to.0);
                }
                let uid = self.tenants.get(&tenant).map(|t| t.uid);
                self.log(
                    uid,
                    crate::events::NodeEvent::Migration {
                        tenant: tenant.0,
                        from: from.0,
                        to: to.0,
                        pause_ms: self.clock.wall(pause).as_secs_f64() * 1e3,
                    },
                );
                self.arriving.push((self.clock.now() + pause, tenant, to));
                let bytes = self.tenants.get(&tenant).map_or(0, |t| t.declared);
                if bytes > 0 && self.pcie_bytes_per_s > 0.0 {
                    let ns = (bytes as f64 / self.pcie_bytes_per_s * 1e9).ceil() as u64;
                    self.transfer.insert(tenant, Nanos(ns));
                }
            }
            Action::DispatchBatch { tasks, placement } if self.inference.is_some() => {
                self.dispatch_batch(&tasks, placement);
            }
            other => {
                tracing::warn!(?other, "action not supported by this daemon's executors; refused");
                // the policy hears of it (queued behind the actions being applied)
                self.internal.push_back(Event::ActionRefused {
                    action: Box::new(other),
                    reason: "not supported by this daemon's executors".into(),
                });
            }
        }
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Connected { conn, region, bell, pid, uid } => {
                // active from the start (its daemon-sleeping flag is clear)
                self.active.push((conn, region.clone(), Instant::now()));
                listen(&self.epoll, &bell, conn, true);
                self.conns.insert(
                    conn,
                    Conn {
                        region,
                        bell,
                        spurious: 0,
                        window: Instant::now(),
                        muted_until: None,
                        kicked: std::cell::Cell::new(false),
                        pid,
                        uid,
                        alive: true,
                        tenants: BTreeSet::new(),
                        tasks: 0,
                    },
                );
            }
            Msg::Control {
                conn,
                request: tessera_client::proto::Request::RunTask { tenant, cost_ns },
                reply,
                ..
            } => self.run_task_over_socket(conn, tenant, cost_ns, reply),
            Msg::Control { conn, pid, uid, request, reply } => {
                if let Some(job) = self.must_wait(conn, uid, &request) {
                    let waiting = self.parked_for(job);
                    if waiting >= MAX_PARKED_PER_JOB {
                        let message = format!(
                            "Slurm job {job} already has {waiting} registrations waiting for \
                             its memory"
                        );
                        self.refused(uid, pid, request.kind(), ErrorCode::NoCapacity, &message);
                        reply.send(Reply::Error { code: ErrorCode::NoCapacity, message });
                        return;
                    }
                    self.log(Some(uid), crate::events::NodeEvent::RegistrationWaits { job, pid });
                    self.parked.push(Parked { job, conn, pid, uid, request, reply });
                } else {
                    let kind = request.kind();
                    let answer = self.control(conn, pid, uid, request);
                    if let Reply::Error { code, message } = &answer {
                        self.refused(uid, pid, kind, *code, message);
                    }
                    reply.send(answer);
                }
            }
            Msg::Disconnected { conn } => {
                let tenants: Vec<TenantId> = self
                    .conns
                    .get(&conn)
                    .map(|c| c.tenants.iter().copied().collect())
                    .unwrap_or_default();
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.alive = false;
                    // the client may keep the eventfd open; stop listening to it
                    let _ = rustix::event::epoll::delete(&self.epoll, c.bell.as_fd());
                }
                self.active.retain(|(id, _, _)| *id != conn);
                self.parked.retain(|p| p.conn != conn);
                // a program that exits while holding a slice of the launch gate is not
                // a failure: its slice ends as done, charged what its gate accounted
                let slices: Vec<TaskId> = self
                    .tasks
                    .iter()
                    .filter(|(_, t)| t.conn == conn && t.slice && t.started.is_some())
                    .map(|(id, _)| *id)
                    .collect();
                if !slices.is_empty()
                    && let Some(c) = self.conns.get(&conn)
                {
                    let (used, inferred) = c.region.slice_used();
                    for task in slices {
                        self.end_slice_early(task, Duration::from_nanos(used), !inferred);
                    }
                }
                for t in tenants {
                    self.close_tenant(t);
                }
                if self.limits.departed_running == crate::config::Departed::Cancel {
                    let running: Vec<TaskId> = self
                        .tasks
                        .iter()
                        .filter(|(_, t)| t.conn == conn && t.started.is_some())
                        .map(|(id, _)| *id)
                        .collect();
                    for task in running {
                        self.cancel_running(task);
                    }
                }
                self.gc_conn(conn);
            }
            Msg::Finished { gpu, task, ran_for, out_len } => {
                if !self.runs_on(gpu, task) {
                    return; // stale: the GPU was reset under it
                }
                // a slice of a GPU its holder has to itself goes on (work conserving):
                // the holder keeps its queue, and is charged what it used so far
                if self.renew_slice(gpu, task, ran_for) {
                    return;
                }
                // a slice whose holder still waits for its launch keeps the GPU (a
                // non-preemptive GPU runs the kernel on anyway): it ends when the
                // holder reports, charged what it measured (FairGV §3.3.2)
                if let Some(info) = self.tasks.get(&task)
                    && info.slice
                    && info
                        .started
                        .is_some_and(|(_, at)| self.clock.now() - at < self.limits.max_task)
                    && self.conns.get(&info.conn).is_some_and(|c| c.alive && c.region.gate_busy())
                {
                    // its time is up: no more launches, only what runs is waited for
                    self.close_gate(info);
                    self.overrunning.push((task, gpu, ran_for));
                    return;
                }
                let Some(info) = self.tasks.remove(&task) else { return };
                // a slice is charged what the client's launch gate accounted (measured,
                // or partly inferred) since its last renewal, never more than it held
                let (ran_for, measured) = match self.conns.get(&info.conn) {
                    Some(c) if info.slice => {
                        let (used, inferred) = c.region.slice_used();
                        let used = used.saturating_sub(info.charged);
                        let held = ran_for + info.slack;
                        let used = self.clock.emulated(Duration::from_nanos(used));
                        (tessera_core::gate::SliceRule::charge(used, held), !inferred)
                    }
                    _ => (ran_for, true),
                };
                self.finish_bookkeeping(gpu, task, &info, true, reason::NONE, out_len);
                self.charge(info.tenant, Some(gpu), ran_for);
                self.deliver(Event::TaskFinished {
                    task,
                    placement: Placement::whole(gpu),
                    ran_for,
                    measured,
                    result: Ok(()),
                });
                if info.slice {
                    self.charge_owed(info.tenant, info.conn);
                }
            }
            Msg::Failed { gpu, task, ran_for, reason: why } => {
                if !self.runs_on(gpu, task) {
                    return;
                }
                let Some(info) = self.tasks.remove(&task) else { return };
                self.return_task_memory(task, gpu, info.memory);
                self.finish_bookkeeping(gpu, task, &info, false, reason::EXECUTOR, 0);
                self.deliver(Event::TaskFinished {
                    task,
                    placement: Placement::whole(gpu),
                    ran_for,
                    measured: true,
                    result: Err(ExecutionFailure { reason: why }),
                });
            }
            Msg::ResetDone { gpu } => {
                if let Some(g) = self.gpus.get_mut(gpu.0 as usize) {
                    g.resetting = false;
                }
                self.log(None, crate::events::NodeEvent::ResetDone { gpu: gpu.0 });
                self.deliver(Event::GpuResetDone { gpu });
            }
            Msg::Admitted { task, ticket, gpu, bytes, refused } => {
                self.admitted(task, ticket, gpu, bytes, refused);
            }
            Msg::Scrape { done } => {
                self.refresh_metrics();
                let _ = done.send(());
            }
            Msg::Shutdown => {
                tracing::info!(
                    "draining: admitting nothing new, cancelling queued tasks, finishing running ones"
                );
                self.draining = true;
                // registrations waiting for a job's memory are refused: no more come
                self.retry_parked();
                self.drain_started = Some(Instant::now());
                let open: Vec<TenantId> =
                    self.tenants.iter().filter(|(_, t)| t.open).map(|(id, _)| *id).collect();
                for t in open {
                    self.close_tenant(t);
                }
            }
        }
    }
}
