//! The shared-memory data plane (FairGV §3.1, §4.1): per client, one region holding a
//! request ring (client produces, daemon consumes), a response ring (daemon produces,
//! client consumes) and a data area; and the daemon's doorbell (an eventfd).
//!
//! Each ring is single-producer single-consumer and lock-free: fixed-size descriptors
//! in a power-of-two array, a tail index written only by the producer and a head index
//! written only by the consumer. No system call is made per task while both sides are
//! busy. A side that finds nothing to do spins briefly, then announces that it sleeps
//! and waits on a futex in the shared memory; the other side makes the wake-up system
//! call only when that flag is set (the paper's hybrid spinning). The flag and index
//! accesses are `SeqCst` so that a producer and a consumer going to sleep cannot both
//! miss each other (the store-then-load pattern of Dekker's algorithm).
//!
//! Waking the daemon: each client has its own eventfd (its [`Doorbell`]), which the
//! daemon watches edge-triggered and never reads; before sleeping the daemon sets a
//! flag in every client's region, and a client rings only if its own flag is set. Each
//! client can thus only affect its own wake-ups, and nothing it does to its eventfd can
//! block the daemon.
//!
//! Data: request `seq` owns data slot `seq % slots` for its input and, once answered,
//! its output; the client never has more than `slots` requests in flight.
#![allow(unsafe_code)]

use bytemuck::{Pod, Zeroable};
use memmap2::MmapMut;
use rustix::thread::futex;
use std::fs::File;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

mod doorbell;
pub use doorbell::Doorbell;

/// Identifies a region.
pub const REGION_MAGIC: u64 = 0x5445_5353_5249_4e47; // "TESSRING"

/// How the daemon serves a ring (its `daemon_sleeping` word): whether a client must
/// ring its doorbell, and whether it may spin for the answer.
pub mod daemon_state {
    /// The core polls the ring: no doorbell; spinning for the answer pays.
    pub const POLLING: u32 = 0;
    /// The core sleeps: ring; it wakes promptly, so a short spin still pays.
    pub const ASLEEP: u32 = 1;
    /// The host's CPUs are oversubscribed: ring, and block for the answer (a spin would
    /// burn the time slice the core needs).
    pub const BUSY: u32 = 2;
}

/// Request operations.
pub mod op {
    /// Run a task.
    pub const SUBMIT: u32 = 0;
    /// Cancel a queued task (`seq` names it).
    pub const CANCEL: u32 = 1;
    /// Answer at once without scheduling (transport benchmark).
    pub const ECHO: u32 = 2;
    /// Ask for a time slice of the GPU (the interposer's launch gate): scheduled like a
    /// task of `cost_ns`, but the daemon runs nothing for it; while it is dispatched
    /// the region's grant word names the GPU, and the client's own kernels may run.
    pub const SLICE: u32 = 3;
    /// End the client's running slice (`seq` names its request) before its time: the
    /// client used what it needed (FairGV §3.3's collaborative release). `cost_ns` is
    /// the GPU time it accounted; `kernel` is 1 when every launch was measured, 0 when
    /// some were inferred. No response of its own: the slice request completes.
    pub const RELEASE: u32 = 4;
}

/// Response statuses.
pub mod status {
    /// Completed.
    pub const DONE: u32 = 0;
    /// Failed; `reason` says why.
    pub const FAILED: u32 = 1;
    /// Cancelled; `reason` says why.
    pub const CANCELLED: u32 = 2;
    /// Answer to an echo.
    pub const ECHO: u32 = 3;
}

/// Why a task failed or was cancelled.
pub mod reason {
    /// None.
    pub const NONE: u32 = 0;
    /// The request was malformed (lengths, op).
    pub const BAD_REQUEST: u32 = 1;
    /// The tenant is unknown or not this client's.
    pub const UNKNOWN_TENANT: u32 = 2;
    /// Not enough GPU memory.
    pub const NO_MEMORY: u32 = 3;
    /// The executor failed it.
    pub const EXECUTOR: u32 = 4;
    /// Cancelled by the client.
    pub const CANCELLED_BY_CLIENT: u32 = 5;
    /// Its tenant was closed.
    pub const TENANT_CLOSED: u32 = 6;
    /// The daemon is shutting down.
    pub const SHUTDOWN: u32 = 7;
    /// It can never run here.
    pub const UNSCHEDULABLE: u32 = 8;
    /// Its uid already has as many tasks, or as much declared GPU time, queued or
    /// running as the operator allows (`max_tasks_per_uid`, `max_gpu_ms_per_uid`).
    pub const QUOTA: u32 = 9;
    /// It waited past the point of meeting its latency target and was dropped (an
    /// inference server's SLO violation).
    pub const DROPPED: u32 = 10;
}

/// A request descriptor (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct RequestDesc {
    /// The client's sequence number for this request.
    pub seq: u64,
    /// Tenant id.
    pub tenant: u64,
    /// Emulation: the task's work on the reference GPU, nanoseconds.
    pub cost_ns: u64,
    /// Device memory the task needs, bytes.
    pub memory: u64,
    /// Kernel id.
    pub kernel: u32,
    /// One of [`op`].
    pub op: u32,
    /// Input bytes in the data slot.
    pub in_len: u32,
    /// Output bytes wanted in the data slot.
    pub out_len: u32,
    /// For a slice request: blocks in the grid of the tenant's latest kernel launch
    /// (0: unknown). See [`LaunchFacts`].
    pub launch_grid: u64,
    /// For a slice request: that launch's block and resources, packed by
    /// [`LaunchFacts::pack`].
    pub launch_block: u64,
}

/// What the interposer saw of a kernel launch, for the daemon's monitor (DCUDA §3.2's
/// inputs): grid and block size, and the kernel's per-thread registers and shared
/// memory per block (static, from `cuFuncGetAttribute`, plus dynamic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchFacts {
    /// Blocks in the grid.
    pub grid_blocks: u64,
    /// Threads per block (at most 65535 on the wire; CUDA allows 1024).
    pub threads_per_block: u32,
    /// Registers per thread (at most 65535 on the wire; CUDA allows 255).
    pub registers_per_thread: u32,
    /// Shared memory per block, bytes.
    pub shared_per_block: u32,
}

impl LaunchFacts {
    /// `launch_block`: threads in bits 0-15, registers in 16-31, shared bytes in 32-63.
    pub fn pack(&self) -> u64 {
        u64::from(self.threads_per_block.min(0xffff))
            | u64::from(self.registers_per_thread.min(0xffff)) << 16
            | u64::from(self.shared_per_block) << 32
    }

    /// From a request's two fields; `None` when no launch is described.
    pub fn unpack(grid: u64, block: u64) -> Option<LaunchFacts> {
        let threads = (block & 0xffff) as u32;
        (grid > 0 && threads > 0).then_some(LaunchFacts {
            grid_blocks: grid,
            threads_per_block: threads,
            registers_per_thread: ((block >> 16) & 0xffff) as u32,
            shared_per_block: (block >> 32) as u32,
        })
    }
}

/// A response descriptor (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct ResponseDesc {
    /// The request's `seq`.
    pub seq: u64,
    /// One of [`status`].
    pub status: u32,
    /// One of [`reason`].
    pub reason: u32,
    /// Time queued in the daemon, nanoseconds (emulated time).
    pub queued_ns: u64,
    /// Time running, nanoseconds (emulated time).
    pub ran_ns: u64,
    /// GPU it ran on, or `u32::MAX`.
    pub gpu: u32,
    /// Output bytes written to the data slot.
    pub out_len: u32,
    /// Reserved.
    pub _reserved: [u64; 3],
}

/// Head and tail of one ring, each on its own cache line.
#[repr(C, align(64))]
#[derive(Debug)]
struct Index {
    value: AtomicU32,
}

#[repr(C)]
#[derive(Debug)]
struct Header {
    // Atomics although written once: the client maps the region writable and may
    // change anything at any time, so every field is read as shared memory.
    magic: std::sync::atomic::AtomicU64,
    slots: AtomicU32,
    slot_bytes: AtomicU32,
    req_tail: Index,
    req_head: Index,
    resp_tail: Index,
    resp_head: Index,
    client_sleeping: Index,
    client_wake: Index,
    /// Set by the daemon when it stops: nothing more will be answered.
    closed: Index,
    /// Set by the daemon while it sleeps: the client must ring the doorbell.
    daemon_sleeping: Index,
    /// The launch gate: 0 while the client holds no slice of a GPU, else that GPU's
    /// index + 1. Written by the daemon (and woken by futex), read by the client.
    grant: Index,
    /// The launch gate's accounting of the current slice, written by the client after
    /// each launch: GPU time used, ns (measured for the first launches, inferred after),
    /// and whether any of it was inferred. Read by the daemon when the slice ends.
    slice_used: Wide,
    slice_inferred: Index,
    /// Set by the client while it waits for a launch of its slice to finish (a measured
    /// launch): the GPU is still its own, however long the kernel runs, so the daemon
    /// lets the slice run on until the client reports (within the task limit).
    gate_busy: Index,
    /// GPU time the client measured after the slice it was used in had ended (a
    /// kernel that ran past its slice), ns, added up by the client; the daemon takes it
    /// (a swap to 0) with the client's next slice request and charges it then, however
    /// late (FairGV §3.3.2: the start tag moves past the whole kernel).
    owed: Wide,
    /// When the daemon last ended a slice (ns since the Unix epoch): the client's gate
    /// measures from here the time its work still ran after the slice.
    closed_at: Wide,
    /// Memory leases: per GPU, bytes the daemon reserved for this client that it has
    /// not allocated yet. The client takes from and adds to them without a system call;
    /// the daemon takes them back whole (a swap to 0) when someone else needs memory.
    lease_unused: [std::sync::atomic::AtomicU64; LEASE_GPUS],
    /// Set by the daemon when it grants the client a slice of a GPU that another
    /// tenant shares (is placed on). Without it the slice's holder has the GPU to
    /// itself: it goes on past its slice's time without draining its queue, and the
    /// daemon renews the slice (on the H200 each drain cost a training step alone on
    /// its GPU its queued-ahead launches, +19% in all).
    gpu_shared: Index,
    /// Set by the client when it asks on a busy host (`daemon_state::BUSY`): the CPU
    /// its asking thread ran on, + 1 (0: not said). The core then waits for its next
    /// request on that CPU, so that a wake-up in either direction finds its thread on
    /// the waker's CPU: on 2 cores beside 8 CPU-bound processes a futex ping-pong took
    /// 5.4 us p50 / 5.9 us p99 with both threads on one CPU, 22 us / 8 ms across two
    /// (`scripts/wake-latency.c`). A claim: the daemon only uses it as a hint.
    client_cpu: Index,
    /// Written by the client after each synchronous call it makes (a copy to or from
    /// the host, a stream, event or context synchronisation): the time (its own monotonic
    /// clock)
    /// from its `interactive::THRESHOLD +
    /// 1`-th latest one to its latest, ns, + 1 (0 while it made fewer). The daemon
    /// classifies the tenant with it (FairGV §3.2.3, `tessera_core::interactive`). A
    /// claim: a client that lies only changes how its own threads are scheduled.
    sync_span: Wide,
}

/// Nanoseconds since the Unix epoch: a clock both sides of a region read alike.
pub fn epoch_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        .max(1)
}

/// GPUs a region keeps memory leases for (the ledger's most GPUs).
pub const LEASE_GPUS: usize = 16;

/// A 64-bit word on its own cache line.
#[repr(C, align(64))]
#[derive(Debug)]
struct Wide {
    value: std::sync::atomic::AtomicU64,
}

const HEADER: usize = 2048;
const _: () = assert!(std::mem::size_of::<Header>() <= HEADER);

/// Bytes needed for a region of `slots` slots of `slot_bytes` each.
pub fn region_size(slots: u32, slot_bytes: u32) -> usize {
    HEADER + 2 * 64 * slots as usize + slots as usize * slot_bytes as usize
}

/// A mapped client region, shared by the client and the daemon.
#[derive(Debug)]
pub struct Region {
    map: MmapMut,
    slots: u32,
    slot_bytes: u32,
}

/// A region file is unusable.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// Too small, bad magic, or slots not a power of two.
    #[error("invalid shared region: {0}")]
    Invalid(&'static str),
    /// Mapping failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Region {
    /// Map `file` (sized and initialised by [`Region::create`]) and check its header.
    pub fn map(file: &File) -> Result<Region, RegionError> {
        // SAFETY: a memfd created by `create`, shared by one client and the daemon, its
        // size sealed by the daemon so that the mapping cannot shrink under us. The
        // client may write anything at any time: the header is all atomics, indices are
        // masked into range, descriptors are plain integers validated by the daemon, and
        // data bytes are only ever copied, so a misbehaving client can corrupt only its
        // own tasks' data.
        let map = unsafe { MmapMut::map_mut(file)? };
        if map.len() < HEADER {
            return Err(RegionError::Invalid("shorter than its header"));
        }
        let h = map.as_ptr() as *const Header;
        // SAFETY: the mapping is page-aligned and at least HEADER bytes, so `h` points to
        // a live Header made only of atomics, which tolerate concurrent writers.
        let h = unsafe { &*h };
        let (magic, slots, slot_bytes) = (
            h.magic.load(Ordering::SeqCst),
            h.slots.load(Ordering::SeqCst),
            h.slot_bytes.load(Ordering::SeqCst),
        );
        if magic != REGION_MAGIC {
            return Err(RegionError::Invalid("bad magic"));
        }
        if slots == 0 || !slots.is_power_of_two() || map.len() < region_size(slots, slot_bytes) {
            return Err(RegionError::Invalid("bad geometry"));
        }
        Ok(Region { map, slots, slot_bytes })
    }

    /// Size `file` for `slots` x `slot_bytes`, write the header, and map it.
    pub fn create(file: &File, slots: u32, slot_bytes: u32) -> Result<Region, RegionError> {
        if slots == 0 || !slots.is_power_of_two() {
            return Err(RegionError::Invalid("slots must be a power of two"));
        }
        file.set_len(region_size(slots, slot_bytes) as u64)?;
        // SAFETY: as in `map`; nobody else has the file yet.
        let map = unsafe { MmapMut::map_mut(file)? };
        let region = Region { map, slots, slot_bytes };
        let h = region.header();
        h.magic.store(REGION_MAGIC, Ordering::SeqCst);
        h.slots.store(slots, Ordering::SeqCst);
        h.slot_bytes.store(slot_bytes, Ordering::SeqCst);
        Ok(region)
    }

    /// Ring slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Data bytes per slot.
    pub fn slot_bytes(&self) -> u32 {
        self.slot_bytes
    }

    fn header(&self) -> &Header {
        // SAFETY: checked size and alignment at construction; Header holds only
        // atomics, which may be shared with a concurrently writing process.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    fn desc_ptr(&self, ring: usize, index: u32) -> *mut u8 {
        let offset =
            HEADER + (ring * self.slots as usize + (index & (self.slots - 1)) as usize) * 64;
        // SAFETY: offset < HEADER + 2 * slots * 64 <= region size (checked).
        unsafe { (self.map.as_ptr() as *mut u8).add(offset) }
    }

    fn data_ptr(&self, seq: u64) -> *mut u8 {
        let slot = (seq % u64::from(self.slots)) as usize;
        let offset = HEADER + 2 * 64 * self.slots as usize + slot * self.slot_bytes as usize;
        // SAFETY: within the region (checked geometry).
        unsafe { (self.map.as_ptr() as *mut u8).add(offset) }
    }

    /// Producer side of the request ring (client): push a descriptor; false if full.
    pub fn push_request(&self, d: &RequestDesc) -> bool {
        push(self, 0, &self.header().req_tail, &self.header().req_head, bytemuck::bytes_of(d))
    }

    /// Daemon: whether the request ring's indices are possible (the client, which can
    /// write them, has not put the tail more than a ring ahead of the head).
    pub fn requests_sane(&self) -> bool {
        let h = self.header();
        let (head, tail) =
            (h.req_head.value.load(Ordering::Relaxed), h.req_tail.value.load(Ordering::SeqCst));
        tail.wrapping_sub(head) <= self.slots
    }

    /// Whether the request ring holds anything (daemon, before sleeping).
    pub fn has_requests(&self) -> bool {
        let h = self.header();
        h.req_head.value.load(Ordering::Relaxed) != h.req_tail.value.load(Ordering::SeqCst)
    }

    /// Consumer side of the request ring (daemon).
    pub fn pop_request(&self) -> Option<RequestDesc> {
        pop(self, 0, &self.header().req_tail, &self.header().req_head)
            .map(|b| bytemuck::pod_read_unaligned(&b))
    }

    /// Producer side of the response ring (daemon): push, and wake the client if it
    /// sleeps. False if full (cannot happen while the client keeps to `slots` in flight).
    pub fn push_response(&self, d: &ResponseDesc) -> bool {
        let ok = push(
            self,
            1,
            &self.header().resp_tail,
            &self.header().resp_head,
            bytemuck::bytes_of(d),
        );
        if ok && self.header().client_sleeping.value.load(Ordering::SeqCst) != 0 {
            self.header().client_wake.value.fetch_add(1, Ordering::SeqCst);
            let _ = futex::wake(&self.header().client_wake.value, futex::Flags::empty(), 1);
        }
        ok
    }

    /// Daemon: mark the region closed (the daemon stops) and wake the client.
    pub fn mark_closed(&self) {
        let h = self.header();
        h.closed.value.store(1, Ordering::SeqCst);
        h.client_wake.value.fetch_add(1, Ordering::SeqCst);
        let _ = futex::wake(&h.client_wake.value, futex::Flags::empty(), i32::MAX as u32);
    }

    /// Daemon: announce (or retract) that it is about to sleep. SeqCst, paired with
    /// the client's tail store and flag load in [`Region::push_request`] then
    /// [`Region::daemon_sleeping`].
    pub fn set_daemon_sleeping(&self, sleeping: bool) {
        let state = if sleeping { daemon_state::ASLEEP } else { daemon_state::POLLING };
        self.set_daemon_state(state);
    }

    /// Daemon: say how it serves this ring now (one of [`daemon_state`]).
    pub fn set_daemon_state(&self, state: u32) {
        self.header().daemon_sleeping.value.store(state, Ordering::SeqCst);
    }

    /// Client: whether the daemon sleeps (so that a new request needs the doorbell).
    pub fn daemon_sleeping(&self) -> bool {
        self.header().daemon_sleeping.value.load(Ordering::SeqCst) != daemon_state::POLLING
    }

    /// Client: whether the daemon says the host is busy: ring, and block rather than
    /// spin for the answer.
    pub fn host_busy(&self) -> bool {
        self.header().daemon_sleeping.value.load(Ordering::SeqCst) == daemon_state::BUSY
    }

    /// Daemon: grant the client a slice of `gpu`, or (`None`) end its slice, and wake
    /// threads waiting for a grant.
    pub fn set_grant(&self, gpu: Option<u32>) {
        let h = self.header();
        if gpu.is_none() && h.grant.value.load(Ordering::SeqCst) != 0 {
            h.closed_at.value.store(epoch_ns(), Ordering::SeqCst);
        }
        h.grant.value.store(gpu.map_or(0, |g| g.saturating_add(1)), Ordering::SeqCst);
        let _ = futex::wake(&h.grant.value, futex::Flags::empty(), i32::MAX as u32);
    }

    /// Daemon: wake threads waiting for a grant without granting (their slice's
    /// completion has been answered: they ask again).
    pub fn wake_grant_waiters(&self) {
        let _ = futex::wake(&self.header().grant.value, futex::Flags::empty(), i32::MAX as u32);
    }

    /// Client: the GPU time its current slice has used so far, and whether any of it
    /// was inferred rather than measured (a relaxed store: the daemon reads it only
    /// when the slice ends).
    #[inline]
    pub fn set_slice_used(&self, used_ns: u64, inferred: bool) {
        let h = self.header();
        h.slice_used.value.store(used_ns, Ordering::Relaxed);
        h.slice_inferred.value.store(u32::from(inferred), Ordering::Relaxed);
    }

    /// Client: the CPU its asking thread runs on, said before it rings on a busy host
    /// (see `client_cpu` in the header).
    #[inline]
    pub fn set_client_cpu(&self, cpu: usize) {
        let word = u32::try_from(cpu).ok().and_then(|c| c.checked_add(1)).unwrap_or(0);
        let h = self.header();
        // a store only when it moved: the word's line stays shared with the daemon
        if h.client_cpu.value.load(Ordering::Relaxed) != word {
            h.client_cpu.value.store(word, Ordering::Relaxed);
        }
    }

    /// Daemon: the CPU the client last said it asks from, if any (client-written:
    /// any value, bounded by the caller).
    pub fn client_cpu(&self) -> Option<usize> {
        match self.header().client_cpu.value.load(Ordering::Relaxed) {
            0 => None,
            c => Some((c - 1) as usize),
        }
    }

    /// Client: the span of its latest synchronous calls (see the field), ns; `None`
    /// while it made too few.
    pub fn set_sync_span(&self, span_ns: Option<u64>) {
        let word = span_ns.map_or(0, |s| s.saturating_add(1));
        self.header().sync_span.value.store(word, Ordering::Relaxed);
    }

    /// Daemon: what the client last said of its synchronous calls (a claim).
    pub fn sync_span(&self) -> Option<u64> {
        match self.header().sync_span.value.load(Ordering::Relaxed) {
            0 => None,
            s => Some(s - 1),
        }
    }

    /// Daemon: whether another tenant shares the GPU of this client's slice.
    pub fn set_gpu_shared(&self, shared: bool) {
        self.header().gpu_shared.value.store(u32::from(shared), Ordering::SeqCst);
    }

    /// Client: whether another tenant shares its slice's GPU (a claim of the
    /// daemon's; when none does, the slice's end need not give the GPU back).
    #[inline]
    pub fn gpu_shared(&self) -> bool {
        self.header().gpu_shared.value.load(Ordering::Relaxed) != 0
    }

    /// Client: whether it is waiting for its slice's launch to finish.
    pub fn set_gate_busy(&self, busy: bool) {
        self.header().gate_busy.value.store(u32::from(busy), Ordering::SeqCst);
    }

    /// Daemon: whether the slice's holder says its launch is still running (a claim).
    pub fn gate_busy(&self) -> bool {
        self.header().gate_busy.value.load(Ordering::SeqCst) != 0
    }

    /// Client: GPU time measured after its slice ended, to be charged with the next
    /// slice request.
    pub fn add_owed(&self, ns: u64) {
        self.header().owed.value.fetch_add(ns, Ordering::SeqCst);
    }

    /// Client: when (ns since the Unix epoch) the daemon last ended a slice; 0 never.
    pub fn closed_at(&self) -> u64 {
        self.header().closed_at.value.load(Ordering::SeqCst)
    }

    /// Daemon: the GPU time owed since it last asked (and none owed after).
    pub fn take_owed(&self) -> u64 {
        self.header().owed.value.swap(0, Ordering::SeqCst)
    }

    /// Daemon: what the client says its slice used (ns, and whether partly inferred);
    /// client-written, so only a claim, which the daemon bounds by the slice's time.
    pub fn slice_used(&self) -> (u64, bool) {
        let h = self.header();
        (
            h.slice_used.value.load(Ordering::SeqCst),
            h.slice_inferred.value.load(Ordering::SeqCst) != 0,
        )
    }

    fn lease(&self, gpu: u32) -> Option<&std::sync::atomic::AtomicU64> {
        self.header().lease_unused.get(gpu as usize)
    }

    /// Bytes of `gpu`'s lease not allocated yet.
    pub fn lease_unused(&self, gpu: u32) -> u64 {
        self.lease(gpu).map_or(0, |l| l.load(Ordering::SeqCst))
    }

    /// Client: take `bytes` from `gpu`'s lease, if it holds that many (the allocation
    /// fast path: one compare-and-swap).
    #[inline]
    pub fn lease_take(&self, gpu: u32, bytes: u64) -> bool {
        let Some(l) = self.lease(gpu) else { return false };
        l.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(bytes)).is_ok()
    }

    /// Client: return `bytes` to `gpu`'s lease, keeping at most `keep` unused; what is
    /// beyond `keep` is taken out and returned, for the client to give back.
    #[inline]
    pub fn lease_return(&self, gpu: u32, bytes: u64, keep: u64) -> u64 {
        let Some(l) = self.lease(gpu) else { return bytes };
        let mut excess = 0;
        let _ = l.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
            let total = v.saturating_add(bytes);
            excess = total.saturating_sub(keep);
            Some(total.min(keep))
        });
        excess
    }

    /// Take all of `gpu`'s unused lease: the daemon, to return it to the ledger; the
    /// client, to use it towards an allocation larger than what is left.
    pub fn lease_reclaim(&self, gpu: u32) -> u64 {
        self.lease(gpu).map_or(0, |l| l.swap(0, Ordering::SeqCst))
    }

    /// Client: give up the grant at once (before telling the daemon its slice ended),
    /// so that no launch slips through in between.
    pub fn drop_grant(&self) {
        self.header().grant.value.store(0, Ordering::SeqCst);
    }

    /// Client: the GPU of the slice it holds now, if any (one atomic load: the launch
    /// gate's fast path).
    #[inline]
    pub fn granted(&self) -> Option<u32> {
        match self.header().grant.value.load(Ordering::Acquire) {
            0 => None,
            g => Some(g - 1),
        }
    }

    /// Client: wait up to `timeout` for a grant (futex on the grant word); whether one
    /// is held on return.
    pub fn wait_grant(&self, timeout: Duration) -> bool {
        let h = self.header();
        if h.grant.value.load(Ordering::Acquire) != 0 {
            return true;
        }
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let _ = futex::wait(&h.grant.value, futex::Flags::empty(), 0, Some(&ts));
        h.grant.value.load(Ordering::Acquire) != 0
    }

    /// Whether the daemon closed the region.
    pub fn is_closed(&self) -> bool {
        self.header().closed.value.load(Ordering::SeqCst) != 0
    }

    /// Consumer side of the response ring (client).
    pub fn pop_response(&self) -> Option<ResponseDesc> {
        pop(self, 1, &self.header().resp_tail, &self.header().resp_head)
            .map(|b| bytemuck::pod_read_unaligned(&b))
    }

    /// Client: wait for a response, spinning `spins` times before sleeping, for at most
    /// `timeout` in total (`Duration::MAX`: no limit). `gone` is asked at least every
    /// 100 ms while asleep; when it says the daemon is gone the wait ends with `None`.
    pub fn wait_response(
        &self,
        spins: u32,
        timeout: Duration,
        gone: &dyn Fn() -> bool,
    ) -> Option<ResponseDesc> {
        // spin only on a quiet host (the daemon says when it is not, `daemon_state::BUSY`)
        // and while this spin is not descheduled: against a core that is descheduled,
        // spinning burns the time slice it needs, and blocking gets this thread woken
        // promptly (issue 59); against one that sleeps, it wakes promptly when rung. A pure spin: a yield
        // that does switch costs as much as a wake-up, and on a busy host puts this
        // thread behind every runnable one
        let started = std::time::Instant::now();
        for i in 0..spins {
            if let Some(r) = self.pop_response() {
                return Some(r);
            }
            if i % 256 == 0 && (self.host_busy() || started.elapsed() > Duration::from_micros(200))
            {
                // the host is busy, or this spin was descheduled
                break;
            }
            std::hint::spin_loop();
        }
        let h = self.header();
        let deadline = std::time::Instant::now().checked_add(timeout);
        loop {
            let seen = h.client_wake.value.load(Ordering::SeqCst);
            h.client_sleeping.value.store(1, Ordering::SeqCst);
            if let Some(r) = self.pop_response() {
                h.client_sleeping.value.store(0, Ordering::SeqCst);
                return Some(r);
            }
            let left = deadline
                .map_or(Duration::MAX, |d| d.saturating_duration_since(std::time::Instant::now()));
            if left.is_zero() || self.is_closed() || gone() {
                h.client_sleeping.value.store(0, Ordering::SeqCst);
                return self.pop_response();
            }
            let nap = left.min(Duration::from_millis(100));
            let ts = rustix::time::Timespec {
                tv_sec: nap.as_secs() as i64,
                tv_nsec: i64::from(nap.subsec_nanos()),
            };
            let _ = futex::wait(&h.client_wake.value, futex::Flags::empty(), seen, Some(&ts));
            h.client_sleeping.value.store(0, Ordering::SeqCst);
        }
    }

    /// Copy `data` into the data slot of `seq` (the owner of that slot only).
    pub fn write_data(&self, seq: u64, data: &[u8]) {
        let n = data.len().min(self.slot_bytes as usize);
        // SAFETY: the slot of `seq` is owned by whoever calls this (client before
        // pushing the request, daemon before pushing the response); n <= slot_bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.data_ptr(seq), n) };
    }

    /// Copy `len` bytes out of the data slot of `seq`.
    pub fn read_data(&self, seq: u64, len: usize) -> Vec<u8> {
        let n = len.min(self.slot_bytes as usize);
        let mut out = vec![0; n];
        // SAFETY: as in `write_data`, the caller owns the slot now; n <= slot_bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.data_ptr(seq), out.as_mut_ptr(), n) };
        out
    }
}

fn push(r: &Region, ring: usize, tail: &Index, head: &Index, bytes: &[u8]) -> bool {
    let t = tail.value.load(Ordering::Relaxed); // only we write the tail
    let h = head.value.load(Ordering::Acquire);
    if t.wrapping_sub(h) >= r.slots {
        return false;
    }
    // SAFETY: slot t is free (t - h < slots), so the consumer does not read it until we
    // publish the new tail; 64 bytes fit the descriptor slot.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), r.desc_ptr(ring, t), 64) };
    tail.value.store(t.wrapping_add(1), Ordering::SeqCst);
    true
}

fn pop(r: &Region, ring: usize, tail: &Index, head: &Index) -> Option<[u8; 64]> {
    let h = head.value.load(Ordering::Relaxed); // only we write the head
    let t = tail.value.load(Ordering::SeqCst);
    if h == t {
        return None;
    }
    let mut out = [0u8; 64];
    // SAFETY: slot h was published by the producer's tail store (acquired above) and is
    // not overwritten until we publish the new head.
    unsafe { std::ptr::copy_nonoverlapping(r.desc_ptr(ring, h), out.as_mut_ptr(), 64) };
    head.value.store(h.wrapping_add(1), Ordering::Release);
    Some(out)
}

#[cfg(test)]
mod tests;
