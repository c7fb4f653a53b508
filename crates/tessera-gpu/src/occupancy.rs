//! A kernel's demand: the share of a GPU's streaming multiprocessors it would occupy
//! alone (DCUDA §3.2 measures an application's demand this way; the arithmetic is that
//! of NVIDIA's CUDA occupancy calculator).
//!
//! Per SM, the resident blocks of a kernel are limited by four resources:
//!
//! ```text
//! by_threads   = floor(max_threads_per_sm / round_up(threads_per_block, warp_size))
//! by_registers = floor(registers_per_sm / (round_up(regs_per_thread * warp_size, reg_granularity) * warps_per_block))
//! by_shared    = floor(shared_per_sm / round_up(shared_per_block, shared_granularity))   (no limit if 0)
//! by_blocks    = max_blocks_per_sm
//! blocks_per_sm = min(by_threads, by_registers, by_shared, by_blocks)
//! occupancy     = blocks_per_sm * warps_per_block / max_warps_per_sm
//! demand        = min(1, grid_blocks / (blocks_per_sm * sms))
//! ```
//!
//! `demand` is the fraction of the GPU's block slots the kernel's grid fills: a grid
//! smaller than one wave leaves SMs idle for others to use, which is what lets
//! co-running kernels share a GPU without slowing each other.

use serde::{Deserialize, Serialize};

/// The per-SM limits of a GPU (from NVIDIA's tables for its compute capability).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmLimits {
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// Resident threads per SM.
    pub max_threads_per_sm: u32,
    /// Resident blocks per SM.
    pub max_blocks_per_sm: u32,
    /// 32-bit registers per SM.
    pub registers_per_sm: u32,
    /// Registers are allocated per warp in multiples of this.
    pub register_granularity: u32,
    /// Shared memory per SM, bytes.
    pub shared_per_sm: u32,
    /// Shared memory is allocated per block in multiples of this, bytes.
    pub shared_granularity: u32,
}

impl SmLimits {
    /// Tesla V100 (compute capability 7.0), from NVIDIA's CUDA occupancy calculator
    /// and the V100 whitepaper: 80 SMs, 2048 threads, 32 blocks, 64 K registers and up
    /// to 96 KiB of shared memory per SM.
    pub const V100: SmLimits = SmLimits {
        sms: 80,
        warp_size: 32,
        max_threads_per_sm: 2048,
        max_blocks_per_sm: 32,
        registers_per_sm: 65_536,
        register_granularity: 256,
        shared_per_sm: 98_304,
        shared_granularity: 256,
    };

    /// GeForce GTX 1080 Ti (compute capability 6.1, DCUDA's GPU), from NVIDIA's CUDA
    /// occupancy calculator: 28 SMs, 2048 threads, 32 blocks, 64 K registers and
    /// 96 KiB of shared memory per SM.
    pub const GTX_1080_TI: SmLimits = SmLimits { sms: 28, ..SmLimits::V100 };
}

/// A kernel launch's shape and per-thread resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// Blocks in the grid.
    pub grid_blocks: u64,
    /// Threads per block.
    pub threads_per_block: u32,
    /// Registers per thread.
    pub registers_per_thread: u32,
    /// Shared memory per block, bytes (static plus dynamic).
    pub shared_per_block: u32,
}

/// What the arithmetic gives for one launch.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Occupancy {
    /// Resident blocks per SM (0: the launch cannot run on this GPU).
    pub blocks_per_sm: u32,
    /// Resident warps over the SM's maximum (0..=1).
    pub occupancy: f64,
    /// Share of the GPU's block slots the grid fills (0..=1).
    pub demand: f64,
}

fn round_up(x: u32, to: u32) -> u32 {
    x.div_ceil(to.max(1)) * to.max(1)
}

/// The occupancy arithmetic (see the module docs).
pub fn occupancy(l: &Launch, gpu: &SmLimits) -> Occupancy {
    if l.threads_per_block == 0 || l.grid_blocks == 0 {
        return Occupancy::NONE;
    }
    let (blocks_per_sm, occupancy) = per_sm(l, gpu);
    Occupancy::of_grid(l.grid_blocks, blocks_per_sm, occupancy, gpu)
}

/// The part of the arithmetic that depends on the block's shape alone (its
/// divisions): resident blocks per SM and the occupancy they give, (0, 0) if none
/// fits. `l.threads_per_block` is not 0.
fn per_sm(l: &Launch, gpu: &SmLimits) -> (u32, f64) {
    let warps_per_block = l.threads_per_block.div_ceil(gpu.warp_size);
    let by_threads = gpu.max_threads_per_sm / (warps_per_block * gpu.warp_size);
    let regs_per_warp =
        round_up(l.registers_per_thread.max(1) * gpu.warp_size, gpu.register_granularity);
    let by_registers = gpu.registers_per_sm / (regs_per_warp * warps_per_block);
    let by_shared = if l.shared_per_block == 0 {
        u32::MAX
    } else {
        gpu.shared_per_sm / round_up(l.shared_per_block, gpu.shared_granularity)
    };
    let blocks_per_sm = by_threads.min(by_registers).min(by_shared).min(gpu.max_blocks_per_sm);
    if blocks_per_sm == 0 {
        return (0, 0.0);
    }
    let max_warps = gpu.max_threads_per_sm / gpu.warp_size;
    (blocks_per_sm, f64::from(blocks_per_sm * warps_per_block) / f64::from(max_warps))
}

impl Occupancy {
    const NONE: Occupancy = Occupancy { blocks_per_sm: 0, occupancy: 0.0, demand: 0.0 };

    /// A grid of `grid_blocks` (not 0) of a shape with `blocks_per_sm` and `occupancy`.
    fn of_grid(grid_blocks: u64, blocks_per_sm: u32, occupancy: f64, gpu: &SmLimits) -> Self {
        if blocks_per_sm == 0 {
            return Occupancy::NONE;
        }
        let slots = u64::from(blocks_per_sm) * u64::from(gpu.sms);
        Occupancy { blocks_per_sm, occupancy, demand: (grid_blocks as f64 / slots as f64).min(1.0) }
    }
}

/// The block shapes (threads, registers, shared memory per block) seen on one GPU,
/// each with what the arithmetic gives for it whatever its grid: a program launches
/// the same shape again and again, and the arithmetic's seven divisions per launch,
/// done twice or three times (its demand, its block cost, its start), were a
/// fiftieth of `sim dcuda`'s time (issue 55). Few shapes: a walk of them is cheaper
/// than the divisions, and at most [`Shapes::MAX`] are kept (a program that varies its
/// blocks' shared memory launch by launch has its further shapes computed each time,
/// not a longer walk on every launch).
#[derive(Clone, Debug)]
pub struct Shapes {
    limits: SmLimits,
    known: Vec<Shape>,
}

/// One block shape and what the arithmetic gives for it.
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// Threads, registers per thread and shared memory per block.
    key: [u32; 3],
    blocks_per_sm: u32,
    occupancy: f64,
    cost: Option<BlockCost>,
}

impl Shapes {
    /// The most shapes kept.
    pub const MAX: usize = 32;

    /// No shapes yet, on a GPU of `limits`.
    pub fn new(limits: SmLimits) -> Shapes {
        Shapes { limits, known: Vec::new() }
    }

    fn entry(&mut self, l: &Launch) -> Shape {
        let key = [l.threads_per_block, l.registers_per_thread, l.shared_per_block];
        if let Some(shape) = self.known.iter().find(|s| s.key == key) {
            return *shape;
        }
        // (the arithmetic's per-SM part once: its blocks per SM say whether one fits)
        let (blocks_per_sm, occupancy) = per_sm(l, &self.limits);
        let cost = (blocks_per_sm > 0).then(|| BlockCost::of_fitting(l, &self.limits));
        let shape = Shape { key, blocks_per_sm, occupancy, cost };
        if self.known.len() < Shapes::MAX {
            self.known.push(shape);
        }
        shape
    }

    /// [`occupancy`] of `l` on this GPU.
    pub fn occupancy(&mut self, l: &Launch) -> Occupancy {
        if l.threads_per_block == 0 || l.grid_blocks == 0 {
            return Occupancy::NONE;
        }
        let shape = self.entry(l);
        Occupancy::of_grid(l.grid_blocks, shape.blocks_per_sm, shape.occupancy, &self.limits)
    }

    /// [`BlockCost::of`] `l` on this GPU.
    pub fn block_cost(&mut self, l: &Launch) -> Option<BlockCost> {
        if l.threads_per_block == 0 {
            return None;
        }
        self.entry(l).cost
    }
}

/// What one resident block of a launch takes from its SM (the four resources of the
/// occupancy arithmetic, rounded as the hardware allocates them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCost {
    /// Threads, whole warps.
    pub threads: u32,
    /// Registers, whole allocation units per warp.
    pub registers: u32,
    /// Shared memory, bytes, whole allocation units.
    pub shared: u32,
}

impl BlockCost {
    /// Whether a block of `self` takes at least as much of every resource as one of
    /// `other`: where `other` has no room, `self` has none either.
    pub fn takes_at_least(&self, other: &BlockCost) -> bool {
        self.threads >= other.threads
            && self.registers >= other.registers
            && self.shared >= other.shared
    }

    /// One block of `l` on `gpu`, or `None` if a block cannot fit on an empty SM.
    pub fn of(l: &Launch, gpu: &SmLimits) -> Option<BlockCost> {
        if occupancy(&Launch { grid_blocks: 1, ..*l }, gpu).blocks_per_sm == 0 {
            return None;
        }
        Some(BlockCost::of_fitting(l, gpu))
    }

    /// [`Self::of`] a launch known to fit on an empty SM.
    fn of_fitting(l: &Launch, gpu: &SmLimits) -> BlockCost {
        let warps = l.threads_per_block.div_ceil(gpu.warp_size);
        let regs_per_warp =
            round_up(l.registers_per_thread.max(1) * gpu.warp_size, gpu.register_granularity);
        BlockCost {
            threads: warps * gpu.warp_size,
            registers: regs_per_warp * warps,
            shared: if l.shared_per_block == 0 {
                0
            } else {
                round_up(l.shared_per_block, gpu.shared_granularity)
            },
        }
    }
}

/// What is in use on one SM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmUse {
    /// Resident blocks.
    pub blocks: u32,
    /// Resident threads.
    pub threads: u32,
    /// Allocated registers.
    pub registers: u32,
    /// Allocated shared memory, bytes.
    pub shared: u32,
}

impl SmUse {
    /// An SM with every resource in use.
    pub fn full(gpu: &SmLimits) -> SmUse {
        SmUse {
            blocks: gpu.max_blocks_per_sm,
            threads: gpu.max_threads_per_sm,
            registers: gpu.registers_per_sm,
            shared: gpu.shared_per_sm,
        }
    }

    /// The lesser use of each resource of the two.
    pub fn least(&self, other: &SmUse) -> SmUse {
        SmUse {
            blocks: self.blocks.min(other.blocks),
            threads: self.threads.min(other.threads),
            registers: self.registers.min(other.registers),
            shared: self.shared.min(other.shared),
        }
    }

    /// How many more blocks costing `c` fit beside what is resident.
    pub fn room_for(&self, c: &BlockCost, gpu: &SmLimits) -> u32 {
        let left = |cap: u32, used: u32, each: u32| {
            cap.saturating_sub(used).checked_div(each).unwrap_or(u32::MAX)
        };
        left(gpu.max_blocks_per_sm, self.blocks, 1)
            .min(left(gpu.max_threads_per_sm, self.threads, c.threads))
            .min(left(gpu.registers_per_sm, self.registers, c.registers))
            .min(left(gpu.shared_per_sm, self.shared, c.shared))
    }

    /// Take the resources of `n` blocks costing `c`.
    pub fn take(&mut self, c: &BlockCost, n: u32) {
        self.blocks += n;
        self.threads += n * c.threads;
        self.registers += n * c.registers;
        self.shared += n * c.shared;
    }

    /// Give back the resources of `n` blocks costing `c`, taken before by
    /// [`Self::take`] (the block model gives back only what a cohort took, so nothing
    /// goes below zero: debug builds check it). Plain subtractions: both were one
    /// signed update clamped at zero, a twentieth of `sim dcuda`'s instructions, and
    /// then saturating ones, an eighth of the release of a cohort's SMs (issue 55).
    pub fn give_back(&mut self, c: &BlockCost, n: u32) {
        debug_assert!(
            self.blocks >= n
                && self.threads >= n * c.threads
                && self.registers >= n * c.registers
                && self.shared >= n * c.shared,
            "giving back more than was taken: {self:?} less {n} of {c:?}"
        );
        self.blocks -= n;
        self.threads -= n * c.threads;
        self.registers -= n * c.registers;
        self.shared -= n * c.shared;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(grid: u64, threads: u32, regs: u32, shared: u32) -> Launch {
        Launch {
            grid_blocks: grid,
            threads_per_block: threads,
            registers_per_thread: regs,
            shared_per_block: shared,
        }
    }

    /// Worked by hand from the formulas above, V100 limits.
    #[test]
    fn hand_computed_cases() {
        let v = SmLimits::V100;
        // 256 threads, 32 regs, no shared: threads allow 2048/256 = 8; registers:
        // 32*32 = 1024 per warp (already a multiple of 256), 8 warps -> 8192 per block,
        // 65536/8192 = 8; blocks limit 32 -> 8 blocks, 64 warps = full occupancy.
        let o = occupancy(&launch(640, 256, 32, 0), &v);
        assert_eq!(o.blocks_per_sm, 8);
        assert_eq!(o.occupancy, 1.0);
        // 640 blocks fill 640 of 8*80 = 640 slots
        assert_eq!(o.demand, 1.0);
        // the same kernel with 64 blocks fills a tenth of the GPU
        assert!((occupancy(&launch(64, 256, 32, 0), &v).demand - 0.1).abs() < 1e-12);
        // 64 registers: 2048 per warp, 8 warps -> 16384 per block -> 4 blocks, half
        let o = occupancy(&launch(80, 256, 64, 0), &v);
        assert_eq!((o.blocks_per_sm, o.occupancy), (4, 0.5));
        assert!((o.demand - 80.0 / 320.0).abs() < 1e-12);
        // 40 KiB shared per block: 98304 / 40960 = 2 blocks
        let o = occupancy(&launch(1000, 128, 16, 40 * 1024), &v);
        assert_eq!(o.blocks_per_sm, 2);
        assert_eq!(o.occupancy, 8.0 / 64.0);
        assert_eq!(o.demand, 1.0, "more blocks than slots: the whole GPU");
        // tiny blocks hit the 32-blocks limit: 32 threads -> 2048/32 = 64 by threads
        assert_eq!(occupancy(&launch(1, 32, 8, 0), &v).blocks_per_sm, 32);
        // a block that cannot fit: 1024 threads * 255 registers
        assert_eq!(occupancy(&launch(1, 1024, 255, 0), &v).blocks_per_sm, 0);
    }

    /// Mixed blocks on one SM: what is left after one kernel's blocks bounds another's.
    #[test]
    fn room_beside_other_blocks() {
        let v = SmLimits::V100;
        let big = BlockCost::of(&launch(1, 1024, 32, 0), &v).unwrap();
        let small = BlockCost::of(&launch(1, 256, 32, 0), &v).unwrap();
        assert_eq!(big, BlockCost { threads: 1024, registers: 32 * 1024, shared: 0 });
        let mut sm = SmUse::default();
        assert_eq!(sm.room_for(&big, &v), 2);
        sm.take(&big, 1);
        // 1024 threads and 32 K registers left: four 256-thread blocks of 8 K registers
        assert_eq!(sm.room_for(&small, &v), 4);
        sm.take(&small, 4);
        assert_eq!((sm.room_for(&small, &v), sm.room_for(&big, &v)), (0, 0));
        sm.give_back(&big, 1);
        assert_eq!(sm.room_for(&big, &v), 1);
        assert_eq!(BlockCost::of(&launch(1, 1024, 255, 0), &v), None);
    }

    /// More shapes than the memo keeps: each still answered as the arithmetic does,
    /// and the memo stays at its bound.
    #[test]
    fn shapes_beyond_the_bound_are_computed_each_time() {
        let gpu = SmLimits::V100;
        let mut shapes = Shapes::new(gpu);
        for round in 0..2u64 {
            for shared in 0..(2 * Shapes::MAX as u32) {
                let l = launch(100 + round, 128, 32, shared * 512);
                let (a, b) = (shapes.occupancy(&l), occupancy(&l, &gpu));
                assert_eq!(
                    (a.blocks_per_sm, a.occupancy.to_bits()),
                    (b.blocks_per_sm, b.occupancy.to_bits())
                );
                assert_eq!(a.demand.to_bits(), b.demand.to_bits());
                assert_eq!(shapes.block_cost(&l), BlockCost::of(&l, &gpu));
            }
        }
        assert_eq!(shapes.known.len(), Shapes::MAX);
    }

    proptest::proptest! {
        /// The memo of shapes answers as the arithmetic does, bit for bit, whatever
        /// the order and repetition of the launches (shapes of a few values each, so
        /// that they repeat with other grids).
        #[test]
        fn shapes_answer_as_the_arithmetic(
            launches in proptest::collection::vec(
                (0u64..3000, proptest::sample::select(vec![0u32, 1, 32, 100, 256, 1024, 1025]),
                 proptest::sample::select(vec![0u32, 16, 64, 255]),
                 proptest::sample::select(vec![0u32, 1, 40 * 1024, 100 * 1024])),
                1..40),
            gtx in proptest::bool::ANY,
        ) {
            let gpu = if gtx { SmLimits::GTX_1080_TI } else { SmLimits::V100 };
            let mut shapes = Shapes::new(gpu);
            for (grid, threads, regs, shared) in launches {
                let l = launch(grid, threads, regs, shared);
                let (a, b) = (shapes.occupancy(&l), occupancy(&l, &gpu));
                proptest::prop_assert_eq!(a.blocks_per_sm, b.blocks_per_sm);
                proptest::prop_assert_eq!(a.occupancy.to_bits(), b.occupancy.to_bits());
                proptest::prop_assert_eq!(a.demand.to_bits(), b.demand.to_bits());
                proptest::prop_assert_eq!(shapes.block_cost(&l), BlockCost::of(&l, &gpu));
            }
        }
    }
}
