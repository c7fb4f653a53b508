//! The block model's tests: its rules one by one, and properties over random kernels.

use super::*;
use proptest::prelude::*;

const V: SmLimits = SmLimits::V100;

fn kernel(context: u32, grid: u64, threads: u32, alone_ns: Ns, priority: i32) -> KernelLaunch {
    KernelLaunch {
        context,
        launch: Launch {
            grid_blocks: grid,
            threads_per_block: threads,
            registers_per_thread: 32,
            shared_per_block: 0,
        },
        alone_ns,
        priority,
    }
}

/// `k` with `shared` bytes of shared memory a block.
fn with_shared(k: KernelLaunch, shared: u32) -> KernelLaunch {
    KernelLaunch { launch: Launch { shared_per_block: shared, ..k.launch }, ..k }
}

fn shared() -> ConcurrentGpu {
    ConcurrentGpu::new(V, Contexts::Shared, Contention::default())
}

/// Run until nothing is left; the finishes by id.
fn run_out(g: &mut ConcurrentGpu) -> BTreeMap<PieceId, Ns> {
    let mut done = BTreeMap::new();
    while let Some(t) = g.next_event() {
        g.advance(t).unwrap();
        while let Some((id, at)) = g.pop_finished() {
            assert!(done.insert(id, at).is_none(), "kernel {id} finished twice");
        }
    }
    while let Some((id, at)) = g.pop_finished() {
        assert!(done.insert(id, at).is_none(), "kernel {id} finished twice");
    }
    done
}

const MS: Ns = 1_000_000;

/// Worked by hand: 1024-thread blocks, two per SM by threads, 160 slots on a V100.
#[test]
fn a_big_kernel_holds_up_a_small_one_behind_it() {
    // A: 480 blocks, 3 ms alone -> 3 waves of 1 ms. B: 80 blocks of 1024 threads,
    // 1 wave of 1 ms, started at 0.5 ms. In order, A takes every freed slot until
    // its blocks are all placed (at 2 ms), so B starts when A's last wave ends.
    let mut g = shared();
    g.start(0, 1, kernel(0, 480, 1024, 3 * MS, 0)).unwrap();
    g.start(MS / 2, 2, kernel(0, 80, 1024, MS, 0)).unwrap();
    let done = run_out(&mut g);
    assert_eq!(done[&1], 3 * MS);
    assert_eq!(done[&2], 4 * MS);
}

#[test]
fn a_higher_stream_priority_is_dispatched_first() {
    // the same, B at a higher priority: at 1 ms the freed 160 slots go to B first
    // (80), A gets 80; A's remaining 240 blocks then need 1.5 more waves' worth
    let mut g = shared();
    g.start(0, 1, kernel(0, 480, 1024, 3 * MS, 0)).unwrap();
    g.start(MS / 2, 2, kernel(0, 80, 1024, MS, 1)).unwrap();
    let done = run_out(&mut g);
    assert_eq!(done[&2], 2 * MS);
    // at 1 ms: A 80 placed (pending 240); at 2 ms: 160 free -> A 160 (pending 80),
    // plus A's 80 from 1 ms end then -> at 2 ms A has 160 resident, at 3 ms 80 more,
    // ending at 4 ms
    assert_eq!(done[&1], 4 * MS);
}

#[test]
fn a_small_kernel_gets_the_leftovers() {
    // A: 100 blocks of 1024 threads, 1 wave (1 ms): 100 of 160 slots. B: 80 blocks
    // of 1024 threads: 60 fit at once (the SMs with one A block), 20 wait for A.
    let mut g = shared();
    g.start(0, 1, kernel(0, 100, 1024, MS, 0)).unwrap();
    g.start(0, 2, kernel(0, 80, 1024, MS, 0)).unwrap();
    g.next_event();
    assert_eq!(g.resident_blocks(1), 100);
    assert_eq!(g.resident_blocks(2), 60);
    let done = run_out(&mut g);
    assert_eq!(done[&1], MS);
    assert_eq!(done[&2], 2 * MS);
}

#[test]
fn contexts_take_turns_and_pay_each_switch() {
    // two contexts, each a 10 ms kernel filling the GPU, 2 ms slices, 0.1 ms switch:
    // A runs 0-2, switch to 2.1, B 2.1-4.1, switch, A 4.2-6.2 ... A needs 5 turns
    let mut g = ConcurrentGpu::new(
        V,
        Contexts::TimeSliced { slice: 2 * MS, switch: MS / 10 },
        Contention::default(),
    );
    g.start(0, 1, kernel(0, 160, 1024, 10 * MS, 0)).unwrap();
    g.start(0, 2, kernel(1, 160, 1024, 10 * MS, 0)).unwrap();
    let done = run_out(&mut g);
    // A's fifth turn starts after 4 turns of 2 ms and 8 switches: 8 + 0.8 = 16.8 ms
    assert_eq!(done[&1], 18 * MS + 8 * MS / 10);
    // B's fifth: after A's 5 turns (10 ms), B's 4 and 9 switches: 18 + 0.9 + 2
    assert_eq!(done[&2], 20 * MS + 9 * MS / 10);
    assert!((g.usage().switching_ns - 0.9 * MS as f64).abs() < 1.0);
}

#[test]
fn contention_slows_co_running_kernels_past_capacity() {
    let mut g = ConcurrentGpu::new(V, Contexts::Shared, Contention { slowdown_per_excess: 0.5 });
    // two kernels of demand 1 each: D = 2, blocks take 1.5 times as long
    g.start(0, 1, kernel(0, 160, 1024, MS, 0)).unwrap();
    g.start(0, 2, kernel(0, 160, 1024, MS, 0)).unwrap();
    let done = run_out(&mut g);
    // A's wave: 1.5 ms; B placed then, alone (D = 1): 1 ms
    assert_eq!(done[&1], 3 * MS / 2);
    assert_eq!(done[&2], 5 * MS / 2);
}

#[test]
fn a_paused_gpu_makes_no_progress() {
    let mut g = shared();
    g.start(0, 1, kernel(0, 320, 1024, 2 * MS, 0)).unwrap();
    g.set_paused(MS / 2, true).unwrap();
    assert_eq!(g.next_event(), None);
    g.set_paused(5 * MS, false).unwrap();
    let done = run_out(&mut g);
    assert_eq!(done[&1], 2 * MS + 9 * MS / 2);
}

#[test]
fn removal_returns_the_time_alone_left() {
    let mut g = shared();
    g.start(0, 1, kernel(0, 320, 1024, 2 * MS, 0)).unwrap();
    // half of the first wave done: a quarter of the work
    assert_eq!(g.remove(MS / 2, 1).unwrap(), 3 * MS / 2);
    assert!(g.is_empty());
    assert_eq!(g.remove(MS, 1), Err(ConcurrentError::Unknown(1)));
    assert!(matches!(g.advance(0), Err(ConcurrentError::TimeBackwards { .. })));
}

fn arb_kernel() -> impl Strategy<Value = (u32, u64, u32, Ns, i32)> {
    (
        0u32..3,
        1u64..700,
        prop::sample::select(vec![64u32, 128, 256, 512, 1024]),
        1u64..5_000_000,
        -1i32..2,
    )
}

proptest! {
    /// The placement computed in closed form puts on each SM what a block per SM in
    /// turn, round after round while any fits, puts there (issue 55's rewrite of
    /// that loop).
    #[test]
    fn breadth_first_placement_is_the_rounds(
        used in proptest::collection::vec((0u32..33, 0u32..2049, 0u32..65537), 80),
        threads in 1u32..1024,
        regs in 1u32..128,
        per_mille in 0u64..1300,
    ) {
        let mut g = shared();
        let launch = Launch { grid_blocks: 1, threads_per_block: threads, registers_per_thread: regs, shared_per_block: 0 };
        let Some(cost) = BlockCost::of(&launch, &V) else { return Ok(()) };
        for (sm, (b, t, r)) in used.iter().enumerate() {
            g.sms[sm] = SmUse { blocks: (*b).min(V.max_blocks_per_sm), threads: (*t).min(V.max_threads_per_sm), registers: (*r).min(V.registers_per_sm), shared: 0 };
        }
        // mostly fewer blocks than fit (a last round that stops part way), some more
        let fits: u64 = g.sms.iter().map(|u| u64::from(u.room_for(&cost, &V))).sum();
        let pending = fits * per_mille / 1000;
        // the rounds, as the loop was
        let mut sms = g.sms.clone();
        let mut expected = vec![0u32; sms.len()];
        let mut left = pending;
        loop {
            let mut any = false;
            for sm in 0..sms.len() {
                if left == 0 {
                    break;
                }
                if sms[sm].room_for(&cost, &V) > 0 {
                    sms[sm].take(&cost, 1);
                    expected[sm] += 1;
                    left -= 1;
                    any = true;
                }
            }
            if left == 0 || !any {
                break;
            }
        }
        let every: Vec<u32> = (0..V.sms).collect();
        let (placed, bound) = g.place_breadth_first(&cost, pending, true, &every);
        prop_assert_eq!(placed, pending - left);
        let expected: Vec<(u32, u32)> = expected.iter().enumerate().filter(|(_, n)| **n > 0).map(|(sm, n)| (sm as u32, *n)).collect();
        // the list and the bound are of a placement: with none, neither is read
        if placed > 0 {
            prop_assert_eq!(&g.scratch, &expected);
            prop_assert_eq!(bound, least_used(&sms, &V));
        }
        prop_assert_eq!(&g.sms, &sms);
    }

    #[test]
    fn a_kernel_alone_takes_its_time((_, grid, threads, alone, p) in arb_kernel()) {
        let mut g = shared();
        g.start(7, 1, kernel(0, grid, threads, alone, p)).unwrap();
        let done = run_out(&mut g);
        prop_assert_eq!(done[&1], 7 + alone);
    }

    /// Every block runs exactly its block time (no contention), across preemption
    /// and pauses; each kernel finishes once; the starts' order at one instant does
    /// not matter.
    #[test]
    fn work_is_conserved_and_order_does_not_matter(
        ks in prop::collection::vec((arb_kernel(), 0u64..3_000_000), 1..8),
        sliced in any::<bool>(),
        pause in prop::option::of((0u64..4_000_000, 1u64..2_000_000)),
    ) {
        let contexts = if sliced {
            Contexts::TimeSliced { slice: 1_000_000, switch: 50_000 }
        } else {
            Contexts::Shared
        };
        let run = |reversed: bool| {
            let mut g = ConcurrentGpu::new(V, contexts, Contention::default());
            let mut starts: Vec<(Ns, PieceId, KernelLaunch)> = ks
                .iter()
                .enumerate()
                .map(|(i, ((ctx, grid, threads, alone, p), at))| {
                    // starts on a coarse grid, so several share an instant
                    (at / 1_000_000 * 1_000_000, i as PieceId, kernel(*ctx, *grid, *threads, *alone, *p))
                })
                .collect();
            starts.sort_by_key(|(at, id, _)| (*at, if reversed { Reverse(*id) } else { Reverse(u64::MAX - id) }));
            let mut done = BTreeMap::new();
            let mut events: Vec<(Ns, u8, usize)> =
                starts.iter().enumerate().map(|(i, s)| (s.0, 1, i)).collect();
            if let Some((at, len)) = pause {
                events.push((at, 0, 0));
                events.push((at + len, 2, 0));
            }
            events.sort_by_key(|e| (e.0, e.1, e.2));
            for (at, kind, i) in events {
                loop {
                    match g.next_event() {
                        Some(t) if t < at => {
                            g.advance(t).unwrap();
                            while let Some((id, t)) = g.pop_finished() {
                                assert!(done.insert(id, t).is_none());
                            }
                        }
                        _ => break,
                    }
                }
                match kind {
                    0 => g.set_paused(at, true).unwrap(),
                    2 => g.set_paused(at, false).unwrap(),
                    _ => g.start(at, starts[i].1, starts[i].2).unwrap(),
                }
            }
            let all = run_out(&mut g);
            for (id, t) in all { assert!(done.insert(id, t).is_none()); }
            (done, g.ran_at_end)
        };
        let (a, ran) = run(false);
        let (b, _) = run(true);
        prop_assert_eq!(a.len(), ks.len(), "every kernel finishes");
        prop_assert_eq!(&a, &b, "the order of starts at one instant changed the finishes");
        for (id, (ran, whole)) in ran {
            prop_assert_eq!(ran, whole, "kernel {} ran other than its blocks' time", id);
        }
    }
}

proptest! {
    /// With contention, blocks placed at different demands take different times, so a
    /// kernel's cohorts end in an order that repeated waves can change: every run of
    /// repeated waves still leaves the model where stepping every wave leaves it (the
    /// comparison inside `run_chain`, in tests), whenever the caller looks, and every
    /// kernel finishes once.
    #[test]
    fn chains_of_waves_are_the_steps_under_contention(
        ks in prop::collection::vec((arb_kernel(), 0u64..3_000_000), 1..8),
        slowdown in 0.0f64..2.0,
        looks in prop::collection::vec(0u64..30_000_000, 0..12),
    ) {
        let mut g = ConcurrentGpu::new(V, Contexts::Shared, Contention { slowdown_per_excess: slowdown });
        let mut events: Vec<(Ns, Option<usize>)> = ks.iter().enumerate().map(|(i, (_, at))| (*at, Some(i))).collect();
        events.extend(looks.iter().map(|at| (*at, None)));
        events.sort();
        let mut done = BTreeMap::new();
        for (at, start) in events {
            g.advance(at).unwrap();
            while let Some((id, t)) = g.pop_finished() {
                prop_assert!(done.insert(id, t).is_none());
            }
            if let Some(i) = start {
                let ((ctx, grid, threads, alone, p), _) = ks[i];
                g.start(at, i as PieceId, kernel(ctx, grid, threads, alone, p)).unwrap();
            }
        }
        for (id, t) in run_out(&mut g) {
            prop_assert!(done.insert(id, t).is_none());
        }
        prop_assert_eq!(done.len(), ks.len());
    }
}

/// A kernel that ends at the instant another starts, found finished by that start
/// (which advances the model), is due at once: the next event is now, not the new
/// kernel's first wave, when a caller that collects finishes at the next event
/// (the simulator's engine) would have reported it a wave late.
#[test]
fn a_finish_found_by_a_start_is_due_at_once() {
    let mut g = shared();
    // 160 blocks of 1024 threads: one wave on a V100, 1 ms
    g.start(0, 1, kernel(0, 160, 1024, MS, 0)).unwrap();
    assert_eq!(g.next_event(), Some(MS));
    g.start(MS, 2, kernel(0, 160, 1024, MS, 0)).unwrap();
    assert_eq!(g.next_event(), Some(MS), "kernel 1's finish waits to be collected");
    assert_eq!(g.pop_finished(), Some((1, MS)));
    assert_eq!(g.next_event(), Some(2 * MS));
}

/// Block time run equals blocks × block time, to the picosecond, for kernels
/// preempted by slices and by a pause.
#[test]
fn block_time_is_conserved_across_preemption() {
    let mut g = ConcurrentGpu::new(
        V,
        Contexts::TimeSliced { slice: 700_000, switch: 30_000 },
        Contention::default(),
    );
    g.start(0, 1, kernel(0, 500, 256, 3 * MS, 0)).unwrap();
    g.start(0, 2, kernel(1, 900, 512, 4 * MS, 0)).unwrap();
    g.set_paused(2 * MS, true).unwrap();
    g.set_paused(3 * MS, false).unwrap();
    let done = run_out(&mut g);
    assert_eq!(done.len(), 2);
    for (id, (ran, whole)) in &g.ran_at_end {
        assert_eq!(ran, whole, "kernel {id}");
    }
}

/// The usage a run integrates does not depend on how often the model is advanced: a
/// caller looking at the GPU every few microseconds and one looking only at the end
/// read the same numbers, to the bit (issue 55: as floating sums, each advance added a
/// rounding, so a faster way of running the same waves moved a run's measures).
#[test]
fn usage_does_not_depend_on_how_often_the_model_is_advanced() {
    let run = |step: Ns| {
        let mut g =
            ConcurrentGpu::new(V, Contexts::Shared, Contention { slowdown_per_excess: 0.3 });
        g.start(0, 1, kernel(0, 1_000, 256, 7 * MS + 333, 0)).unwrap();
        g.start(1_234, 2, kernel(0, 300, 512, 3 * MS + 77, 1)).unwrap();
        let mut t = 1_234 + step;
        while t < 20 * MS {
            g.advance(t).unwrap();
            while g.pop_finished().is_some() {}
            t += step;
        }
        g.advance(20 * MS).unwrap();
        assert!(g.is_empty());
        g.usage()
    };
    let once = run(20 * MS);
    for step in [997, 10_007, 333_333] {
        assert_eq!(format!("{:?}", run(step)), format!("{once:?}"), "advanced every {step} ns");
    }
}

/// Issue 55: a kernel's repeated waves on the same SMs are not changes a caller must
/// look at one by one. A kernel alone of ten waves is next due at its last wave's end
/// (its finish), not at its first wave's; advanced part way, and joined by another
/// kernel, the model is where stepping every wave would have left it (`run_chain`
/// compares itself with that in tests), and both kernels take their time.
#[test]
fn repeated_waves_are_run_without_an_event_each() {
    let mut g = shared();
    // 1,600 blocks of 1,024 threads: ten waves of 1 ms on a V100 (160 blocks a wave)
    g.start(0, 1, kernel(0, 1_600, 1_024, 10 * MS, 0)).unwrap();
    assert_eq!(g.next_event(), Some(10 * MS));
    g.advance(4 * MS + MS / 2).unwrap();
    assert_eq!(g.next_event(), Some(10 * MS));
    assert_eq!(g.resident_blocks(1), 160);
    // a second kernel waits behind the first's waves, which now end one by one
    g.start(4 * MS + MS / 2, 2, kernel(0, 160, 1_024, MS, 0)).unwrap();
    let done = run_out(&mut g);
    assert_eq!(done[&1], 10 * MS);
    assert_eq!(done[&2], 11 * MS);
    assert!((g.usage().busy_ns - 11.0 * MS as f64).abs() < 1.0);
}

/// A run of repeated waves stops at another kernel's wave: kernel 1 (one 10 ms block on
/// each SM) and kernel 2 (800 blocks of 2 ms, one beside it on each SM) start
/// together; kernel 2's waves at 2, 4, 6 and 8 ms are repeats, but at 10 ms kernel 1's
/// blocks end with its wave and the dispatcher gives kernel 2 all 160 slots. Worked by
/// hand; the model is advanced past it all in one call (the chain compares itself
/// with stepping every wave in tests).
#[test]
fn a_chain_of_waves_stops_at_another_kernels_wave() {
    let mut g = shared();
    g.start(0, 1, kernel(0, 80, 1_024, 10 * MS, 0)).unwrap();
    g.start(0, 2, kernel(0, 800, 1_024, 10 * MS, 0)).unwrap();
    assert_eq!(g.next_event(), Some(10 * MS));
    g.advance(13 * MS).unwrap();
    assert_eq!(g.pop_finished(), Some((1, 10 * MS)));
    // 80 × 5 blocks by 10 ms, 160 at 10 and at 12 ms (a repeat): 80 left, placed at
    // 14 ms by a dispatch (a wave of fewer blocks is not a repeat)
    assert_eq!(g.resident_blocks(2), 160);
    assert_eq!(g.next_event(), Some(14 * MS));
    assert_eq!(run_out(&mut g)[&2], 16 * MS);
}

/// A kernel that came to the GPU part by part keeps cohorts that end in turn, and
/// their waves repeat in turn: kernel 2 (1,600 blocks of 1 ms) gets one slot per SM at
/// 0 beside kernel 1 (one 2.5 ms block per SM), and the other slot when kernel 1 ends
/// at 2.5 ms; from then its two cohorts end half a millisecond apart, and every end
/// until its blocks run out is a repeat, not a change the caller must look at.
/// Worked by hand: 1,280 blocks left at 2.5 ms, 160 a round of two ends, the last
/// repeat at 10.5 ms; the cohorts then end at 11 and 11.5 ms.
#[test]
fn a_kernels_staggered_cohorts_repeat_in_turn() {
    let mut g = shared();
    g.start(0, 1, kernel(0, 80, 1_024, 2 * MS + MS / 2, 0)).unwrap();
    g.start(0, 2, kernel(0, 1_600, 1_024, 10 * MS, 0)).unwrap();
    assert_eq!(g.next_event(), Some(2 * MS + MS / 2));
    g.advance(2 * MS + MS / 2).unwrap();
    assert_eq!(g.pop_finished(), Some((1, 2 * MS + MS / 2)));
    assert_eq!(g.next_event(), Some(11 * MS));
    // part way through the rounds (the chain compares itself with every step in tests)
    g.advance(7 * MS + MS / 4).unwrap();
    assert_eq!(g.resident_blocks(2), 160);
    assert_eq!(g.next_event(), Some(11 * MS));
    assert_eq!(run_out(&mut g)[&2], 11 * MS + MS / 2);
}

/// The two kernels of the tests below: kernel 2 (3,200 blocks of 512 threads, 10 ms
/// alone) at 0, and at 0.5 ms kernel 1 (ahead by priority; 800 blocks of 256 threads
/// and 64 KiB of shared memory, one per SM), `alone` its time alone.
fn interleaving_kernels(alone: Ns) -> ConcurrentGpu {
    let mut g = shared();
    g.start(0, 2, kernel(0, 3_200, 512, 10 * MS, 0)).unwrap();
    g.start(MS / 2, 1, with_shared(kernel(0, 800, 256, alone, 1), 64 * 1024)).unwrap();
    g
}

/// Two kernels' waves interleave: kernel 1 (ahead by priority; 64 KiB of shared memory
/// a block, so one block per SM) and kernel 2 (512-thread blocks, three beside it on
/// each SM). Each of kernel 2's cohorts frees three blocks' threads but no shared
/// memory, so kernel 1 cannot use them and kernel 2 takes them again: the dispatcher's
/// result without its walk of the SMs (`repeat_wave` compares itself with a dispatch
/// in tests). Worked by hand: kernel 2 alone fills the GPU (4 blocks an SM, 1 ms a
/// wave) until 1 ms; then kernel 1 takes one block an SM (2.3 ms each, so that its
/// ends never meet kernel 2's) and kernel 2 three (240 a wave): 2,640 blocks left,
/// eleven more waves at 2, 3, …, 12 ms, the last ending at 13 ms; kernel 1's ten waves
/// end at 24 ms, each after the first its own repeat.
#[test]
fn a_second_kernels_waves_repeat_where_the_first_cannot_fit() {
    let mut g = interleaving_kernels(23 * MS);
    assert_eq!(g.next_event(), Some(MS));
    g.advance(MS).unwrap();
    // from here both kernels' waves are repeats, side by side, until kernel 2's
    // blocks run out: its end at 13 ms is the next change a caller must look at
    assert_eq!(g.next_event(), Some(13 * MS));
    g.advance(7 * MS + MS / 4).unwrap();
    assert_eq!((g.resident_blocks(1), g.resident_blocks(2)), (80, 240));
    assert_eq!(g.next_event(), Some(13 * MS));
    let done = run_out(&mut g);
    assert_eq!(done[&2], 13 * MS);
    assert_eq!(done[&1], 24 * MS);
    // blocks placed by a dispatch at 0 (kernel 2) and 1 ms (both) only; before, also
    // at each of kernel 2's eleven waves after them
    assert_eq!(g.placing_dispatches, 2);
}

/// Two kernels' repeated waves stop where their ends meet: the kernels of the test
/// above, kernel 1's blocks now 2 ms long, so that its waves end at 3, 5, 7, … ms and
/// kernel 2's every millisecond from 2 ms. At 3 ms both end together, which is a
/// change, not a repeat: the next event a caller must look at (issue 55: the chain's
/// search walks all kernels' ends at once, checked against the pairs' solution in
/// tests). Worked by hand: kernel 2's last wave ends at 13 ms, kernel 1's tenth at
/// 21 ms.
#[test]
fn two_kernels_waves_repeat_until_they_end_together() {
    let mut g = interleaving_kernels(20 * MS);
    g.advance(MS).unwrap();
    assert_eq!(g.next_event(), Some(3 * MS));
    g.advance(3 * MS).unwrap();
    assert_eq!(g.next_event(), Some(5 * MS));
    assert_eq!((g.resident_blocks(1), g.resident_blocks(2)), (80, 240));
    let done = run_out(&mut g);
    assert_eq!(done[&2], 13 * MS);
    assert_eq!(done[&1], 21 * MS);
}

/// Two cohorts' ends meet where the Chinese remainder theorem says: checked against a
/// walk of both progressions.
#[test]
fn cohorts_meet_where_a_walk_finds_them() {
    proptest!(|(fa in 0u64..200, da in 1u64..40, fb in 0u64..200, db in 1u64..40)| {
        let below = 2_000;
        let walk = (fa.max(fb)..below)
            .find(|t| (t - fa) % da == 0 && t >= &fb && (t - fb) % db == 0);
        prop_assert_eq!(chain::first_meeting((fa, da), (fb, db), below), walk);
    });
}

/// A kernel waiting behind one that found no room, with blocks costing at least as
/// much of every resource, is passed over without a walk of the SMs (issue 55), and
/// still starts where it would. Worked by hand on a V100 (2,048 threads, 65,536
/// registers and 96 KiB of shared memory an SM; 32 registers a thread). At 0, on the 80
/// SMs: kernel 1 a block of 1,024 threads on each; kernels 2 and 3 a block of 512 on
/// each of SMs 0-39 (full); kernel 4 (64 threads, all of the shared memory) one on each
/// of SMs 40-79. Kernels 5 and 6 (768 threads, 1 and 2 KiB) start at 0.5 ms and fit
/// nowhere. At 1 ms kernel 3 ends: 512 threads free on SMs 0-39, room for neither,
/// though each resource's least use leaves room (SMs 40-79 have the threads, 0-39 the
/// shared memory): kernel 5's walk finds none, and kernel 6, costing more, is not
/// walked for.
/// At 10 ms the others end, and 5 and 6 run one wave each.
#[test]
fn a_kernel_costing_more_than_one_without_room_is_not_walked_for() {
    let launch = |grid: u64, threads: u32, shared: u32, alone_ns: Ns| {
        with_shared(kernel(0, grid, threads, alone_ns, 0), shared)
    };
    let mut g = shared();
    g.start(0, 1, launch(80, 1024, 0, 10 * MS)).unwrap();
    g.start(0, 2, launch(40, 512, 0, 10 * MS)).unwrap();
    g.start(0, 3, launch(40, 512, 0, MS)).unwrap();
    g.start(0, 4, launch(40, 64, 98_304, 10 * MS)).unwrap();
    g.start(MS / 2, 5, launch(80, 768, 1024, MS)).unwrap();
    g.start(MS / 2, 6, launch(80, 768, 2048, 2 * MS)).unwrap();
    assert_eq!(g.next_event(), Some(MS));
    let before = g.placement_walks;
    g.advance(MS).unwrap();
    assert_eq!(g.pop_finished(), Some((3, MS)));
    assert_eq!(g.next_event(), Some(10 * MS));
    // kernel 5's walk of the 40 SMs kernel 3 freed, not kernel 6's
    assert_eq!(g.placement_walks - before, 1);
    assert_eq!((g.resident_blocks(5), g.resident_blocks(6)), (0, 0));
    let done = run_out(&mut g);
    assert_eq!((done[&1], done[&2], done[&4]), (10 * MS, 10 * MS, 10 * MS));
    assert_eq!((done[&5], done[&6]), (11 * MS, 12 * MS));
}

/// Issue 55: in a dispatch that walks only the SMs a cohort freed, a kernel that finds
/// them filled by the kernel ahead of it is passed over without a walk. 1024-thread
/// blocks, two per SM: kernel 1 (120 blocks, 10 ms) fills SMs 0-39 and half of 40-79,
/// kernel 2 (40 blocks, 1 ms) the other half. Kernels 3 and 4 (40 blocks each, 1 ms)
/// start at 0.5 ms and fit nowhere. At 1 ms kernel 2 ends: kernel 3 takes its 40
/// slots, and kernel 4 is not walked for (before: a second walk, placing nothing).
#[test]
fn a_kernel_after_one_that_filled_the_freed_sms_is_not_walked_for() {
    let mut g = shared();
    g.start(0, 1, kernel(0, 120, 1024, 10 * MS, 0)).unwrap();
    g.start(0, 2, kernel(0, 40, 1024, MS, 0)).unwrap();
    g.start(MS / 2, 3, kernel(0, 40, 1024, MS, 0)).unwrap();
    g.start(MS / 2, 4, kernel(0, 40, 1024, MS, 0)).unwrap();
    assert_eq!(g.next_event(), Some(MS));
    let before = g.placement_walks;
    g.advance(MS).unwrap();
    assert_eq!(g.pop_finished(), Some((2, MS)));
    assert_eq!((g.resident_blocks(3), g.resident_blocks(4)), (40, 0));
    assert_eq!(g.placement_walks - before, 1, "kernel 4 walked for");
    let done = run_out(&mut g);
    assert_eq!((done[&1], done[&3], done[&4]), (10 * MS, 2 * MS, 3 * MS));
}
