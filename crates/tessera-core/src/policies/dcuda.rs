//! DCUDA (Guo, Li, Lui and Xu, "DCUDA: Dynamic GPU Scheduling with Live Migration
//! Support", SoCC '19): applications are placed on a GPU when they arrive, a monitor
//! measures what each one demands of its GPU's cores, and a scheduler migrates running
//! applications between their kernels to balance the GPUs, compact light ones and keep
//! co-runners fair.
//!
//! - Placement baselines (§2.3, §5): round-robin and least-loaded — a new application
//!   goes to the next GPU in turn, or to the GPU whose monitored load is least. With
//!   every step below switched off, [`Dcuda`] is exactly that static scheduling.
//! - The monitor (§3.2, [`Monitor`]): a kernel's demand of GPU cores comes from its
//!   occupancy, evaluated once per distinct kernel configuration (kernel, grid, block)
//!   and cached; an application's demand is its kernels' demand weighted by the time
//!   they ran in the sampling interval (100 ms); a GPU's utilization is the summed
//!   demand of the applications placed on it over its capacity.
//! - Step 1, load balancing with hysteresis (§3.3, [`balance`]): a GPU above
//!   `thresh_over` (100%) is overloaded, below `thresh_under` (90%) underloaded, normal
//!   between. For each overloaded / underloaded pair the heaviest application that does
//!   not make the target overloaded moves, repeatedly, until the source is no longer
//!   overloaded or nothing fits.
//! - Step 2, energy awareness ([`compact`]): the two least-loaded GPUs in use are
//!   merged onto one when one can hold both loads; repeated until no pair can be. The
//!   daemon adds two safeguards of ours (`compact_to` at `thresh_under`, a `min_stay`
//!   of 1 s after a move), because noisy demand measurements made steps 1 and 2 undo
//!   each other under CPU load; the simulator runs the paper's rule.
//! - Step 3, fairness awareness ([`fairness_groups`], [`SliceRotation`]): on a GPU still
//!   overloaded, applications are grouped so that each group's demand is close to the
//!   capacity (it may exceed it slightly), and the groups take 100 ms slices in turn; a
//!   group whose work overshoots its slice (kernels are not preempted) is charged the
//!   overshoot in its next slice. Within a group, the low-demand applications get
//!   higher stream priority (`priority_boost`, [`raised_in_groups`]): every member but
//!   the group's heaviest is raised ([`Action::SetStreamPriority`]), so that its few
//!   blocks are not queued behind the heavy one's when the group exceeds the GPU; an
//!   application leaving every group is restored. A driver that cannot set stream
//!   priorities refuses the action and the policy stops asking.
//! - Migration (§3.4), between two tasks of an application and never inside one: its
//!   waiting tasks stop being dispatched, its running task finishes on the source, then
//!   [`Board::migrate`] moves its memory reservations and the driver moves its context
//!   ([`Action::Migrate`]); on [`Event::MigrationDone`] its waiting tasks resume on the
//!   target in their original order (the board's FIFO queue).

use crate::action::Action;
use crate::board::Board;
use crate::event::Event;
use crate::id_table::IdTable;
use crate::ids::{GpuId, TenantId};
use crate::model::GpuSpec;
use crate::policy::Policy;
use crate::units::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

mod monitor;
mod steps;
pub use monitor::Monitor;
pub use steps::{
    LoadState, Loads, Move, MoveReason, balance, classify, compact, fairness_groups,
    raised_in_groups, utilization,
};

/// How a new application chooses its GPU (the static scheduling of §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitialPlacement {
    /// The next GPU in turn.
    RoundRobin,
    /// The GPU with the least monitored load (ties: fewest applications, lowest id).
    LeastLoaded,
}

/// DCUDA's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DcudaParams {
    /// Where new applications go.
    pub placement: InitialPlacement,
    /// Step 1: migrate from overloaded to underloaded GPUs.
    pub balance: bool,
    /// Step 2: compact the two least-loaded GPUs when one can hold both.
    pub energy: bool,
    /// Step 3: time slices for groups of applications on a GPU still overloaded.
    pub fairness: bool,
    /// Overloaded above this utilization (§4.1: 100%).
    pub thresh_over: f64,
    /// Underloaded below this utilization (§4.1: 90%).
    pub thresh_under: f64,
    /// The monitor's sampling interval and the scheduler's period (§4.1: 100 ms).
    pub interval: Nanos,
    /// A fairness time slice (§3.3: 100 ms).
    pub slice: Nanos,
    /// How far a fairness group's demand may exceed the capacity (the paper groups a
    /// 100% and a 5% application together; "slightly" is not quantified: ours).
    pub group_slack: f64,
    /// Step 2 merges two GPUs only when their summed load is at most this: 1.0 as the
    /// paper says ("can be satisfied by one GPU"); the daemon uses `thresh_under`, which
    /// keeps the merged GPU out of the band where noise in measured demand makes step 1
    /// move an application straight back.
    pub compact_to: f64,
    /// An application that moved stays at least this long (0 in the paper; the daemon
    /// uses 1 s, against flip-flops when measured demands are noisy).
    pub min_stay: Nanos,
    /// Step 3 raises the stream priority of a group's low-demand applications (§3.3's
    /// "priority-based reordering").
    pub priority_boost: bool,
}

impl DcudaParams {
    /// DCUDA as evaluated (§4.1): least-loaded placement, all three steps, 100%/90%
    /// thresholds, 100 ms sampling and slices.
    pub const PAPER: DcudaParams = DcudaParams {
        placement: InitialPlacement::LeastLoaded,
        balance: true,
        energy: true,
        fairness: true,
        thresh_over: 1.0,
        thresh_under: 0.9,
        interval: Nanos(100_000_000),
        slice: Nanos(100_000_000),
        group_slack: 0.1,
        compact_to: 1.0,
        min_stay: Nanos(0),
        priority_boost: true,
    };

    /// What tesserad runs with its `[dcuda]` section's defaults (a test there checks
    /// that they agree): compaction only below the underload threshold, a moved
    /// application stays at least 1 s, no stream priorities (its executors cannot
    /// re-create a client's streams with another priority).
    pub const DAEMON: DcudaParams = DcudaParams {
        compact_to: 0.9,
        min_stay: Nanos(1_000_000_000),
        priority_boost: false,
        ..Self::PAPER
    };

    /// Static scheduling only (the baseline): `placement`, no migration, no slicing.
    pub fn static_placement(placement: InitialPlacement) -> DcudaParams {
        DcudaParams { placement, balance: false, energy: false, fairness: false, ..Self::PAPER }
    }
}

/// Groups taking slices in turn on one GPU, each charged what it overshot.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceRotation {
    groups: Vec<Vec<TenantId>>,
    /// Overshoot owed by each group, charged against its next slice.
    owed: Vec<Nanos>,
    active: usize,
    /// When the active group's slice ends.
    ends: Nanos,
    /// The previous group, until its last running task ends (its overshoot).
    draining: Option<(usize, Nanos)>,
}

impl SliceRotation {
    /// Start with the first group at `now`.
    pub fn new(groups: Vec<Vec<TenantId>>, now: Nanos, slice: Nanos) -> SliceRotation {
        let n = groups.len();
        SliceRotation {
            groups,
            owed: vec![Nanos::ZERO; n],
            active: 0,
            ends: now + slice,
            draining: None,
        }
    }

    /// The groups.
    pub fn groups(&self) -> &[Vec<TenantId>] {
        &self.groups
    }

    /// Whether `tenant` may dispatch now.
    pub fn admits(&self, tenant: TenantId) -> bool {
        self.groups.get(self.active).is_some_and(|g| g.contains(&tenant))
    }

    /// The time left until the active slice ends.
    pub fn slice_ends(&self) -> Nanos {
        self.ends
    }

    /// Move to the next group whose slice, less what it owes, is positive; a group that
    /// owes a whole slice or more pays it off by being skipped.
    pub fn advance(&mut self, now: Nanos, slice: Nanos) {
        self.draining = Some((self.active, now));
        for _ in 0..=self.groups.len() {
            self.active = (self.active + 1) % self.groups.len().max(1);
            let owed = self.owed[self.active];
            if owed < slice {
                self.owed[self.active] = Nanos::ZERO;
                self.ends = now + (slice - owed);
                return;
            }
            self.owed[self.active] = owed - slice;
        }
        self.ends = now + slice;
    }

    /// The previous group's work is all done at `now`: charge its overshoot past the
    /// end of its slice.
    pub fn drained(&mut self, now: Nanos) {
        if let Some((group, slice_end)) = self.draining.take() {
            self.owed[group] += now - slice_end;
        }
    }

    /// The group still draining, if any.
    pub fn draining(&self) -> Option<&[TenantId]> {
        self.draining.map(|(g, _)| self.groups[g].as_slice())
    }

    /// What each group owes.
    pub fn owed(&self) -> &[Nanos] {
        &self.owed
    }
}

/// One migration as the report shows it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigrationRecord {
    /// When it was decided.
    pub at: Nanos,
    /// What moved, from where to where and why.
    pub decided: Move,
}

/// What DCUDA publishes for status displays and experiments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DcudaReport {
    /// Each GPU's utilization at the last sample (summed demand over capacity).
    pub utilization: Vec<f64>,
    /// Each GPU's state at the last sample.
    pub states: Vec<Option<LoadState>>,
    /// Samples taken.
    pub samples: u64,
    /// Samples at which one GPU was overloaded while another was under 50% (§2.3's
    /// load imbalance, with Figure 2's bands).
    pub imbalanced_samples: u64,
    /// Per GPU, samples with its placed applications' summed demand below 50%, 50-100%
    /// and above 100% of its capacity (Figures 2 and 10).
    pub bands: Vec<[u64; 3]>,
    /// Per GPU, the sum over samples of its utilization as §4.3 defines it: its placed
    /// applications' summed demand over its capacity, at most 1 (Figure 11(a)).
    #[serde(default)]
    pub utilization_sum: Vec<f64>,
    /// The sum over samples of the most utilization any placement could give at the
    /// sample: the GPUs' summed demand spread evenly, at most each GPU's capacity
    /// (min(sum, GPUs) / GPUs); an upper bound, since an application is not divisible
    /// (issue 57 item 6: what a balancer can reach at all).
    #[serde(default)]
    pub balanced_utilization_sum: f64,
    /// Migrations decided, in all.
    pub migrations: u64,
    /// The most recent migrations (at most [`DcudaReport::RECENT`]).
    pub recent: Vec<MigrationRecord>,
    /// Kernel configurations evaluated by the monitor.
    pub occupancy_evaluations: u64,
    /// GPUs time-slicing groups now, with their group count.
    pub slicing: Vec<(GpuId, usize)>,
    /// Where the overloaded samples come from (issue 57 item 6), summed over samples
    /// and GPUs.
    #[serde(default)]
    pub overload: OverloadSources,
}

/// Overloaded GPU-samples (a GPU whose placed applications' demand exceeds it at a
/// sample, the count Figures 10 and 11 read), taken apart, summed over samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OverloadSources {
    /// Overloaded GPU-samples.
    pub overloaded: u64,
    /// Of those, the GPU was not overloaded at the sample before: the overload arose
    /// between two samples (an arrival, an application's demand rising).
    pub new: u64,
    /// Of those, the sample's own moves bring the GPU to its capacity or below.
    pub relieved: u64,
    /// Samples (not GPU-samples) at which the applications' summed demand exceeded
    /// the node's GPUs: there no placement leaves every GPU within its capacity, and
    /// one that balances evenly overloads them all.
    pub node_over: u64,
    /// Overloaded GPU-samples at the other samples (the node's demand within its GPUs,
    /// so that a placement without an overloaded GPU may exist).
    pub overloaded_with_room: u64,
}

impl OverloadSources {
    /// Count one sample: each GPU's utilization at the sample before (empty at the
    /// first), at this one, and after this sample's moves.
    pub fn count(&mut self, before: &[f64], now: &[f64], after: &[f64]) {
        let over = |u: f64| u > 1.0 + 1e-9;
        for (g, u) in now.iter().enumerate() {
            if !over(*u) {
                continue;
            }
            self.overloaded += 1;
            if !before.get(g).is_some_and(|b| over(*b)) {
                self.new += 1;
            }
            if after.get(g).is_some_and(|a| !over(*a)) {
                self.relieved += 1;
            }
        }
        if now.iter().sum::<f64>() > now.len() as f64 + 1e-9 {
            self.node_over += 1;
        } else {
            self.overloaded_with_room += now.iter().filter(|u| over(**u)).count() as u64;
        }
    }
}

impl DcudaReport {
    /// How many recent migrations the report keeps.
    pub const RECENT: usize = 16;
}

/// The DCUDA policy: static placement plus, as configured, the monitor-driven steps.
#[derive(Debug)]
pub struct Dcuda {
    board: Board,
    params: DcudaParams,
    monitor: Monitor,
    /// Each application's GPU (by id: looked up for each tenant a pass visits, on
    /// every event; a tree's walk was a hundredth of heavy DCUDA runs, issue 55).
    home: IdTable<GpuId>,
    /// Applications decided to move, waiting for their running task to end.
    moving: BTreeMap<TenantId, (GpuId, MoveReason)>,
    /// Fairness slicing per GPU.
    rotations: BTreeMap<GpuId, SliceRotation>,
    /// When each application last arrived on a GPU by a migration.
    arrived: BTreeMap<TenantId, Nanos>,
    /// Applications whose stream priority step 3 raised.
    raised: BTreeSet<TenantId>,
    /// The driver refused a stream priority: step 3 stops setting them.
    priorities_refused: bool,
    next_rr: u32,
    next_sample: Nanos,
    report: DcudaReport,
    shared: Option<Arc<Mutex<DcudaReport>>>,
    /// Scratch: the applications a scheduling pass looks at.
    visit: Vec<TenantId>,
}

impl Dcuda {
    /// DCUDA over `gpus` with `params`; applications co-run on a GPU without limit.
    pub fn new(gpus: &[GpuSpec], params: DcudaParams) -> Dcuda {
        Dcuda {
            board: Board::with_colocation(gpus, usize::MAX).without_estimates(),
            params,
            monitor: Monitor::default(),
            home: IdTable::default(),
            moving: BTreeMap::new(),
            rotations: BTreeMap::new(),
            arrived: BTreeMap::new(),
            raised: BTreeSet::new(),
            priorities_refused: false,
            next_rr: 0,
            next_sample: params.interval,
            report: DcudaReport {
                utilization: vec![0.0; gpus.len()],
                states: vec![None; gpus.len()],
                ..DcudaReport::default()
            },
            shared: None,
            visit: Vec::new(),
        }
    }

    /// Publish the report to `to` after every sample.
    pub fn with_report(mut self, to: Arc<Mutex<DcudaReport>>) -> Dcuda {
        self.shared = Some(to);
        self
    }

    /// The report as of the last sample.
    pub fn report(&self) -> &DcudaReport {
        &self.report
    }

    /// The board (for status displays and tests).
    pub fn board(&self) -> &Board {
        &self.board
    }

    /// An application's GPU.
    pub fn home(&self, tenant: TenantId) -> Option<GpuId> {
        self.home.get(tenant.0).copied()
    }

    fn gpu_count(&self) -> usize {
        self.board.gpu_count()
    }

    /// Applications per GPU with their monitored demand (unsampled ones count 0), each
    /// at the GPU it is moving to if a move is decided.
    fn loads(&self) -> Loads {
        let mut loads: Loads = vec![Vec::new(); self.gpu_count()];
        for (tenant, gpu) in self.home.iter() {
            let tenant = TenantId(tenant);
            let at = self.moving.get(&tenant).map_or(*gpu, |(to, _)| *to);
            let d = self.monitor.demand(tenant).unwrap_or(0.0);
            if let Some(l) = loads.get_mut(at.0 as usize) {
                l.push((tenant, d));
            }
        }
        loads
    }

    fn place(&mut self, tenant: TenantId) {
        let n = self.gpu_count() as u32;
        let usable = |g: &GpuId| self.board.state(*g).is_powered();
        let gpu = match self.params.placement {
            InitialPlacement::RoundRobin => {
                let g = GpuId(self.next_rr % n);
                self.next_rr = self.next_rr.wrapping_add(1);
                g
            }
            InitialPlacement::LeastLoaded => {
                let loads = self.loads();
                self.board
                    .gpu_ids()
                    .filter(usable)
                    .min_by(|a, b| {
                        let (la, lb) = (&loads[a.0 as usize], &loads[b.0 as usize]);
                        utilization(la)
                            .total_cmp(&utilization(lb))
                            .then(la.len().cmp(&lb.len()))
                            .then(a.cmp(b))
                    })
                    .unwrap_or(GpuId(0))
            }
        };
        self.home.insert(tenant.0, gpu);
    }

    /// The monitor's sample and the scheduler's three steps.
    fn schedule(&mut self, now: Nanos, actions: &mut Vec<Action>) {
        self.monitor.sample(now);
        let (over, under) = (self.params.thresh_over, self.params.thresh_under);
        let mut loads = self.loads();
        let states: Vec<LoadState> =
            loads.iter().map(|l| classify(utilization(l), over, under)).collect();
        self.report.samples += 1;
        let utils: Vec<f64> = loads.iter().map(|l| utilization(l)).collect();
        if states.contains(&LoadState::Overloaded) && utils.iter().any(|u| *u < 0.5) {
            self.report.imbalanced_samples += 1;
        }
        self.report.bands.resize(utils.len(), [0; 3]);
        for (band, u) in self.report.bands.iter_mut().zip(&utils) {
            let i = if *u > 1.0 + 1e-9 {
                2
            } else if *u >= 0.5 {
                1
            } else {
                0
            };
            band[i] += 1;
        }
        self.report.utilization_sum.resize(utils.len(), 0.0);
        for (sum, u) in self.report.utilization_sum.iter_mut().zip(&utils) {
            *sum += u.min(1.0);
        }
        let gpus = utils.len().max(1) as f64;
        self.report.balanced_utilization_sum += utils.iter().sum::<f64>().min(gpus) / gpus;
        let before = std::mem::replace(&mut self.report.utilization, utils.clone());
        self.report.states = states.iter().map(|s| Some(*s)).collect();
        // applications already moving, or not yet measured, are not candidates
        let pinned: std::collections::BTreeSet<TenantId> = self
            .home
            .iter()
            .map(|(t, _)| TenantId(t))
            .filter(|t| {
                self.moving.contains_key(t)
                    || self.monitor.demand(*t).is_none()
                    || self.arrived.get(t).is_some_and(|at| now < *at + self.params.min_stay)
            })
            .collect();
        let mut candidates: Loads = loads
            .iter()
            .map(|l| {
                l.iter().map(|(t, d)| (*t, if pinned.contains(t) { 0.0 } else { *d })).collect()
            })
            .collect();
        let mut moves = Vec::new();
        if self.params.balance {
            moves.extend(balance(&mut candidates, over, under));
        }
        if self.params.energy {
            moves.extend(compact(&mut candidates, self.params.compact_to));
        }
        for m in moves {
            if pinned.contains(&m.tenant) {
                continue; // zero-demand stand-ins for pinned applications never move
            }
            // keep the loads in step for the fairness step, for moves decided
            if !self.decide(now, m) {
                continue;
            }
            if let Some(pos) = loads[m.from.0 as usize].iter().position(|(t, _)| *t == m.tenant) {
                let app = loads[m.from.0 as usize].remove(pos);
                loads[m.to.0 as usize].push(app);
            }
        }
        let after: Vec<f64> = loads.iter().map(|l| utilization(l)).collect();
        self.report.overload.count(&before, &utils, &after);
        if self.params.fairness {
            self.slice(now, &loads);
        }
        self.set_priorities(actions);
        self.report.occupancy_evaluations = self.monitor.evaluations();
        self.report.slicing = self.rotations.iter().map(|(g, r)| (*g, r.groups().len())).collect();
        if let Some(Ok(mut r)) = self.shared.as_ref().map(|s| s.lock()) {
            r.clone_from(&self.report);
        }
    }

    /// Whether the move stands (a tenant pinned elsewhere does not move).
    fn decide(&mut self, now: Nanos, m: Move) -> bool {
        let Some(home) = self.home.get(m.tenant.0).copied() else { return false };
        // a pinned tenant moves only among its GPUs
        if self
            .board
            .tenant_spec(m.tenant)
            .is_some_and(|s| !s.gpus.is_empty() && !s.gpus.contains(&m.to))
        {
            return false;
        }
        if home == m.to {
            self.moving.remove(&m.tenant);
            return true;
        }
        self.moving.insert(m.tenant, (m.to, m.reason));
        self.report.migrations += 1;
        record_move(&mut self.report.recent, now, Move { from: home, ..m });
        true
    }

    /// Step 3: groups and slices on GPUs still overloaded; none elsewhere.
    fn slice(&mut self, now: Nanos, loads: &Loads) {
        let (over, under) = (self.params.thresh_over, self.params.thresh_under);
        for (g, apps) in loads.iter().enumerate() {
            let gpu = GpuId(g as u32);
            if classify(utilization(apps), over, under) != LoadState::Overloaded {
                self.rotations.remove(&gpu);
                continue;
            }
            let groups = fairness_groups(apps, 1.0, self.params.group_slack);
            if groups.len() < 2 {
                self.rotations.remove(&gpu);
                continue;
            }
            let same = self.rotations.get(&gpu).is_some_and(|r| {
                let mut a: Vec<_> = r.groups().iter().flatten().collect();
                let mut b: Vec<_> = groups.iter().flatten().collect();
                a.sort();
                b.sort();
                a == b
            });
            if !same {
                self.rotations.insert(gpu, SliceRotation::new(groups, now, self.params.slice));
            }
        }
    }

    /// Raise the streams of each group's low-demand applications, restore those no
    /// longer in one (no action while nothing changes).
    fn set_priorities(&mut self, actions: &mut Vec<Action>) {
        if !self.params.priority_boost || self.priorities_refused {
            return;
        }
        let monitor = &self.monitor;
        let want = raised_in_groups(self.rotations.values().flat_map(|r| r.groups()), |t| {
            monitor.demand(t).unwrap_or(0.0)
        });
        for tenant in self.raised.difference(&want) {
            actions.push(Action::SetStreamPriority { tenant: *tenant, raised: false });
        }
        for tenant in want.difference(&self.raised) {
            actions.push(Action::SetStreamPriority { tenant: *tenant, raised: true });
        }
        self.raised = want;
    }

    /// Rotate slices that ended, charge drained overshoots, start migrations whose
    /// application is between tasks, and dispatch every application allowed to run.
    fn run(&mut self, now: Nanos, actions: &mut Vec<Action>) {
        let slice = self.params.slice;
        for (gpu, rotation) in self.rotations.iter_mut() {
            if now >= rotation.slice_ends() {
                rotation.advance(now, slice);
            }
            if let Some(previous) = rotation.draining() {
                let busy = self
                    .board
                    .state(*gpu)
                    .running()
                    .iter()
                    .any(|r| previous.contains(&r.spec.tenant))
                    && !rotation.admits_any(previous);
                if !busy {
                    rotation.drained(now);
                }
            }
        }
        let home = &self.home;
        start_moves(&mut self.board, |t| home.get(t.0).copied(), &mut self.moving, actions);
        // Only a tenant with queued tasks or held by the monitor can change below: one
        // with neither would only be released, which holds nothing (issue 55: a walk
        // of every application on every event was most of the policy's time). Merged
        // in id order, the order of the walk of every application it replaces.
        let mut visit = std::mem::take(&mut self.visit);
        visit.clear();
        visit.extend(self.board.backlogged());
        visit.extend(self.monitor.held_tenants());
        visit.sort_unstable();
        visit.dedup();
        #[cfg(debug_assertions)]
        for tenant in self.home.iter().map(|(t, _)| TenantId(t)) {
            if visit.binary_search(&tenant).is_err() {
                debug_assert_eq!(self.board.queue_len(tenant), 0, "{tenant:?} not visited");
                debug_assert!(!self.monitor.is_held(tenant), "{tenant:?} held, not visited");
            }
        }
        for &tenant in &visit {
            let Some(&gpu) = self.home.get(tenant.0) else { continue };
            let (queued, _) = self.board.queue_of(tenant);
            if queued == 0 {
                self.monitor.release(tenant, now);
                continue;
            }
            // an application's tasks are its stream's kernels: one at a time, in order
            if self.board.tenant_runs(tenant) {
                continue;
            }
            let held = self.moving.contains_key(&tenant)
                || self.board.is_migrating(tenant)
                || self.rotations.get(&gpu).is_some_and(|r| !r.admits(tenant));
            if held {
                self.monitor.hold(tenant, now);
                continue;
            }
            self.monitor.release(tenant, now);
            {
                let task = self.board.dispatch(now, gpu, tenant, actions);
                let spec =
                    task.and_then(|t| self.board.running_task(gpu, t)).map(|r| r.spec.clone());
                if let Some(spec) = spec {
                    self.monitor.started(&spec, now);
                }
            }
        }
        self.visit = visit;
    }
}

/// Start the decided moves (`moving`: tenant to target) of tenants now between tasks:
/// a tenant's running task finishes on its `home` first (§3.4). A move the board
/// refuses (no room for its memory, target unavailable) is dropped: the tenant stays.
pub(crate) fn start_moves(
    board: &mut Board,
    home: impl Fn(TenantId) -> Option<GpuId>,
    moving: &mut BTreeMap<TenantId, (GpuId, MoveReason)>,
    actions: &mut Vec<Action>,
) {
    // in tenant order, each decided move kept until it starts or cannot (no list of
    // them made per event: issue 55)
    moving.retain(|&tenant, (to, _)| {
        let Some(from) = home(tenant) else { return false };
        if board.is_migrating(tenant) || board.tenant_runs(tenant) {
            return true;
        }
        board.migrate(tenant, from, *to, actions)
    });
}

/// Keep `decided` among the recent moves, at most [`DcudaReport::RECENT`] of them.
pub(crate) fn record_move(recent: &mut Vec<MigrationRecord>, at: Nanos, decided: Move) {
    recent.push(MigrationRecord { at, decided });
    if recent.len() > DcudaReport::RECENT {
        recent.remove(0);
    }
}

impl SliceRotation {
    /// Whether the active group includes any of `tenants`.
    fn admits_any(&self, tenants: &[TenantId]) -> bool {
        tenants.iter().any(|t| self.admits(*t))
    }
}

impl Policy for Dcuda {
    fn label(&self) -> String {
        let p = &self.params;
        let base = match p.placement {
            InitialPlacement::RoundRobin => "RoundRobin",
            InitialPlacement::LeastLoaded => "LeastLoaded",
        };
        if !(p.balance || p.energy || p.fairness) {
            return base.into();
        }
        let mut steps = Vec::new();
        if p.balance {
            steps.push("balance");
        }
        if p.energy {
            steps.push("energy");
        }
        if p.fairness {
            steps.push("fairness");
        }
        format!("DCUDA({base}; {})", steps.join("+"))
    }

    fn tick_interval(&self) -> Option<Nanos> {
        Some(self.params.interval)
    }

    fn home(&self, tenant: TenantId) -> Option<GpuId> {
        Dcuda::home(self, tenant)
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        // (before, a repeat placed the tenant anew: its home moved without a migration,
        // away from its running work)
        if self.board.is_repeated_registration(event) {
            return;
        }
        match event {
            Event::TenantRegistered(spec) => {
                self.place(spec.id);
                // a tenant pinned to GPUs (a Slurm job's) lives on its first one
                if let Some(g) = spec.gpus.first() {
                    self.home.insert(spec.id.0, *g);
                }
            }
            Event::TenantLeft { tenant, .. } => {
                self.home.remove(tenant.0);
                self.moving.remove(tenant);
                self.arrived.remove(tenant);
                self.raised.remove(tenant);
                self.monitor.forget(*tenant);
            }
            // (the monitor runs only what the board runs: its tenant is the board's, read
            // before the board hears of the end)
            Event::TaskFinished { task, .. } => {
                if let Some((tenant, _)) = self.board.finishing(event) {
                    self.monitor.stopped_of(*task, tenant, now);
                }
            }
            // a tenant that left while its move was under way is gone: no home for it
            Event::MigrationDone { tenant, .. } if self.home.get(tenant.0).is_none() => {
                self.moving.remove(tenant);
            }
            Event::MigrationDone { tenant, to } => {
                self.home.insert(tenant.0, *to);
                self.moving.remove(tenant);
                self.arrived.insert(*tenant, now);
            }
            Event::MigrationFailed { tenant, .. } => {
                self.moving.remove(tenant);
            }
            Event::ActionRefused { action, .. } => {
                match action.as_ref() {
                    Action::Migrate { tenant, .. } => {
                        self.moving.remove(tenant);
                    }
                    Action::SetStreamPriority { .. } => {
                        // the driver says so once, not at every regrouping
                        self.priorities_refused = true;
                        self.raised.clear();
                    }
                    Action::Dispatch { task, .. } => self.monitor.cancelled(*task),
                    Action::DispatchBatch { tasks, .. } => {
                        tasks.iter().for_each(|t| self.monitor.cancelled(*t))
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        self.board.observe(now, event, actions);
        if now >= self.next_sample {
            self.schedule(now, actions);
            while self.next_sample <= now {
                self.next_sample += self.params.interval;
            }
        }
        self.run(now, actions);
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod migration_properties;
