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

mod actions;
mod admission;
mod control;
mod event_loop;
mod follow;
mod host_load;
mod jobs;
mod messages;
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
}
