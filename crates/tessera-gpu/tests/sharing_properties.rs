//! Properties of the shared-GPU model (issue 10's list), over random workloads.

use proptest::prelude::*;
use tessera_gpu::sharing::{SharedGpu, Sharing};

fn piece() -> impl Strategy<Value = (u64, u64, f64)> {
    // (start offset ns, work ns, demand)
    (0u64..5_000, 1u64..20_000, 0.05f64..=1.0)
}

proptest! {
    /// Times never go backwards and every piece finishes exactly once.
    #[test]
    fn every_piece_finishes_once_and_times_move_forward(pieces in prop::collection::vec(piece(), 1..30)) {
        let mut g = SharedGpu::new(Sharing::Processor);
        let mut starts: Vec<(u64, u64, u64, f64)> = pieces.iter().enumerate()
            .map(|(i, &(t, w, d))| (t, i as u64, w, d)).collect();
        starts.sort_by_key(|s| (s.0, s.1));
        let mut finished = Vec::new();
        let mut last = 0u64;
        for (t, id, w, d) in starts {
            // finish what ends before this start
            while let Some((f, _)) = g.next_finish() {
                if f > t { break; }
                prop_assert!(f >= last);
                last = f;
                finished.extend(g.take_finished(f).unwrap());
            }
            g.start(t, id, w, d).unwrap();
            last = last.max(t);
        }
        for (id, f) in g.drain(u64::MAX).unwrap() {
            prop_assert!(f >= last);
            last = f;
            finished.push(id);
        }
        finished.sort_unstable();
        let want: Vec<u64> = (0..pieces.len() as u64).collect();
        prop_assert_eq!(finished, want);
    }

    /// While over-subscribed, demand-weighted work done equals capacity x time.
    #[test]
    fn work_is_conserved_when_oversubscribed(demands in prop::collection::vec(0.3f64..=1.0, 4..10)) {
        let mut g = SharedGpu::new(Sharing::Processor);
        let total: f64 = demands.iter().sum();
        prop_assume!(total > 1.0);
        for (i, d) in demands.iter().enumerate() {
            g.start(0, i as u64, 1_000_000, *d).unwrap();
        }
        let t = 100_000; // before anyone can finish (rate >= 1/10, work 1e6)
        g.advance(t).unwrap();
        let weighted: f64 = demands.iter().enumerate().map(|(i, d)| d * g.done(i as u64).unwrap()).sum();
        prop_assert!((weighted - t as f64).abs() < 1e-6 * t as f64, "{} vs {}", weighted, t);
        prop_assert!((g.usage().sm_busy_ns - t as f64).abs() < 1e-6 * t as f64);
    }

    /// n identical pieces with n*d > 1 started together all finish together at n*d*w.
    #[test]
    fn identical_pieces_finish_together(n in 2usize..16, d in 0.2f64..=1.0, w in 1_000u64..100_000) {
        prop_assume!(n as f64 * d > 1.0);
        let mut g = SharedGpu::new(Sharing::Processor);
        for i in 0..n {
            g.start(0, i as u64, w, d).unwrap();
        }
        let done = g.drain(u64::MAX).unwrap();
        let expect = (n as f64 * d * w as f64).ceil() as u64;
        prop_assert!(done.iter().all(|&(_, t)| t == done[0].1), "{:?}", done);
        prop_assert!(done[0].1.abs_diff(expect) <= 1, "{} vs {}", done[0].1, expect);
    }

    /// The order of events at one instant does not change when anything finishes.
    #[test]
    fn finish_times_do_not_depend_on_event_order(pieces in prop::collection::vec((1u64..50_000, 0.1f64..=1.0), 2..12)) {
        let run = |order: &[usize]| {
            let mut g = SharedGpu::new(Sharing::Processor);
            for &i in order {
                g.start(0, i as u64, pieces[i].0, pieces[i].1).unwrap();
            }
            let mut done = g.drain(u64::MAX).unwrap();
            done.sort_unstable();
            done
        };
        let forward: Vec<usize> = (0..pieces.len()).collect();
        let backward: Vec<usize> = forward.iter().rev().copied().collect();
        prop_assert_eq!(run(&forward), run(&backward));
    }

    /// A piece alone finishes in its work time, in every sharing mode.
    #[test]
    fn a_piece_alone_takes_its_work(start in 0u64..1_000_000, w in 1u64..10_000_000, d in 0.01f64..=1.0) {
        for mode in [Sharing::Exclusive, Sharing::Processor, Sharing::TimeSliced { slice: 2_000_000, switch: 25_000 }] {
            let mut g = SharedGpu::new(mode);
            g.start(start, 7, w, d).unwrap();
            prop_assert_eq!(g.drain(u64::MAX).unwrap(), vec![(7, start + w)]);
        }
    }

    /// A piece moved to another GPU mid-way neither loses nor repeats work.
    #[test]
    fn a_migrated_piece_keeps_its_work(w in 10_000u64..1_000_000, at in 1u64..9_999, pause in 0u64..1_000_000) {
        let mut a = SharedGpu::new(Sharing::Processor);
        a.start(0, 1, w, 0.5).unwrap();
        let left = a.remove(at, 1).unwrap();
        prop_assert_eq!(left, w - at);
        let mut b = SharedGpu::new(Sharing::Processor);
        b.start(at + pause, 1, left, 0.5).unwrap();
        prop_assert_eq!(b.drain(u64::MAX).unwrap(), vec![(1, w + pause)]);
    }
}
