//! The control protocol between clients and `tesserad`, version [`PROTOCOL`].
//!
//! Framing: each message is a 4-byte little-endian length followed by that many bytes
//! of JSON (one [`Request`] from the client, one [`Reply`] from the daemon). A frame
//! longer than [`MAX_FRAME`] bytes, or one that is not a valid message, is answered with
//! [`Reply::Error`] and the connection is closed.
//!
//! Session: the client sends [`Request::Hello`]; the daemon answers [`Reply::Welcome`]
//! and, in the same `sendmsg`, passes two file descriptors (`SCM_RIGHTS`): the client's
//! shared region (its request and response rings and data area, size-sealed) and the
//! daemon's doorbell (an eventfd). Then the client registers tenants and submits tasks through its
//! rings. `Status` works without `Hello` and answers in pages of [`STATUS_PAGE`] tenants. Everything a connection registered ends with
//! it: when the client disconnects or dies, its queued tasks are cancelled and its
//! tenants removed.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

mod status;
pub use status::{
    BUSY_WINDOW_MS, BalanceSummary, EventReport, GpuBusy, GpuReport, JobGrant, JobReport,
    MigrationReport, RunningReport, StatusReport, TenantReport, Totals,
};

/// Protocol version; a daemon refuses a client of another version with
/// [`ErrorCode::UnsupportedVersion`]. It counts changes of the messages and of the
/// shared region's layout (2: the region's header grew to 2 KiB, with `closed_at`), so
/// that an interposer left from an older build fails with that error instead of
/// misreading the region.
pub const PROTOCOL: u32 = 2;
/// Largest frame either side accepts.
pub const MAX_FRAME: usize = 64 * 1024;
/// Most tenants one status reply lists (each takes about 200 bytes of JSON, so a page
/// fits a frame with room to spare); [`Request::Status`] pages through the rest.
pub const STATUS_PAGE: u32 = 200;

/// What a tenant is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantClass {
    /// Latency-critical, with an SLA.
    UserFacing,
    /// Throughput work.
    Batch,
}

impl Request {
    /// The request's name, as in its JSON `type` field.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::Register { .. } => "register",
            Request::JobStart(_) => "job_start",
            Request::JobEnd { .. } => "job_end",
            Request::JobInfo { .. } => "job_info",
            Request::PodStart(_) => "pod_start",
            Request::PodEnd { .. } => "pod_end",
            Request::RunTask { .. } => "run_task",
            Request::Close { .. } => "close",
            Request::SetWeight { .. } => "set_weight",
            Request::Status { .. } => "status",
            Request::Reserve { .. } => "reserve",
            Request::Unreserve { .. } => "unreserve",
            Request::ReserveContext { .. } => "reserve_context",
            Request::MemoryInfo { .. } => "memory_info",
            Request::KeepLedgerRecord { .. } => "keep_ledger_record",
            Request::Adopt { .. } => "adopt",
            Request::Ping => "ping",
        }
    }
}

/// Recent events a status reply carries at most.
pub const STATUS_EVENTS: u32 = 32;

/// A message from a client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Open a session with rings.
    Hello {
        /// [`PROTOCOL`].
        protocol: u32,
    },
    /// Register a tenant (Flexy's virtual accelerator) owned by this connection.
    Register {
        /// Class.
        class: TenantClass,
        /// SLA in milliseconds (user-facing only).
        #[serde(default)]
        sla_ms: u64,
        /// Weight for fair sharing.
        #[serde(default = "one")]
        weight: u32,
        /// Priority.
        #[serde(default)]
        priority: u8,
        /// GPU memory the tenant expects to use, bytes.
        #[serde(default)]
        memory: u64,
        /// How many GPUs to place the tenant on (0: none; the interposer asks, so that
        /// the program sees only the GPUs the daemon chose).
        #[serde(default)]
        gpus: u32,
        /// An inference model this tenant serves (daemons with `policy = "gpulets"`
        /// only): each task is one request, batched and run on the gpu-lets the
        /// daemon's scheduler gives the model. `class` must be user-facing and `sla_ms`
        /// is the model's SLO.
        #[serde(default)]
        model: Option<ModelSpec>,
        /// The Slurm job this tenant belongs to (its processes get it from
        /// `TESSERA_SLURM_JOB`, which the job's TaskProlog exports): the daemon checks
        /// the peer's uid against the job's and gives the tenant the job's GPUs, weight,
        /// class and memory entitlement instead of what this request asks.
        #[serde(default)]
        job: Option<u64>,
        /// The GPUs the program may see (its `CUDA_VISIBLE_DEVICES` entries: node
        /// indices, or UUIDs `GPU-…` and unique prefixes of them); the daemon places it
        /// only there. Ignored for a Slurm job's tenant, whose GPUs are the job's (and
        /// whose `CUDA_VISIBLE_DEVICES` device cgroups renumber from 0).
        #[serde(default)]
        visible: Option<Vec<String>>,
        /// The program may be moved to any GPU it may see (DCUDA's migration,
        /// `TESSERA_MIGRATION`): it reserves memory on any of them, not only where it
        /// is placed. Left out when false, so a daemon of before it reads the request.
        #[serde(default, skip_serializing_if = "is_false")]
        migratable: bool,
        /// The Kubernetes allocation this tenant belongs to, by its secret (its
        /// processes get it from `TESSERA_TOKEN`, which the device plugin puts in the
        /// container): the daemon gives the tenant the allocation's GPU, weight and
        /// memory entitlement instead of what this request asks, and refuses a token
        /// it did not give. Left out when none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<crate::pod::Token>,
    },
    /// A Slurm job starts on this node (its Prolog, as root): root and the daemon's
    /// user only.
    JobStart(JobGrant),
    /// A Slurm job ended (its Epilog, as root): every tenant of the job is closed, its
    /// queued tasks cancelled and its reservations released. Root and the daemon's user.
    JobEnd {
        /// The job id.
        job: u64,
    },
    /// A Kubernetes container's allocation (`tessera k8s device-plugin`'s `Allocate`):
    /// root and the daemon's user only. Answered with the allocation as a job
    /// ([`Reply::Job`], its `job` an id of the daemon's); the same grant again is the same
    /// allocation.
    PodStart(crate::pod::PodGrant),
    /// A Kubernetes container's allocation ended (its pod is gone): as [`Request::JobEnd`]
    /// for its job. Root and the daemon's user.
    PodEnd {
        /// Its token.
        token: crate::pod::Token,
    },
    /// Run a task of one of this connection's tenants and answer when it ends, over
    /// the socket (the rings' baseline in `tessera bench transport`; the rings are
    /// the data plane). The connection must have said hello.
    RunTask {
        /// The tenant.
        tenant: u64,
        /// Its work, ns of GPU time.
        cost_ns: u64,
    },
    /// What the daemon gives a Slurm job (its TaskProlog, as the job's user): the job's
    /// uid, root and the daemon's user only.
    JobInfo {
        /// The job id.
        job: u64,
    },
    /// Close one of this connection's tenants: its queued tasks are cancelled.
    Close {
        /// The tenant.
        tenant: u64,
    },
    /// Change the weight of one of this connection's tenants (fair sharing).
    SetWeight {
        /// The tenant.
        tenant: u64,
        /// Its new weight, 1..=1000.
        weight: u32,
    },
    /// The node's state: the GPUs, and one page of the tenants this client may see
    /// (root and the daemon's own user see all; others their own uid's), optionally
    /// filtered.
    Status {
        /// Only this tenant.
        #[serde(default)]
        tenant: Option<u64>,
        /// Only tenants of this uid.
        #[serde(default)]
        uid: Option<u32>,
        /// Only this GPU, and tenants with a task running on it.
        #[serde(default)]
        gpu: Option<u32>,
        /// Tenants to skip (paging).
        #[serde(default)]
        offset: u64,
        /// Tenants in this page; 0 or more than [`STATUS_PAGE`] mean [`STATUS_PAGE`].
        #[serde(default)]
        limit: u32,
        /// The most recent events this client may see to include, at most
        /// [`STATUS_EVENTS`] (0: none).
        #[serde(default)]
        events: u32,
    },
    /// Reserve GPU memory for a tenant of this uid in the node's ledger (the
    /// interposer's allocations): the daemon holds the reservation for the tenant, so
    /// programs of every user share the node's one ledger without touching its file.
    /// Answered `Reserved`, or `Error` with [`ErrorCode::NoMemory`] when it does not fit
    /// (after waiting as asked), exceeds the tenant's limit, or would deadlock.
    Reserve {
        /// The tenant (of this connection's uid).
        tenant: u64,
        /// The node's GPU index.
        gpu: u32,
        /// Bytes.
        bytes: u64,
        /// How long to wait when it does not fit now: 0 not at all, none for ever.
        #[serde(default)]
        wait_ms: Option<u64>,
        /// A lease beyond what an allocation needs now: granted only if it fits at once,
        /// never by taking back other clients' unused leases.
        #[serde(default)]
        lease: bool,
    },
    /// Return memory reserved with `Reserve` (after freeing it). Answered `Unreserved`.
    Unreserve {
        /// The tenant (of this connection's uid).
        tenant: u64,
        /// The node's GPU index.
        gpu: u32,
        /// Bytes.
        bytes: u64,
    },
    /// Reserve the memory a program's context takes on a GPU (the daemon's
    /// `context_mib`), once per tenant and GPU, outside the tenant's declared memory;
    /// again for the same GPU it does nothing. Answered `Reserved`.
    ReserveContext {
        /// The tenant (of this connection's uid).
        tenant: u64,
        /// The node's GPU index.
        gpu: u32,
        /// How long to wait when it does not fit now: 0 not at all, none for ever.
        #[serde(default)]
        wait_ms: Option<u64>,
    },
    /// What a tenant may still reserve on a GPU: its limit less what it holds, or the
    /// GPU's capacity less what the ledger granted. Answered `Memory`.
    MemoryInfo {
        /// The tenant (of this connection's uid).
        tenant: u64,
        /// The node's GPU index.
        gpu: u32,
    },
    /// The descriptor of the ledger record the daemon holds the tenant's reservations
    /// under, for the program to keep open for its life: its reservations then outlive
    /// a crash of the daemon (the ledger keeps a client's memory while any process
    /// holds its record) and end with the program. Answered `LedgerRecord`, with the
    /// descriptor (`SCM_RIGHTS`).
    KeepLedgerRecord {
        /// The tenant (of this connection's uid).
        tenant: u64,
    },
    /// After the daemon restarted: take back, for `tenant` (newly registered by the
    /// same program), the reservations the ledger kept under the program's record
    /// `client` (from `LedgerRecord`). Only the program the record names (by pid) may,
    /// and only while it holds the record. Answered `Adopted`.
    Adopt {
        /// The tenant (of this connection's uid, registered by the record's program).
        tenant: u64,
        /// The ledger client id `LedgerRecord` named.
        client: u64,
        /// The node's GPUs whose context memory the reservations include.
        #[serde(default)]
        contexts: Vec<u32>,
    },
    /// Answered at once by the connection (transport benchmark).
    Ping,
}

fn one() -> u32 {
    1
}

fn is_false(b: &bool) -> bool {
    !b
}

/// An inference model a tenant serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The model's name, for status.
    pub name: String,
    /// Its latency profile, by name (the daemon lists the ones it knows when it refuses
    /// an unknown one).
    pub profile: String,
}

/// What an inference-serving daemon's scheduler decided since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServingSummary {
    /// New schedules made.
    pub reorganizations: u64,
    /// Checks whose rates were not schedulable.
    pub refused: u64,
}

/// An inference model's state, in a status report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelReport {
    /// Name.
    pub name: String,
    /// Profile.
    pub profile: String,
    /// Request rate the scheduler last tracked, req/s (none before its first check).
    pub rate: Option<f64>,
    /// The gpu-lets serving it: GPU, size (% of the GPU), batch.
    pub gpulets: Vec<(u32, u32, u32)>,
}

/// Errors a client can act on; stable names on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The message was malformed, too large, or out of order.
    BadRequest,
    /// The tenant does not exist or belongs to another client.
    UnknownTenant,
    /// Not enough capacity (memory, ring slots, tenants).
    NoCapacity,
    /// The daemon is shutting down and admits nothing new.
    ShuttingDown,
    /// The client speaks another protocol version.
    UnsupportedVersion,
    /// The operator's policy does not allow this (e.g. a user-facing tenant for a uid
    /// not in `user_facing_uids`).
    Forbidden,
    /// A memory reservation was refused: the GPU has no room (after the wait asked
    /// for), the tenant's limit is reached, or waiting would deadlock. The message
    /// says which.
    NoMemory,
}

/// A message from the daemon.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    /// Session open; two fds accompany this message.
    Welcome {
        /// [`PROTOCOL`].
        protocol: u32,
        /// Ring slots (also the most tasks in flight).
        slots: u32,
        /// Bytes of data area per slot (largest input or output of a task).
        slot_bytes: u32,
    },
    /// A tenant was registered.
    Registered {
        /// Its id, for ring requests.
        tenant: u64,
        /// The GPUs it was placed on (as many as asked for, at most all), least loaded
        /// first.
        #[serde(default)]
        gpus: Vec<u32>,
        /// Those GPUs' UUIDs (`GPU-…`), in the same order, when the daemon knows them
        /// (from the driver); empty for emulated GPUs.
        #[serde(default)]
        uuids: Vec<String>,
        /// The registering process's pid as the daemon sees it (`SO_PEERCRED`, in the
        /// daemon's pid namespace — the one NVML reports processes in, on a node whose
        /// daemon runs on the host), which differs from its own `getpid()` inside a
        /// container's pid namespace. 0 from a daemon that does not say.
        #[serde(default)]
        pid: u32,
    },
    /// A tenant was closed.
    Closed {
        /// Its id.
        tenant: u64,
    },
    /// A tenant's weight was changed.
    WeightSet {
        /// Its id.
        tenant: u64,
        /// Its weight now.
        weight: u32,
    },
    /// The node's state.
    Status(Box<StatusReport>),
    /// A Slurm job started, or its information.
    Job(JobReport),
    /// A Slurm job ended.
    JobEnded {
        /// The job id.
        job: u64,
        /// Tenants closed.
        tenants_closed: u32,
    },
    /// Memory was reserved (`Reserve`).
    Reserved {
        /// The node's GPU index.
        gpu: u32,
        /// Bytes.
        bytes: u64,
    },
    /// Memory was returned (`Unreserve`).
    Unreserved {
        /// The node's GPU index.
        gpu: u32,
        /// Bytes.
        bytes: u64,
    },
    /// Answer to `KeepLedgerRecord`; the record's descriptor comes with it.
    LedgerRecord {
        /// The ledger client id of the tenant's reservations.
        client: u64,
    },
    /// Answer to `Adopt`: what the tenant holds now, per GPU (contexts included).
    Adopted {
        /// (the node's GPU index, bytes) for each GPU it holds memory on.
        held: Vec<(u32, u64)>,
    },
    /// Answer to `MemoryInfo`: (free, total) as the tenant should see them.
    Memory {
        /// Bytes the tenant may still reserve there.
        free: u64,
        /// Its limit, or the GPU's capacity.
        total: u64,
    },
    /// Answer to `Ping`.
    Pong,
    /// A task run over the socket (`RunTask`) ended.
    TaskDone {
        /// How (`region::status`).
        status: u32,
        /// Why, when it did not finish (`region::reason`).
        reason: u32,
        /// The GPU it ran on (`u32::MAX`: none).
        gpu: u32,
    },
    /// The request failed.
    Error {
        /// What kind of failure.
        code: ErrorCode,
        /// Details for humans.
        message: String,
    },
}

/// Write one frame.
pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if body.len() > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "frame too large"));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection between frames.
    #[error("connection closed")]
    Closed,
    /// Declared length above [`MAX_FRAME`].
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    /// Not a valid message.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// I/O error (including a frame cut short).
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Read the raw bytes of one frame.
pub fn read_frame_bytes(r: &mut impl Read) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// Read one frame and decode it.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> Result<T, FrameError> {
    let body = read_frame_bytes(r)?;
    serde_json::from_slice(&body).map_err(|e| FrameError::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requests_kind_is_its_wire_name() {
        let requests = [
            Request::Hello { protocol: PROTOCOL },
            Request::Ping,
            Request::Close { tenant: 1 },
            Request::SetWeight { tenant: 1, weight: 2 },
            Request::JobEnd { job: 3 },
            Request::PodEnd { token: crate::pod::Token([1; 16]) },
            Request::PodStart(crate::pod::PodGrant {
                token: crate::pod::Token([1; 16]),
                gpu: 0,
                memory: 1,
                weight: 1,
                name: String::new(),
            }),
            Request::MemoryInfo { tenant: 1, gpu: 0 },
            Request::RunTask { tenant: 1, cost_ns: 0 },
            Request::Unreserve { tenant: 1, gpu: 0, bytes: 1 },
            Request::KeepLedgerRecord { tenant: 1 },
            Request::Adopt { tenant: 1, client: 2, contexts: vec![0] },
            Request::Status { tenant: None, uid: None, gpu: None, offset: 0, limit: 0, events: 0 },
        ];
        for r in requests {
            let v = serde_json::to_value(&r).unwrap();
            assert_eq!(v["type"], r.kind(), "{r:?}");
        }
    }

    #[test]
    fn frames_round_trip_and_limits_hold() {
        let mut buf = Vec::new();
        let msg = Request::Register {
            class: TenantClass::UserFacing,
            sla_ms: 200,
            weight: 2,
            priority: 1,
            memory: 5,
            gpus: 1,
            model: Some(ModelSpec { name: "r".into(), profile: "resnet50".into() }),
            job: Some(17),
            visible: Some(vec!["1".into(), "GPU-fa".into()]),
            migratable: true,
            token: Some(crate::pod::Token([0xab; 16])),
        };
        write_frame(&mut buf, &msg).unwrap();
        assert_eq!(read_frame::<Request>(&mut buf.as_slice()).unwrap(), msg);
        // defaults
        let json = br#"{"type":"register","class":"batch"}"#;
        let mut framed = (json.len() as u32).to_le_bytes().to_vec();
        framed.extend_from_slice(json);
        assert_eq!(
            read_frame::<Request>(&mut framed.as_slice()).unwrap(),
            Request::Register {
                class: TenantClass::Batch,
                sla_ms: 0,
                weight: 1,
                priority: 0,
                memory: 0,
                gpus: 0,
                model: None,
                job: None,
                visible: None,
                migratable: false,
                token: None,
            }
        );
        let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(matches!(
            read_frame::<Request>(&mut huge.as_slice()),
            Err(FrameError::TooLarge(_))
        ));
        let junk = [3, 0, 0, 0, b'{', b'x', b'}'];
        assert!(matches!(
            read_frame::<Request>(&mut junk.as_slice()),
            Err(FrameError::Malformed(_))
        ));
        let unknown = br#"{"type":"hello","protocol":1,"extra":true}"#;
        let mut framed = (unknown.len() as u32).to_le_bytes().to_vec();
        framed.extend_from_slice(unknown);
        assert!(matches!(
            read_frame::<Request>(&mut framed.as_slice()),
            Err(FrameError::Malformed(_))
        ));
        assert!(matches!(read_frame::<Request>(&mut [0u8; 0].as_slice()), Err(FrameError::Closed)));
    }
}
