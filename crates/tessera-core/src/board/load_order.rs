//! The whole GPUs with room for one more task, least loaded first — by (summed
//! demand, tasks running, id) — for least-loaded placement: a binary heap over the
//! GPUs' dense indices that knows where each GPU's entry is, so that a GPU whose load
//! changes is moved in place. Every task's start and end changes its GPU's load; in a
//! B-tree set of the keys each change was a removal and an insertion of hundreds of
//! instructions (issue 55: least-loaded placement cost a third more per task than
//! round robin for it). The least is a read; [`LoadOrder::first_where`] walks the
//! entries in order as far as a pinned tenant needs.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A GPU's place in the order: (summed demand, tasks running, its index).
pub(super) type LoadKey = (u32, u32, u32);

/// A GPU's entry is not in the heap (it has no room).
const NOWHERE: u32 = u32::MAX;

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub(super) struct LoadOrder {
    /// A binary heap of the keys, least first.
    heap: Vec<LoadKey>,
    /// Per GPU index, where its entry lies (`NOWHERE`: no room).
    place: Vec<u32>,
    /// Scratch of [`LoadOrder::first_where`]'s walk: the entries whose parent was
    /// visited, least first, with their places.
    frontier: BinaryHeap<Reverse<(LoadKey, usize)>>,
}

impl LoadOrder {
    /// An order of `gpus` GPUs, none with room yet.
    pub(super) fn new(gpus: usize) -> LoadOrder {
        LoadOrder {
            heap: Vec::with_capacity(gpus),
            place: vec![NOWHERE; gpus],
            frontier: BinaryHeap::new(),
        }
    }

    /// GPU `gpu` has room under (demand, running) from now on, or none (`None`).
    pub(super) fn set(&mut self, gpu: u32, load: Option<(u32, u32)>) {
        let at = self.place[gpu as usize];
        match (load, at) {
            (None, NOWHERE) => {}
            (None, at) => self.remove_at(at as usize),
            (Some((demand, running)), NOWHERE) => {
                self.heap.push((demand, running, gpu));
                self.up(self.heap.len() - 1);
            }
            (Some((demand, running)), at) => {
                let at = at as usize;
                let old = self.heap[at];
                let key = (demand, running, gpu);
                self.heap[at] = key;
                if key < old {
                    self.up(at);
                } else if key > old {
                    self.down(at);
                }
            }
        }
    }

    /// The least loaded GPU with room for which `wanted` holds, by index: the heap's
    /// top when it does (always, for a tenant allowed everywhere), else a walk of the
    /// entries in ascending order, each further one a step of a small heap of the
    /// candidates (an entry is one once its parent was visited).
    pub(super) fn first_where(&mut self, wanted: impl Fn(u32) -> bool) -> Option<u32> {
        let top = *self.heap.first()?;
        if wanted(top.2) {
            return Some(top.2);
        }
        let heap = &self.heap;
        let frontier = &mut self.frontier;
        frontier.clear();
        let mut children = [1, 2];
        loop {
            for child in children {
                if let Some(key) = heap.get(child) {
                    frontier.push(Reverse((*key, child)));
                }
            }
            let Reverse((key, at)) = frontier.pop()?;
            if wanted(key.2) {
                return Some(key.2);
            }
            children = [2 * at + 1, 2 * at + 2];
        }
    }

    /// Every GPU with room, least loaded first (a sort: for checks and the rare
    /// caller that wants them all).
    pub(super) fn sorted(&self) -> Vec<LoadKey> {
        let mut all = self.heap.clone();
        all.sort_unstable();
        all
    }

    fn remove_at(&mut self, at: usize) {
        let gone = self.heap.swap_remove(at);
        self.place[gone.2 as usize] = NOWHERE;
        if at < self.heap.len() {
            // the last entry, moved into the hole, goes where its key says
            let moved = self.heap[at];
            self.place[moved.2 as usize] = at as u32;
            if moved < gone {
                self.up(at);
            } else {
                self.down(at);
            }
        }
    }

    fn up(&mut self, mut at: usize) {
        let key = self.heap[at];
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[parent] <= key {
                break;
            }
            self.put(at, self.heap[parent]);
            at = parent;
        }
        self.put(at, key);
    }

    fn down(&mut self, mut at: usize) {
        let key = self.heap[at];
        let n = self.heap.len();
        loop {
            let left = 2 * at + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.heap[right] < self.heap[left] { right } else { left };
            if key <= self.heap[child] {
                break;
            }
            self.put(at, self.heap[child]);
            at = child;
        }
        self.put(at, key);
    }

    #[inline]
    fn put(&mut self, at: usize, key: LoadKey) {
        self.heap[at] = key;
        self.place[key.2 as usize] = at as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Whatever loads GPUs take, gain and lose, the order holds what a sorted set
        /// of (demand, running, gpu) holds, and the first GPU a filter wants is the
        /// set's first that passes it.
        #[test]
        fn answers_as_a_sorted_set_of_keys(
            gpus in 1u32..40,
            ops in proptest::collection::vec((0u32..40, 0u8..4, 0u32..6, 0u32..3), 0..300),
            wanted_mod in 1u32..5,
        ) {
            let mut order = LoadOrder::new(gpus as usize);
            let mut model: Vec<Option<(u32, u32)>> = vec![None; gpus as usize];
            for (gpu, op, demand, running) in ops {
                let gpu = gpu % gpus;
                let load = (op > 0).then_some((demand, running));
                order.set(gpu, load);
                model[gpu as usize] = load;
                let sorted: BTreeSet<LoadKey> = model
                    .iter()
                    .enumerate()
                    .filter_map(|(g, l)| l.map(|(d, r)| (d, r, g as u32)))
                    .collect();
                prop_assert_eq!(order.sorted(), sorted.iter().copied().collect::<Vec<_>>());
                let want = |g: u32| g.is_multiple_of(wanted_mod);
                prop_assert_eq!(
                    order.first_where(want),
                    sorted.iter().map(|k| k.2).find(|g| want(*g))
                );
                for (at, key) in order.heap.iter().enumerate() {
                    prop_assert_eq!(order.place[key.2 as usize], at as u32);
                }
            }
        }
    }
}
