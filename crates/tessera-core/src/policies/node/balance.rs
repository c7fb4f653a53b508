//! Balancing the node on the monitor's samples: the leads of each GPU ranked, the
//! moves DCUDA's steps decide, and what they published.

use super::*;

impl NodePolicy {
    /// The GPUs with contending batch tenants ranked for the pool: the one whose
    /// tenants are furthest ahead of their fair share (the largest least start tag)
    /// first, so that the tenants that fell behind are not the ones the pool stops
    /// (a GPU's place is its rank; a sample's ranks hold until the next, so the pool
    /// moves at most once per interval for this).
    pub(super) fn rank_leads(&mut self) {
        let n = self.board.gpu_count();
        // (into a list kept between samples: issue 55)
        let mut least = std::mem::take(&mut self.least_scratch);
        least.clear();
        least.extend((0..n).map(|g| {
            let min = self.homed_on[g]
                .keys()
                .filter(|t| self.contends(**t))
                .filter_map(|t| self.batch.tags(*t).map(|x| x.start))
                .min()
                .unwrap_or(u128::MAX);
            (std::cmp::Reverse(min), g)
        }));
        least.sort_unstable();
        for (i, (_, g)) in least.iter().enumerate() {
            self.lead_rank[*g] = i.min(200) as u8;
        }
        // (emptied: scratch, which a later look at the policy would take for state)
        least.clear();
        self.least_scratch = least;
    }

    /// The monitor's sample and DCUDA's steps 1 and 2 over the GPUs outside the pool;
    /// tenants homed inside the pool move out when a GPU has room for them.
    pub(super) fn sample(&mut self, now: Nanos) {
        if self.params.steady_pool && self.params.fair_pool {
            self.rank_leads();
        }
        self.monitor.sample(now);
        // the monitor's demands changed: every GPU's contention again
        for g in 0..self.contended.len() {
            self.contended[g] = self.contended_now(GpuId(g as u32));
        }
        self.ranks_all_stale = true;
        let mut loads = std::mem::take(&mut self.loads_scratch);
        self.loads_into(&mut loads);
        if self.params.migrate {
            self.decide_moves(now, &loads);
        }
        self.publish(&loads);
        loads.iter_mut().for_each(Vec::clear);
        self.loads_scratch = loads;
    }

    /// DCUDA's steps, the share step and the room step: the moves this sample decides.
    pub(super) fn decide_moves(&mut self, now: Nanos, loads: &Loads) {
        let n = loads.len();
        // a tenant that may not move now (moving already, arrived lately, a Slurm job's)
        // is counted above any GPU's room, so that its load keeps its GPU's state and
        // no step picks it; the pool's GPUs likewise hold a stand-in no target can
        // take, so that the balancer moves their tenants out and nothing in
        const POOL: TenantId = TenantId(u64::MAX);
        let unreachable = self.params.thresh_over + 1.0;
        let mut candidates = std::mem::take(&mut self.candidates_scratch);
        let mut outside = std::mem::take(&mut self.outside_scratch);
        let movable = |t: &TenantId| self.movable(now, *t);
        candidates.resize_with(n, Vec::new);
        for (g, (l, apps)) in candidates.iter_mut().zip(loads).enumerate() {
            l.clear();
            l.extend(
                apps.iter().map(|(t, d)| (*t, if movable(t) { *d } else { *d + unreachable })),
            );
            if self.held_from_batch(GpuId(g as u32), now) {
                l.push((POOL, unreachable));
            }
        }
        let mut moves =
            dcuda::balance(&mut candidates, self.params.thresh_over, self.params.thresh_under);
        if !self.params.balance {
            // the ablation keeps the one duty the composition cannot do without: moving
            // tenants off the pool's GPUs (else a tenant homed where the pool stays
            // would wait for ever)
            moves.retain(|m| self.held_from_batch(m.from, now));
        }
        if self.params.balance && self.params.energy {
            // step 2 among the GPUs outside the pool only
            // (into lists kept between samples, each refilled in place: issue 55)
            outside.resize_with(n, Vec::new);
            for (g, o) in outside.iter_mut().enumerate() {
                o.clear();
                if !self.reserved(GpuId(g as u32)) {
                    o.extend_from_slice(&candidates[g]);
                }
            }
            moves.extend(dcuda::compact(&mut outside, self.params.thresh_under));
            outside.iter_mut().for_each(Vec::clear);
        }
        let stays: Vec<bool> =
            moves.iter().map(|m| m.tenant == POOL || !movable(&m.tenant)).collect();
        candidates.iter_mut().for_each(Vec::clear);
        self.candidates_scratch = candidates;
        self.outside_scratch = outside;
        for (m, stays) in moves.into_iter().zip(stays) {
            if !stays {
                self.decide(now, m);
            }
        }
        if self.params.even_shares {
            for m in self.even_shares(now) {
                self.decide(now, m);
            }
        }
        // one tenant's room at a time, and none while earlier room moves are under way
        let making_room = self.moving.values().any(|(_, r)| *r == MoveReason::Room);
        if self.params.make_room && !making_room {
            for m in self.make_room(now) {
                self.decide(now, m);
            }
        }
    }

    /// The report as of this sample, to whoever reads it.
    pub(super) fn publish(&mut self, loads: &Loads) {
        // (in place: lists made per sample, issue 55)
        self.report.load.clear();
        self.report.load.extend(loads.iter().map(|l| dcuda::utilization(l)));
        self.report.homed.clear();
        self.report.homed.extend(loads.iter().map(Vec::len));
        self.report.pool.clear();
        self.report.pool.extend_from_slice(self.pool.gpus());
        self.report.unplaced = self.unplaced.len();
        self.samples += 1;
        if let Some(Ok(mut r)) = self.shared.as_ref().map(|s| s.lock()) {
            r.clone_from(&self.report);
        }
        if let Some(Ok(mut r)) = self.balance_shared.as_ref().map(|s| s.lock()) {
            let (over, under) = (self.params.thresh_over, self.params.thresh_under);
            r.utilization = self.report.load.clone();
            r.states =
                self.report.load.iter().map(|u| Some(dcuda::classify(*u, over, under))).collect();
            r.samples = self.samples;
            r.migrations = self.report.migrations;
            r.recent = self.report.recent.clone();
        }
    }

    /// Record a move if it stands: the target is the tenant's to use and has room for
    /// its memory.
    pub(super) fn decide(&mut self, now: Nanos, m: Move) {
        let Some(home) = self.homes.get(&m.tenant).copied() else { return };
        if home == m.to || !self.board.may_run_on(m.tenant, m.to) || !self.fits(m.tenant, m.to) {
            return;
        }
        self.moving.insert(m.tenant, (m.to, m.reason));
        self.moves_may_start = true;
        self.report.migrations += 1;
        dcuda::record_move(&mut self.report.recent, now, Move { from: home, ..m });
    }
}
