//! Serving a schedule: its gpu-lets as partitions, each model's requests batched on
//! its duty cycle ([`GpuletServing`]), rescheduled as rates change
//! ([`AdaptiveGpulets`], [`RateTracker`], [`needs_reschedule`]).

use super::batch::*;
use super::schedule::*;
use crate::action::Action;
use crate::board::Board;
use crate::event::Event;
use crate::ids::{GpuId, PartitionId, TenantId};
use crate::model::{GpuSpec, Placement};
use crate::units::{Nanos, PerMille};

/// One gpu-let being served.
#[derive(Clone, Debug)]
struct ServingLet {
    placement: Placement,
    /// The models it serves, taking turns.
    models: Vec<ServedModel>,
    next: usize,
}

/// A model served in a gpu-let: its batch and how long its requests may wait.
#[derive(Clone, Copy, Debug)]
struct ServedModel {
    tenant: TenantId,
    batch: u32,
    /// The longest a request may wait for its batch to fill and still meet its SLO
    /// after the batch runs: the batch then goes with what has arrived.
    max_wait: Nanos,
    /// The longest a request may wait and still meet its SLO in a batch of one: past
    /// it the request can no longer meet its SLO and is dropped (gpu-lets' frontend
    /// drops such requests; a drop counts as a violation).
    drop_after: Nanos,
}

/// What serving a schedule means on each GPU: its partition layout (`None`: whole,
/// unpartitioned) and the gpu-lets to serve on it, with each model's batch and longest
/// wait. Built from a schedule by [`ServingPlan::new`].
#[derive(Clone, Debug, Default)]
pub struct ServingPlan {
    gpus: Vec<GpuPlan>,
    /// How often the server looks at its queues: a fiftieth of the tightest SLO, at
    /// most 1 ms (lenet's 5 ms SLO: every 100 µs).
    tick: Option<Nanos>,
}

/// One GPU's part of a plan: its layout (`None`: whole) and its gpu-lets.
type GpuPlan = (Option<Vec<PerMille>>, Vec<ServingLet>);

/// A GPU's part of a plan waiting for its repartition, and whether it was asked for.
type Waiting = (Option<Vec<PerMille>>, Vec<ServingLet>, bool);

impl ServingPlan {
    /// The plan for `schedule` of `models` on `gpus` GPUs; model `i` is `tenants[i]`.
    /// Each batch is sent once full, or once its oldest request has waited as long as it
    /// can and still meet its SLO — reckoned, as the scheduler reckoned the schedule, with
    /// the scheduled latency (profiled, times `opts`' margin and the `interference` of the
    /// gpu-lets beside it) and, in a gpu-let shared in time, the longest batch of the
    /// models beside it, which may have just started when this one falls due.
    pub fn new(
        gpus: usize,
        schedule: &[Gpulet],
        models: &[Model<'_>],
        tenants: &[TenantId],
        opts: &Options,
        interference: &dyn InterferenceModel,
    ) -> ServingPlan {
        let ms = |x: f64| Nanos((x.max(0.0) * 1e6).round() as u64);
        let mut out = Vec::new();
        for g in 0..gpus {
            let mut here: Vec<&Gpulet> = schedule.iter().filter(|x| x.gpu == g).collect();
            here.sort_by_key(|x| std::cmp::Reverse(x.size));
            let whole = here.is_empty() || matches!(here.as_slice(), [one] if one.size == 100);
            let layout = (!whole)
                .then(|| here.iter().map(|x| PerMille((x.size * 10) as u16)).collect::<Vec<_>>());
            let mut lets = Vec::new();
            for (i, x) in here.iter().enumerate() {
                let placement = if whole {
                    Placement::whole(GpuId(g as u32))
                } else {
                    Placement { gpu: GpuId(g as u32), partition: Some(PartitionId(i as u32)) }
                };
                let beside: Vec<&Gpulet> =
                    here.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, y)| *y).collect();
                // each model's (run, run of a batch of one) as scheduled here
                let runs: Vec<Option<(f64, f64)>> = x
                    .served
                    .iter()
                    .map(|s| {
                        let m = models.get(s.model)?;
                        let f = |b| factor_beside(interference, (s.model, b, x.size), &beside);
                        let run = scheduled_ms(m.profile, opts, s.batch, x.size, &f)?;
                        let one = scheduled_ms(m.profile, opts, 1, x.size, &f).unwrap_or(run);
                        Some((run, one))
                    })
                    .collect();
                let served = x
                    .served
                    .iter()
                    .enumerate()
                    .filter_map(|(k, s)| {
                        let m = models.get(s.model)?;
                        let (run, one) = runs[k]?;
                        let neighbour = runs
                            .iter()
                            .enumerate()
                            .filter(|(j, _)| *j != k)
                            .filter_map(|(_, r)| r.map(|r| r.0))
                            .fold(0.0, f64::max);
                        Some(ServedModel {
                            tenant: *tenants.get(s.model)?,
                            batch: s.batch,
                            max_wait: ms(m.slo_ms - run - neighbour),
                            drop_after: ms(m.slo_ms - one / opts.latency_margin),
                        })
                    })
                    .collect();
                lets.push(ServingLet { placement, models: served, next: 0 });
            }
            out.push((layout, lets));
        }
        let tightest = models.iter().map(|m| m.slo_ms).fold(f64::INFINITY, f64::min);
        let tick = tightest.is_finite().then(|| ms((tightest / 50.0).min(1.0)).max(Nanos(1_000)));
        ServingPlan { gpus: out, tick }
    }

    /// The same plan with every batch sent `guard` before its oldest request's last
    /// moment: the slack a real-time executor needs (ticks, thread wake-ups), so that a
    /// batch dispatched on time is not late by the time it runs. The simulator needs none.
    pub fn with_guard(mut self, guard: Nanos) -> ServingPlan {
        for (_, lets) in &mut self.gpus {
            for l in lets {
                for m in &mut l.models {
                    m.max_wait = m.max_wait.saturating_sub(guard);
                }
            }
        }
        self
    }
}

/// Serves a gpu-lets schedule: partitions each GPU as the schedule lays it out (a GPU
/// with one whole gpu-let stays unpartitioned), then, whenever a gpu-let is free,
/// dispatches its next model's batch (models sharing a gpu-let in time take turns) once
/// the batch is full — the scheduled size — or its oldest request has waited as long as
/// it can and still meet its SLO after the batch runs (the batch then goes with what has
/// arrived). Requests are the tenants' tasks. A new plan ([`GpuletServing::replan`])
/// takes over GPU by GPU: at once where the layout is unchanged; where it changes, the
/// old gpu-lets keep serving until the repartition is done (the reorganization happens
/// in the background, as gpu-lets' does), then the new ones take over.
#[derive(Debug)]
pub struct GpuletServing {
    board: Board,
    /// Per GPU: the layout in force (`None`: whole) and the gpu-lets served now.
    current: Vec<GpuPlan>,
    /// Per GPU: a layout and gpu-lets waiting for its repartition, and whether the
    /// repartition has been asked for.
    waiting: Vec<Option<Waiting>>,
    /// A plan not yet applied (applied on the next event).
    plan: Option<ServingPlan>,
    /// How often the queues are looked at (the plan's; 1 ms before any).
    tick: Nanos,
    /// Until when a tick finds nothing due: the earliest moment a queued request falls
    /// due for its batch or for a drop, as of the last look at every queue. Only time
    /// makes a tick act, and nothing else changed since that look (any other event, or
    /// a plan not yet in force, looks again), so a tick before it is passed over: at
    /// gpu-lets' 100 µs ticks, walking every gpu-let on each was most of a serving
    /// run's time (issue 55).
    quiet_until: Nanos,
    /// Whether `quiet_until` is kept ([`GpuletServing::every_event`]: not).
    shortcuts: bool,
}

impl GpuletServing {
    /// Serve `plan` on `gpus`.
    pub fn new(gpus: &[GpuSpec], plan: ServingPlan) -> GpuletServing {
        GpuletServing {
            board: Board::new(gpus),
            current: vec![(None, Vec::new()); gpus.len()],
            waiting: vec![None; gpus.len()],
            plan: Some(plan),
            tick: Nanos::from_millis(1),
            quiet_until: Nanos::ZERO,
            shortcuts: true,
        }
    }

    /// The same server looking at every gpu-let on every event, tick or not: what the
    /// passing over of quiet ticks and untouched gpu-lets is checked against.
    pub fn every_event(mut self) -> GpuletServing {
        self.shortcuts = false;
        self
    }

    /// Serve `plan` from the next event on, GPU by GPU as described above.
    pub fn replan(&mut self, plan: ServingPlan) {
        self.plan = Some(plan);
    }

    /// The gpu-lets in force: (GPU, size %, (model, batch) of each model served).
    pub fn layout(&self) -> Vec<GpuletInForce> {
        self.current
            .iter()
            .enumerate()
            .flat_map(|(g, (layout, lets))| {
                lets.iter().enumerate().map(move |(i, l)| {
                    let size =
                        layout.as_ref().and_then(|s| s.get(i)).map_or(100, |p| u32::from(p.0) / 10);
                    (GpuId(g as u32), size, l.models.iter().map(|m| (m.tenant, m.batch)).collect())
                })
            })
            .collect()
    }

    /// Drop the requests of user-facing tenants that no gpu-let in force serves once
    /// they have waited past their SLO: no batch will carry them (a model the schedule
    /// could not place, or one not yet scheduled), and every request must end.
    fn drop_unserved(&mut self, now: Nanos, actions: &mut Vec<Action>) {
        let unserved: Vec<TenantId> = self
            .board
            .backlogged()
            .filter(|t| {
                !self
                    .current
                    .iter()
                    .flat_map(|(_, lets)| lets)
                    .any(|l| l.models.iter().any(|m| m.tenant == *t))
            })
            .collect();
        for t in unserved {
            if let Some(crate::ServiceClass::UserFacing { sla }) =
                self.board.tenant_spec(t).map(|s| s.class)
            {
                self.board.drop_waiting_since(t, now.saturating_sub(sla), actions);
            }
        }
    }

    /// Apply a pending plan and ask for the repartitions still to ask. A plan waits
    /// while a repartition is in flight, so that every GPU's layout in force is known.
    fn take_plan(&mut self, actions: &mut Vec<Action>) {
        let in_flight = self.waiting.iter().any(|w| matches!(w, Some((_, _, true))));
        if !in_flight && let Some(plan) = self.plan.take() {
            if let Some(tick) = plan.tick {
                self.tick = tick;
            }
            for (g, (layout, lets)) in plan.gpus.into_iter().enumerate() {
                let Some(cur) = self.current.get_mut(g) else { continue };
                if cur.0 == layout {
                    cur.1 = lets;
                    self.waiting[g] = None;
                } else {
                    self.waiting[g] = Some((layout, lets, false));
                }
            }
        }
        for (g, w) in self.waiting.iter_mut().enumerate() {
            if let Some((layout, _, asked @ false)) = w {
                let shares = layout.clone().unwrap_or_default();
                *asked = self.board.repartition(GpuId(g as u32), shares, actions);
            }
        }
    }
}

impl crate::policy::Policy for GpuletServing {
    fn label(&self) -> String {
        "gpulet-serving".into()
    }

    fn tick_interval(&self) -> Option<Nanos> {
        // a batch whose oldest request can wait no longer goes at the next tick
        Some(self.tick)
    }

    fn quiet_until(&self) -> Nanos {
        if self.settled() { self.quiet_until } else { Nanos::ZERO }
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        self.board.observe(now, event, actions);
        // Before `quiet_until` nothing falls due by time, so only what the event
        // touched can act: a request's arrival, the gpu-lets serving its model; a
        // finish, the gpu-lets of its GPU. Any other event looks at every gpu-let.
        if now < self.quiet_until && self.settled() {
            let touched = match event {
                Event::Tick => return,
                Event::TaskSubmitted(spec) => Touched::Model(spec.tenant),
                Event::TaskFinished { placement, .. } => Touched::At(*placement),
                _ => Touched::All,
            };
            if touched != Touched::All {
                self.serve_lets(now, touched, actions);
                let due = self.due_of(touched);
                self.quiet_until = self.quiet_until.min(due);
                return;
            }
        }
        if let Event::RepartitionDone { gpu } = event
            && let Some(slot) = self.waiting.get_mut(gpu.0 as usize)
            && matches!(slot, Some((_, _, true)))
            && let Some((layout, lets, _)) = slot.take()
        {
            self.current[gpu.0 as usize] = (layout, lets);
        }
        self.take_plan(actions);
        if matches!(event, Event::Tick) {
            self.drop_unserved(now, actions);
        }
        self.serve_lets(now, Touched::All, actions);
        if self.shortcuts {
            self.quiet_until = self.due_of(Touched::All);
        }
    }
}

/// Which gpu-lets an event can have made act (see [`GpuletServing`]'s `quiet_until`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Touched {
    All,
    /// Those serving this model (tenant): its queue grew.
    Model(TenantId),
    /// Those on this placement's GPU: one of them has room again (the daemon reports a
    /// finish on the whole GPU, not on the partition it ran in).
    At(Placement),
}

impl GpuletServing {
    /// No plan waits to be applied and every repartition it needs was asked for: what
    /// an event can change is in the board.
    fn settled(&self) -> bool {
        self.plan.is_none() && self.waiting.iter().all(|w| !matches!(w, Some((_, _, false))))
    }

    /// Drop what waited too long and send the batch that is due on each `touched`
    /// gpu-let with room, in the order of the plan.
    fn serve_lets(&mut self, now: Nanos, touched: Touched, actions: &mut Vec<Action>) {
        for l in self.current.iter_mut().flat_map(|(_, lets)| lets.iter_mut()) {
            if !touched.includes(l) {
                continue;
            }
            for m in &l.models {
                self.board.drop_waiting_since(m.tenant, now.saturating_sub(m.drop_after), actions);
            }
            // a model whose oldest request can wait no longer goes first (the most
            // overdue of them); else the next full batch in turn. The gpu-let's room
            // is asked only when one is due (it walks the GPU's running requests)
            let n = l.models.len();
            if let [m] = l.models.as_slice() {
                // one model alone, most gpu-lets: the same rule without the turns
                let (queued, oldest) = self.board.queue_of(m.tenant);
                let due =
                    oldest.is_some_and(|o| now - o >= m.max_wait) || queued >= m.batch as usize;
                if due && self.board.has_room(l.placement) {
                    self.board.dispatch_batch(
                        now,
                        l.placement,
                        m.tenant,
                        m.batch as usize,
                        actions,
                    );
                }
                continue;
            }
            let board = &self.board;
            let model = |k: usize| l.models[(l.next + k) % n];
            let overdue = (0..n)
                .filter_map(|k| {
                    let m = model(k);
                    let oldest = board.queue_of(m.tenant).1?;
                    (now - oldest >= m.max_wait).then_some((oldest, k))
                })
                .min()
                .map(|(_, k)| k);
            let full =
                || (0..n).find(|&k| board.queue_len(model(k).tenant) >= model(k).batch as usize);
            if let Some(k) = overdue.or_else(full)
                && self.board.has_room(l.placement)
            {
                let m = l.models[(l.next + k) % n];
                if self.board.dispatch_batch(now, l.placement, m.tenant, m.batch as usize, actions)
                    > 0
                {
                    l.next = (l.next + k + 1) % n;
                }
            }
        }
    }

    /// The earliest moment a tick could act on the `touched` gpu-lets (see
    /// `quiet_until`): a served model's oldest request reaching its longest wait or its
    /// drop; an unserved model's (or the touched one's) oldest request passing its SLO.
    fn due_of(&self, touched: Touched) -> Nanos {
        let mut due = Nanos(u64::MAX);
        for l in self.current.iter().flat_map(|(_, lets)| lets).filter(|l| touched.includes(l)) {
            // a gpu-let without room sends nothing until a finish there (an event that
            // looks at it again): only its drops fall due by time
            let mut room = None;
            for m in &l.models {
                if let (_, Some(oldest)) = self.board.queue_of(m.tenant) {
                    let drop = m.drop_after + Nanos(1);
                    let room = *room.get_or_insert_with(|| self.board.has_room(l.placement));
                    due = due.min(oldest + if room { m.max_wait.min(drop) } else { drop });
                }
            }
        }
        let unserved = match touched {
            Touched::All => &mut self.board.backlogged() as &mut dyn Iterator<Item = TenantId>,
            Touched::Model(t) => &mut std::iter::once(t),
            Touched::At(_) => &mut std::iter::empty(),
        };
        for t in unserved {
            if let (_, Some(oldest)) = self.board.queue_of(t)
                && let Some(crate::ServiceClass::UserFacing { sla }) =
                    self.board.tenant_spec(t).map(|s| s.class)
            {
                due = due.min(oldest + sla + Nanos(1));
            }
        }
        due
    }
}

impl Touched {
    fn includes(self, l: &ServingLet) -> bool {
        match self {
            Touched::All => true,
            Touched::Model(t) => l.models.iter().any(|m| m.tenant == t),
            Touched::At(p) => l.placement.gpu == p.gpu,
        }
    }
}

/// Makes a new schedule, at a time, for models (tenants, in the order the schedule's
/// model indices follow) at tracked rates (req/s), or `None` when they are not
/// schedulable; returns the schedule and the plan to serve it.
pub type Rescheduler =
    Box<dyn FnMut(Nanos, &[TenantId], &[f64]) -> Option<(Vec<Gpulet>, ServingPlan)> + Send>;

/// What an adaptive gpu-lets policy last decided, for status reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServingReport {
    /// Each model's tracked rate at the last check, req/s.
    pub rates: Vec<(TenantId, f64)>,
    /// The gpu-lets in force.
    pub gpulets: Vec<GpuletInForce>,
    /// New schedules made so far.
    pub reorganizations: u64,
    /// Checks that wanted a new schedule and found the rates not schedulable.
    pub refused: u64,
}

/// A gpu-let in force: its GPU, size %, and (model, batch) of each model it serves.
pub type GpuletInForce = (GpuId, u32, Vec<(TenantId, u32)>);

/// gpu-lets with rate tracking and periodic rescheduling (§4.3, Algorithm 1 line 1):
/// every request's arrival is counted by a [`RateTracker`]; every `period` the tracked
/// rates are checked with [`needs_reschedule`] against what the schedule in force gives
/// each model, and when it is at risk or idle, `reschedule` makes a new schedule, which
/// [`GpuletServing`] takes over in the background. Rates that are not schedulable are
/// counted in [`AdaptiveGpulets::refused`], and the schedule made for the largest share
/// of them that is (found by bisection) serves instead — the best the GPUs can do. Models may come and go: a user-facing tenant that
/// registers becomes a model (checked every second until the schedule serves it, so
/// that a new model does not wait a whole period), and one that leaves is dropped and
/// rescheduled for at once.
pub struct AdaptiveGpulets {
    serving: GpuletServing,
    schedule: Vec<Gpulet>,
    tracker: RateTracker,
    tenants: Vec<TenantId>,
    period: Nanos,
    prepare: Nanos,
    /// A new plan getting ready, and when it is.
    staged: Option<(Nanos, ServingPlan)>,
    next_check: Nanos,
    idle: f64,
    reschedule: Rescheduler,
    /// A model the schedule does not serve yet: check every second.
    unserved: bool,
    last_quick: Nanos,
    /// The rates of the last check, by model.
    last_rates: Vec<f64>,
    /// Where status reports read what was decided.
    report: Option<std::sync::Arc<std::sync::Mutex<ServingReport>>>,
    /// (when, sum of gpu-let sizes of the new schedule, %) of every reorganization.
    pub reorganizations: Vec<(Nanos, u32)>,
    /// Checks that wanted a new schedule and could not make one.
    pub refused: u64,
}

impl std::fmt::Debug for AdaptiveGpulets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdaptiveGpulets")
            .field("schedule", &self.schedule)
            .field("period", &self.period)
            .field("reorganizations", &self.reorganizations.len())
            .finish_non_exhaustive()
    }
}

impl AdaptiveGpulets {
    /// Serve `first` (made for the rates expected at the start) on `gpus`, then track the
    /// rates of models `tenants[i]` (EWMA with `alpha` over 1 s windows) and check every
    /// `period` from `start` on (the first check at `start + period`); `idle` is
    /// [`needs_reschedule`]'s share below which resources count as idle. A new schedule
    /// takes `prepare` to get ready in the background (gpu-lets' 10-15 s of loading
    /// models into the new gpu-lets' processes) while the old one serves; then it is
    /// put in force.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gpus: &[GpuSpec],
        first: (Vec<Gpulet>, ServingPlan),
        tenants: Vec<TenantId>,
        start: Nanos,
        period: Nanos,
        prepare: Nanos,
        alpha: f64,
        idle: f64,
        reschedule: Rescheduler,
    ) -> AdaptiveGpulets {
        let (schedule, plan) = first;
        let mut serving = GpuletServing {
            board: Board::new(gpus),
            current: vec![(None, Vec::new()); gpus.len()],
            waiting: vec![None; gpus.len()],
            plan: None,
            tick: Nanos::from_millis(1),
            quiet_until: Nanos::ZERO,
            shortcuts: true,
        };
        serving.replan(plan);
        AdaptiveGpulets {
            serving,
            schedule,
            tracker: RateTracker::new(tenants.len(), alpha, Nanos::from_secs(1)),
            tenants,
            period,
            prepare,
            staged: None,
            next_check: start + period,
            idle,
            reschedule,
            unserved: false,
            last_quick: Nanos::ZERO,
            last_rates: Vec::new(),
            report: None,
            reorganizations: Vec::new(),
            refused: 0,
        }
    }

    /// Publish what is decided into `report` (the daemon's status reads it).
    pub fn with_report(mut self, report: std::sync::Arc<std::sync::Mutex<ServingReport>>) -> Self {
        self.report = Some(report);
        self
    }

    /// A model arrived or left: follow the tenant set.
    fn follow_tenants(&mut self, now: Nanos, event: &Event) {
        match event {
            Event::TenantRegistered(spec)
                if matches!(spec.class, crate::ServiceClass::UserFacing { .. })
                    && !self.tenants.contains(&spec.id) =>
            {
                self.tenants.push(spec.id);
                self.tracker.add_model();
                self.unserved = true;
            }
            Event::TenantLeft { tenant } => {
                if let Some(i) = self.tenants.iter().position(|t| t == tenant) {
                    self.tenants.remove(i);
                    self.tracker.remove_model(i);
                    // the schedule's model indices are stale: make a new one now
                    for g in &mut self.schedule {
                        g.served.clear();
                    }
                    self.next_check = now;
                }
            }
            _ => {}
        }
    }

    /// Publish the rates of the last check and the gpu-lets in force now.
    fn publish(&self) {
        let Some(report) = &self.report else { return };
        if let Ok(mut r) = report.lock() {
            r.rates = self.tenants.iter().copied().zip(self.last_rates.iter().copied()).collect();
            r.gpulets = self.serving.layout();
            r.reorganizations = self.reorganizations.len() as u64;
            r.refused = self.refused;
        }
    }

    /// The schedule in force (or being put in force).
    pub fn schedule(&self) -> &[Gpulet] {
        &self.schedule
    }

    /// Per GPU, whether the server uses it or is about to: the schedule (in force or
    /// being put in force) places a gpu-let serving a model there, a gpu-let in force
    /// serves there, it is partitioned or waits for a repartition, or a batch still
    /// runs there. The composed node policy keeps its other tenants off these GPUs.
    pub fn gpus_in_use(&self) -> Vec<bool> {
        let s = &self.serving;
        (0..s.board.gpu_count())
            .map(|g| {
                self.schedule.iter().any(|x| x.gpu == g && !x.served.is_empty())
                    || s.current[g].0.is_some()
                    || s.current[g].1.iter().any(|l| !l.models.is_empty())
                    || s.waiting[g].is_some()
                    || !s.board.state(GpuId(g as u32)).running().is_empty()
            })
            .collect()
    }
}

impl crate::policy::Policy for AdaptiveGpulets {
    fn label(&self) -> String {
        "gpulets-adaptive".into()
    }

    fn tick_interval(&self) -> Option<Nanos> {
        crate::policy::Policy::tick_interval(&self.serving)
    }

    fn quiet_until(&self) -> Nanos {
        // the server's, or the next check of the rates (the quick one while a model
        // is unserved), or a staged plan's moment, whichever comes first
        let mut until = crate::policy::Policy::quiet_until(&self.serving).min(self.next_check);
        if self.unserved {
            until = until.min(self.last_quick + Nanos::from_secs(1));
        }
        if let Some((ready, _)) = &self.staged {
            until = until.min(*ready);
        }
        until
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        self.follow_tenants(now, event);
        if let Event::TaskSubmitted(t) = event
            && let Some(m) = self.tenants.iter().position(|x| *x == t.tenant)
        {
            self.tracker.arrival(m, now);
        }
        let quick = self.unserved && now >= self.last_quick + Nanos::from_secs(1);
        if now >= self.next_check || quick {
            if quick {
                self.last_quick = now;
            } else {
                self.next_check = now + self.period;
            }
            let rates = self.tracker.rates(now);
            if needs_reschedule(&self.schedule, &rates, self.idle) {
                let made = (self.reschedule)(now, &self.tenants, &rates).or_else(|| {
                    // not schedulable: count it, and serve the largest share of the
                    // rates that is (bisection to 1/64), rather than keep a schedule made
                    // for rates long past
                    self.refused += 1;
                    let (mut lo, mut hi, mut best) = (0.0, 1.0, None);
                    for _ in 0..6 {
                        let mid = (lo + hi) / 2.0;
                        let scaled: Vec<f64> = rates.iter().map(|r| r * mid).collect();
                        match (self.reschedule)(now, &self.tenants, &scaled) {
                            Some(made) => {
                                lo = mid;
                                best = Some(made);
                            }
                            None => hi = mid,
                        }
                    }
                    best
                });
                if let Some((schedule, plan)) = made {
                    let size = schedule.iter().map(|g| g.size).sum();
                    self.reorganizations.push((now, size));
                    // served once every model with requests has a gpu-let
                    self.unserved = rates.iter().enumerate().any(|(m, r)| {
                        *r > 0.0 && !schedule.iter().any(|g| g.served.iter().any(|s| s.model == m))
                    });
                    self.schedule = schedule;
                    self.staged = Some((now + self.prepare, plan));
                }
            }
            self.last_rates = rates;
            self.publish();
        }
        let mut changed = matches!(event, Event::RepartitionDone { .. });
        if self.staged.as_ref().is_some_and(|(ready, _)| now >= *ready)
            && let Some((_, plan)) = self.staged.take()
        {
            self.serving.replan(plan);
            changed = true;
        }
        crate::policy::Policy::on_event(&mut self.serving, now, event, actions);
        if changed {
            self.publish();
        }
    }
}

/// Request-rate tracking by exponentially weighted moving average (gpu-lets §4.3: "The
/// incoming request rates of each model are tracked with an exponentially-weighted
/// moving average"): arrivals are counted per window, and each window's rate is folded
/// in with weight `alpha`.
#[derive(Clone, Debug)]
pub struct RateTracker {
    alpha: f64,
    window: Nanos,
    window_start: Nanos,
    counts: Vec<u64>,
    rates: Vec<Option<f64>>,
}

impl RateTracker {
    /// Track `models` rates over windows of `window`, folding each in with `alpha`.
    pub fn new(models: usize, alpha: f64, window: Nanos) -> RateTracker {
        RateTracker {
            alpha: alpha.clamp(0.0, 1.0),
            window: window.max(Nanos(1)),
            window_start: Nanos::ZERO,
            counts: vec![0; models],
            rates: vec![None; models],
        }
    }

    /// Close every window that ended by `now`, folding its rate into the averages (an
    /// empty window counts as a rate of 0).
    fn roll(&mut self, now: Nanos) {
        while now >= self.window_start + self.window {
            let secs = self.window.as_secs_f64();
            for (count, rate) in self.counts.iter_mut().zip(&mut self.rates) {
                let seen = *count as f64 / secs;
                *rate = Some(match *rate {
                    None => seen,
                    Some(r) => self.alpha * seen + (1.0 - self.alpha) * r,
                });
                *count = 0;
            }
            self.window_start += self.window;
        }
    }

    /// Track one more model (last in order), from no rate.
    pub fn add_model(&mut self) {
        self.counts.push(0);
        self.rates.push(None);
    }

    /// Stop tracking model `i` (later models move up one).
    pub fn remove_model(&mut self, i: usize) {
        if i < self.counts.len() {
            self.counts.remove(i);
            self.rates.remove(i);
        }
    }

    /// A request of `model` arrived at `now`.
    pub fn arrival(&mut self, model: usize, now: Nanos) {
        self.roll(now);
        if let Some(c) = self.counts.get_mut(model) {
            *c += 1;
        }
    }

    /// The tracked rates (req/s) as of `now`; 0 for a model with no closed window yet.
    pub fn rates(&mut self, now: Nanos) -> Vec<f64> {
        self.roll(now);
        self.rates.iter().map(|r| r.unwrap_or(0.0)).collect()
    }
}

/// Whether a schedule should be reorganized at the tracked `rates` (gpu-lets §4.3:
/// rescheduling "if the current schedules produce SLO violations or the assigned
/// resource is being underutilized"): a model's rate is above what the schedule gives
/// it (SLO at risk), or every model's rate is below `idle` times what it is given and
/// the schedule uses more than it needs (resources idle).
pub fn needs_reschedule(schedule: &[Gpulet], rates: &[f64], idle: f64) -> bool {
    let given = |m: usize| -> f64 {
        schedule.iter().flat_map(|g| &g.served).filter(|s| s.model == m).map(|s| s.rate).sum()
    };
    let at_risk = rates.iter().enumerate().any(|(m, r)| *r > given(m) * (1.0 + 1e-9));
    let idle_everywhere =
        !schedule.is_empty() && rates.iter().enumerate().all(|(m, r)| *r < idle * given(m));
    at_risk || idle_everywhere
}

#[cfg(test)]
mod tests;
