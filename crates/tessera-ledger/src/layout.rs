//! The ledger file's layout: plain `#[repr(C)]` integers only, so that any bit pattern
//! is a valid value and a torn, zeroed, truncated or foreign file can be read safely and
//! then rejected by its magic, sizes and checksums.
//!
//! ```text
//! offset 0        Header (magic, version, futex word, table capacities, CRC)
//! offset COPIES   the state:  CopyHead { crc, len } + body
//! body = BodyHead (configuration, counters, GPU rows) + holder rows + waiter rows
//! ```
//!
//! Only the rows in use are stored (the tables are kept dense), so an operation reads
//! and writes bytes in proportion to the holders and waiters that exist, not to the
//! tables' capacity; the state follows the header directly, so one `pread` usually
//! fetches both. Every operation reads the state under the file lock, checks it, works
//! on an in-memory [`State`], and writes it back with one `pwrite`. A writer killed in
//! the middle of a write leaves a checksum that does not match; what every client holds
//! is then rebuilt from the clients' own records (see `records`), which are the truth
//! the state summarises — so no second copy is kept (layout 1 kept one, and paid a
//! write for it on every operation).

use bytemuck::{Pod, Zeroable};

/// Identifies a tessera ledger file.
pub const MAGIC: [u8; 8] = *b"TSLEDGR\0";
/// Layout version; a file of another version is refused, never reinterpreted or
/// rewritten.
pub const VERSION: u32 = 2;
/// GPUs one ledger can describe.
pub const MAX_GPUS: usize = 16;
/// Default capacity of the holder table ((client, GPU) reservations).
pub const DEFAULT_HOLDERS: u32 = 4096;
/// Default capacity of the waiter table (requests waiting at once).
pub const DEFAULT_WAITERS: u32 = 4096;
/// Largest capacity either table may be given at creation.
pub const MAX_TABLE: u32 = 1 << 16;
/// The header page: mapped (for the futex word's address only); the file is never
/// shorter.
pub const PAGE: u64 = 4096;
/// Where the state starts: right after the header.
pub const COPIES: u64 = std::mem::size_of::<Header>() as u64;
/// Byte offset of the futex word in the file.
pub const WAKE_OFFSET: u64 = std::mem::offset_of!(Header, wake) as u64;

/// The first bytes of the file.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`VERSION`].
    pub version: u32,
    /// Futex word: bumped (under the file lock) whenever memory is granted to waiters;
    /// waiters sleep on it. Not covered by `crc`.
    pub wake: u32,
    /// Holder table capacity, fixed at creation.
    pub max_holders: u32,
    /// Waiter table capacity, fixed at creation.
    pub max_waiters: u32,
    /// CRC-32 of magic, version and the two capacities.
    pub crc: u32,
    /// Padding.
    pub _pad: u32,
}

impl Header {
    /// A header for a new ledger with these capacities.
    pub fn new(max_holders: u32, max_waiters: u32) -> Header {
        let mut h = Header {
            magic: MAGIC,
            version: VERSION,
            max_holders,
            max_waiters,
            ..Header::default()
        };
        h.crc = h.expected_crc();
        h
    }

    fn expected_crc(&self) -> u32 {
        let mut c = crc32fast::Hasher::new();
        c.update(&self.magic);
        c.update(&self.version.to_le_bytes());
        c.update(&self.max_holders.to_le_bytes());
        c.update(&self.max_waiters.to_le_bytes());
        c.finalize()
    }

    /// Magic, version, checksum and capacities all sound.
    pub fn is_sound(&self) -> bool {
        self.magic == MAGIC
            && self.version == VERSION
            && self.crc == self.expected_crc()
            && capacities_valid(self.max_holders, self.max_waiters)
    }

    /// Bytes the state may occupy.
    pub fn slot_size(&self) -> u64 {
        slot_size(self.max_holders, self.max_waiters)
    }

    /// Size of the whole file.
    pub fn file_size(&self) -> u64 {
        (COPIES + self.slot_size()).max(PAGE)
    }
}

/// Whether these table capacities are allowed.
pub fn capacities_valid(max_holders: u32, max_waiters: u32) -> bool {
    (1..=MAX_TABLE).contains(&max_holders) && (1..=MAX_TABLE).contains(&max_waiters)
}

/// Bytes one copy may occupy with these capacities.
pub fn slot_size(max_holders: u32, max_waiters: u32) -> u64 {
    (std::mem::size_of::<CopyHead>()
        + std::mem::size_of::<BodyHead>()
        + max_holders as usize * std::mem::size_of::<HolderRow>()
        + max_waiters as usize * std::mem::size_of::<WaiterRow>()) as u64
}

/// Precedes the state's body.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct CopyHead {
    /// CRC-32 of the body.
    pub crc: u32,
    /// Body length in bytes.
    pub len: u32,
}

/// Total and granted memory of one GPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GpuRow {
    /// Capacity in bytes.
    pub total: u64,
    /// Granted bytes; never above `total`.
    pub used: u64,
}

/// The fixed part of a body.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BodyHead {
    /// [`VERSION`] again, so a copy is never read as another version's.
    pub version: u32,
    /// GPUs in use (rows beyond are zero).
    pub gpu_count: u32,
    /// Notification policy (see `ledger::policy_code`).
    pub policy: u32,
    /// Holder rows that follow.
    pub holders: u32,
    /// Waiter rows that follow the holders.
    pub waiters: u32,
    /// Bumped by every commit (wrapping): a handle that finds the file older than what
    /// it last read or wrote knows the file was replaced by an old copy. (Zero in files
    /// written before it existed, where this was padding.)
    pub generation: u32,
    /// Next waiter ticket.
    pub next_seq: u64,
    /// Wall-clock nanoseconds of the last sanity check (liveness sweep).
    pub last_sweep_ns: u64,
    /// Wall-clock nanoseconds of the last clean-up of the records directory.
    pub last_janitor_ns: u64,
    /// Per GPU.
    pub gpus: [GpuRow; MAX_GPUS],
}

/// Memory one client holds on one GPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct HolderRow {
    /// The client (see `records`): its liveness is its record file's lock.
    pub client: u64,
    /// GPU index.
    pub gpu: u32,
    /// The holder's pid as the holder saw it — for people reading `status` only; it is
    /// meaningless across pid namespaces and never used to judge liveness.
    pub pid: u32,
    /// Bytes held.
    pub bytes: u64,
}

/// A waiting request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct WaiterRow {
    /// The waiting client.
    pub client: u64,
    /// GPU index.
    pub gpu: u32,
    /// Its pid as it saw it (informational).
    pub pid: u32,
    /// Bytes wanted.
    pub bytes: u64,
    /// Arrival order (its ticket).
    pub seq: u64,
    /// Priority (higher first, for the priority policies; 0-255).
    pub priority: u16,
    /// [`WAIT_TIMED`] and any later flags. (Until these bits had a meaning the field
    /// was the upper half of a 32-bit priority that never exceeded 255, so files
    /// written before read as flags 0: the layout did not change.)
    pub flags: u16,
    /// Non-zero once a notifier granted it (and added the holder row for it).
    pub granted: u32,
}

/// A [`WaiterRow`] flag: the request gives up at a deadline, so its client is not
/// blocked for good (the deadlock check counts what it holds as returnable).
pub const WAIT_TIMED: u16 = 1;

/// Everything the ledger knows, in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// Holder table capacity.
    pub max_holders: u32,
    /// Waiter table capacity.
    pub max_waiters: u32,
    /// Notification policy code.
    pub policy: u32,
    /// See [`BodyHead::generation`].
    pub generation: u32,
    /// Next waiter ticket.
    pub next_seq: u64,
    /// See [`BodyHead::last_sweep_ns`].
    pub last_sweep_ns: u64,
    /// See [`BodyHead::last_janitor_ns`].
    pub last_janitor_ns: u64,
    /// One row per GPU.
    pub gpus: Vec<GpuRow>,
    /// Reservations, dense.
    pub holders: Vec<HolderRow>,
    /// Waiting requests, dense.
    pub waiters: Vec<WaiterRow>,
}

/// Why a copy was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyFault {
    /// Short, checksum mismatch, or counts out of range.
    Damaged,
    /// Sound, but of another layout version.
    OtherVersion(u32),
    /// Sound bytes whose books do not add up.
    Inconsistent,
}

impl State {
    /// A new, empty ledger.
    pub fn fresh(gpus: &[u64], policy: u32, max_holders: u32, max_waiters: u32) -> State {
        State {
            max_holders,
            max_waiters,
            policy,
            generation: 0,
            next_seq: 0,
            last_sweep_ns: 0,
            last_janitor_ns: 0,
            gpus: gpus.iter().map(|&total| GpuRow { total, used: 0 }).collect(),
            holders: Vec::new(),
            waiters: Vec::new(),
        }
    }

    /// `CopyHead` followed by the body, ready to be written at a copy's offset.
    pub fn encode(&self) -> Vec<u8> {
        let mut head = BodyHead {
            version: VERSION,
            gpu_count: self.gpus.len() as u32,
            policy: self.policy,
            holders: self.holders.len() as u32,
            waiters: self.waiters.len() as u32,
            generation: self.generation,
            next_seq: self.next_seq,
            last_sweep_ns: self.last_sweep_ns,
            last_janitor_ns: self.last_janitor_ns,
            gpus: [GpuRow::default(); MAX_GPUS],
        };
        head.gpus[..self.gpus.len()].copy_from_slice(&self.gpus);
        let body_len = std::mem::size_of::<BodyHead>()
            + std::mem::size_of_val(self.holders.as_slice())
            + std::mem::size_of_val(self.waiters.as_slice());
        let mut out = Vec::with_capacity(std::mem::size_of::<CopyHead>() + body_len);
        out.extend_from_slice(bytemuck::bytes_of(&CopyHead::default()));
        out.extend_from_slice(bytemuck::bytes_of(&head));
        out.extend_from_slice(bytemuck::cast_slice(&self.holders));
        out.extend_from_slice(bytemuck::cast_slice(&self.waiters));
        let body = &out[std::mem::size_of::<CopyHead>()..];
        let copy = CopyHead { crc: crc32fast::hash(body), len: body.len() as u32 };
        out[..std::mem::size_of::<CopyHead>()].copy_from_slice(bytemuck::bytes_of(&copy));
        out
    }

    /// Decode a body (without its `CopyHead`) under `header`'s capacities, checking its
    /// checksum, version, counts and books.
    pub fn decode(header: &Header, crc: u32, body: &[u8]) -> Result<State, CopyFault> {
        let head_len = std::mem::size_of::<BodyHead>();
        if body.len() < head_len || crc32fast::hash(body) != crc {
            return Err(CopyFault::Damaged);
        }
        let head: BodyHead = bytemuck::pod_read_unaligned(&body[..head_len]);
        if head.version != VERSION {
            return Err(CopyFault::OtherVersion(head.version));
        }
        let (hn, wn) = (head.holders as usize, head.waiters as usize);
        let hs = hn * std::mem::size_of::<HolderRow>();
        let ws = wn * std::mem::size_of::<WaiterRow>();
        if head.holders > header.max_holders
            || head.waiters > header.max_waiters
            || body.len() != head_len + hs + ws
            || head.gpu_count == 0
            || head.gpu_count as usize > MAX_GPUS
        {
            return Err(CopyFault::Damaged);
        }
        let rows = &body[head_len..];
        let state = State {
            max_holders: header.max_holders,
            max_waiters: header.max_waiters,
            policy: head.policy,
            generation: head.generation,
            next_seq: head.next_seq,
            last_sweep_ns: head.last_sweep_ns,
            last_janitor_ns: head.last_janitor_ns,
            gpus: head.gpus[..head.gpu_count as usize].to_vec(),
            holders: rows[..hs]
                .chunks_exact(std::mem::size_of::<HolderRow>())
                .map(bytemuck::pod_read_unaligned)
                .collect(),
            waiters: rows[hs..hs + ws]
                .chunks_exact(std::mem::size_of::<WaiterRow>())
                .map(bytemuck::pod_read_unaligned)
                .collect(),
        };
        if !state.is_consistent() {
            return Err(CopyFault::Inconsistent);
        }
        Ok(state)
    }

    /// The books add up: per GPU, used = sum of its holders and used <= total; rows name
    /// existing GPUs and hold something. (A (client, GPU) pair itemised twice would
    /// still add up; it is not checked, to keep this O(rows) without allocating.)
    pub fn is_consistent(&self) -> bool {
        if self.gpus.is_empty() || self.gpus.len() > MAX_GPUS {
            return false;
        }
        let mut sums = [0u64; MAX_GPUS];
        for h in &self.holders {
            if h.gpu as usize >= self.gpus.len() || h.bytes == 0 {
                return false;
            }
            sums[h.gpu as usize] = sums[h.gpu as usize].saturating_add(h.bytes);
        }
        self.waiters.iter().all(|w| (w.gpu as usize) < self.gpus.len())
            && self.gpus.iter().zip(sums).all(|(g, s)| g.used == s && g.used <= g.total)
    }
}

/// Whether generation `a` is older than `b` (serial-number arithmetic: correct while
/// they are less than 2^31 commits apart).
pub fn older(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_sizes_match_the_decoder() {
        assert_eq!(std::mem::size_of::<HolderRow>(), 24);
        assert_eq!(std::mem::size_of::<WaiterRow>(), 40);
        assert_eq!(WAKE_OFFSET % 4, 0, "the futex word is 4-byte aligned");
        assert_eq!(COPIES, 32);
    }

    #[test]
    fn a_state_round_trips_and_a_flipped_bit_is_caught() {
        let header = Header::new(8, 8);
        let mut s = State::fresh(&[1000, 500], 1, 8, 8);
        s.holders.push(HolderRow { client: 7, gpu: 1, pid: 3, bytes: 200 });
        s.gpus[1].used = 200;
        s.waiters.push(WaiterRow { client: 9, gpu: 0, bytes: 10, seq: 4, ..Default::default() });
        let bytes = s.encode();
        let head: CopyHead = bytemuck::pod_read_unaligned(&bytes[..8]);
        assert_eq!(State::decode(&header, head.crc, &bytes[8..]), Ok(s.clone()));
        let mut bad = bytes.clone();
        bad[40] ^= 1;
        assert_eq!(State::decode(&header, head.crc, &bad[8..]), Err(CopyFault::Damaged));
        // more rows than the header's capacity: refused even with a matching checksum
        let small = Header::new(1, 1);
        let mut many = s.clone();
        many.holders.push(HolderRow { client: 8, gpu: 0, pid: 1, bytes: 1 });
        many.gpus[0].used = 1;
        let b = many.encode();
        let h: CopyHead = bytemuck::pod_read_unaligned(&b[..8]);
        assert_eq!(State::decode(&small, h.crc, &b[8..]), Err(CopyFault::Damaged));
    }
}
