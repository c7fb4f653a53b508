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
    BalanceSummary, ErrorCode, GpuReport, MigrationReport, ModelReport, Reply, RunningReport,
    STATUS_PAGE, ServingSummary, StatusReport, TenantClass, TenantReport, Totals,
};
use tessera_client::region::{
    Doorbell, LaunchFacts, Region, RequestDesc, ResponseDesc, op, reason, status,
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
    ledger: Option<Ledger>,
    /// Tenants' memory reservations made through the daemon (see `memory`).
    desk: Option<Arc<crate::memory::MemoryDesk>>,
    conns: BTreeMap<ConnId, Conn>,
    /// The regions of connected clients, for the polling loop (kept beside `conns` so
    /// that spinning allocates nothing).
    live: Vec<(ConnId, Arc<Region>)>,
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
    slot_bytes: u32,
    limits: Limits,
    drain_started: Option<Instant>,
    uid_use: BTreeMap<u32, UidUse>,
    /// Inference serving (`policy = "gpulets"`).
    inference: Option<crate::inference::Inference>,
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
    /// GPU time charged over the last [`SHARE_WINDOW`]: (when, tenant, how much).
    charges: VecDeque<(Nanos, TenantId, Nanos)>,
    /// Slurm jobs running on this node.
    jobs: BTreeMap<u64, crate::slurm::Job>,
    /// Registrations waiting for their job's memory (`over_entitlement = "wait"`).
    parked: Vec<Parked>,
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

/// Spin this long without work before sleeping on the doorbell.
const SPIN: Duration = Duration::from_micros(20);

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
        Core {
            connections,
            daemon_uid: rustix::process::geteuid().as_raw(),
            epoll,
            policy,
            clock,
            rx,
            mailbox,
            exec,
            ledger,
            desk: None,
            conns: BTreeMap::new(),
            live: Vec::new(),
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
            executor_name,
            slot_bytes: limits.slot_bytes,
            limits,
            drain_started: None,
            uid_use: BTreeMap::new(),
            inference: None,
            balance: None,
            arriving: Vec::new(),
            transfer: BTreeMap::new(),
            pcie_bytes_per_s: 12e9,
            charges: VecDeque::new(),
            jobs: BTreeMap::new(),
            parked: Vec::new(),
        }
    }

    /// Tell `desk` of tenants as they register and close (their memory reservations).
    pub fn with_memory_desk(mut self, desk: Arc<crate::memory::MemoryDesk>) -> Core {
        self.desk = Some(desk);
        self
    }

    /// The GPUs' UUIDs, by index, as the driver told them (none for emulated GPUs).
    pub fn with_uuids(mut self, uuids: Vec<Option<String>>) -> Core {
        for (g, uuid) in self.gpus.iter_mut().zip(uuids) {
            g.uuid = uuid;
        }
        self
    }

    /// Serve inference models with `inference` (the gpulets policy's state).
    pub fn with_inference(mut self, inference: Option<crate::inference::Inference>) -> Core {
        self.inference = inference;
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

    /// Record GPU time charged to `tenant` now, for the received shares of `status`.
    fn charge(&mut self, tenant: TenantId, ran: Nanos) {
        let now = self.clock.now();
        self.charges.push_back((now, tenant, ran));
        while self.charges.front().is_some_and(|(at, _, _)| now.saturating_sub(*at) > SHARE_WINDOW)
        {
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
            let mut worked = false;
            while let Ok(m) = self.rx.try_recv() {
                self.mailbox.pending.fetch_sub(1, Ordering::SeqCst);
                self.handle(m);
                worked = true;
            }
            worked |= self.poll_rings();
            worked |= self.migrations_arrive();
            if let (Some(t), Some(period)) = (next_tick, tick)
                && self.clock.now() >= t
            {
                self.deliver(Event::Tick);
                next_tick = Some(self.clock.now() + period);
            }
            if self.draining
                && self.tasks.values().all(|t| t.started.is_none())
                && self.gpus.iter().all(|g| !g.resetting)
            {
                // nothing runs; anything still queued was cancelled by TenantLeft
                break;
            }
            if self.drain_started.is_some_and(|t| t.elapsed() > self.limits.drain_timeout) {
                self.abandon_running();
                break;
            }
            if worked {
                idle_since = None;
                continue;
            }
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let next_arrival = self.arriving.iter().map(|(at, _, _)| *at).min();
            let wake = match (next_tick, next_arrival) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let timeout = wake.map_or(Duration::from_millis(100), |t| {
                self.clock.wall(t.saturating_sub(self.clock.now())).min(Duration::from_millis(100))
            });
            let mb = &self.mailbox;
            mb.sleeping.store(true, Ordering::SeqCst);
            for (_, r) in &self.live {
                r.set_daemon_sleeping(true);
            }
            if mb.pending.load(Ordering::SeqCst) == 0
                && !self.live.iter().any(|(_, r)| r.has_requests())
            {
                self.sleep(timeout.max(Duration::from_micros(100)));
            }
            let mb = &self.mailbox;
            mb.sleeping.store(false, Ordering::SeqCst);
            for (_, r) in &self.live {
                r.set_daemon_sleeping(false);
            }
            idle_since = None;
        }
        // answer what arrived during the last pass, then tell every client we are gone
        self.poll_rings();
        for c in self.conns.values() {
            c.region.mark_closed();
        }
        tracing::info!("core drained; stopping executors");
        self.exec.stop();
    }

    /// Sleep on the doorbells until one rings or `timeout`. The core never reads a
    /// client's doorbell (see [`Conn::bell`]); it reads only its private one, which no
    /// client holds.
    fn sleep(&mut self, timeout: Duration) {
        use rustix::event::epoll;
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut events = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 64];
        let Ok((ready, _)) = epoll::wait(&self.epoll, &mut events, Some(&ts)) else { return };
        let now = Instant::now();
        for ev in ready.iter() {
            let data = ev.data.u64();
            if data == 0 {
                self.mailbox.bell.drain();
                continue;
            }
            let Some(c) = self.conns.get_mut(&data) else { continue };
            if c.region.has_requests() {
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
            }
        }
        for (&id, c) in self.conns.iter_mut() {
            if c.alive && c.muted_until.is_some_and(|t| now >= t) {
                c.muted_until = None;
                c.spurious = 0;
                c.window = now;
                listen(&self.epoll, &c.bell, id, true);
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
                self.release_memory(gpu, info.memory);
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

    fn poll_rings(&mut self) -> bool {
        let mut worked = false;
        // by index: handling a request may change `live` (it never does today, but a
        // bounds check is cheaper than a copy of the list on every spin of the loop)
        let mut i = 0;
        while let Some((conn, region)) = self.live.get(i) {
            i += 1;
            if !region.has_requests() {
                continue;
            }
            let (conn, region) = (*conn, region.clone());
            if !region.requests_sane() || self.conns.get(&conn).is_some_and(|c| c.kicked.get()) {
                self.kick(conn, "its request ring's indices are impossible");
                continue;
            }
            // bounded per connection per pass, so one busy client cannot starve others
            for _ in 0..64 {
                let Some(req) = region.pop_request() else { break };
                worked = true;
                self.request(conn, &region, req);
            }
        }
        worked
    }

    fn respond(&self, conn: ConnId, r: ResponseDesc) {
        if let Some(c) = self.conns.get(&conn).filter(|c| c.alive && !c.kicked.get())
            && !c.region.push_response(&r)
        {
            // the ring has room for every task the protocol allows in flight: a full
            // one means the client broke the protocol (or its indices)
            self.kick(conn, "its response ring is full or its indices are impossible");
        }
    }

    /// Close a client's connection for breaking the ring protocol; logged once, and
    /// everything it registered ends as for any disconnect.
    fn kick(&self, conn: ConnId, why: &str) {
        let Some(c) = self.conns.get(&conn) else { return };
        if c.kicked.replace(true) {
            return;
        }
        tracing::warn!(
            conn,
            pid = c.pid,
            uid = c.uid,
            why,
            "disconnecting a client that broke the ring protocol"
        );
        self.connections.kick(conn);
    }

    fn reject(&self, conn: ConnId, seq: u64, why: u32) {
        self.respond(
            conn,
            ResponseDesc {
                seq,
                status: status::FAILED,
                reason: why,
                gpu: u32::MAX,
                ..Default::default()
            },
        );
    }

    fn request(&mut self, conn: ConnId, region: &Region, d: RequestDesc) {
        match d.op {
            op::ECHO => {
                let _ = region.push_response(&ResponseDesc {
                    seq: d.seq,
                    status: status::ECHO,
                    gpu: u32::MAX,
                    ..Default::default()
                });
            }
            op::CANCEL => {
                if let Some(task) = self.by_seq.get(&(conn, d.seq)).copied() {
                    self.deliver(Event::TaskCancelRequested { task });
                }
            }
            op::RELEASE => {
                // a running slice of this connection ends early; anything else (a task,
                // a queued or unknown slice) is ignored, as a late release would be
                let Some(task) = self.by_seq.get(&(conn, d.seq)).copied() else { return };
                self.end_slice_early(task, Duration::from_nanos(d.cost_ns), d.kernel == 1);
            }
            op::SUBMIT | op::SLICE => {
                let slice = d.op == op::SLICE;
                let tenant = TenantId(d.tenant);
                let owned = self.tenants.get(&tenant).is_some_and(|t| t.conn == conn && t.open);
                if self.draining {
                    return self.respond(
                        conn,
                        ResponseDesc {
                            seq: d.seq,
                            status: status::CANCELLED,
                            reason: reason::SHUTDOWN,
                            gpu: u32::MAX,
                            ..Default::default()
                        },
                    );
                }
                if !owned {
                    return self.reject(conn, d.seq, reason::UNKNOWN_TENANT);
                }
                if d.in_len > self.slot_bytes
                    || d.out_len > self.slot_bytes
                    || d.cost_ns > self.limits.max_task.0
                    || (slice && (d.in_len, d.out_len, d.memory) != (0, 0, 0))
                {
                    return self.reject(conn, d.seq, reason::BAD_REQUEST);
                }
                // the protocol allows `slots` tasks in flight; a client writing its
                // ring directly must not grow the daemon's tables without bound
                if self.conns.get(&conn).is_some_and(|c| c.tasks >= self.limits.slots as usize) {
                    return self.reject(conn, d.seq, reason::BAD_REQUEST);
                }
                if self.gpus.iter().all(|g| d.memory > g.memory) {
                    return self.reject(conn, d.seq, reason::UNSCHEDULABLE);
                }
                let uid = self.conns.get(&conn).map_or(u32::MAX, |c| c.uid);
                let usage = self.uid_use.entry(uid).or_default();
                if usage.tasks >= self.limits.max_tasks_per_uid
                    || usage.gpu + Nanos(d.cost_ns) > self.limits.max_gpu_per_uid
                {
                    return self.reject(conn, d.seq, reason::QUOTA);
                }
                usage.tasks += 1;
                usage.gpu += Nanos(d.cost_ns);
                let id = TaskId(self.next_task);
                self.next_task += 1;
                self.tasks.insert(
                    id,
                    TaskInfo {
                        conn,
                        uid,
                        seq: d.seq,
                        tenant,
                        work: Nanos(d.cost_ns),
                        memory: d.memory,
                        in_len: d.in_len,
                        out_len: d.out_len,
                        submitted: self.clock.now(),
                        started: None,
                        slice,
                    },
                );
                self.by_seq.insert((conn, d.seq), id);
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.tasks += 1;
                }
                if let Some(t) = self.tenants.get_mut(&tenant) {
                    t.queued += 1;
                    t.tasks += 1;
                }
                // a slice carries its tenant's latest launch: its demand by the occupancy
                // arithmetic (DCUDA §3.2), on V100 limits until GPUs are described
                let launch = if slice {
                    LaunchFacts::unpack(d.launch_grid, d.launch_block).map(|f| {
                        let o = occupancy::occupancy(
                            &occupancy::Launch {
                                grid_blocks: f.grid_blocks,
                                threads_per_block: f.threads_per_block,
                                registers_per_thread: f.registers_per_thread,
                                shared_per_block: f.shared_per_block,
                            },
                            &occupancy::SmLimits::V100,
                        );
                        LaunchInfo {
                            grid_blocks: f.grid_blocks,
                            threads_per_block: f.threads_per_block,
                            demand: PerMille((o.demand * 1000.0).round() as u16),
                        }
                    })
                } else {
                    None
                };
                if let (Some(l), Some(t)) = (launch, self.tenants.get_mut(&tenant)) {
                    t.demand = Some(f64::from(l.demand.0) / 1000.0);
                }
                self.deliver(Event::TaskSubmitted(TaskSpec {
                    launch,
                    batch: 1,
                    id,
                    tenant,
                    kernel: d.kernel,
                    memory: Bytes(d.memory),
                }));
            }
            _ => self.reject(conn, d.seq, reason::BAD_REQUEST),
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
                    self.release_memory(gpu, memory);
                }
                self.exec.send(gpu, Command::Reset);
            }
            Action::SetPools { user_facing, batch } => {
                for g in user_facing {
                    if let Some(rt) = self.gpus.get_mut(g.0 as usize) {
                        rt.pool = "user_facing";
                    }
                }
                for g in batch {
                    if let Some(rt) = self.gpus.get_mut(g.0 as usize) {
                        rt.pool = "batch";
                    }
                }
            }
            Action::Repartition { gpu, shares } if self.inference.is_some() => {
                // emulated partitions: a share of the GPU's demand, ready at once (see
                // `inference`); batches already running finish where they are
                if let Some(g) = self.gpus.get_mut(gpu.0 as usize) {
                    g.partitions = shares;
                    self.internal.push_back(Event::RepartitionDone { gpu });
                }
            }
            Action::Migrate { tenant, from, to } if self.balance.is_some() => {
                // DCUDA §3.4: the policy moves a tenant only between its tasks, so
                // nothing of it runs on `from` and, its reservations being per task, it
                // holds no memory there; the context moves in the pause, and its data
                // would follow on demand while it runs on `to`
                let pause = self.balance.as_ref().map_or(Nanos::ZERO, |(_, p)| *p);
                tracing::info!(%tenant, %from, %to, "migrating");
                self.totals.migrations += 1;
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

    fn release_memory(&mut self, gpu: GpuId, memory: u64) {
        if memory > 0
            && let Some(l) = &self.ledger
            && let Err(e) = l.post_free(gpu.0, memory)
        {
            tracing::error!(error = %e, "ledger post-free failed");
        }
    }

    fn dispatch(&mut self, task: TaskId, gpu: GpuId) {
        self.dispatch_as(task, gpu, None);
    }

    /// Run a batch of one model's requests in a partition: each request is sent as its
    /// own task with the batch's run time and an equal part of the partition's share, so
    /// that they finish together when the model says the batch does.
    fn dispatch_batch(&mut self, tasks: &[TaskId], placement: Placement) {
        let Some(inf) = &self.inference else { return };
        let Some(lead) = tasks.first().and_then(|t| self.tasks.get(t)) else { return };
        let tenant = lead.tenant;
        let gpu = placement.gpu;
        let Some(g) = self.gpus.get_mut(gpu.0 as usize) else { return };
        let now = self.clock.now();
        g.batches.retain(|b| b.ends > now);
        let partition = placement.partition.map(|p| p.0);
        let share =
            partition.and_then(|p| g.partitions.get(p as usize)).map_or(1000, |s| u32::from(s.0));
        let neighbour = g
            .batches
            .iter()
            .find(|b| b.partition != partition)
            .map(|b| (b.tenant, b.requests, b.share_permille));
        let n = tasks.len() as u32;
        let Some(run) = inf.batch_time(tenant, n, share, neighbour) else {
            // a model whose profile lacks this point: the requests fail with the reason
            for &task in tasks {
                self.dispatch_as(task, gpu, Some((Nanos::ZERO, 0.0)));
            }
            return;
        };
        g.batches.push(RunningBatch {
            partition,
            tenant,
            requests: n,
            share_permille: share,
            ends: now + run,
        });
        let demand = f64::from(share) / 1000.0 / f64::from(n.max(1));
        for &task in tasks {
            self.dispatch_as(task, gpu, Some((run, demand)));
        }
    }

    /// Dispatch `task` to `gpu`, with its declared work and the whole GPU, or with
    /// `batch`'s (work, demand).
    fn dispatch_as(&mut self, task: TaskId, gpu: GpuId, batch: Option<(Nanos, f64)>) {
        let Some(info) = self.tasks.get_mut(&task) else {
            // cannot happen with today's policies; if it did, the policy would keep the
            // GPU busy forever, so tell it the task failed at once
            tracing::error!(%task, %gpu, "policy dispatched a task the daemon does not know");
            self.internal.push_back(Event::TaskFinished {
                task,
                placement: Placement::whole(gpu),
                ran_for: Nanos::ZERO,
                measured: true,
                result: Err(ExecutionFailure { reason: "unknown task".into() }),
            });
            return;
        };
        // memory for the task is admitted through the ledger, which other processes on
        // the node share; if it is not free the task fails with a reason
        if info.memory > 0
            && let Some(l) = &self.ledger
            && let Err(e) = l.pre_alloc(gpu.0, info.memory, Wait::NoWait)
        {
            tracing::info!(%task, error = %e, "no GPU memory for task");
            let failure = Event::TaskFinished {
                task,
                placement: Placement::whole(gpu),
                ran_for: Nanos::ZERO,
                measured: true,
                result: Err(ExecutionFailure { reason: e.to_string() }),
            };
            // the policy counts the task as running there; tell it the task failed at once
            self.gpus[gpu.0 as usize].running.push(task);
            info.started = Some((gpu, self.clock.now()));
            let info = self.tasks.remove(&task).expect("present");
            if let Some(t) = self.tenants.get_mut(&info.tenant) {
                t.queued = t.queued.saturating_sub(1);
            }
            self.finish_bookkeeping(gpu, task, &info, false, reason::NO_MEMORY, 0);
            self.internal.push_back(failure);
            return;
        }
        info.started = Some((gpu, self.clock.now()));
        let waited = self.clock.now().saturating_sub(info.submitted);
        if let Some(t) = self.tenants.get_mut(&info.tenant) {
            t.queued = t.queued.saturating_sub(1);
            t.waiting += waited;
        }
        let conn = self.conns.get(&info.conn).filter(|c| c.alive);
        let data = conn.map(|c| (c.region.clone(), info.seq, info.in_len, info.out_len));
        let hold = info.slice;
        if hold && let Some(c) = conn {
            // the launch gate opens: the client's own kernels may run on this GPU
            c.region.set_grant(Some(gpu.0));
        }
        let g = &mut self.gpus[gpu.0 as usize];
        g.running.push(task);
        g.busy_since.get_or_insert_with(Instant::now);
        let (mut work, demand) = batch.unwrap_or((info.work, 1.0));
        // the first task after a migration waits on its data as it comes over PCIe (a
        // slice's program moves its own data through the driver)
        if !hold && let Some(extra) = self.transfer.remove(&info.tenant) {
            work += extra;
        }
        self.exec.send(gpu, Command::Run { task, work, data, memory: info.memory, hold, demand });
    }

    /// A slice that stopped being dispatched closes its client's launch gate.
    fn close_gate(&self, info: &TaskInfo) {
        if info.slice
            && let Some(c) = self.conns.get(&info.conn)
        {
            c.region.set_grant(None);
        }
    }

    fn forget(&mut self, info: &TaskInfo) {
        self.by_seq.remove(&(info.conn, info.seq));
        if let Some(u) = self.uid_use.get_mut(&info.uid) {
            u.tasks = u.tasks.saturating_sub(1);
            u.gpu = Nanos(u.gpu.0.saturating_sub(info.work.0));
        }
        if let Some(t) = self.tenants.get_mut(&info.tenant) {
            t.tasks = t.tasks.saturating_sub(1);
        }
        if let Some(c) = self.conns.get_mut(&info.conn) {
            c.tasks = c.tasks.saturating_sub(1);
        }
        self.gc_conn(info.conn);
    }

    fn gc_conn(&mut self, conn: ConnId) {
        if self.conns.get(&conn).is_some_and(|c| !c.alive && c.tasks == 0) {
            self.conns.remove(&conn);
        }
    }

    /// Stats, client answer and ledger release for a task that stopped on `gpu`.
    fn finish_bookkeeping(
        &mut self,
        gpu: GpuId,
        task: TaskId,
        info: &TaskInfo,
        ok: bool,
        why: u32,
        out_len: u32,
    ) {
        self.left_gpu(gpu, task);
        self.close_gate(info);
        let now = self.clock.now();
        let (started_at, ran) = info.started.map_or((now, Nanos::ZERO), |(_, s)| (s, now - s));
        if ok {
            self.release_memory(gpu, info.memory);
        }
        if let Some(t) = self.tenants.get_mut(&info.tenant) {
            if ok {
                t.done += 1;
                match t.class {
                    ServiceClass::UserFacing { sla } => {
                        self.totals.uf_done += 1;
                        if now - info.submitted <= sla {
                            t.met += 1;
                            self.totals.uf_met += 1;
                        }
                    }
                    ServiceClass::Batch => self.totals.batch_done += 1,
                }
            } else {
                t.not_done += 1;
                self.totals.failed += 1;
            }
        }
        self.respond(
            info.conn,
            ResponseDesc {
                seq: info.seq,
                status: if ok { status::DONE } else { status::FAILED },
                reason: why,
                queued_ns: (started_at - info.submitted).0,
                ran_ns: ran.0,
                gpu: gpu.0,
                out_len,
                ..Default::default()
            },
        );
        self.forget(info);
        self.gc_tenant(info.tenant);
    }

    /// `task` no longer runs on `gpu`; the GPU's busy time stops when nothing does.
    fn left_gpu(&mut self, gpu: GpuId, task: TaskId) {
        let Some(g) = self.gpus.get_mut(gpu.0 as usize) else { return };
        g.running.retain(|t| *t != task);
        if g.running.is_empty()
            && let Some(since) = g.busy_since.take()
        {
            g.busy_total += since.elapsed();
        }
    }

    /// Choose `n` GPUs (at most all, or all of `within`) for a new tenant: the least loaded — fewest open
    /// tenants placed there, then fewest running tasks, then lowest index — and count
    /// it there.
    fn place(&mut self, n: usize, within: Option<&[u32]>) -> Vec<u32> {
        let mut order: Vec<(usize, usize, u32)> = self
            .gpus
            .iter()
            .enumerate()
            .filter(|(i, _)| within.is_none_or(|w| w.contains(&(*i as u32))))
            .map(|(i, g)| (g.placed, g.running.len(), i as u32))
            .collect();
        order.sort_unstable();
        let chosen: Vec<u32> = order.into_iter().take(n).map(|(_, _, i)| i).collect();
        for g in &chosen {
            self.gpus[*g as usize].placed += 1;
        }
        chosen
    }

    /// The GPUs a program's `CUDA_VISIBLE_DEVICES` entries name, as the driver reads
    /// them: a node index or a UUID (`GPU-` and a unique prefix of the rest) each; the
    /// first entry that names none, or one already named, ends the list. `Err` when no
    /// GPU is left, or a UUID is asked of a daemon that knows none.
    fn visible_gpus(&self, entries: &[String]) -> Result<Vec<u32>, String> {
        let mut within: Vec<u32> = Vec::new();
        for entry in entries.iter().map(|e| e.trim()) {
            let found = if entry.starts_with("GPU-") && entry.len() > 4 {
                if self.gpus.iter().all(|g| g.uuid.is_none()) {
                    return Err(format!(
                        "CUDA_VISIBLE_DEVICES names {entry}, but this daemon's GPUs have no \
                         UUIDs (they are emulated): name them by index"
                    ));
                }
                let mut matches = self
                    .gpus
                    .iter()
                    .enumerate()
                    .filter(|(_, g)| g.uuid.as_deref().is_some_and(|u| u.starts_with(entry)));
                match (matches.next(), matches.next()) {
                    (Some((i, _)), None) => Some(i as u32),
                    _ => None,
                }
            } else {
                entry.parse::<u32>().ok().filter(|i| (*i as usize) < self.gpus.len())
            };
            match found {
                Some(g) if !within.contains(&g) => within.push(g),
                _ => break,
            }
        }
        if within.is_empty() {
            return Err(format!(
                "CUDA_VISIBLE_DEVICES ({}) names none of this node's {} GPUs",
                entries.join(","),
                self.gpus.len()
            ));
        }
        Ok(within)
    }

    fn gc_tenant(&mut self, tenant: TenantId) {
        if self.tenants.get(&tenant).is_some_and(|t| !t.open && t.tasks == 0) {
            self.tenants.remove(&tenant);
            if let Some(inf) = &self.inference {
                inf.forget(tenant);
            }
        }
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Connected { conn, region, bell, pid, uid } => {
                self.live.push((conn, region.clone()));
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
            Msg::Control { conn, pid, uid, request, reply } => {
                if let Some(job) = self.must_wait(conn, uid, &request) {
                    let waiting = self.parked_for(job);
                    if waiting >= MAX_PARKED_PER_JOB {
                        reply.send(Reply::Error {
                            code: ErrorCode::NoCapacity,
                            message: format!(
                                "Slurm job {job} already has {waiting} registrations waiting \
                                 for its memory"
                            ),
                        });
                        return;
                    }
                    tracing::info!(job, uid, "a registration waits for its job's memory");
                    self.parked.push(Parked { job, conn, pid, uid, request, reply });
                } else {
                    reply.send(self.control(conn, pid, uid, request));
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
                self.live.retain(|(id, _)| *id != conn);
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
                let Some(info) = self.tasks.remove(&task) else { return };
                // a slice is charged what the client's launch gate accounted (measured,
                // or partly inferred), never more than the slice it held
                let (ran_for, measured) = match self.conns.get(&info.conn) {
                    Some(c) if info.slice => {
                        let (used, inferred) = c.region.slice_used();
                        (self.clock.emulated(Duration::from_nanos(used)).min(ran_for), !inferred)
                    }
                    _ => (ran_for, true),
                };
                self.finish_bookkeeping(gpu, task, &info, true, reason::NONE, out_len);
                if let Some(t) = self.tenants.get_mut(&info.tenant) {
                    t.gpu_time += ran_for;
                }
                self.charge(info.tenant, ran_for);
                self.deliver(Event::TaskFinished {
                    task,
                    placement: Placement::whole(gpu),
                    ran_for,
                    measured,
                    result: Ok(()),
                });
            }
            Msg::Failed { gpu, task, ran_for, reason: why } => {
                if !self.runs_on(gpu, task) {
                    return;
                }
                let Some(info) = self.tasks.remove(&task) else { return };
                self.release_memory(gpu, info.memory);
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
                self.deliver(Event::GpuResetDone { gpu });
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

    /// A running slice ends before its time (its program gave it back, or exited while
    /// holding it): done, charged `used` as the program's launch gate accounted it
    /// (`measured`, or partly inferred), never more than it held. Nothing runs for a
    /// slice, so nothing is reset. Whether `task` was such a slice.
    fn end_slice_early(&mut self, task: TaskId, used: Duration, measured: bool) -> bool {
        let Some(info) = self.tasks.get(&task) else { return false };
        let Some((gpu, started)) = info.started else { return false };
        if !info.slice || !self.runs_on(gpu, task) {
            return false;
        }
        self.exec.send(gpu, Command::Cancel { task });
        let Some(info) = self.tasks.remove(&task) else { return false };
        self.finish_bookkeeping(gpu, task, &info, true, reason::NONE, 0);
        let held = self.clock.now() - started;
        let used = self.clock.emulated(used).min(held);
        if let Some(t) = self.tenants.get_mut(&info.tenant) {
            t.gpu_time += used;
        }
        self.charge(info.tenant, used);
        self.deliver(Event::TaskFinished {
            task,
            placement: Placement::whole(gpu),
            ran_for: used,
            measured,
            result: Ok(()),
        });
        true
    }

    fn runs_on(&self, gpu: GpuId, task: TaskId) -> bool {
        self.gpus.get(gpu.0 as usize).is_some_and(|g| g.running.contains(&task))
    }

    /// End a running task whose client is gone and tell the policy it failed, so that
    /// its place is scheduled again. Alone on its GPU it is abandoned by a reset (the
    /// only way to stop a running kernel); beside co-located tasks, which a reset would
    /// kill too, the executor drops it alone.
    /// Stop a running task and end it as cancelled; whether it was running.
    fn cancel_running(&mut self, task: TaskId) -> bool {
        if self.tasks.get(&task).is_none_or(|t| t.started.is_none()) {
            return false;
        }
        let Some(info) = self.tasks.remove(&task) else { return false };
        let Some((gpu, started)) = info.started else { return false };
        self.close_gate(&info);
        if self.runs_on(gpu, task) {
            let alone = self.gpus[gpu.0 as usize].running.len() == 1;
            self.left_gpu(gpu, task);
            if alone {
                self.gpus[gpu.0 as usize].resetting = true;
                self.totals.resets += 1;
                self.exec.send(gpu, Command::Reset);
            } else {
                self.exec.send(gpu, Command::Cancel { task });
            }
        }
        self.release_memory(gpu, info.memory);
        self.totals.cancelled += 1;
        if let Some(t) = self.tenants.get_mut(&info.tenant) {
            t.not_done += 1;
        }
        tracing::info!(%task, %gpu, "cancelled the running task of a departed client");
        self.forget(&info);
        self.gc_tenant(info.tenant);
        let ran_for = self.clock.now() - started;
        self.deliver(Event::TaskFinished {
            task,
            placement: Placement::whole(gpu),
            ran_for,
            measured: true,
            result: Err(ExecutionFailure { reason: "its client left: cancelled".into() }),
        });
        true
    }

    fn close_tenant(&mut self, tenant: TenantId) {
        if let Some(t) = self.tenants.get_mut(&tenant)
            && t.open
        {
            t.open = false;
            if let Some(desk) = &self.desk {
                desk.close(tenant.0);
            }
            for g in std::mem::take(&mut t.placed) {
                if let Some(rt) = self.gpus.get_mut(g as usize) {
                    rt.placed = rt.placed.saturating_sub(1);
                }
            }
            if let Some(u) = self.uid_use.get_mut(&t.uid) {
                u.tenants = u.tenants.saturating_sub(1);
            }
            if let Some(c) = self.conns.get_mut(&t.conn) {
                c.tenants.remove(&tenant);
            }
            let job = t.job;
            self.deliver(Event::TenantLeft { tenant });
            if let Some(j) = job.and_then(|j| self.jobs.get_mut(&j)) {
                j.tenants.remove(&tenant);
                self.retry_parked();
            }
        }
        self.gc_tenant(tenant);
    }

    /// Registrations parked for job `job`'s memory.
    fn parked_for(&self, job: u64) -> usize {
        self.parked.iter().filter(|p| p.job == job).count()
    }

    /// Memory the open tenants of job `job` declared.
    fn job_declared(&self, job: u64) -> u64 {
        self.jobs.get(&job).map_or(0, |j| {
            j.tenants.iter().filter_map(|t| self.tenants.get(t)).map(|t| t.declared).sum()
        })
    }

    /// A registration that must wait for room in its job's entitlement: one under a
    /// job of this uid, over what the job has left but within the whole entitlement,
    /// with `over_entitlement = "wait"`.
    fn must_wait(
        &self,
        conn: ConnId,
        uid: u32,
        request: &tessera_client::proto::Request,
    ) -> Option<u64> {
        if !self.conns.contains_key(&conn) {
            return None; // no session: refused with a reason, never parked
        }
        let tessera_client::proto::Request::Register { job: Some(job), memory, .. } = request
        else {
            return None;
        };
        let j = self.jobs.get(job)?;
        // a registration that will be refused anyway is answered now
        if self.draining {
            return None;
        }
        (self.limits.slurm.over_entitlement == crate::config::OverEntitlement::Wait
            && j.grant.uid == uid
            && *memory <= j.memory_entitled
            && self.job_declared(*job).saturating_add(*memory) > j.memory_entitled)
            .then_some(*job)
    }

    /// Answer the parked registrations that now fit (or whose job ended).
    fn retry_parked(&mut self) {
        for p in std::mem::take(&mut self.parked) {
            if !self.conns.get(&p.conn).is_some_and(|c| c.alive) {
                continue;
            }
            if !self.draining
                && self.jobs.contains_key(&p.job)
                && self.must_wait(p.conn, p.uid, &p.request).is_some()
            {
                self.parked.push(p);
                continue;
            }
            let reply = self.control(p.conn, p.pid, p.uid, p.request);
            p.reply.send(reply);
        }
    }

    fn control(
        &mut self,
        conn: ConnId,
        _pid: u32,
        uid: u32,
        request: tessera_client::proto::Request,
    ) -> Reply {
        use tessera_client::proto::Request;
        let err = |code, message: String| Reply::Error { code, message };
        match request {
            Request::Hello { .. }
            | Request::Ping
            | Request::Reserve { .. }
            | Request::ReserveContext { .. }
            | Request::Unreserve { .. }
            | Request::MemoryInfo { .. } => {
                err(ErrorCode::BadRequest, "handled by the connection".into())
            }
            Request::Status { tenant, uid: of_uid, gpu, offset, limit } => Reply::Status(
                self.status(uid, StatusQuery { tenant, uid: of_uid, gpu, offset, limit }),
            ),
            Request::Register {
                class,
                sla_ms,
                weight,
                priority,
                memory,
                gpus,
                model,
                job,
                visible,
            } => {
                if self.draining {
                    return err(ErrorCode::ShuttingDown, "the daemon is shutting down".into());
                }
                if !self.conns.contains_key(&conn) {
                    return err(ErrorCode::BadRequest, "send hello before registering".into());
                }
                // a Slurm job's tenant: the job's class, weight and GPUs, within its
                // memory entitlement, for the job's own uid only
                let (class, sla_ms, weight, job_gpus) = match job {
                    None if self.limits.slurm.require_job
                        && uid != 0
                        && uid != self.daemon_uid
                        && !self.limits.user_facing_uids.contains(&uid) =>
                    {
                        return err(
                            ErrorCode::Forbidden,
                            "this node's GPUs are Slurm's: register under your job \
                             (TESSERA_SLURM_JOB, set by the job's TaskProlog)"
                                .into(),
                        );
                    }
                    None => (class, sla_ms, weight, None),
                    Some(_) if self.inference.is_some() => {
                        return err(
                            ErrorCode::BadRequest,
                            "Slurm jobs are not served in the gpulets inference mode".into(),
                        );
                    }
                    Some(j) => {
                        let Some(jb) = self.jobs.get(&j) else {
                            return err(
                                ErrorCode::UnknownTenant,
                                format!(
                                    "no Slurm job {j} on this node (its Prolog did not reach \
                                     this daemon, or it ended)"
                                ),
                            );
                        };
                        if uid != jb.grant.uid {
                            return err(
                                ErrorCode::Forbidden,
                                format!("Slurm job {j} belongs to uid {}, not {uid}", jb.grant.uid),
                            );
                        }
                        let declared = self.job_declared(j);
                        if declared.saturating_add(memory) > jb.memory_entitled {
                            return err(
                                ErrorCode::NoCapacity,
                                format!(
                                    "Slurm job {j}'s {} shard(s) entitle it to {} bytes of GPU \
                                     memory; its tenants declared {declared}, this one asks \
                                     {memory}",
                                    jb.weight, jb.memory_entitled
                                ),
                            );
                        }
                        (jb.class, jb.sla_ms, jb.weight, Some(jb.grant.gpus.clone()))
                    }
                };
                let class = match class {
                    TenantClass::UserFacing if sla_ms == 0 || sla_ms > 86_400_000 => {
                        return err(
                            ErrorCode::BadRequest,
                            "a user-facing tenant needs 0 < sla_ms <= 86400000 (a day)".into(),
                        );
                    }
                    TenantClass::UserFacing => {
                        ServiceClass::UserFacing { sla: Nanos::from_millis(sla_ms) }
                    }
                    TenantClass::Batch => ServiceClass::Batch,
                };
                if self.gpus.iter().all(|g| memory > g.memory) {
                    return err(
                        ErrorCode::NoCapacity,
                        format!("{memory} bytes exceed every GPU's memory"),
                    );
                }
                match (&self.inference, &model) {
                    (None, Some(_)) => {
                        return err(
                            ErrorCode::BadRequest,
                            "this daemon serves no models (its policy is not gpulets)".into(),
                        );
                    }
                    (Some(_), None) => {
                        return err(
                            ErrorCode::BadRequest,
                            "this daemon serves inference models (policy gpulets): register \
                             with a model"
                                .into(),
                        );
                    }
                    (Some(_), Some(_)) if !class.is_user_facing() => {
                        return err(
                            ErrorCode::BadRequest,
                            "a model is user-facing: its sla_ms is its SLO".into(),
                        );
                    }
                    (Some(inf), Some(m)) => {
                        if let Err(e) = inf.check(&m.name, &m.profile, sla_ms as f64) {
                            return err(ErrorCode::BadRequest, e.to_string());
                        }
                    }
                    (None, None) => {}
                }
                if class.is_user_facing()
                    && job.is_none()
                    && uid != 0
                    && uid != self.daemon_uid
                    && !self.limits.user_facing_uids.contains(&uid)
                {
                    return err(
                        ErrorCode::Forbidden,
                        format!("uid {uid} may register batch tenants only (user_facing_uids)"),
                    );
                }
                let open_here = self.conns.get(&conn).map_or(0, |c| c.tenants.len());
                if open_here >= self.limits.max_tenants_per_conn as usize {
                    return err(
                        ErrorCode::NoCapacity,
                        format!(
                            "a connection may have {} open tenants (max_tenants_per_conn)",
                            self.limits.max_tenants_per_conn
                        ),
                    );
                }
                // the GPUs the program can see (its CUDA_VISIBLE_DEVICES); a job's
                // tenant has the job's
                let within = match visible.filter(|_| job_gpus.is_none()) {
                    None => None,
                    Some(v) => match self.visible_gpus(&v) {
                        Ok(w) => Some(w),
                        Err(e) => return err(ErrorCode::BadRequest, e),
                    },
                };
                let usage = self.uid_use.entry(uid).or_default();
                if usage.tenants >= self.limits.max_tenants_per_uid {
                    return err(
                        ErrorCode::NoCapacity,
                        format!(
                            "uid {uid} has {} open tenants (max_tenants_per_uid)",
                            usage.tenants
                        ),
                    );
                }
                usage.tenants += 1;
                let id = TenantId(self.next_tenant);
                self.next_tenant += 1;
                let placed = match job_gpus {
                    Some(gs) => {
                        for g in &gs {
                            if let Some(rt) = self.gpus.get_mut(*g as usize) {
                                rt.placed += 1;
                            }
                        }
                        gs
                    }
                    None => self.place(gpus as usize, within.as_deref()),
                };
                self.tenants.insert(
                    id,
                    TenantInfo {
                        conn,
                        uid,
                        class,
                        open: true,
                        tasks: 0,
                        queued: 0,
                        done: 0,
                        met: 0,
                        not_done: 0,
                        placed: placed.clone(),
                        demand: None,
                        gpu_time: Nanos::ZERO,
                        declared: memory,
                        job,
                        weight: weight.max(1),
                        waiting: Nanos::ZERO,
                    },
                );
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.tenants.insert(id);
                }
                if let Some(desk) = &self.desk {
                    let region = self.conns.get(&conn).map(|c| c.region.clone());
                    desk.open(id.0, uid, memory, region);
                }
                if let Some(j) = job.and_then(|j| self.jobs.get_mut(&j)) {
                    j.tenants.insert(id);
                }
                if let (Some(inf), Some(m)) = (&self.inference, model) {
                    inf.admit(
                        id,
                        crate::inference::ServedModel {
                            name: m.name,
                            profile: m.profile,
                            slo_ms: sla_ms as f64,
                        },
                    );
                }
                self.deliver(Event::TenantRegistered(TenantSpec {
                    id,
                    class,
                    weight: weight.max(1),
                    priority,
                    memory: Bytes(memory),
                    // a Slurm job's tenant runs only on the job's GPUs
                    gpus: if job.is_some() {
                        placed.iter().map(|g| GpuId(*g)).collect()
                    } else {
                        Vec::new()
                    },
                }));
                // a policy that gives each tenant one GPU (DCUDA) places it: its
                // program must run where the policy grants its slices
                let home = if job.is_none() { self.policy.home(id) } else { None };
                let placed = match (home, placed.as_slice()) {
                    (Some(home), [only]) if home.0 != *only => {
                        self.gpus[*only as usize].placed -= 1;
                        if let Some(g) = self.gpus.get_mut(home.0 as usize) {
                            g.placed += 1;
                        }
                        if let Some(t) = self.tenants.get_mut(&id) {
                            t.placed = vec![home.0];
                        }
                        vec![home.0]
                    }
                    _ => placed,
                };
                let uuids = placed
                    .iter()
                    .map(|g| self.gpus.get(*g as usize).and_then(|rt| rt.uuid.clone()))
                    .collect::<Option<Vec<_>>>()
                    .unwrap_or_default();
                Reply::Registered { tenant: id.0, gpus: placed, uuids }
            }
            Request::SetWeight { tenant, weight } => {
                let id = TenantId(tenant);
                if !self.tenants.get(&id).is_some_and(|t| t.conn == conn && t.open) {
                    return err(
                        ErrorCode::UnknownTenant,
                        format!("tenant {tenant} is not one of this connection's"),
                    );
                }
                if !(1..=1000).contains(&weight) {
                    return err(
                        ErrorCode::BadRequest,
                        format!("weight must be 1..=1000, got {weight}"),
                    );
                }
                if let Some(j) = self.tenants.get(&id).and_then(|t| t.job) {
                    return err(
                        ErrorCode::Forbidden,
                        format!("tenant {tenant}'s weight is Slurm job {j}'s shards"),
                    );
                }
                if let Some(t) = self.tenants.get_mut(&id) {
                    t.weight = weight;
                }
                self.deliver(Event::TenantWeightChanged { tenant: id, weight });
                Reply::WeightSet { tenant, weight }
            }
            Request::JobStart(grant) => {
                if uid != 0 && uid != self.daemon_uid {
                    return err(
                        ErrorCode::Forbidden,
                        format!("only root or the daemon's user start Slurm jobs, not uid {uid}"),
                    );
                }
                if let Some(why) = &self.limits.slurm_refusal {
                    return err(ErrorCode::BadRequest, why.clone());
                }
                if let Some(j) = self.jobs.get(&grant.job) {
                    // a Prolog run twice reports the same grant: the same answer
                    if j.grant == grant {
                        return Reply::Job(j.report(self.job_declared(grant.job), 0));
                    }
                    // a job id reused (a requeued job) whose earlier run's Epilog never
                    // reached us: replaced if nothing of it is open
                    if !j.tenants.is_empty() {
                        let e = crate::slurm::SlurmError::Conflict(grant.job);
                        return err(ErrorCode::BadRequest, e.to_string());
                    }
                    self.jobs.remove(&grant.job);
                }
                if self.jobs.len() >= crate::slurm::MAX_JOBS {
                    let e = crate::slurm::SlurmError::TooMany(self.jobs.len());
                    return err(ErrorCode::NoCapacity, e.to_string());
                }
                let memory: Vec<u64> = self.gpus.iter().map(|g| g.memory).collect();
                match crate::slurm::Job::new(grant, &memory, &self.limits.slurm) {
                    Ok(j) => {
                        tracing::info!(
                            job = j.grant.job,
                            uid = j.grant.uid,
                            gpus = ?j.grant.gpus,
                            weight = j.weight,
                            memory = j.memory_entitled,
                            "a Slurm job started"
                        );
                        let report = j.report(0, 0);
                        self.jobs.insert(j.grant.job, j);
                        Reply::Job(report)
                    }
                    Err(e) => err(ErrorCode::BadRequest, e.to_string()),
                }
            }
            Request::JobEnd { job } => {
                if uid != 0 && uid != self.daemon_uid {
                    return err(
                        ErrorCode::Forbidden,
                        format!("only root or the daemon's user end Slurm jobs, not uid {uid}"),
                    );
                }
                // an Epilog may run for a job whose Prolog never reached us: nothing to do
                // taken out first: closing its tenants must not let a parked
                // registration into a job that is ending
                let Some(j) = self.jobs.remove(&job) else {
                    return Reply::JobEnded { job, tenants_closed: 0 };
                };
                let tenants: Vec<TenantId> = j.tenants.iter().copied().collect();
                // every task of the job still running: its open tenants', and those of
                // tenants that closed earlier (their clients left; `departed_running =
                // "finish"` let them run on) — nothing of a job outlives it
                let running: Vec<(TaskId, ConnId, u64, bool)> = self
                    .tasks
                    .iter()
                    .filter(|(_, x)| x.started.is_some())
                    .filter(|(_, x)| {
                        self.tenants.get(&x.tenant).is_some_and(|t| t.job == Some(job))
                    })
                    .map(|(id, x)| (*id, x.conn, x.seq, j.tenants.contains(&x.tenant)))
                    .collect();
                // queued tasks end with TenantLeft, first: a running task stopped first
                // would let the next queued one start
                for t in &tenants {
                    self.close_tenant(*t);
                }
                for (task, conn, seq, open) in running {
                    // answered here only if it was still running (not ended or requeued
                    // meanwhile) and an open tenant's client waits: every task once
                    if self.cancel_running(task)
                        && open
                        && self.conns.get(&conn).is_some_and(|c| c.alive)
                    {
                        self.respond(
                            conn,
                            ResponseDesc {
                                seq,
                                status: status::CANCELLED,
                                reason: reason::TENANT_CLOSED,
                                gpu: u32::MAX,
                                ..Default::default()
                            },
                        );
                    }
                }
                // registrations still waiting for this job's memory are refused
                self.retry_parked();
                tracing::info!(job, tenants = tenants.len(), "a Slurm job ended");
                Reply::JobEnded { job, tenants_closed: tenants.len() as u32 }
            }
            Request::JobInfo { job } => match self.jobs.get(&job) {
                Some(j) if uid == 0 || uid == self.daemon_uid || uid == j.grant.uid => {
                    let waiting = self.parked_for(job) as u32;
                    Reply::Job(j.report(self.job_declared(job), waiting))
                }
                Some(_) => err(ErrorCode::Forbidden, format!("Slurm job {job} is not uid {uid}'s")),
                None => err(ErrorCode::UnknownTenant, format!("no Slurm job {job} on this node")),
            },
            Request::Close { tenant } => {
                let id = TenantId(tenant);
                if !self.tenants.get(&id).is_some_and(|t| t.conn == conn && t.open) {
                    return err(
                        ErrorCode::UnknownTenant,
                        format!("tenant {tenant} is not one of this connection's"),
                    );
                }
                self.close_tenant(id);
                Reply::Closed { tenant }
            }
        }
    }

    /// The node's state as `viewer` may see it: root and the daemon's own user see
    /// every tenant; others only their own uid's (and GPUs busy with others' tasks as
    /// just "busy"). One page of the tenants `q` selects.
    fn status(&self, viewer: u32, q: StatusQuery) -> StatusReport {
        let sees_all = viewer == 0 || viewer == self.daemon_uid;
        let uid_of = |t: &TenantInfo| self.conns.get(&t.conn).map_or(u32::MAX, |c| c.uid);
        let visible = |t: &TenantInfo| sees_all || uid_of(t) == viewer;
        // per-tenant memory and GPUs in one pass over the running tasks
        let mut held: BTreeMap<TenantId, u64> = BTreeMap::new();
        let mut on_gpu: BTreeSet<TenantId> = BTreeSet::new();
        for g in &self.gpus {
            for info in g.running.iter().filter_map(|t| self.tasks.get(t)) {
                *held.entry(info.tenant).or_default() += info.memory;
                if info.started.is_some_and(|(gpu, _)| Some(gpu.0) == q.gpu) {
                    on_gpu.insert(info.tenant);
                }
            }
        }
        let selected = self.tenants.iter().filter(|(id, t)| {
            t.open
                && visible(t)
                && q.tenant.is_none_or(|x| x == id.0)
                && q.uid.is_none_or(|u| u == uid_of(t))
                && (q.gpu.is_none() || on_gpu.contains(id))
        });
        let total = selected.clone().count() as u64;
        let limit = match q.limit {
            0 => STATUS_PAGE,
            n => n.min(STATUS_PAGE),
        };
        let uptime = self.started.elapsed();
        let used = self.ledger.as_ref().and_then(|l| l.status().ok());
        // fair sharing: who has work now, and who was charged GPU time lately
        let on_any: BTreeSet<TenantId> = self
            .gpus
            .iter()
            .flat_map(|g| g.running.iter().filter_map(|t| self.tasks.get(t).map(|i| i.tenant)))
            .collect();
        let active_weight: u32 = self
            .tenants
            .iter()
            .filter(|(id, t)| t.open && (t.queued > 0 || on_any.contains(id)))
            .map(|(_, t)| t.weight)
            .sum();
        let now = self.clock.now();
        let mut charged: BTreeMap<TenantId, u64> = BTreeMap::new();
        for (at, tenant, ran) in &self.charges {
            if now.saturating_sub(*at) <= SHARE_WINDOW {
                *charged.entry(*tenant).or_default() += ran.0;
            }
        }
        let charged_total: u64 = charged.values().sum();
        let balance: Option<DcudaReport> =
            self.balance.as_ref().and_then(|(r, _)| r.lock().ok().map(|r| r.clone()));
        let state_name = |s: LoadState| match s {
            LoadState::Underloaded => "underloaded",
            LoadState::Normal => "normal",
            LoadState::Overloaded => "overloaded",
        };
        // at most a page of jobs (a status reply must fit one frame); `jobs_total` says
        // how many there are
        let visible_jobs = || self.jobs.values().filter(|j| sees_all || j.grant.uid == viewer);
        let jobs_total = visible_jobs().count() as u64;
        let jobs = visible_jobs()
            .take(JOBS_IN_STATUS)
            .map(|j| {
                let waiting = self.parked_for(j.grant.job) as u32;
                j.report(self.job_declared(j.grant.job), waiting)
            })
            .collect();
        StatusReport {
            jobs,
            jobs_total,
            slurm_shards_per_gpu: self.limits.slurm.shards_per_gpu,
            policy: self.policy.label(),
            executor: self.executor_name.clone(),
            uptime_s: uptime.as_secs_f64(),
            gpus: self
                .gpus
                .iter()
                .enumerate()
                .filter(|(i, _)| q.gpu.is_none_or(|g| g as usize == *i))
                .map(|(i, g)| {
                    let busy = g.busy_total + g.busy_since.map_or(Duration::ZERO, |s| s.elapsed());
                    let shares = self.exec.shares(GpuId(i as u32));
                    let running: Vec<RunningReport> = g
                        .running
                        .iter()
                        .filter_map(|t| self.tasks.get(t).map(|info| (t, info)))
                        .map(|(t, info)| RunningReport {
                            // another uid's tenant is shown only as "busy" work
                            tenant: self
                                .tenants
                                .get(&info.tenant)
                                .is_some_and(visible)
                                .then_some(info.tenant.0),
                            share: shares
                                .as_ref()
                                .and_then(|s| s.iter().find(|(id, _)| id == t))
                                .map(|(_, share)| *share),
                        })
                        .collect();
                    GpuReport {
                        gpu: i as u32,
                        pool: g.pool.into(),
                        busy: if g.resetting {
                            "resetting".into()
                        } else {
                            match running.as_slice() {
                                [] => "idle".into(),
                                [RunningReport { tenant: Some(t), .. }] => format!("tenant {t}"),
                                [_] => "busy".into(),
                                many => format!("{} tasks", many.len()),
                            }
                        },
                        running,
                        memory_used: used
                            .as_ref()
                            .and_then(|s| s.gpus.get(i))
                            .map_or(0, |s| s.used),
                        memory_total: g.memory,
                        utilization: if uptime.is_zero() {
                            0.0
                        } else {
                            busy.as_secs_f64() / uptime.as_secs_f64()
                        },
                        partitions: g.partitions.iter().map(|p| u32::from(p.0) / 10).collect(),
                        load: balance.as_ref().and_then(|b| {
                            let u = b.utilization.get(i)?;
                            let st = (*b.states.get(i)?)?;
                            Some((*u, state_name(st).to_string()))
                        }),
                    }
                })
                .collect(),
            tenants: selected
                .skip(usize::try_from(q.offset).unwrap_or(usize::MAX))
                .take(limit as usize)
                .map(|(id, t)| {
                    let c = self.conns.get(&t.conn);
                    TenantReport {
                        tenant: id.0,
                        pid: c.map_or(0, |c| c.pid),
                        uid: c.map_or(0, |c| c.uid),
                        class: if t.class.is_user_facing() {
                            TenantClass::UserFacing
                        } else {
                            TenantClass::Batch
                        },
                        sla_ms: match t.class {
                            ServiceClass::UserFacing { sla } => sla.0 / 1_000_000,
                            ServiceClass::Batch => 0,
                        },
                        queued: t.queued,
                        done: t.done,
                        not_done: t.not_done,
                        sla_met: (t.class.is_user_facing() && t.done > 0)
                            .then(|| t.met as f64 / t.done as f64),
                        memory_held: held.get(id).copied().unwrap_or(0),
                        demand: t.demand,
                        gpu_ms: t.gpu_time.as_secs_f64() * 1e3,
                        weight: t.weight,
                        entitled_share: (t.queued > 0 || on_any.contains(id))
                            .then(|| f64::from(t.weight) / f64::from(active_weight.max(1))),
                        received_share: (charged_total > 0).then(|| {
                            charged.get(id).map_or(0, |n| *n) as f64 / charged_total as f64
                        }),
                        waiting_ms: t.waiting.0 as f64 / 1e6,
                        job: t.job,
                        model: self.inference.as_ref().and_then(|inf| inf.model_of(*id)).map(|m| {
                            ModelReport {
                                name: m.model.name,
                                profile: m.model.profile,
                                rate: m.rate,
                                gpulets: m.gpulets,
                            }
                        }),
                    }
                })
                .collect(),
            tenants_total: total,
            serving: self.inference.as_ref().map(|i| {
                let (reorganizations, refused) = i.decisions();
                ServingSummary { reorganizations, refused }
            }),
            balance: balance.map(|b| BalanceSummary {
                migrations: b.migrations,
                recent: b
                    .recent
                    .iter()
                    .map(|m| MigrationReport {
                        at_s: m.at.0 as f64 / 1e9 / self.clock.speedup(),
                        tenant: self
                            .tenants
                            .get(&m.decided.tenant)
                            .is_some_and(visible)
                            .then_some(m.decided.tenant.0),
                        from: m.decided.from.0,
                        to: m.decided.to.0,
                        reason: match m.decided.reason {
                            MoveReason::Balance => "balance".into(),
                            MoveReason::Energy => "energy".into(),
                        },
                    })
                    .collect(),
            }),
            totals: self.totals.clone(),
        }
    }
}

/// What a status request selects.
#[derive(Clone, Copy, Debug)]
struct StatusQuery {
    tenant: Option<u64>,
    uid: Option<u32>,
    gpu: Option<u32>,
    offset: u64,
    limit: u32,
}
