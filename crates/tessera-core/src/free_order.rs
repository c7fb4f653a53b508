//! The busy GPUs of an exclusive board (one task per GPU) in the order of their
//! expected completion, so that Flexy's Algorithm 1 takes the first few without
//! sorting the node on every event. A GPU whose state changes is marked, and the
//! marked ones are set when the order is next read ([`FreeOrder::mark`]).
//!
//! A busy GPU is expected to free at E: its task's start plus the current prediction
//! for the task's kernel and class (never known: `Nanos::MAX`), or the end of its
//! reset, or never while powered down. The order wanted is Flexy's sort key,
//! (max(E, now), !in_pool, id): every GPU already past its E ties at `now`, and ties
//! go to the pool's GPUs first, then by id.
//!
//! A prediction changes with every completion of its kernel, which would move every
//! GPU running that kernel; so GPUs are grouped by (kernel, class) and kept by start
//! time, an order no prediction changes. Per group, a min-tree over GPU ids finds the
//! lowest id already past its E in O(log n); the rest come from merging the groups by
//! E. A query costs O((m + pool) × groups × log n) for m GPUs, not a walk of the node.

use crate::ids::GpuId;
use crate::units::Nanos;
use smallvec::SmallVec;
use std::collections::BTreeMap;

/// One sorted source of busy GPUs by expected freeing: a set ordered by (time, GPU)
/// and what turns its time into the expected freeing (plus a prediction, or never).
struct Stream<'a> {
    range: std::slice::Iter<'a, SortedEntry>,
    /// Added to the set's time; `None`: never expected (nothing known of the kernel).
    plus: Option<Nanos>,
}

impl Stream<'_> {
    fn next(&mut self) -> Option<(Nanos, GpuId)> {
        // (removed pairs are passed over: see `Sorted`)
        let &((t, gpu), _) = self.range.by_ref().find(|(_, live)| *live)?;
        Some((self.plus.map_or(Nanos::MAX, |d| t + d), gpu))
    }
}

/// What a busy GPU's expected freeing depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Busy {
    /// Running a task of `kernel` in class `class` (an index) since `started`.
    Running { kernel: u32, class: usize, started: Nanos },
    /// Free at a fixed time: a reset's end, or never (`Nanos::MAX`).
    Until(Nanos),
}

/// The lowest index at or after a bound whose value is at most a threshold.
#[derive(Clone, Debug)]
struct MinTree {
    size: usize,
    v: Vec<u64>,
}

impl MinTree {
    fn new(n: usize) -> MinTree {
        let size = n.next_power_of_two().max(1);
        MinTree { size, v: vec![u64::MAX; 2 * size] }
    }

    fn set(&mut self, i: usize, value: u64) {
        let mut k = i + self.size;
        self.v[k] = value;
        while k > 1 {
            k /= 2;
            let least = self.v[2 * k].min(self.v[2 * k + 1]);
            if self.v[k] == least {
                // a node unchanged leaves every node above it as it was (issue 55: a
                // start at the present is rarely a group's least, so most sets stop
                // a level or two up instead of walking the tree's nine at 400 GPUs)
                break;
            }
            self.v[k] = least;
        }
    }

    fn leftmost(&self, from: usize, at_most: u64) -> Option<usize> {
        self.descend(1, 0, self.size, from, at_most)
    }

    fn descend(
        &self,
        node: usize,
        lo: usize,
        hi: usize,
        from: usize,
        at_most: u64,
    ) -> Option<usize> {
        if hi <= from || self.v[node] > at_most {
            return None;
        }
        if hi - lo == 1 {
            return Some(lo);
        }
        let mid = (lo + hi) / 2;
        self.descend(2 * node, lo, mid, from, at_most)
            .or_else(|| self.descend(2 * node + 1, mid, hi, from, at_most))
    }
}

/// A (time, GPU) pair and whether it is still in the set.
type SortedEntry = ((Nanos, GpuId), bool);

/// (time, GPU) pairs in order, in a vector: a group's GPUs are added as their tasks
/// start, at the present, so nearly always at the end, where a B-tree set paid an
/// allocation-heavy insertion and removal on every event (issue 55). A pair removed is
/// marked, not taken out, and the marked ones go once they are as many as the rest:
/// a task ends anywhere in its group's start order, and taking each out shifted half
/// the group, 330 instructions of memory moves per task at 400 GPUs (issue 55).
///
/// Where each GPU's pair lies is kept in `at` (indexed by GPU, shared by every set of
/// a [`FreeOrder`]), so that a removal finds its pair without a search: at 100x the
/// bench's node a group holds hundreds of pairs, and the binary search of each removal
/// read a cold line per step and mispredicted its end (issue 55).
#[derive(Clone, Debug, Default)]
struct Sorted {
    v: Vec<SortedEntry>,
    removed: usize,
}

impl Sorted {
    fn insert(&mut self, key: (Nanos, GpuId), at: &mut [u32]) {
        // after every pair (a start at the present, the usual case): no search
        if self.v.last().is_none_or(|(k, _)| *k < key) {
            at[key.1.0 as usize] = self.v.len() as u32;
            self.v.push((key, true));
            return;
        }
        let i = self.v.partition_point(|(k, _)| *k < key);
        match self.v.get_mut(i) {
            Some((k, live)) if *k == key => {
                if !*live {
                    *live = true;
                    self.removed -= 1;
                }
                at[key.1.0 as usize] = i as u32;
            }
            _ => {
                self.v.insert(i, (key, true));
                // the pairs after it moved up one
                self.note_places(i, at);
            }
        }
    }

    fn remove(&mut self, key: (Nanos, GpuId), at: &mut [u32]) {
        let gpu = key.1.0 as usize;
        // where it was put (a pair's place moves only with the pairs around it, and
        // each move is noted); the search only should that ever not hold
        let i = match at.get(gpu).map(|i| *i as usize) {
            Some(i) if self.v.get(i).is_some_and(|(k, _)| *k == key) => Some(i),
            _ => {
                debug_assert!(false, "the place of {key:?} was not kept");
                self.v.binary_search_by(|(k, _)| k.cmp(&key)).ok()
            }
        };
        if let Some(i) = i
            && self.v[i].1
        {
            self.v[i].1 = false;
            self.removed += 1;
            if self.removed * 2 > self.v.len() {
                self.v.retain(|(_, live)| *live);
                self.removed = 0;
                self.note_places(0, at);
            }
        }
    }

    /// Note in `at` where the live pairs from `from` on lie (a removed pair's GPU may
    /// lie in another set now: only the live ones are noted).
    fn note_places(&self, from: usize, at: &mut [u32]) {
        for (j, ((_, gpu), live)) in self.v.iter().enumerate().skip(from) {
            if *live {
                at[gpu.0 as usize] = j as u32;
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.removed == self.v.len()
    }

    /// The entries from the first pair at or after `key`, in order (removed ones
    /// among them, marked).
    fn from(&self, key: (Nanos, GpuId)) -> std::slice::Iter<'_, SortedEntry> {
        self.v[self.v.partition_point(|(k, _)| *k < key)..].iter()
    }

    /// Every entry, in order (removed ones marked).
    fn all(&self) -> std::slice::Iter<'_, SortedEntry> {
        self.v.iter()
    }
}

#[derive(Clone, Debug)]
struct Group {
    by_start: Sorted,
    /// Start time per GPU id (`u64::MAX`: not in the group).
    starts: MinTree,
}

/// See the module docs.
#[derive(Clone, Debug)]
pub(crate) struct FreeOrder {
    entries: Vec<Option<Busy>>,
    /// Per GPU, where its pair lies in the set that holds it ([`Sorted`]).
    at: Vec<u32>,
    groups: BTreeMap<(u32, usize), Group>,
    fixed: Sorted,
    fixed_until: MinTree,
    /// GPUs whose state changed since the order was last brought up to date (each
    /// once, `marked` says which): the board marks them on every change and sets them
    /// only before the order is read, which most events never do (issue 55: kept up to
    /// date on every change, the order was a fifth of Flexy's instructions per task at
    /// 400 GPUs; a GPU taken and freed between two reads now costs nothing).
    pending: Vec<u32>,
    marked: Vec<bool>,
}

impl FreeOrder {
    pub(crate) fn new(gpus: usize) -> FreeOrder {
        FreeOrder {
            entries: vec![None; gpus],
            at: vec![0; gpus],
            groups: BTreeMap::new(),
            fixed: Sorted::default(),
            fixed_until: MinTree::new(gpus),
            pending: Vec::new(),
            marked: vec![false; gpus],
        }
    }

    /// GPU `i`'s state changed: set it again before the next read.
    pub(crate) fn mark(&mut self, i: usize) {
        if let Some(m) = self.marked.get_mut(i)
            && !*m
        {
            *m = true;
            self.pending.push(i as u32);
        }
    }

    /// A GPU marked since the last read, to be set from its state now (none left:
    /// the order is up to date).
    pub(crate) fn pop_pending(&mut self) -> Option<usize> {
        let i = self.pending.pop()? as usize;
        self.marked[i] = false;
        Some(i)
    }

    /// Whether every change was set.
    pub(crate) fn is_settled(&self) -> bool {
        self.pending.is_empty()
    }

    /// GPU `gpu` is now `busy` (`None`: idle).
    pub(crate) fn set(&mut self, gpu: GpuId, busy: Option<Busy>) {
        let i = gpu.0 as usize;
        if self.entries.get(i).copied().flatten() == busy {
            return;
        }
        match self.entries[i].take() {
            Some(Busy::Running { kernel, class, started }) => {
                // an emptied group stays (the kernels of a run are few): dropping it
                // and making it again cost an allocation on nearly every event
                if let Some(g) = self.groups.get_mut(&(kernel, class)) {
                    g.by_start.remove((started, gpu), &mut self.at);
                    g.starts.set(i, u64::MAX);
                }
            }
            Some(Busy::Until(until)) => {
                self.fixed.remove((until, gpu), &mut self.at);
                self.fixed_until.set(i, u64::MAX);
            }
            None => {}
        }
        match busy {
            Some(Busy::Running { kernel, class, started }) => {
                let n = self.entries.len();
                let g = self.groups.entry((kernel, class)).or_insert_with(|| Group {
                    by_start: Sorted::default(),
                    starts: MinTree::new(n),
                });
                g.by_start.insert((started, gpu), &mut self.at);
                g.starts.set(i, started.0);
            }
            Some(Busy::Until(until)) => {
                self.fixed.insert((until, gpu), &mut self.at);
                // a reset ending later than ever is never past
                self.fixed_until.set(i, until.0);
            }
            None => {}
        }
        self.entries[i] = busy;
    }

    /// When GPU `i` is expected to free, with `predict` the current prediction for a
    /// (kernel, class) (zero: none).
    fn end_of(&self, i: usize, predict: &impl Fn(u32, usize) -> Nanos) -> Option<Nanos> {
        match self.entries.get(i).copied().flatten()? {
            Busy::Running { kernel, class, started } => {
                let d = predict(kernel, class);
                Some(if d > Nanos::ZERO { started + d } else { Nanos::MAX })
            }
            Busy::Until(until) => Some(until),
        }
    }

    /// Append to `out` the first `m` busy GPUs in the order (max(E, now), !pool, id)
    /// (see the module docs), passing over those `skip` says; `in_pool` says which GPUs
    /// are in the pool, `pool` lists them in ascending order.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn first(
        &self,
        now: Nanos,
        m: usize,
        predict: impl Fn(u32, usize) -> Nanos,
        in_pool: &[bool],
        pool: &[GpuId],
        skip: &dyn Fn(GpuId) -> bool,
        out: &mut Vec<GpuId>,
    ) {
        let want = out.len() + m;
        // past their time (E <= now): tied at now, the pool's first, then by id
        for g in pool {
            if out.len() == want {
                return;
            }
            if !skip(*g) && self.end_of(g.0 as usize, &predict).is_some_and(|e| e <= now) {
                out.push(*g);
            }
        }
        let mut from = 0usize;
        while out.len() < want {
            let mut next: Option<usize> = self.fixed_until.leftmost(from, now.0);
            for (&(kernel, class), g) in &self.groups {
                if g.by_start.is_empty() {
                    continue;
                }
                let d = predict(kernel, class);
                if d == Nanos::ZERO || d > now {
                    continue;
                }
                if let Some(i) = g.starts.leftmost(from, (now - d).0) {
                    next = Some(next.map_or(i, |n| n.min(i)));
                }
            }
            let Some(i) = next else { break };
            from = i + 1;
            if !in_pool.get(i).copied().unwrap_or(false) && !skip(GpuId(i as u32)) {
                out.push(GpuId(i as u32));
            }
        }
        if out.len() == want {
            return;
        }
        // the rest by E, ties by (!pool, id): merge the groups and the fixed ones (on
        // the stack: this runs on nearly every event)
        let mut streams: SmallVec<[Stream<'_>; 8]> = SmallVec::new();
        streams.push(Stream {
            range: self.fixed.from((Nanos(now.0.saturating_add(1)), GpuId(0))),
            plus: Some(Nanos::ZERO),
        });
        for (&(kernel, class), g) in &self.groups {
            if g.by_start.is_empty() {
                continue;
            }
            let d = predict(kernel, class);
            if d == Nanos::ZERO {
                streams.push(Stream { range: g.by_start.all(), plus: None });
            } else {
                // started + d > now
                let after = Nanos(now.0.saturating_sub(d.0).saturating_add(1));
                let lower = if d > now { Nanos::ZERO } else { after };
                streams.push(Stream { range: g.by_start.from((lower, GpuId(0))), plus: Some(d) });
            }
        }
        let mut heads: SmallVec<[Option<(Nanos, GpuId)>; 8]> =
            streams.iter_mut().map(Stream::next).collect();
        let mut tie: SmallVec<[(bool, GpuId); 8]> = SmallVec::new();
        while out.len() < want {
            let Some(e) = heads.iter().flatten().map(|(e, _)| *e).min() else { break };
            tie.clear();
            for (head, stream) in heads.iter_mut().zip(streams.iter_mut()) {
                while let Some((he, g)) = *head {
                    if he != e {
                        break;
                    }
                    if !skip(g) {
                        tie.push((!in_pool.get(g.0 as usize).copied().unwrap_or(false), g));
                    }
                    *head = Stream::next(stream);
                }
            }
            tie.sort_unstable();
            for (_, g) in &tie {
                if out.len() == want {
                    break;
                }
                out.push(*g);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The order by a full sort, as Flexy computed it before.
    fn sorted(
        f: &FreeOrder,
        now: Nanos,
        predict: &impl Fn(u32, usize) -> Nanos,
        in_pool: &[bool],
    ) -> Vec<GpuId> {
        let mut keys: Vec<(Nanos, bool, GpuId)> = (0..f.entries.len())
            .filter_map(|i| {
                let e = f.end_of(i, predict)?;
                Some((e.max(now), !in_pool[i], GpuId(i as u32)))
            })
            .collect();
        keys.sort_unstable();
        keys.into_iter().map(|(_, _, g)| g).collect()
    }

    fn arb_busy() -> impl Strategy<Value = Option<Busy>> {
        prop_oneof![
            Just(None),
            (0u32..3, 0usize..2, 0u64..50).prop_map(|(kernel, class, s)| Some(Busy::Running {
                kernel,
                class,
                started: Nanos(s * 10)
            })),
            (0u64..60).prop_map(|u| Some(Busy::Until(Nanos(u * 10)))),
            Just(Some(Busy::Until(Nanos::MAX))),
        ]
    }

    proptest! {
        /// The min-tree, its sets stopping where a node is unchanged, finds what a scan
        /// of the values finds, after any sequence of sets.
        #[test]
        fn the_min_tree_finds_what_a_scan_finds(
            sets in prop::collection::vec((0usize..37, prop::option::of(0u64..20)), 0..120),
            from in 0usize..40,
            at_most in 0u64..20,
        ) {
            let mut tree = MinTree::new(37);
            let mut values = vec![u64::MAX; 37];
            for (i, v) in &sets {
                let v = v.unwrap_or(u64::MAX);
                tree.set(*i, v);
                values[*i] = v;
            }
            let want = (from..37).find(|&i| values[i] <= at_most);
            prop_assert_eq!(tree.leftmost(from, at_most), want);
        }

        /// After any sequence of changes, the first m are the full sort's first m, for
        /// any predictions (known or not), pool and time, and with any GPUs passed over
        /// (the node policy's ranked ones) those of the sort without them.
        #[test]
        fn the_first_m_are_those_of_a_full_sort(
            changes in prop::collection::vec((0usize..12, arb_busy()), 0..60),
            predictions in prop::collection::vec(prop::option::of(1u64..40), 6),
            pool_bits in prop::collection::vec(any::<bool>(), 12),
            skipped in prop::collection::vec(prop::bool::weighted(0.2), 12),
            now in 0u64..700,
            m in 1usize..12,
        ) {
            let mut f = FreeOrder::new(12);
            for (g, b) in &changes {
                f.set(GpuId(*g as u32), *b);
            }
            let predict = |k: u32, c: usize| Nanos(predictions[(k as usize) * 2 + c].map_or(0, |d| d * 10));
            let pool: Vec<GpuId> =
                (0..12).filter(|i| pool_bits[*i]).map(|i| GpuId(i as u32)).collect();
            let mut got = Vec::new();
            f.first(Nanos(now), m, predict, &pool_bits, &pool, &|_| false, &mut got);
            let mut want = sorted(&f, Nanos(now), &predict, &pool_bits);
            want.truncate(m);
            prop_assert_eq!(got, want);
            let skip = |g: GpuId| skipped[g.0 as usize];
            let mut got = Vec::new();
            f.first(Nanos(now), m, predict, &pool_bits, &pool, &skip, &mut got);
            let mut want = sorted(&f, Nanos(now), &predict, &pool_bits);
            want.retain(|g| !skip(*g));
            want.truncate(m);
            prop_assert_eq!(got, want);
        }
    }
}
