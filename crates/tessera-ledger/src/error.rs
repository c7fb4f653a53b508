//! What the ledger's operations answer when they fail: one enum, each variant a case a
//! client can act on, with a stable C code (see `ffi`).

use std::path::PathBuf;

use crate::layout::VERSION;

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
    /// The waiting request was given up by its caller (`pre_alloc_unless`).
    #[error("the wait for {requested} bytes on GPU {gpu} was given up")]
    Cancelled {
        /// GPU.
        gpu: u32,
        /// Bytes asked for.
        requested: u64,
    },
    /// Waiting would never end: the memory this request needs is held by clients that
    /// are themselves waiting for memory this client holds (see `deadlock`). The
    /// request, the newest of the cycle, was not queued.
    #[error(
        "waiting for {requested} bytes on GPU {gpu} would deadlock: the memory is held by pid(s) {holders:?}, which wait for memory this process holds"
    )]
    WouldDeadlock {
        /// GPU.
        gpu: u32,
        /// Bytes asked for.
        requested: u64,
        /// Pids (as they registered) of the other waiting holders on that GPU.
        holders: Vec<u32>,
    },
    /// More than the GPU's memory less what this client already holds there: it could
    /// not be granted even if every other client released everything, so waiting for
    /// it would never end (a program that outgrows its own holdings). Asked at once.
    #[error(
        "{requested} bytes can never be granted on GPU {gpu}: this program already holds {held} of its {capacity} bytes, so even if every other program released everything there would be only {} free; free some of its own memory first",
        capacity - held
    )]
    NeverFits {
        /// GPU.
        gpu: u32,
        /// Bytes asked for.
        requested: u64,
        /// Bytes this client holds there already.
        held: u64,
        /// The GPU's capacity.
        capacity: u64,
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
    /// A table is full of live rows (dead ones were swept first).
    #[error(
        "the ledger's {table} table is full ({capacity} live rows); create the ledger with a larger one"
    )]
    TableFull {
        /// "holder" or "waiter".
        table: &'static str,
        /// Its capacity.
        capacity: u32,
    },
    /// The ledger could not be created: no GPU description.
    #[error("no GPUs to describe: {0}")]
    NoGpus(String),
    /// A configuration value is out of range.
    #[error("bad ledger configuration: {0}")]
    BadConfig(String),
    /// The file belongs to another layout version.
    #[error(
        "{path} holds an incompatible ledger (layout version {found}, this library reads {VERSION}); it was left untouched"
    )]
    Incompatible {
        /// The file.
        path: PathBuf,
        /// Version found.
        found: u32,
    },
    /// The file exists and is not a ledger, and no live client has a record of one.
    #[error(
        "{path} is not a tessera ledger (and no live client has a record of one); it was left untouched"
    )]
    NotALedger {
        /// The file.
        path: PathBuf,
    },
    /// The file or its records directory is not safe to use.
    #[error("refusing {path}: it {reason}")]
    Insecure {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file is damaged, no live client has a record to rebuild it from, and this
    /// opener gave no GPU description to start it afresh.
    #[error("{path} is damaged and cannot be repaired: {reason}")]
    Unrepairable {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A record could not be adopted ([`Ledger::adopt`]).
    #[error("cannot adopt ledger client {client}: {reason}")]
    NotAdoptable {
        /// The client asked for.
        client: u64,
        /// Why not.
        reason: String,
    },
    /// The handle was opened by the parent of this (forked) process.
    #[error(
        "this ledger handle was opened before fork(); open a new one in the child (C: call tessera_init again)"
    )]
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
