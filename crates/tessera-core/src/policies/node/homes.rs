//! Homes and memory: where each tenant lives, what each GPU has committed, the moves
//! that make room or even out the weighted shares of contended GPUs.

use super::*;
use crate::model::TenantSpec;

impl NodePolicy {
    pub(super) fn memory_of(&self, tenant: TenantId) -> Bytes {
        self.declared.get(&tenant).copied().unwrap_or(Bytes(0))
    }

    /// Whether `tenant`'s declared memory fits on `gpu` beside the tenants homed there,
    /// those already moving there (counted at both ends until their move is done) and
    /// the user-facing tenants'.
    pub(super) fn fits(&self, tenant: TenantId, gpu: GpuId) -> bool {
        self.fits_beside(tenant, gpu, 0)
    }

    /// [`Self::fits`] with `extra` bytes more promised to `gpu`.
    pub(super) fn fits_beside(&self, tenant: TenantId, gpu: GpuId, extra: u64) -> bool {
        if !self.params.memory_homes {
            return true;
        }
        self.committed(gpu) + extra + self.memory_of(tenant).0 <= self.board.gpu_memory(gpu).0
    }

    /// Whether a batch tenant homed on `gpu` contends, asked of each.
    pub(super) fn contended_now(&self, gpu: GpuId) -> bool {
        self.homed_on[gpu.0 as usize].keys().any(|t| self.contends(*t))
    }

    /// Bring [`NodePolicy::contended`] up to date with the tenants the board logged.
    pub(super) fn refresh_contended(&mut self) {
        // (empty: cleared after each walk below)
        self.board.take_changed(&mut self.changed);
        // (walked by index in place: taken out of the policy and put back, twice per
        // event, the list cost more than the walk, issue 55)
        for i in 0..self.changed.len() {
            let t = self.changed[i];
            // (a moving tenant whose task ended, or was killed, may start its move)
            if !self.moving.is_empty() && self.moving.contains_key(&t) {
                self.moves_may_start = true;
            }
            if let Some(g) = self.homes.get(&t).copied() {
                // Only the logged tenants changed since the flags were last true to the
                // node (a sample sets every GPU's; a home's change, its GPU's): a GPU
                // where the tenant contends is contended, and one that was not and
                // where it does not is still not. Only a GPU that may have lost its
                // last contending tenant is walked (a walk per logged tenant was a
                // twentieth of the node policy's work, issue 55).
                let was = self.contended[g.0 as usize];
                let now = self.contends(t) || (was && self.contended_now(g));
                if std::mem::replace(&mut self.contended[g.0 as usize], now) != now {
                    self.ranks_stale.push(g);
                }
            }
        }
        self.changed.clear();
    }

    /// Whether a batch tenant contends for its GPU now: it has work queued or running,
    /// or used its GPU in the last interval.
    pub(super) fn contends(&self, tenant: TenantId) -> bool {
        self.contends_with(tenant, self.board.has_work(tenant))
    }

    /// [`Self::contends`] for a tenant whose work on the board (`works`) is known.
    fn contends_with(&self, tenant: TenantId, works: bool) -> bool {
        works || self.monitor.demand(tenant).is_some_and(|d| d > 0.0)
    }

    /// Whether a tenant may be moved now: not moving already, not arrived by a move
    /// within `min_stay`, not a Slurm job's (pinned to its job's GPUs).
    pub(super) fn movable(&self, now: Nanos, tenant: TenantId) -> bool {
        self.movable_with(now, tenant, self.board.tenant_spec(tenant))
    }

    /// [`Self::movable`] for a tenant whose registration (`spec`) is at hand.
    fn movable_with(&self, now: Nanos, tenant: TenantId, spec: Option<&TenantSpec>) -> bool {
        !self.moving.contains_key(&tenant)
            && self.arrived.get(&tenant).is_none_or(|at| now >= *at + self.params.min_stay)
            && spec.is_none_or(|s| s.gpus.is_empty())
    }

    /// The share step (not DCUDA's; see [`NodeParams::even_shares`]). Fair queuing
    /// gives each tenant of a GPU its weight's part of that GPU, so a tenant's share is
    /// its weight over the summed weight of the contending tenants homed with it. DCUDA's
    /// step 1 balances *load*: with every tenant backlogged, every GPU is overloaded
    /// and it moves nothing, however unequal those sums are. This step takes the GPU
    /// outside the pool with the largest summed weight and moves the one tenant whose
    /// move lowers the larger of the two GPUs' sums the most, where its memory fits,
    /// while that raises the lowest share per unit of weight by more than
    /// [`SHARES_HYSTERESIS`]; then again, each tenant at most once.
    pub(super) fn even_shares(&mut self, now: Nanos) -> Vec<Move> {
        let mut candidates = std::mem::take(&mut self.candidates_scratch);
        let mut scratch = std::mem::take(&mut self.shares_scratch);
        let moves = self.even_shares_with(now, &mut candidates, &mut scratch);
        candidates.iter_mut().for_each(Vec::clear);
        self.candidates_scratch = candidates;
        self.shares_scratch = scratch;
        moves
    }

    /// [`Self::even_shares`] with the candidates' lists in `candidates` and the lists
    /// per GPU in `scratch` (each refilled, their room kept: lists made per sample,
    /// issue 55).
    fn even_shares_with(
        &self,
        now: Nanos,
        candidates: &mut Loads,
        scratch: &mut SharesScratch,
    ) -> Vec<Move> {
        let n = self.board.gpu_count();
        let outside = &mut scratch.outside;
        outside.clear();
        outside.extend((0..n).map(|g| {
            let gpu = GpuId(g as u32);
            !self.reserved(gpu) && self.board.state(gpu).is_powered()
        }));
        let outside = &*outside;
        // the contending tenants' summed weights ([`Self::summed_weights`]) and the
        // candidates in one walk of the homes, each tenant's weight and contention
        // asked once (two walks with both asked in each were a tenth of the node
        // policy's instructions, issue 55); the same sums to the bit, each GPU's
        // weights added in the same order
        let mut summed = std::mem::take(&mut scratch.summed);
        summed.clear();
        summed.resize(n, 0.0);
        candidates.resize_with(n, Vec::new);
        candidates.iter_mut().for_each(Vec::clear);
        // (the board's entry of each looked up once for its contention, weight and
        // pinning: three look-ups were a sixth of the step, issue 55)
        for (tenant, home) in self.homes.iter() {
            let at = self.moving.get(tenant).map_or(*home, |(to, _)| *to);
            let (spec, works) = self.board.spec_and_work(*tenant).unzip();
            if self.contends_with(*tenant, works.unwrap_or(false)) {
                debug_assert!(self.contends(*tenant));
                let w = weight_in(spec);
                debug_assert_eq!(w.to_bits(), self.weight_of(*tenant).to_bits());
                summed[at.0 as usize] += w;
                let movable = self.movable_with(now, *tenant, spec);
                debug_assert_eq!(movable, self.movable(now, *tenant));
                if movable {
                    candidates[at.0 as usize].push((*tenant, w));
                }
            } else {
                debug_assert!(!self.contends(*tenant));
            }
        }
        debug_assert!(
            summed.iter().zip(self.summed_weights(true)).all(|(a, b)| a.to_bits() == b.to_bits()),
            "the share step's summed weights drifted from summed_weights"
        );
        let mut plan = Planned::with_promised(summed, std::mem::take(&mut scratch.promised));
        let room = |t: TenantId, g: usize, promised: &[u64]| {
            let gpu = GpuId(g as u32);
            self.board.may_run_on(t, gpu) && self.fits_beside(t, gpu, promised[g])
        };
        // a contending tenant homed on a reserved GPU (the pool's or the inference
        // server's) receives nothing there: it moves to the GPU outside with the least
        // summed weight where it fits, loaded or not (DCUDA's step 1 moves it only to
        // an underloaded GPU, and with every tenant backlogged there is none)
        for g in (0..n).filter(|g| !outside[*g] && self.held_from_batch(GpuId(*g as u32), now)) {
            // (drained in place: its room stays for the next sample)
            let held = std::mem::take(&mut candidates[g]);
            for &(tenant, w) in &held {
                let to = (0..n)
                    .filter(|h| outside[*h] && room(tenant, *h, &plan.promised))
                    .min_by(|a, b| plan.summed[*a].total_cmp(&plan.summed[*b]).then(a.cmp(b)));
                let Some(to) = to else { continue };
                let bytes = self.memory_of(tenant).0;
                plan.add(
                    Move {
                        tenant,
                        from: GpuId(g as u32),
                        to: GpuId(to as u32),
                        reason: MoveReason::Shares,
                    },
                    w,
                    bytes,
                );
            }
            let mut held = held;
            held.clear();
            candidates[g] = held;
        }
        while let Some(from) = (0..n)
            .filter(|g| outside[*g])
            .max_by(|a, b| plan.summed[*a].total_cmp(&plan.summed[*b]).then(b.cmp(a)))
        {
            // the least (larger sum, candidate, GPU) of the moves with room: room (a
            // walk of the moves under way, for the memory promised) is asked only of a
            // move that would be the least so far, not of every candidate on every GPU
            // (issue 55: a tenth of the node policy's work at 100x its node)
            let sums = &plan.summed;
            let mut best: Option<(f64, usize, usize, TenantId)> = None;
            // a candidate whose move to the least-summed target would not lower the
            // larger sum below the best's is passed over: every other target's is at
            // least that (sums and weights are positive, and rounding keeps order), and
            // a tie goes to the earlier candidate (a walk of every target for every
            // candidate was most of the step at 100x the node, issue 55)
            let least_target = (0..n)
                .filter(|g| outside[*g] && *g != from)
                .map(|g| sums[g])
                .min_by(f64::total_cmp);
            for (i, (t, w)) in candidates[from].iter().enumerate() {
                if let (Some((l, ..)), Some(least)) = (best, least_target)
                    && (sums[from] - w).max(least + w).total_cmp(&l).is_ge()
                {
                    continue;
                }
                for g in (0..n).filter(|g| outside[*g] && *g != from) {
                    let larger = (sums[from] - w).max(sums[g] + w);
                    let beats = best.is_none_or(|(l, bi, bg, _)| {
                        larger.total_cmp(&l).then(i.cmp(&bi)).then(g.cmp(&bg)).is_lt()
                    });
                    if beats && room(*t, g, &plan.promised) {
                        best = Some((larger, i, g, *t));
                    }
                }
            }
            debug_assert_eq!(
                best.map(|(l, i, g, _)| (l.to_bits(), i, g)),
                candidates[from]
                    .iter()
                    .enumerate()
                    .flat_map(|(i, (_, w))| {
                        (0..n)
                            .filter(|g| outside[*g] && *g != from)
                            .map(move |g| ((sums[from] - w).max(sums[g] + w), i, g))
                    })
                    .filter(|(_, i, g)| room(candidates[from][*i].0, *g, &plan.promised))
                    .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)))
                    .map(|(l, i, g)| (l.to_bits(), i, g)),
                "the share step's move differs from the walk of every pair"
            );
            let Some((larger, i, to, tenant)) = best else { break };
            if larger >= plan.summed[from] * (1.0 - SHARES_HYSTERESIS) {
                break;
            }
            let (_, w) = candidates[from].remove(i);
            let bytes = self.memory_of(tenant).0;
            plan.add(
                Move {
                    tenant,
                    from: GpuId(from as u32),
                    to: GpuId(to as u32),
                    reason: MoveReason::Shares,
                },
                w,
                bytes,
            );
        }
        let Planned { summed, promised, moves } = plan;
        scratch.summed = summed;
        scratch.promised = promised;
        moves
    }

    /// A batch tenant's weight (at least 1).
    pub(super) fn weight_of(&self, tenant: TenantId) -> f64 {
        weight_in(self.board.tenant_spec(tenant))
    }

    /// The summed weight of the batch tenants on each GPU (each at the GPU it is moving
    /// to), of the contending ones only if `contending`.
    pub(super) fn summed_weights(&self, contending: bool) -> Vec<f64> {
        let mut summed = vec![0.0_f64; self.board.gpu_count()];
        for (tenant, home) in self.homes.iter() {
            let at = self.moving.get(tenant).map_or(*home, |(to, _)| *to);
            if !contending || self.contends(*tenant) {
                summed[at.0 as usize] += self.weight_of(*tenant);
            }
        }
        summed
    }

    /// A tenant's demand for the balancer: the monitor's, or a whole GPU for one that
    /// has work and was never measured (held since it arrived).
    pub(super) fn demand(&self, tenant: TenantId) -> f64 {
        self.monitor
            .demand(tenant)
            .unwrap_or_else(|| if self.board.has_queued(tenant) { 1.0 } else { 0.0 })
    }

    /// Batch tenants per GPU with their demand, each at the GPU it is moving to.
    pub(super) fn loads(&self) -> Loads {
        let mut loads = Vec::new();
        self.loads_into(&mut loads);
        loads
    }

    /// [`Self::loads`] into `loads` (its lists emptied first, their room kept).
    pub(super) fn loads_into(&self, loads: &mut Loads) {
        loads.resize_with(self.board.gpu_count(), Vec::new);
        loads.iter_mut().for_each(Vec::clear);
        for (tenant, gpu) in self.homes.iter() {
            let at = self.moving.get(tenant).map_or(*gpu, |(to, _)| *to);
            loads[at.0 as usize].push((*tenant, self.demand(*tenant)));
        }
    }

    /// Of [`Self::loads`], each GPU's utilization ([`dcuda::utilization`] of its
    /// loads) and number of tenants, in one walk of the homes and without a list per
    /// GPU: the placement of a registering tenant asked for the lists and summed each
    /// GPU's twice per comparison (issue 55: a twentieth of the node policy's work at
    /// 100x its node). The same sums to the bit: each GPU's demands added in the same
    /// order from the same start as the sum of its list.
    pub(super) fn load_summary(&self) -> (Vec<f64>, Vec<usize>) {
        let n = self.board.gpu_count();
        let mut utilization = vec![std::iter::empty::<f64>().sum::<f64>(); n];
        let mut homed = vec![0usize; n];
        for (tenant, gpu) in self.homes.iter() {
            let at = self.moving.get(tenant).map_or(*gpu, |(to, _)| *to).0 as usize;
            utilization[at] += self.demand(*tenant);
            homed[at] += 1;
        }
        debug_assert!({
            let loads = self.loads();
            loads
                .iter()
                .zip(&utilization)
                .zip(&homed)
                .all(|((l, u), h)| dcuda::utilization(l).to_bits() == u.to_bits() && l.len() == *h)
        });
        (utilization, homed)
    }

    /// Home `tenant` on the least-loaded GPU outside the pool with room for its memory
    /// (its job's GPUs only, for a Slurm job's); false if there is none.
    pub(super) fn place(&mut self, tenant: TenantId) -> bool {
        let (utilization, homed) = self.load_summary();
        // [`Self::fits`] for every GPU from one walk of the moves under way and one
        // look-up of the tenant's memory, not both per GPU (issue 55)
        let need = self.memory_of(tenant).0;
        let committed = self.params.memory_homes.then(|| self.committed_all());
        let fits = |g: GpuId| {
            let fits = committed
                .as_ref()
                .is_none_or(|c| c[g.0 as usize] + need <= self.board.gpu_memory(g).0);
            debug_assert_eq!(fits, self.fits(tenant, g), "{g}: fits drifted");
            fits
        };
        let allowed: Vec<GpuId> =
            self.board.tenant_spec(tenant).map_or(Vec::new(), |s| s.gpus.clone());
        let pick = self
            .board
            .gpu_ids()
            .filter(|g| allowed.is_empty() || allowed.contains(g))
            .filter(|g| self.board.state(*g).is_powered() && fits(*g))
            // outside the pool if possible; a pinned tenant takes its GPU regardless
            .min_by(|a, b| {
                let (i, j) = (a.0 as usize, b.0 as usize);
                self.reserved(*a)
                    .cmp(&self.reserved(*b))
                    .then(utilization[i].total_cmp(&utilization[j]))
                    .then(homed[i].cmp(&homed[j]))
                    .then(a.cmp(b))
            });
        let Some(gpu) = pick else { return false };
        self.home_on(tenant, gpu);
        true
    }

    pub(super) fn home_on(&mut self, tenant: TenantId, gpu: GpuId) {
        self.batch.set_home(&self.board, tenant, Some(gpu));
        self.homes.insert(tenant, gpu);
        self.homed_memory[gpu.0 as usize].0 += self.memory_of(tenant).0;
        self.homed_on[gpu.0 as usize].insert(tenant, ());
        self.contended[gpu.0 as usize] = self.contended_now(gpu);
        self.ranks_stale.push(gpu);
    }

    pub(super) fn unhome(&mut self, tenant: TenantId) {
        self.batch.set_home(&self.board, tenant, None);
        if let Some(gpu) = self.homes.remove(&tenant) {
            let m = self.memory_of(tenant);
            self.homed_memory[gpu.0 as usize].0 -= m.0.min(self.homed_memory[gpu.0 as usize].0);
            self.homed_on[gpu.0 as usize].remove(&tenant);
            self.contended[gpu.0 as usize] = self.contended_now(gpu);
            self.ranks_stale.push(gpu);
        }
    }

    /// [`Self::committed`] of every GPU, from one walk of the moves under way.
    pub(super) fn committed_all(&self) -> Vec<u64> {
        let services = self.services_memory;
        let mut committed: Vec<u64> = self.homed_memory.iter().map(|m| m.0 + services).collect();
        for (t, (to, _)) in &self.moving {
            if self.homes.get(t) != Some(to) {
                committed[to.0 as usize] += self.memory_of(*t).0;
            }
        }
        committed
    }

    /// Declared memory that `gpu` holds or is promised: the batch tenants homed there,
    /// those moving there (counted at both ends until their move is done), and the
    /// user-facing tenants' (kept free everywhere).
    pub(super) fn committed(&self, gpu: GpuId) -> u64 {
        let services = self.services_memory;
        let incoming: u64 = self
            .moving
            .iter()
            .filter(|(t, (to, _))| *to == gpu && self.homes.get(t) != Some(&gpu))
            .map(|(t, _)| self.memory_of(*t).0)
            .sum();
        self.homed_memory[gpu.0 as usize].0 + incoming + services
    }

    /// Whether `gpu`'s homed batch tenants leave no room for the user-facing tenants'
    /// memory: a service that registered after they were homed would run out of
    /// memory there.
    pub(super) fn overcommitted(&self, gpu: GpuId) -> bool {
        self.params.memory_homes
            && !self.services.is_empty()
            && self.committed(gpu) > self.board.gpu_memory(gpu).0
    }

    /// Free memory (not DCUDA's; see [`NodeParams::make_room`]), for one need at a
    /// time:
    /// - a GPU over-committed since a service registered: its batch tenants move off
    ///   until the services' memory fits there again;
    /// - else the first tenant waiting unplaced: homes admitted one by one, each on the
    ///   least-loaded GPU, spread small tenants over every GPU, so that a large one
    ///   arriving later may fit on none though the node has room for it in all. The GPU
    ///   where that takes the fewest bytes moved is freed for it.
    ///
    /// Nothing when no GPU can be freed.
    pub(super) fn make_room(&self, now: Nanos) -> Vec<Move> {
        for gpu in self.board.gpu_ids() {
            if self.overcommitted(gpu) {
                let deficit = self.committed(gpu) - self.board.gpu_memory(gpu).0;
                if let Some((_, moves)) = self.free_on(now, gpu, deficit) {
                    return moves;
                }
            }
        }
        let Some(&waiting) = self.unplaced.first() else { return Vec::new() };
        let need = self.memory_of(waiting).0;
        let mut best: Option<(u64, Vec<Move>)> = None;
        for gpu in self.board.gpu_ids() {
            if !self.board.may_run_on(waiting, gpu) || !self.board.state(gpu).is_powered() {
                continue;
            }
            let deficit = (self.committed(gpu) + need).saturating_sub(self.board.gpu_memory(gpu).0);
            if deficit == 0 {
                continue; // it fits already: the next placement takes it
            }
            if let Some((freed, moves)) = self.free_on(now, gpu, deficit)
                && best.as_ref().is_none_or(|(b, _)| freed < *b)
            {
                best = Some((freed, moves));
            }
        }
        best.map(|(_, moves)| moves).unwrap_or_default()
    }

    /// Moves that free at least `deficit` bytes of declared memory on `gpu`: its
    /// movable tenants, largest first, each to where it fits (the GPU with the least
    /// summed weight); with the bytes freed, or `None` if they cannot free enough.
    pub(super) fn free_on(&self, now: Nanos, gpu: GpuId, deficit: u64) -> Option<(u64, Vec<Move>)> {
        let n = self.board.gpu_count();
        let mut plan = Planned::new(self.summed_weights(false));
        let mut here: Vec<(u64, TenantId)> = self
            .homes
            .iter()
            .filter(|(t, h)| **h == gpu && self.movable(now, **t))
            .map(|(t, _)| (self.memory_of(*t).0, *t))
            .collect();
        here.sort_by(|a, b| b.cmp(a));
        let mut freed = 0_u64;
        for (bytes, tenant) in here {
            if freed >= deficit {
                break;
            }
            let to = (0..n)
                .filter(|h| *h != gpu.0 as usize)
                .filter(|h| {
                    let target = GpuId(*h as u32);
                    self.board.may_run_on(tenant, target)
                        && !self.overcommitted(target)
                        && self.fits_beside(tenant, target, plan.promised[*h])
                })
                .min_by(|a, b| plan.summed[*a].total_cmp(&plan.summed[*b]).then(a.cmp(b)));
            let Some(to) = to else { continue };
            freed += bytes;
            let m = Move { tenant, from: gpu, to: GpuId(to as u32), reason: MoveReason::Room };
            plan.add(m, self.weight_of(tenant), bytes);
        }
        (freed >= deficit).then_some((freed, plan.moves))
    }
}

/// The share step's lists per GPU, kept between samples (see `shares_scratch`).
#[derive(Debug, Default)]
pub(super) struct SharesScratch {
    outside: Vec<bool>,
    summed: Vec<f64>,
    promised: Vec<u64>,
}

/// Moves a step has decided, with the summed weights and promised memory they leave.
struct Planned {
    /// Summed weight per GPU, the moves applied.
    summed: Vec<f64>,
    /// Declared memory the moves bring to each GPU.
    promised: Vec<u64>,
    moves: Vec<Move>,
}

impl Planned {
    fn new(summed: Vec<f64>) -> Planned {
        let n = summed.len();
        Planned::with_promised(summed, vec![0; n])
    }

    /// [`Planned::new`] with the promised memory's list in `promised` (refilled with
    /// zeros).
    fn with_promised(summed: Vec<f64>, mut promised: Vec<u64>) -> Planned {
        promised.clear();
        promised.resize(summed.len(), 0);
        Planned { summed, promised, moves: Vec::new() }
    }

    /// Decide `m`, of a tenant of `weight` declaring `bytes`.
    fn add(&mut self, m: Move, weight: f64, bytes: u64) {
        self.summed[m.from.0 as usize] -= weight;
        self.summed[m.to.0 as usize] += weight;
        self.promised[m.to.0 as usize] += bytes;
        self.moves.push(m);
    }
}

/// A batch tenant's weight from its registration (at least 1; 1 if unknown).
fn weight_in(spec: Option<&TenantSpec>) -> f64 {
    spec.map_or(1.0, |s| f64::from(s.weight.max(1)))
}
