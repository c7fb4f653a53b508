//! The client: connect, register tenants, submit tasks through the rings, wait.

use crate::proto::{
    self, ErrorCode, FrameError, PROTOCOL, Reply, Request, StatusReport, TenantClass,
};
use crate::region::{Doorbell, Region, RegionError, RequestDesc, ResponseDesc, op, reason, status};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use std::collections::VecDeque;
use std::fs::File;
use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

mod types;
pub use types::{Completion, Outcome, Placement, StatusFilter, TaskRequest, TenantOptions};

/// Spins before a waiting client sleeps on its futex.
const SPINS: u32 = 2_000;

/// What can go wrong for a client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No daemon at that path, or the connection broke.
    #[error("cannot reach tesserad: {0}")]
    Connect(#[source] std::io::Error),
    /// The daemon refused the request.
    #[error("tesserad refused: {code:?}: {message}")]
    Refused {
        /// Stable code.
        code: ErrorCode,
        /// Details.
        message: String,
    },
    /// The daemon said something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// More tasks in flight than ring slots.
    #[error("{0} tasks already in flight: wait for some before submitting more")]
    TooManyInFlight(u32),
    /// Input or output larger than a data slot.
    #[error("task data of {len} bytes exceeds the {max}-byte slot")]
    TooLarge {
        /// Bytes asked for.
        len: usize,
        /// Slot size.
        max: u32,
    },
    /// No completion within the timeout.
    #[error("timed out waiting for a completion")]
    TimedOut,
    /// The daemon went away (it shut down, or died: its end of the connection
    /// closed); what was in flight will not complete.
    #[error("tesserad is gone: it shut down or died; tasks in flight will not complete")]
    DaemonGone,
    /// The shared region was unusable.
    #[error(transparent)]
    Region(#[from] RegionError),
}

impl From<FrameError> for ClientError {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::Io(io) => ClientError::Connect(io),
            FrameError::Closed => {
                ClientError::Connect(std::io::Error::other("daemon closed the connection"))
            }
            other => ClientError::Protocol(other.to_string()),
        }
    }
}

/// A connection to `tesserad`. Not `Sync`: one thread drives it (open one per thread).
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    region: Option<(std::sync::Arc<Region>, Doorbell)>,
    next_seq: u64,
    /// Per data slot: whether a request in flight holds it.
    slot_busy: Vec<bool>,
    /// Requests in flight.
    in_flight: usize,
    ready: VecDeque<Completion>,
    /// Handles whose completions no one will wait for (see [`Client::forget`]).
    forgotten: std::collections::BTreeSet<u64>,
}

fn refused(reply: Reply) -> ClientError {
    match reply {
        Reply::Error { code, message } => ClientError::Refused { code, message },
        other => ClientError::Protocol(format!("unexpected reply {other:?}")),
    }
}

/// A memory request's wait on the wire: milliseconds, none for ever.
fn wait_ms(wait: Option<Duration>) -> Option<u64> {
    wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX))
}

impl Client {
    /// Connect to the daemon at `socket` and open the shared rings.
    pub fn connect(socket: &Path) -> Result<Client, ClientError> {
        let mut c = Client::connect_control(socket)?;
        if let Err(e) = proto::write_frame(&mut c.stream, &Request::Hello { protocol: PROTOCOL }) {
            // a daemon that refuses the connection (too many for this uid, shutting
            // down) answers and closes before reading: its answer says why
            return Err(c.refusal_after(e));
        }
        let (reply, fds) = recv_with_fds(&c.stream)?;
        match reply {
            Reply::Welcome { protocol, .. } if protocol == PROTOCOL => {}
            other => return Err(refused(other)),
        }
        let mut fds = fds.into_iter();
        let (Some(region), Some(bell)) = (fds.next(), fds.next()) else {
            return Err(ClientError::Protocol(
                "welcome without the two shared-memory descriptors".into(),
            ));
        };
        let region = Region::map(&region)?;
        c.slot_busy = vec![false; region.slots() as usize];
        c.region = Some((std::sync::Arc::new(region), Doorbell::from_fd(bell.into())));
        Ok(c)
    }

    /// The connection's socket descriptor (for a library that must close its copy in a
    /// forked child).
    pub fn socket_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.stream)
    }

    /// Connect for control messages only (status, no rings).
    pub fn connect_control(socket: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(socket).map_err(ClientError::Connect)?;
        Ok(Client {
            stream,
            region: None,
            next_seq: 0,
            slot_busy: Vec::new(),
            in_flight: 0,
            ready: VecDeque::new(),
            forgotten: std::collections::BTreeSet::new(),
        })
    }

    /// Give up on a control call (its write or its answer) after `limit`: for callers
    /// that must not hang on a stuck daemon, such as Slurm's hooks.
    pub fn set_timeout(&mut self, limit: Duration) -> Result<(), ClientError> {
        self.stream.set_read_timeout(Some(limit)).map_err(ClientError::Connect)?;
        self.stream.set_write_timeout(Some(limit)).map_err(ClientError::Connect)
    }

    fn call(&mut self, req: &Request) -> Result<Reply, ClientError> {
        if let Err(e) = proto::write_frame(&mut self.stream, req) {
            return Err(self.refusal_after(e));
        }
        Ok(proto::read_frame(&mut self.stream)?)
    }

    /// A write failed: if the daemon left an answer before closing, that answer (its
    /// refusal) is the error; otherwise the write's.
    fn refusal_after(&mut self, write: std::io::Error) -> ClientError {
        // never wait long for an answer that may not come
        let _ = self.stream.set_read_timeout(Some(Duration::from_secs(1)));
        let answer = proto::read_frame::<Reply>(&mut self.stream);
        let _ = self.stream.set_read_timeout(None);
        match answer {
            Ok(reply) => refused(reply),
            Err(_) => ClientError::Connect(write),
        }
    }

    /// Register a tenant owned by this connection.
    pub fn register(&mut self, o: TenantOptions) -> Result<u64, ClientError> {
        self.register_placed(o, 0).map(|(tenant, _)| tenant)
    }

    /// Register a tenant and have the daemon place it on `gpus` GPUs (the least loaded);
    /// returns the tenant and the GPUs chosen.
    pub fn register_placed(
        &mut self,
        o: TenantOptions,
        gpus: u32,
    ) -> Result<(u64, Vec<u32>), ClientError> {
        self.register_within(o, gpus, None).map(|p| (p.tenant, p.gpus))
    }

    /// Register a tenant placed on `gpus` GPUs among those `visible` names (a
    /// program's `CUDA_VISIBLE_DEVICES` entries; all of the node's when `None`).
    pub fn register_within(
        &mut self,
        o: TenantOptions,
        gpus: u32,
        visible: Option<Vec<String>>,
    ) -> Result<Placement, ClientError> {
        self.register_placed_as(o, gpus, visible, false)
    }

    /// [`Client::register_within`] for a program that may be moved to any GPU it may
    /// see (`migratable`: it reserves memory on any of them).
    pub fn register_placed_as(
        &mut self,
        o: TenantOptions,
        gpus: u32,
        visible: Option<Vec<String>>,
        migratable: bool,
    ) -> Result<Placement, ClientError> {
        let req = Request::Register {
            class: o.class,
            sla_ms: o.sla.as_millis() as u64,
            weight: o.weight,
            priority: o.priority,
            memory: o.memory,
            gpus,
            model: None,
            job: o.job,
            visible,
            migratable,
            token: o.token,
        };
        match self.call(&req)? {
            Reply::Registered { tenant, gpus, uuids, pid } => {
                Ok(Placement { tenant, gpus, uuids, pid })
            }
            other => Err(refused(other)),
        }
    }

    /// Register a tenant serving an inference model (`profile` by name) with SLO `slo`,
    /// on a daemon running `policy = "gpulets"`: each task it submits is one request.
    pub fn register_model(
        &mut self,
        name: &str,
        profile: &str,
        slo: Duration,
    ) -> Result<u64, ClientError> {
        let req = Request::Register {
            class: TenantClass::UserFacing,
            sla_ms: slo.as_millis() as u64,
            weight: 1,
            priority: 0,
            memory: 0,
            gpus: 0,
            model: Some(crate::proto::ModelSpec { name: name.into(), profile: profile.into() }),
            job: None,
            visible: None,
            migratable: false,
            token: None,
        };
        match self.call(&req)? {
            Reply::Registered { tenant, .. } => Ok(tenant),
            other => Err(refused(other)),
        }
    }

    /// Close a tenant: its queued tasks are cancelled.
    pub fn close(&mut self, tenant: u64) -> Result<(), ClientError> {
        match self.call(&Request::Close { tenant })? {
            Reply::Closed { .. } => Ok(()),
            other => Err(refused(other)),
        }
    }

    /// Reserve `bytes` on the node's GPU `gpu` for `tenant` (of this uid), waiting up to
    /// `wait` when they do not fit now (`None`: for ever). A `lease` (memory beyond what
    /// is needed now) is granted only if it fits at once.
    pub fn reserve(
        &mut self,
        tenant: u64,
        gpu: u32,
        bytes: u64,
        wait: Option<Duration>,
        lease: bool,
    ) -> Result<(), ClientError> {
        let wait_ms = wait_ms(wait);
        match self.call(&Request::Reserve { tenant, gpu, bytes, wait_ms, lease })? {
            Reply::Reserved { .. } => Ok(()),
            other => Err(refused(other)),
        }
    }

    /// Reserve the memory a context of `tenant` takes on GPU `gpu` (once per GPU).
    pub fn reserve_context(
        &mut self,
        tenant: u64,
        gpu: u32,
        wait: Option<Duration>,
    ) -> Result<u64, ClientError> {
        let wait_ms = wait_ms(wait);
        match self.call(&Request::ReserveContext { tenant, gpu, wait_ms })? {
            Reply::Reserved { bytes, .. } => Ok(bytes),
            other => Err(refused(other)),
        }
    }

    /// Return `bytes` reserved with [`Client::reserve`].
    pub fn unreserve(&mut self, tenant: u64, gpu: u32, bytes: u64) -> Result<(), ClientError> {
        match self.call(&Request::Unreserve { tenant, gpu, bytes })? {
            Reply::Unreserved { .. } => Ok(()),
            other => Err(refused(other)),
        }
    }

    /// The ledger record `tenant`'s reservations are held under: its client id and a
    /// descriptor of it, which the program keeps open for its life so that its
    /// reservations outlive a crash of the daemon.
    pub fn keep_ledger_record(&mut self, tenant: u64) -> Result<(u64, File), ClientError> {
        if let Err(e) = proto::write_frame(&mut self.stream, &Request::KeepLedgerRecord { tenant })
        {
            return Err(self.refusal_after(e));
        }
        match recv_with_fds(&self.stream)? {
            (Reply::LedgerRecord { client }, fds) => match fds.into_iter().next() {
                Some(record) => Ok((client, record)),
                None => Err(ClientError::Protocol("a ledger record without its descriptor".into())),
            },
            (other, _) => Err(refused(other)),
        }
    }

    /// Take back, for `tenant` (just registered by this program with a daemon that
    /// restarted), the reservations the ledger kept under the program's record
    /// `client`; `contexts`: the node's GPUs whose context memory they include. What
    /// the tenant holds now, per GPU.
    pub fn adopt(
        &mut self,
        tenant: u64,
        client: u64,
        contexts: Vec<u32>,
    ) -> Result<Vec<(u32, u64)>, ClientError> {
        match self.call(&Request::Adopt { tenant, client, contexts })? {
            Reply::Adopted { held } => Ok(held),
            other => Err(refused(other)),
        }
    }

    /// (free, total) bytes `tenant` sees on GPU `gpu`.
    pub fn memory_info(&mut self, tenant: u64, gpu: u32) -> Result<(u64, u64), ClientError> {
        match self.call(&Request::MemoryInfo { tenant, gpu })? {
            Reply::Memory { free, total } => Ok((free, total)),
            other => Err(refused(other)),
        }
    }

    /// Change the weight of one of this connection's tenants (1..=1000).
    pub fn set_weight(&mut self, tenant: u64, weight: u32) -> Result<(), ClientError> {
        match self.call(&Request::SetWeight { tenant, weight })? {
            Reply::WeightSet { .. } => Ok(()),
            other => Err(refused(other)),
        }
    }

    /// Tell the daemon a Slurm job started here (a Prolog, as root).
    pub fn job_start(
        &mut self,
        grant: crate::proto::JobGrant,
    ) -> Result<crate::proto::JobReport, ClientError> {
        match self.call(&Request::JobStart(grant))? {
            Reply::Job(r) => Ok(r),
            other => Err(refused(other)),
        }
    }

    /// Tell the daemon a Slurm job ended (an Epilog, as root); returns the tenants it
    /// closed.
    pub fn job_end(&mut self, job: u64) -> Result<u32, ClientError> {
        match self.call(&Request::JobEnd { job })? {
            Reply::JobEnded { tenants_closed, .. } => Ok(tenants_closed),
            other => Err(refused(other)),
        }
    }

    /// Tell the daemon a Kubernetes container was allocated (the device plugin, as root
    /// or the daemon's user); the allocation is answered as a job.
    pub fn pod_start(
        &mut self,
        grant: crate::pod::PodGrant,
    ) -> Result<crate::proto::JobReport, ClientError> {
        match self.call(&Request::PodStart(grant))? {
            Reply::Job(r) => Ok(r),
            other => Err(refused(other)),
        }
    }

    /// Tell the daemon a Kubernetes container's allocation ended; returns the tenants
    /// it closed.
    pub fn pod_end(&mut self, token: crate::pod::Token) -> Result<u32, ClientError> {
        match self.call(&Request::PodEnd { token })? {
            Reply::JobEnded { tenants_closed, .. } => Ok(tenants_closed),
            other => Err(refused(other)),
        }
    }

    /// What the daemon gives a Slurm job (the job's user, root or the daemon's user).
    pub fn job_info(&mut self, job: u64) -> Result<crate::proto::JobReport, ClientError> {
        match self.call(&Request::JobInfo { job })? {
            Reply::Job(r) => Ok(r),
            other => Err(refused(other)),
        }
    }

    /// A round trip over the control socket (transport benchmark).
    pub fn ping(&mut self) -> Result<(), ClientError> {
        match self.call(&Request::Ping)? {
            Reply::Pong => Ok(()),
            other => Err(refused(other)),
        }
    }

    /// The node's state with every tenant this client may see (all pages).
    pub fn status(&mut self) -> Result<StatusReport, ClientError> {
        self.status_where(StatusFilter::default())
    }

    /// The node's state with the tenants `filter` selects (all pages).
    pub fn status_where(&mut self, filter: StatusFilter) -> Result<StatusReport, ClientError> {
        let mut report = self.status_page(filter, 0)?;
        // tenants come and go between pages: stop at an empty page whatever the total
        let later_pages = StatusFilter { events: 0, ..filter };
        while (report.tenants.len() as u64) < report.tenants_total {
            let page = self.status_page(later_pages, report.tenants.len() as u64)?;
            if page.tenants.is_empty() {
                break;
            }
            report.tenants.extend(page.tenants);
        }
        Ok(report)
    }

    /// One page of the state, from the `offset`-th selected tenant.
    pub fn status_page(
        &mut self,
        filter: StatusFilter,
        offset: u64,
    ) -> Result<StatusReport, ClientError> {
        let req = Request::Status {
            tenant: filter.tenant,
            uid: filter.uid,
            gpu: filter.gpu,
            offset,
            limit: 0,
            events: filter.events,
        };
        match self.call(&req)? {
            Reply::Status(s) => Ok(*s),
            other => Err(refused(other)),
        }
    }

    fn rings(&self) -> Result<&(std::sync::Arc<Region>, Doorbell), ClientError> {
        self.region
            .as_ref()
            .ok_or_else(|| ClientError::Protocol("control-only connection has no rings".into()))
    }

    fn push(&mut self, mut d: RequestDesc, input: &[u8]) -> Result<u64, ClientError> {
        let (region, bell) = self.rings()?;
        let slots = region.slots();
        if self.in_flight as u32 >= slots {
            return Err(ClientError::TooManyInFlight(slots));
        }
        let max = region.slot_bytes();
        if input.len() > max as usize || d.out_len > max {
            return Err(ClientError::TooLarge { len: input.len().max(d.out_len as usize), max });
        }
        // request `seq` owns data slot `seq % slots`; tasks finish out of order, so skip
        // ahead to a sequence number whose slot no task in flight holds (one exists
        // within `slots` steps, since fewer than `slots` are in flight)
        let slot = |seq: u64| (seq % u64::from(slots)) as usize;
        let mut seq = self.next_seq;
        while self.slot_busy[slot(seq)] {
            seq += 1;
        }
        d.seq = seq;
        region.write_data(seq, input);
        if !region.push_request(&d) {
            return Err(ClientError::TooManyInFlight(slots));
        }
        ring_if_asleep(region, bell);
        self.next_seq = seq + 1;
        self.slot_busy[slot(seq)] = true;
        self.in_flight += 1;
        Ok(seq)
    }

    /// Submit a task of `tenant`; returns its handle. No system call unless the daemon
    /// sleeps.
    pub fn submit(&mut self, tenant: u64, t: &TaskRequest) -> Result<u64, ClientError> {
        let d = RequestDesc {
            tenant,
            cost_ns: t.cost.as_nanos() as u64,
            memory: t.memory,
            kernel: t.kernel,
            op: op::SUBMIT,
            in_len: t.input.len() as u32,
            out_len: t.output_len,
            ..Default::default()
        };
        self.push(d, &t.input)
    }

    /// Ask for a slice of `cost` of a GPU (the interposer's launch gate); returns its
    /// handle. While the daemon has it dispatched, the region's [`Region::granted`]
    /// names the GPU; it completes when the slice ends.
    /// `launch` describes the tenant's latest kernel launch, for the daemon's monitor.
    pub fn submit_slice(
        &mut self,
        tenant: u64,
        cost: Duration,
        launch: Option<crate::region::LaunchFacts>,
    ) -> Result<u64, ClientError> {
        let launch = launch.unwrap_or_default();
        let d = RequestDesc {
            tenant,
            cost_ns: cost.as_nanos() as u64,
            op: op::SLICE,
            launch_grid: launch.grid_blocks,
            launch_block: launch.pack(),
            ..Default::default()
        };
        self.push(d, &[])
    }

    /// End the running slice `handle` early, reporting the GPU time used and whether
    /// it was measured throughout (else partly inferred); no system call unless the
    /// daemon sleeps.
    pub fn release_slice(
        &mut self,
        handle: u64,
        used: Duration,
        measured: bool,
    ) -> Result<(), ClientError> {
        let (region, bell) = self.rings()?;
        region.drop_grant();
        let d = RequestDesc {
            seq: handle,
            op: op::RELEASE,
            cost_ns: used.as_nanos() as u64,
            kernel: u32::from(measured),
            ..Default::default()
        };
        if !region.push_request(&d) {
            return Err(ClientError::TooManyInFlight(region.slots()));
        }
        ring_if_asleep(region, bell);
        Ok(())
    }

    /// The shared region, for lock-free reads of the grant word by other threads.
    pub fn region(&self) -> Option<std::sync::Arc<Region>> {
        self.region.as_ref().map(|(r, _)| r.clone())
    }

    /// Ask the daemon to cancel a queued task (a running one finishes).
    pub fn cancel(&mut self, handle: u64) -> Result<(), ClientError> {
        let (region, bell) = self.rings()?;
        let d = RequestDesc { seq: handle, op: op::CANCEL, ..Default::default() };
        if !region.push_request(&d) {
            return Err(ClientError::TooManyInFlight(region.slots()));
        }
        ring_if_asleep(region, bell);
        Ok(())
    }

    /// Run a task of `tenant` costing `cost` over the socket, waiting for its end: the
    /// rings' baseline (transport benchmark); returns its `region::status`. Needs a
    /// connection made with [`Client::connect`].
    pub fn run_task_over_socket(
        &mut self,
        tenant: u64,
        cost: Duration,
    ) -> Result<u32, ClientError> {
        let cost_ns = u64::try_from(cost.as_nanos()).unwrap_or(u64::MAX);
        match self.call(&Request::RunTask { tenant, cost_ns })? {
            Reply::TaskDone { status, .. } => Ok(status),
            other => Err(refused(other)),
        }
    }

    /// Round trip through the rings with no scheduling (transport benchmark).
    pub fn echo(&mut self) -> Result<(), ClientError> {
        let h = self.push(RequestDesc { op: op::ECHO, ..Default::default() }, &[])?;
        self.wait(h, Duration::from_secs(10)).map(|_| ())
    }

    fn completion(&mut self, r: ResponseDesc) -> Completion {
        let region = &self.region.as_ref().expect("rings").0;
        let output = if r.status == status::DONE {
            region.read_data(r.seq, r.out_len as usize)
        } else {
            Vec::new()
        };
        let slot = (r.seq % self.slot_busy.len().max(1) as u64) as usize;
        if self.slot_busy.get(slot).copied().unwrap_or(false) {
            self.slot_busy[slot] = false;
            self.in_flight -= 1;
        }
        Completion {
            handle: r.seq,
            outcome: match r.status {
                status::DONE => Outcome::Done,
                status::CANCELLED => Outcome::Cancelled(r.reason),
                status::ECHO => Outcome::Echo,
                _ => Outcome::Failed(if r.reason == reason::NONE {
                    reason::EXECUTOR
                } else {
                    r.reason
                }),
            },
            queued: Duration::from_nanos(r.queued_ns),
            ran: Duration::from_nanos(r.ran_ns),
            gpu: (r.gpu != u32::MAX).then_some(r.gpu),
            output,
        }
    }

    /// Whether the daemon's end of the connection has closed (it shut down or died):
    /// a non-blocking peek that sees end-of-file or a reset.
    pub fn daemon_gone(&self) -> bool {
        let mut b = [0u8; 1];
        match rustix::net::recv(
            &self.stream,
            &mut b,
            rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
        ) {
            Ok((0, _)) => true,
            Ok(_) | Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => false,
            Err(_) => true,
        }
    }

    fn wait_response(&self, timeout: Duration) -> Result<ResponseDesc, ClientError> {
        self.rings()?
            .0
            .wait_response(SPINS, timeout, &|| self.daemon_gone())
            .ok_or_else(|| self.why_no_response())
    }

    /// The next completion of any task, waiting up to `timeout` (`Duration::MAX`: no
    /// limit). If the daemon goes away meanwhile, fails with
    /// [`ClientError::DaemonGone`] within about 100 ms.
    pub fn wait_any(&mut self, timeout: Duration) -> Result<Completion, ClientError> {
        if let Some(c) = self.ready.pop_front() {
            return Ok(c);
        }
        self.next_completion(std::time::Instant::now().checked_add(timeout))
    }

    /// The next completion to arrive that is not forgotten (see [`Client::forget`]),
    /// waiting until `deadline` (`None`: no limit).
    fn next_completion(
        &mut self,
        deadline: Option<std::time::Instant>,
    ) -> Result<Completion, ClientError> {
        loop {
            let left = deadline
                .map_or(Duration::MAX, |d| d.saturating_duration_since(std::time::Instant::now()));
            let r = self.wait_response(left)?;
            let c = self.completion(r);
            if !self.forgotten.remove(&c.handle) {
                return Ok(c);
            }
        }
    }

    /// No one will wait for `handle`'s completion (a slice released whose next one was
    /// already asked for): it is dropped when it comes, its slot freed all the same.
    pub fn forget(&mut self, handle: u64) {
        if let Some(i) = self.ready.iter().position(|c| c.handle == handle) {
            self.ready.remove(i);
        } else {
            self.forgotten.insert(handle);
        }
    }

    /// The completion of `handle`, waiting up to `timeout` (`Duration::MAX`: no
    /// limit); other completions that arrive meanwhile are kept for `wait_any`. If the
    /// daemon goes away meanwhile, fails with [`ClientError::DaemonGone`] within about
    /// 100 ms.
    pub fn wait(&mut self, handle: u64, timeout: Duration) -> Result<Completion, ClientError> {
        if let Some(i) = self.ready.iter().position(|c| c.handle == handle) {
            return Ok(self.ready.remove(i).expect("index in range"));
        }
        let deadline = std::time::Instant::now().checked_add(timeout);
        loop {
            let c = self.next_completion(deadline)?;
            if c.handle == handle {
                return Ok(c);
            }
            self.ready.push_back(c);
        }
    }

    fn why_no_response(&self) -> ClientError {
        match &self.region {
            Some((r, _)) if r.is_closed() => ClientError::DaemonGone,
            _ if self.daemon_gone() => ClientError::DaemonGone,
            _ => ClientError::TimedOut,
        }
    }

    /// Tasks submitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
}

/// Receive one reply frame and any file descriptors sent with it.
fn recv_with_fds(stream: &UnixStream) -> Result<(Reply, Vec<File>), ClientError> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let mut buf = vec![0u8; proto::MAX_FRAME + 4];
    let mut got = 0;
    let mut fds = Vec::new();
    // the first recvmsg carries the descriptors; the rest of the frame may follow
    loop {
        let r = rustix::net::recvmsg(
            stream,
            &mut [IoSliceMut::new(&mut buf[got..])],
            &mut cmsg,
            RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(|e| ClientError::Connect(e.into()))?;
        for msg in cmsg.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = msg {
                fds.extend(rights.map(File::from));
            }
        }
        if r.bytes == 0 {
            return Err(ClientError::Connect(std::io::Error::other(
                "daemon closed the connection",
            )));
        }
        got += r.bytes;
        if got >= 4 {
            let len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
            if len > proto::MAX_FRAME {
                return Err(ClientError::Protocol("oversized reply".into()));
            }
            if got >= 4 + len {
                let reply = serde_json::from_slice(&buf[4..4 + len])
                    .map_err(|e| ClientError::Protocol(e.to_string()))?;
                return Ok((reply, fds));
            }
        }
    }
}

/// After a request: ring the daemon's doorbell if it does not poll this ring; on a busy
/// host, tell it first which CPU this thread asks from, so that its core waits there,
/// where the wake-ups between the two find a CPU-bound neighbour to preempt rather than
/// a queue on another CPU (see `Region::set_client_cpu`).
fn ring_if_asleep(region: &Region, bell: &Doorbell) {
    if region.daemon_sleeping() {
        if region.host_busy() {
            region.set_client_cpu(rustix::thread::sched_getcpu());
        }
        bell.ring();
    }
}
