//! Flexy (Flexy §II-C): an elastic pool of GPUs for user-facing tasks, sized by
//! Little's law and recomputed on every arrival and completion (Algorithm 1):
//!
//! ```text
//! Lmax = le * q                 le: mean of the last k user-facing task times
//! U    = ceil(Lmax / SLA)       q: outstanding user-facing tasks
//! U    = clamp(U, K, N)         K: minimum reservation
//! sort GPUs by estimated completion; the first U serve user-facing tasks, the rest batch
//! ```
//!
//! The two pools are disjoint: a user-facing GPU never takes a batch task and vice
//! versa (§II-C1). With reset (§II-C3), when user-facing tasks wait and the pool's
//! GPUs are busy with batch work, Flexy resets pool GPUs running long batch tasks
//! until U of them can serve user-facing work; because Flexy packs user-facing work
//! onto few GPUs (U is usually below the number of waiting tasks), it needs fewer
//! resets than priority, which resets one GPU per waiting user-facing task.
//!
//! Choices the paper leaves open, all documented in the experiment report:
//! - q counts queued and running user-facing tasks ("outstanding");
//! - before any user-facing task has finished, le is taken to be the SLA
//!   (pessimistic: one GPU per outstanding task, up to N);
//! - the pool packs ([`PoolOrder::Packing`], the paper's "Flexy tries to collocate
//!   them on the same GPU as long as their SLA targets are satisfied", Fig. 2): a pool
//!   GPU that is idle or runs only user-facing work stays ahead of every other GPU, so
//!   user-facing work queues for the pool instead of taking whichever batch GPU frees
//!   next. Algorithm 1 as printed (every GPU by estimated completion) is kept as
//!   [`PoolOrder::Completion`];
//! - ties in estimated completion put idle GPUs first, then keep a GPU in the pool it
//!   was in, then go by id, so that the pools do not flap between identical GPUs;
//! - a running task's completion is estimated from its kernel's recent times (else its
//!   class's); a task of which nothing is known yet is taken to end last;
//! - among the tenants of a pool, the oldest head-of-line task goes first.

use super::{resettable_batch_gpus, user_facing_capable};
use crate::action::Action;
use crate::board::{Board, Classes};
use crate::estimate::WindowMean;
use crate::event::Event;
use crate::ids::GpuId;
use crate::model::GpuSpec;
use crate::policy::Policy;
use crate::units::Nanos;

/// Flexy's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlexyParams {
    /// Minimum reservation K.
    pub reserve: usize,
    /// Reset latency, when resets are allowed.
    pub reset: Option<Nanos>,
    /// The common user-facing SLA.
    pub sla: Nanos,
    /// k: how many recent user-facing task times estimate le.
    pub history: usize,
    /// How Algorithm 1's sort orders the GPUs.
    pub order: PoolOrder,
}

/// How Algorithm 1 orders the GPUs before the first U become the user-facing pool.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum PoolOrder {
    /// The paper's packing (Fig. 2, §II-C3): the pool's GPUs that are idle or run only
    /// user-facing work come first (idle ones, then by estimated completion), then
    /// every other GPU by estimated completion.
    #[default]
    Packing,
    /// Algorithm 1's sort as printed: every GPU by estimated completion, so an idle or
    /// soon-free batch GPU displaces a pool GPU still running a user-facing task, and
    /// user-facing work spreads over the node as under priority.
    Completion,
}

impl PoolOrder {
    /// Suffix of the policy's label ("" for the default).
    pub fn suffix(self) -> &'static str {
        match self {
            PoolOrder::Packing => "",
            PoolOrder::Completion => "-completion",
        }
    }
}

/// Algorithm 1, lines 1-8: the size of the user-facing pool.
///
/// `le` is the estimated user-facing task time, `q` the outstanding user-facing tasks.
pub fn user_facing_pool_size(le: Nanos, q: usize, sla: Nanos, k: usize, n: usize) -> usize {
    let lmax = u128::from(le.0) * q as u128;
    let sla = sla.0.max(1);
    // in 64 bits where the product fits them, the same quotient: a 128-bit division is
    // a library call, and the composed node policy sizes the pool on every event
    // (issue 55)
    let u = match u64::try_from(lmax) {
        Ok(l) => u128::from(l.div_ceil(sla)),
        Err(_) => lmax.div_ceil(u128::from(sla)),
    };
    (u.min(n as u128) as usize).max(k).min(n)
}

/// Flexy's elastic user-facing pool as a mechanism over a [`Board`] it does not own:
/// Algorithm 1's size and choice of GPUs, the estimate le, and F-Reset's resets. The
/// [`Flexy`] policy runs it over a board of its own; the composed node policy runs it
/// beside fair queuing on the GPUs left over.
#[derive(Debug)]
pub struct ElasticPool {
    params: FlexyParams,
    le: WindowMean,
    in_user_pool: Vec<bool>,
    pool_size: usize,
    /// The pool's GPUs in ascending order, and scratch for the next one.
    pool: Vec<GpuId>,
    top: Vec<GpuId>,
    /// Scratch: the pool's GPUs running user-facing work, by expected freeing.
    kept: Vec<(Nanos, GpuId)>,
    /// Scratch: each GPU's key in Algorithm 1's order, for the ranked selection (a
    /// vector per event before: issue 55).
    keys: Vec<OrderKey>,
    /// Counts the times the pool's GPUs changed (see [`ElasticPool::generation`]).
    generation: u64,
    /// Whether the pool was installed (and so announced on the board) once.
    installed: bool,
}

impl ElasticPool {
    /// An empty pool for a node of `gpus` GPUs.
    pub fn new(gpus: usize, params: FlexyParams) -> ElasticPool {
        ElasticPool {
            params,
            le: WindowMean::new(params.history),
            in_user_pool: vec![false; gpus],
            pool_size: 0,
            pool: Vec::new(),
            top: Vec::new(),
            kept: Vec::new(),
            keys: Vec::new(),
            generation: 0,
            installed: false,
        }
    }

    /// A number that changes whenever the pool's GPUs do (not its size alone): what
    /// depends only on which GPUs are the pool's need not be looked at again otherwise.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether a repartition now ([`ElasticPool::repartition_ranked`], `skip` passing
    /// over the ranked GPUs; [`ElasticPool::repartition`], none) or at any later time
    /// with nothing else changed could choose other GPUs than the pool's (the node
    /// policy's [`crate::Policy::quiet_until`] asks). Not while the pool has Algorithm
    /// 1's size U and every GPU of it is idle and not passed over: the pool's idle GPUs
    /// come first in either order, so the choice is the pool again, and no GPU's
    /// expected freeing, which is the clock once a task runs past its prediction, is
    /// read. Otherwise it may (a busy pool GPU, under [`PoolOrder::Completion`], gives
    /// way to an idle one; under packing it is kept by when it frees): the answer is
    /// yes, without looking further. O(the pool).
    pub fn may_choose_anew(&self, board: &Board, skip: &dyn Fn(GpuId) -> bool) -> bool {
        !self.stands(board, self.size_for(board), skip)
    }

    /// Whether the pool is Algorithm 1's choice of `u` GPUs as it is, without a look
    /// at the rest of the node: it has `u` GPUs, each idle and not passed over by
    /// `skip` (see [`ElasticPool::may_choose_anew`]), and it was announced once. A
    /// repartition then changes nothing, and returns at once: the minimum reservation
    /// idle beside busy batch GPUs is most events' case (issue 55: the walk of the
    /// node's order was a fifth of Flexy's instructions per task).
    fn stands(&self, board: &Board, u: usize, skip: &dyn Fn(GpuId) -> bool) -> bool {
        self.installed
            && self.pool.len() == u
            && self.pool.iter().all(|g| !skip(*g) && board.state(*g).is_idle())
    }

    /// Algorithm 1's U, the pool's size, for the board as it stands.
    fn size_for(&self, board: &Board) -> usize {
        let q = board.queued(Classes::UserFacing) + board.running(Classes::UserFacing);
        let le = self.le.mean().unwrap_or(self.params.sla);
        user_facing_pool_size(le, q, self.params.sla, self.params.reserve, board.gpu_count())
    }

    /// The parameters.
    pub fn params(&self) -> &FlexyParams {
        &self.params
    }

    /// Change the minimum reservation (the PID variant's actuator).
    pub fn set_reserve(&mut self, k: usize) {
        self.params.reserve = k.min(self.in_user_pool.len());
    }

    /// The current size U of the user-facing pool.
    pub fn pool_size(&self) -> usize {
        self.pool_size
    }

    /// The pool's GPUs, ascending.
    pub fn gpus(&self) -> &[GpuId] {
        &self.pool
    }

    /// Whether `gpu` is in the user-facing pool.
    pub fn contains(&self, gpu: GpuId) -> bool {
        self.in_user_pool.get(gpu.0 as usize).copied().unwrap_or(false)
    }

    /// le: the estimated user-facing task time (the SLA while nothing is known).
    pub fn estimate(&self) -> Nanos {
        self.le.mean().unwrap_or(self.params.sla)
    }

    /// A user-facing task ran for `ran` and completed: le's window takes it.
    pub fn learn(&mut self, ran: Nanos) {
        self.le.push(ran);
    }

    /// Algorithm 1: recompute U and the pools.
    // (on every event's path: inlined, issue 55)
    #[inline]
    pub fn repartition(&mut self, board: &mut Board, now: Nanos, actions: &mut Vec<Action>) {
        let u = self.size_for(board);
        if self.stands_for(board, now, u, &|_| 0) {
            return;
        }
        board.settle_free_order();
        let mut top = std::mem::take(&mut self.top);
        top.clear();
        self.first_in_order(board, now, u, &|_| false, &mut top);
        debug_assert_eq!(
            top,
            self.sorted_order(board, now, u, &|_| 0),
            "the pool differs from a full sort's"
        );
        self.install(board, top, u, actions);
    }

    /// Append to `top` (empty) the first `u` GPUs in Algorithm 1's order, of those
    /// `skip` does not pass over, from the board's indices (not a sort of the node).
    fn first_in_order(
        &mut self,
        board: &Board,
        now: Nanos,
        u: usize,
        skip: &dyn Fn(GpuId) -> bool,
        top: &mut Vec<GpuId>,
    ) {
        // The pool is the first U GPUs by expected completion; at equal times an idle
        // GPU before a busy one (a task past its predicted end is still running), then
        // the GPU's current pool (so identical GPUs do not swap pools), then id. The
        // idle ones come first: the current pool's, then the others, by id; then the
        // busy ones from the board's index — not a sort of the node.
        for g in &self.pool {
            if top.len() == u {
                break;
            }
            if !skip(*g) && board.state(*g).is_idle() {
                top.push(*g);
            }
        }
        // packing: the pool's GPUs running only user-facing work stay, soonest free
        // first (the pool is small: a sort of it, not of the node)
        let mut kept_busy = 0;
        if self.params.order == PoolOrder::Packing && top.len() < u {
            let mut busy = std::mem::take(&mut self.kept);
            busy.clear();
            busy.extend(
                self.pool
                    .iter()
                    .filter(|g| !skip(**g) && runs_only_user_facing(board, **g))
                    .map(|g| (board.expected_free_at(*g, now), *g)),
            );
            busy.sort_unstable();
            for (_, g) in busy.iter().take(u - top.len()) {
                top.push(*g);
                kept_busy += 1;
            }
            // (emptied, as every scratch here: a later look at the pool takes what it
            // holds for state)
            busy.clear();
            self.kept = busy;
        }
        for g in board.idle_ids() {
            if top.len() == u {
                break;
            }
            if !self.in_user_pool[g.0 as usize] && !skip(g) {
                top.push(g);
            }
        }
        if top.len() < u {
            // the busy GPUs by estimated completion, past those already kept
            let before = top.len();
            board.first_busy_to_free(
                now,
                u - before + kept_busy,
                &self.in_user_pool,
                &self.pool,
                skip,
                top,
            );
            // the kept GPUs are busy too, so they come again among the busy ones
            if kept_busy > 0 {
                let mut at = before;
                while at < top.len() {
                    if top[..before].contains(&top[at]) {
                        top.remove(at);
                    } else {
                        at += 1;
                    }
                }
            }
            top.truncate(u);
        }
    }

    /// Algorithm 1 with the GPUs taken by `rank` first (lower first), in Flexy's order
    /// within a rank: the composed node policy ranks GPUs by the batch contexts that
    /// live on them, which Flexy's tasks do not have (a full sort: the node policy runs
    /// on a handful of GPUs).
    pub fn repartition_ranked(
        &mut self,
        board: &mut Board,
        now: Nanos,
        actions: &mut Vec<Action>,
        rank: &dyn Fn(GpuId) -> u8,
    ) {
        let u = self.size_for(board);
        if self.stands_for(board, now, u, rank) {
            return;
        }
        // the GPUs of rank 0 in Flexy's order from the board's indices, passing over
        // the ranked ones (few: a walk of the node on every event was most of the
        // node policy's time at 100x its node, issue 55); then the ranked ones by rank
        // and key, a sort of those alone
        board.settle_free_order();
        let mut top = std::mem::take(&mut self.top);
        top.clear();
        self.first_in_order(board, now, u, &|g| rank(g) > 0, &mut top);
        if top.len() < u {
            let mut ranked = std::mem::take(&mut self.keys);
            ranked.clear();
            ranked.extend(
                board.gpu_ids().filter(|g| rank(*g) > 0).map(|g| self.key(board, now, rank, g)),
            );
            ranked.sort_unstable();
            top.extend(ranked.iter().take(u - top.len()).map(|(_, _, _, _, _, g)| *g));
            ranked.clear();
            self.keys = ranked;
        }
        debug_assert_eq!(
            {
                let mut t = top.clone();
                t.sort_unstable();
                t
            },
            self.sorted_top(board, now, u, rank),
            "the pool differs from a full sort's"
        );
        self.install(board, top, u, actions);
    }

    /// A repartition's early return: whether the pool stands for `u` ([`Self::stands`],
    /// passing over the GPUs `rank` ranks); then U is recorded and nothing else moves.
    fn stands_for(
        &mut self,
        board: &Board,
        now: Nanos,
        u: usize,
        rank: &dyn Fn(GpuId) -> u8,
    ) -> bool {
        if !self.stands(board, u, &|g| rank(g) > 0) {
            return false;
        }
        debug_assert_eq!(
            self.pool,
            self.sorted_top(board, now, u, rank),
            "a standing pool differs from a full sort's"
        );
        self.pool_size = u;
        true
    }

    /// The first `u` GPUs of a full sort ([`Self::sorted_order`]), by id: the debug
    /// checks' pool.
    fn sorted_top(
        &self,
        board: &Board,
        now: Nanos,
        u: usize,
        rank: &dyn Fn(GpuId) -> u8,
    ) -> Vec<GpuId> {
        let mut t = self.sorted_order(board, now, u, rank);
        t.sort_unstable();
        t
    }

    /// Make `top`, the first `u` GPUs, the pool and announce it.
    fn install(
        &mut self,
        board: &mut Board,
        mut top: Vec<GpuId>,
        u: usize,
        actions: &mut Vec<Action>,
    ) {
        for g in &self.pool {
            self.in_user_pool[g.0 as usize] = false;
        }
        for g in &top {
            self.in_user_pool[g.0 as usize] = true;
        }
        self.pool_size = u;
        top.sort_unstable();
        if top != self.pool {
            self.generation += 1;
        }
        board.announce_pools(&top, actions);
        self.installed = true;
        self.top = std::mem::replace(&mut self.pool, top);
        self.top.clear();
    }

    /// The first `u` GPUs by a full sort of the node, as Algorithm 1 is written (the
    /// check of the index in debug builds).
    fn sorted_order(
        &self,
        board: &Board,
        now: Nanos,
        u: usize,
        rank: &dyn Fn(GpuId) -> u8,
    ) -> Vec<GpuId> {
        let mut order = Vec::new();
        self.order_keys(board, now, rank, &mut order);
        order.sort_unstable();
        order.into_iter().take(u).map(|(_, _, _, _, _, g)| g).collect()
    }

    /// Each GPU's key in Algorithm 1's order, within `rank`, into `out` (emptied first).
    fn order_keys(
        &self,
        board: &Board,
        now: Nanos,
        rank: &dyn Fn(GpuId) -> u8,
        out: &mut Vec<OrderKey>,
    ) {
        out.clear();
        out.extend(board.gpu_ids().map(|g| self.key(board, now, rank, g)));
    }

    /// GPU `g`'s key in Algorithm 1's order, within `rank`.
    fn key(&self, board: &Board, now: Nanos, rank: &dyn Fn(GpuId) -> u8, g: GpuId) -> OrderKey {
        let in_pool = self.in_user_pool[g.0 as usize];
        let state = board.state(g);
        let kept = self.params.order == PoolOrder::Packing
            && in_pool
            && (state.is_idle() || runs_only_user_facing(board, g));
        let busy = !state.is_idle();
        (rank(g), !kept, board.expected_free_at(g, now), busy, !in_pool, g)
    }

    /// F-Reset (§II-C3, §IV): when user-facing tasks wait and the user-facing pool's
    /// GPUs are busy with batch work, reset pool GPUs running long batch tasks until U
    /// pool GPUs can serve user-facing work (never more than there are waiting tasks).
    /// Packing keeps U small, which is why Flexy resets less than priority. Nothing
    /// without a reset latency.
    /// Only GPUs `serves` says could then serve user-facing work are reset (the node
    /// policy's pool may hold a GPU whose batch homes leave room for no waiting
    /// service's context: a reset would free it for no request).
    pub fn reset_if_needed(
        &mut self,
        board: &mut Board,
        now: Nanos,
        actions: &mut Vec<Action>,
        serves: &dyn Fn(GpuId) -> bool,
    ) {
        let Some(latency) = self.params.reset else { return };
        let waiting = board.queued(Classes::UserFacing);
        if waiting == 0 || self.pool_size == 0 {
            return;
        }
        let in_pool = &self.in_user_pool;
        let capable = user_facing_capable(board, |g| in_pool[g.0 as usize]);
        let missing = self.pool_size.min(waiting).saturating_sub(capable);
        if missing == 0 {
            return;
        }
        let resettable =
            resettable_batch_gpus(board, now, latency, |g| in_pool[g.0 as usize] && serves(g));
        for gpu in resettable.into_iter().take(missing) {
            board.reset(now, gpu, latency, actions);
        }
    }
}

/// A GPU's key in Algorithm 1's order: its rank, then not kept by packing, its expected
/// freeing, busy, not in the pool, and its id (a total order).
type OrderKey = (u8, bool, Nanos, bool, bool, GpuId);

/// Whether `gpu` runs tasks, all of them user-facing.
fn runs_only_user_facing(board: &Board, gpu: GpuId) -> bool {
    let running = board.state(gpu).running();
    !running.is_empty() && running.iter().all(|r| r.class.is_user_facing())
}

/// The Flexy policy, with minimum reservation and reset variants.
#[derive(Debug)]
pub struct Flexy {
    board: Board,
    pool: ElasticPool,
}

impl Flexy {
    /// Flexy over `gpus`.
    pub fn new(gpus: &[GpuSpec], params: FlexyParams) -> Flexy {
        Flexy {
            board: Board::new(gpus).with_head_index().with_free_order(),
            pool: ElasticPool::new(gpus.len(), params),
        }
    }

    /// Change the minimum reservation (the PID variant's actuator).
    pub fn set_reserve(&mut self, k: usize) {
        self.pool.set_reserve(k);
    }

    /// The current minimum reservation K.
    pub fn reserve(&self) -> usize {
        self.pool.params.reserve
    }

    /// The current size U of the user-facing pool.
    pub fn pool_size(&self) -> usize {
        self.pool.pool_size()
    }

    /// The board, for the PID variant's latency signal.
    pub fn board(&self) -> &Board {
        &self.board
    }

    fn dispatch_idle(&mut self, now: Nanos, actions: &mut Vec<Action>) {
        // a walk of the idle GPUs, not a list of them per event: a dispatch changes
        // only its own GPU, so the walk sees what a list taken first would
        let mut from = 0;
        while self.board.any_queued()
            && let Some(gpu) = self.board.next_idle(from)
        {
            from = gpu.0 + 1;
            let user_facing = self.pool.contains(gpu);
            if let Some(tenant) = self.board.oldest_head(Classes::of(user_facing)) {
                self.board.dispatch(now, gpu, tenant, actions);
            }
        }
    }

    /// React to an event: bookkeeping, then Algorithm 1 on every arrival and
    /// completion, then dispatch and (variant) reset.
    fn step(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        if let Some(done) = self.board.observe(now, event, actions)
            && done.completed
            && done.class.is_user_facing()
        {
            self.pool.learn(done.ran_for);
        }
        self.pool.repartition(&mut self.board, now, actions);
        self.dispatch_idle(now, actions);
        self.pool.reset_if_needed(&mut self.board, now, actions, &|_| true);
    }
}

impl Policy for Flexy {
    fn label(&self) -> String {
        let p = &self.pool.params;
        match p.reset {
            Some(_) => format!("F-Reset{}", p.order.suffix()),
            None => format!("F-MinRes{}{}", p.reserve, p.order.suffix()),
        }
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        self.step(now, event, actions);
    }

    fn min_reservation(&self) -> usize {
        self.pool.params.reserve
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Algorithm 1 lines 1-8 against hand-computed cases.
    #[test]
    fn pool_size_follows_algorithm_1() {
        let ms = Nanos::from_millis;
        // (le, q, SLA, K, N) -> U, each worked by hand.
        let cases = [
            // no outstanding work: U = K
            (ms(100), 0, ms(200), 0, 4, 0),
            (ms(100), 0, ms(200), 1, 4, 1),
            // 100 ms x 1 / 200 ms = 0.5 -> 1
            (ms(100), 1, ms(200), 0, 4, 1),
            // 100 x 2 / 200 = 1.0 -> exactly 1 (ceil of an integer)
            (ms(100), 2, ms(200), 0, 4, 1),
            // 100 x 3 / 200 = 1.5 -> 2
            (ms(100), 3, ms(200), 0, 4, 2),
            // 82 x 7 / 200 = 2.87 -> 3
            (ms(82), 7, ms(200), 0, 4, 3),
            // K dominates a small U
            (ms(14), 5, ms(200), 2, 4, 2),
            // clamped to N
            (ms(178), 16, ms(200), 1, 4, 4),
            // a 1 s SLA packs more: 178 x 16 / 1000 = 2.85 -> 3
            (ms(178), 16, ms(1000), 0, 4, 3),
            // one nanosecond over the boundary rounds up
            (Nanos(200_000_001), 1, ms(200), 0, 4, 2),
            // a product past 64 bits (the 128-bit path): clamped to N
            (Nanos(u64::MAX), 3, ms(200), 0, 4, 4),
            // and one that fits them only just (the 64-bit path)
            (Nanos(u64::MAX / 2), 2, Nanos(u64::MAX / 4), 0, 8, 5),
        ];
        for (le, q, sla, k, n, want) in cases {
            assert_eq!(
                user_facing_pool_size(le, q, sla, k, n),
                want,
                "le={le:?} q={q} sla={sla:?} K={k} N={n}"
            );
        }
    }
}
