//! The kernels present and the order of those waiting, kept for the model's hot paths:
//! each kernel in a slot of a dense table that its cohorts and the waiting order name,
//! so that a cohort's end, a dispatch or a chain's search finds its kernel by index
//! (issue 55: lookups in B-trees keyed by kernel id were a tenth of `sim dcuda`).

use super::*;

/// The kernels present, each in a slot (reused once its kernel is gone). Their ids'
/// order is kept too, for what depends on it: the contention's summed demand is added
/// up in that order, as it always was, so that its last bits do not move.
#[derive(Clone, Debug, Default)]
pub(super) struct Kernels {
    slots: Vec<Option<Kernel>>,
    free: Vec<u32>,
    by_id: BTreeMap<PieceId, u32>,
}

impl Kernels {
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// One more than the highest slot (slots index per-kernel scratch).
    pub(super) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The slot of kernel `id`, if present.
    pub(super) fn slot_of(&self, id: PieceId) -> Option<u32> {
        self.by_id.get(&id).copied()
    }

    /// Add kernel `k` (its id not present); its slot.
    pub(super) fn insert(&mut self, k: Kernel) -> u32 {
        let id = k.id;
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(k);
                s
            }
            None => {
                self.slots.push(Some(k));
                (self.slots.len() - 1) as u32
            }
        };
        self.by_id.insert(id, slot);
        slot
    }

    /// Take the kernel of `slot` out.
    pub(super) fn remove(&mut self, slot: u32) -> Option<Kernel> {
        let k = self.slots.get_mut(slot as usize)?.take()?;
        self.by_id.remove(&k.id);
        self.free.push(slot);
        Some(k)
    }

    pub(super) fn get(&self, slot: u32) -> Option<&Kernel> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    pub(super) fn get_mut(&mut self, slot: u32) -> Option<&mut Kernel> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    /// The kernels in the order of their ids.
    pub(super) fn in_id_order(&self) -> impl Iterator<Item = &Kernel> {
        self.by_id.values().filter_map(|s| self.get(*s))
    }
}

/// Where a kernel stands in the dispatch order: greater priority first, then earlier
/// start, then lower id (unique, so the slot never decides).
pub(super) type WaitKey = (Reverse<i32>, Ns, PieceId);

/// The kernels with blocks to place, in dispatch order, each with its slot: a sorted
/// vector, as one or two kernels wait at a time (a B-tree's search and rebalancing
/// were most of a dispatch's book-keeping).
#[derive(Clone, Debug, Default)]
pub(super) struct Waiting {
    order: Vec<(WaitKey, u32)>,
}

impl Waiting {
    pub(super) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Add a kernel (not waiting yet).
    pub(super) fn insert(&mut self, key: WaitKey, slot: u32) {
        let at = self.order.partition_point(|(k, _)| *k < key);
        debug_assert!(self.order.get(at).is_none_or(|(k, _)| *k != key), "waits twice");
        self.order.insert(at, (key, slot));
    }

    /// Take a kernel out, if waiting.
    pub(super) fn remove(&mut self, key: &WaitKey) {
        let at = self.order.partition_point(|(k, _)| k < key);
        if self.order.get(at).is_some_and(|(k, _)| k == key) {
            self.order.remove(at);
        }
    }

    /// The waiting kernels in order: (id, slot).
    pub(super) fn iter(&self) -> impl Iterator<Item = (PieceId, u32)> + '_ {
        self.order.iter().map(|((_, _, id), slot)| (*id, *slot))
    }
}

impl Kernel {
    /// Its place in the dispatch order.
    pub(super) fn wait_key(&self) -> WaitKey {
        (Reverse(self.priority), self.started, self.id)
    }
}
