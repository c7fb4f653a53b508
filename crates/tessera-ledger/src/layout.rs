//! The ledger's layout in shared memory: plain `#[repr(C)]` integers only, so that any
//! bit pattern is a valid value and a torn or corrupted file can be read safely and then
//! rejected by its checksum.
//!
//! The file holds a futex word, then two copies of [`State`] (primary and backup), each
//! followed by its CRC-32. Every operation copies the primary out under the file lock,
//! checks it, works on the copy, and writes it back to the primary and then to the
//! backup, so that a process killed at any instruction leaves at least one good copy —
//! or, if both are bad, the clients' own records to rebuild from.

use bytemuck::{Pod, Zeroable};

/// Identifies a tessera ledger file.
pub const MAGIC: [u8; 8] = *b"TSLEDGR\0";
/// Layout version; a file of another version is refused, never reinterpreted.
pub const VERSION: u32 = 1;
/// GPUs one ledger can describe.
pub const MAX_GPUS: usize = 16;
/// (process, GPU) reservations one ledger can itemise.
pub const MAX_HOLDERS: usize = 128;
/// Requests that can wait at once.
pub const MAX_WAITERS: usize = 64;

/// Total and granted memory of one GPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GpuRow {
    /// Capacity in bytes.
    pub total: u64,
    /// Granted bytes; never above `total`.
    pub used: u64,
}

/// Memory one process holds on one GPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct HolderRow {
    /// Non-zero when the row is used.
    pub in_use: u32,
    /// GPU index.
    pub gpu: u32,
    /// Holder's pid.
    pub pid: u32,
    /// Which ledger handle of that process holds it (a process may open several).
    pub handle: u32,
    /// Holder's start time (clock ticks since boot), so a recycled pid is not taken for it.
    pub start_time: u64,
    /// Bytes held.
    pub bytes: u64,
}

/// A waiting request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct WaiterRow {
    /// Non-zero when the row is used.
    pub in_use: u32,
    /// GPU index.
    pub gpu: u32,
    /// Waiter's pid.
    pub pid: u32,
    /// Waiter's priority (higher first, for the priority policies).
    pub priority: u32,
    /// Waiter's start time.
    pub start_time: u64,
    /// Bytes wanted.
    pub bytes: u64,
    /// Arrival order.
    pub seq: u64,
    /// Non-zero once a notifier granted it (and added the holder row for it).
    pub granted: u32,
    /// Which ledger handle of that process waits.
    pub handle: u32,
}

/// Everything the ledger knows; checksummed as a whole.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct State {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`VERSION`].
    pub version: u32,
    /// GPUs in use (rows beyond are zero).
    pub gpu_count: u32,
    /// Notification policy (see `policy_code`).
    pub policy: u32,
    /// Padding.
    pub _pad: u32,
    /// Next waiter sequence number.
    pub next_seq: u64,
    /// Per GPU.
    pub gpus: [GpuRow; MAX_GPUS],
    /// Per (process, GPU).
    pub holders: [HolderRow; MAX_HOLDERS],
    /// Waiting requests.
    pub waiters: [WaiterRow; MAX_WAITERS],
}

impl Default for State {
    fn default() -> Self {
        Zeroable::zeroed()
    }
}

/// The whole shared file.
#[repr(C)]
#[derive(Debug)]
pub struct Region {
    /// Futex word: bumped after memory is granted to waiters; waiters sleep on it.
    /// Not checksummed (it changes without the lock).
    pub wake: std::sync::atomic::AtomicU32,
    /// Padding.
    pub _pad: u32,
    /// CRC-32 of `primary`.
    pub primary_crc: u32,
    /// CRC-32 of `backup`.
    pub backup_crc: u32,
    /// The state.
    pub primary: State,
    /// The state as of the last completed operation.
    pub backup: State,
}

/// Size of the shared file in bytes.
pub const REGION_SIZE: usize = std::mem::size_of::<Region>();

impl State {
    /// CRC-32 of the state's bytes (`Pod`: no implicit padding, every byte defined).
    pub fn crc(&self) -> u32 {
        crc32fast::hash(bytemuck::bytes_of(self))
    }

    /// Magic, version and internal consistency (used = sum of holders, used <= total).
    pub fn is_consistent(&self) -> bool {
        if self.magic != MAGIC
            || self.version != VERSION
            || self.gpu_count as usize > MAX_GPUS
            || self.gpu_count == 0
        {
            return false;
        }
        let mut sums = [0u64; MAX_GPUS];
        for h in self.holders.iter().filter(|h| h.in_use != 0) {
            if h.gpu >= self.gpu_count {
                return false;
            }
            sums[h.gpu as usize] = sums[h.gpu as usize].saturating_add(h.bytes);
        }
        self.gpus.iter().zip(sums).all(|(g, s)| g.used == s && g.used <= g.total)
    }
}
