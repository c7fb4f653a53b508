//! The launch gate (FairGV §3.2-3.3): a tenant's kernels run in the slices its policy
//! grants — one atomic load inside a slice, a request to the daemon outside — with
//! collaborative accounting of the GPU time each slice used, and the watcher thread
//! that gives back a slice its holder leaves idle.

use crate::log::{complain_once, line};
use crate::tenant::{RULE, SLICE_SPIN, SYSTEM_NOT_READY, Tenant};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_client::region::{LaunchFacts, epoch_ns, reason};
use tessera_client::{ClientError, Outcome};
use tessera_core::gate::{Holder, SliceRule, Step};
use tessera_core::units::Nanos;
use tessera_driver::CuResult;

/// Whether the daemon's departure was reported.
static GONE_REPORTED: AtomicBool = AtomicBool::new(false);

/// The daemon went away (`why`) and none took the program back: said once, and the
/// launch fails.
fn gone(why: &str) -> CuResult {
    complain_once(
        &GONE_REPORTED,
        &format!(
            "tesserad went away ({why}): kernel launches fail until a daemon at the socket takes this program back"
        ),
    );
    SYSTEM_NOT_READY
}

/// Who waits for a tenant's work in flight: the program's thread (its current
/// context) or the gate's watcher (the context of the unsynced launches).
#[derive(Clone, Copy)]
enum Waiter {
    Program,
    Watcher,
}

/// When [`Tenant::give_back`] gives the slice back, checked once no other thread
/// settles.
#[derive(Clone, Copy)]
enum GiveBack {
    /// Always: the slice's time is used.
    Now,
    /// If launches counted at the mean may still run.
    InFlight,
    /// If the slice is held and nothing may run.
    Idle,
}

/// The gate's watcher, for the process's life: gives back a slice its holder leaves
/// idle, measures work left in flight, and re-registers with a daemon that restarted.
pub(crate) fn watch_forever(t: &'static Tenant) {
    let mut quiet = (0, 0);
    loop {
        let held = t.granted().is_some() || t.in_flight();
        t.watch(&mut quiet);
        t.readopt_if_gone();
        std::thread::sleep(if held {
            Duration::from_micros(500)
        } else {
            Duration::from_millis(5)
        });
    }
}

impl Tenant {
    /// Note a launch's shape for the daemon's monitor (three relaxed stores).
    #[inline]
    pub fn note_launch(&self, function: u64, grid_blocks: u64, threads: u32, dynamic_shared: u32) {
        self.last_launch[0].store(function, Ordering::Relaxed);
        self.last_launch[1].store(grid_blocks, Ordering::Relaxed);
        self.last_launch[2]
            .store(u64::from(threads) | u64::from(dynamic_shared) << 32, Ordering::Relaxed);
    }

    /// The latest launch's facts, with the function's registers and static shared
    /// memory (asked of the driver once per function).
    fn launch_facts(&self) -> Option<LaunchFacts> {
        let function = self.last_launch[0].load(Ordering::Relaxed);
        let grid_blocks = self.last_launch[1].load(Ordering::Relaxed);
        let block = self.last_launch[2].load(Ordering::Relaxed);
        if function == 0 || grid_blocks == 0 {
            return None;
        }
        let (registers, static_shared) = {
            let mut cache = self.functions.lock().ok()?;
            *cache.entry(function).or_insert_with(|| {
                let kernel_on = crate::hooks::kernel_device(function);
                let facts = crate::real::function_resources(function, kernel_on);
                line(format_args!(
                    "{} {function:#x}: {} registers, {} static shared bytes",
                    if kernel_on.is_some() { "kernel" } else { "function" },
                    facts.0,
                    facts.1
                ));
                facts
            })
        };
        Some(LaunchFacts {
            grid_blocks,
            threads_per_block: (block & 0xffff_ffff) as u32,
            registers_per_thread: registers,
            shared_per_block: static_shared.saturating_add((block >> 32) as u32),
        })
    }

    /// Account a launch that went through (FairGV §3.3's collaborative accounting):
    /// the launches of a slice [`RULE`] measures are measured by synchronising after
    /// them; later ones are counted at the measured mean, and the gate stays busy
    /// until they are waited for — by the slice's end here, or by the watcher — which
    /// measures them too. Once the slice's time is used, wait for the last launches
    /// and give the slice back, reporting the measured time: the policy charges what
    /// the tenant really used, not what it held or what the mean predicted.
    #[inline]
    pub fn after_launch(&self) {
        let region = self.region();
        let n = self.launches.fetch_add(1, Ordering::Relaxed);
        let add = if RULE.measures(n) && !crate::hooks::capture::open() {
            let t0 = std::time::Instant::now();
            // the slice lasts until this launch is done, however long it runs
            region.set_gate_busy(true);
            crate::real::synchronize();
            let dt = t0.elapsed().as_nanos() as u64;
            self.unsynced.store(false, Ordering::Relaxed);
            self.last_idle.store(epoch_ns(), Ordering::Relaxed);
            if region.granted().is_none() {
                // the kernel ran past the slice it was launched in, whose end the
                // daemon deferred until now: the whole measured time is owed, charged
                // as the slice ends (FairGV §3.3.2)
                region.add_owed(dt);
                self.give_back(Waiter::Program, GiveBack::Now);
                return;
            }
            region.set_gate_busy(false);
            self.measured_ns.fetch_add(dt, Ordering::Relaxed);
            dt
        } else {
            // a launch recorded into a capture runs nothing now (the capture is asked
            // only at the first unsynchronised launch, not on every launch)
            if !self.unsynced.load(Ordering::Relaxed) && !crate::hooks::capture::open() {
                self.unsynced_since.store(epoch_ns(), Ordering::Relaxed);
                self.context.store(crate::real::current_context(), Ordering::Relaxed);
                self.unsynced.store(true, Ordering::Relaxed);
                region.set_gate_busy(true);
            }
            self.mean_ns()
        };
        let used = self.accounted_ns.fetch_add(add, Ordering::Relaxed) + add;
        // what the daemon charges when the slice ends with nothing in flight, if it is
        // not given back first
        region.set_slice_used(used, !RULE.measures(n));
        let end = self.slice_end_ns.load(Ordering::Relaxed);
        if SliceRule::used_up(Nanos(used), Nanos(end)) {
            if region.gpu_shared() {
                self.give_back(Waiter::Program, GiveBack::Now);
            } else {
                // the GPU is its own: going on costs no one anything, while giving back
                // would drain the queue the program keeps ahead of the GPU (the daemon
                // renews the slice, charging what it used so far)
                self.slice_end_ns.store(used + self.slice.as_nanos() as u64, Ordering::Relaxed);
                self.pace();
            }
        }
    }

    /// Going on alone past a slice's end, the program stays at most about two slices
    /// ahead of the GPU: it waits for the mark set at the previous slice's end (an
    /// event on its launches' stream) and sets one here. Its queue keeps the work since
    /// that mark — never drained, as a give-back would — and a tenant that comes later
    /// waits behind at most that much, not behind everything a program queued while
    /// alone (up to the driver's limit: seconds, with long kernels).
    #[cold]
    fn pace(&self) {
        if crate::hooks::capture::open() {
            return;
        }
        // another thread pacing now does it for both
        let Ok(mut mark) = self.pace_mark.try_lock() else { return };
        if let Some(previous) = mark.take() {
            self.pacing.store(true, Ordering::Relaxed);
            crate::real::wait_mark(previous);
            self.pacing.store(false, Ordering::Relaxed);
        }
        *mark = crate::real::mark(crate::hooks::launch_stream());
    }

    /// Wait for this process's work in flight (the gate busy meanwhile, so the daemon
    /// does not hand the GPU on under it) and measure it: the GPU time its slice has
    /// used, and the time its work ran on after the slice had ended, which is owed. The
    /// launches counted at the mean since the last wait are measured as the time from
    /// the first of them until all are done (idle gaps among them included: at most
    /// [`SLICE_SPIN`] each, after which the watcher waits for them). The caller holds
    /// `settling`.
    fn settle(&self, waiter: Waiter) -> u64 {
        let session = self.session.load_full();
        session.region.set_gate_busy(true);
        let t0 = epoch_ns();
        let begin = if self.unsynced.load(Ordering::Relaxed) {
            self.unsynced_since.load(Ordering::Relaxed).min(t0)
        } else {
            t0
        };
        // launches the program makes while the watcher waits (it was descheduled, not
        // done) may still be queued when the wait ends: they stay in flight, counted at
        // the mean, until the next wait measures them. Dropped as done, they were never
        // charged and the slice looked idle while they ran (a lone program on a loaded
        // host was charged 73% of its kernels' time, issue 52's test)
        let launches_before = self.launches.load(Ordering::Relaxed);
        match waiter {
            Waiter::Program => crate::real::synchronize(),
            Waiter::Watcher => {
                crate::real::synchronize_context(self.context.load(Ordering::Relaxed))
            }
        }
        let done = epoch_ns().max(t0);
        let ran = done - begin;
        let open = session.region.granted().is_some();
        // the part of the wait after the daemon ended the slice
        let after = if open { 0 } else { done - session.region.closed_at().clamp(begin, done) };
        let measured = self.measured_ns.load(Ordering::Relaxed)
            + self.settled_ns.fetch_add(ran - after, Ordering::Relaxed)
            + (ran - after);
        let mean = self.mean_ns();
        // from now on the measured figure is the slice's, plus the launches made during
        // the wait; looked at again until no launch slipped in while it was written
        let mut used;
        loop {
            let seen = self.launches.load(Ordering::Relaxed);
            let during = seen.saturating_sub(launches_before);
            if during > 0 {
                self.unsynced_since.store(done, Ordering::Relaxed);
            }
            self.unsynced.store(during > 0, Ordering::Relaxed);
            used = measured + during * mean;
            self.accounted_ns.store(used, Ordering::Relaxed);
            session.region.set_slice_used(used, during > 0);
            if self.launches.load(Ordering::Relaxed) == seen {
                break;
            }
        }
        if after > 0 {
            session.region.add_owed(after);
        }
        used
    }

    /// Give the slice back, its last charge measured (see [`Tenant::settle`]), if
    /// `when` still holds once no other thread settles. A slice whose time was up
    /// meanwhile is released too: the daemon kept the GPU for it while the gate was
    /// busy, and ends it on this word rather than on its next look.
    #[cold]
    fn give_back(&self, waiter: Waiter, when: GiveBack) {
        let session = self.session.load_full();
        let Ok(_one) = self.settling.lock() else { return };
        let go = match when {
            GiveBack::Now => true,
            GiveBack::InFlight => self.in_flight(),
            GiveBack::Idle => !self.in_flight() && session.region.granted().is_some(),
        };
        if !go {
            return;
        }
        let used = self.settle(waiter);
        if let (Ok(mut client), Ok(mut outstanding)) =
            (session.client.lock(), session.outstanding.lock())
            && let Some(h) = *outstanding
        {
            // a failure here means the daemon is gone, which the next launch reports; a
            // release of a slice already ended is ignored
            let released = client.release_slice(h, Duration::from_nanos(used), true).is_ok();
            if released && matches!((waiter, when), (Waiter::Program, GiveBack::Now)) {
                // its time was up in the middle of its launches: the next slice is
                // asked for at once, behind the release, so that it is queued when the
                // daemon looks for whose turn it is. Asked only with the next launch,
                // it came a round trip later — on the H200 often past the fair queue's
                // spin budget, and the turn went to the other tenant (weights 1:3 gave
                // the weight-1 tenant 0.26-0.31 in six runs)
                client.forget(h);
                *outstanding = None;
                if self.submit_slice(&session, &mut client, &mut outstanding).is_ok() {
                    // a grant the program no longer uses is given back by the watcher
                    self.last_idle.store(epoch_ns(), Ordering::Relaxed);
                }
            }
        }
        session.region.set_gate_busy(false);
    }

    /// The program made a synchronous call (it waited for the GPU): kept in its window
    /// of latest calls, whose span the daemon reads to classify it as CPU-GPU
    /// interactive (FairGV §3.2.3; `tessera_core::interactive`), continuously, so a
    /// program that changes phase changes class. A lock per call: a synchronous call
    /// waits for the GPU anyway.
    pub(crate) fn note_sync_call(&self) {
        let now = self.own_clock.now(monotonic());
        let Ok(mut w) = self.sync_calls.lock() else { return };
        w.record(now);
        // stored under the lock: a thread with an older span never overwrites a newer
        self.region().set_sync_span(w.span().map(|s| s.0));
    }

    /// As the program starts to wait for a slice: the span from its calls to now on its
    /// own clock, so that a program that stopped making synchronous calls (a batch
    /// phase) is judged so when its slice is granted, not by calls long past.
    fn note_slice_wait(&self) {
        let now = self.own_clock.now(monotonic());
        let Ok(w) = self.sync_calls.lock() else { return };
        if let Some(span) = w.span_until(now) {
            self.region().set_sync_span(Some(span.0));
        }
    }

    /// What a launch beyond the measured ones is counted at ([`RULE`]'s mean of them).
    fn mean_ns(&self) -> u64 {
        RULE.mean(Nanos(self.measured_ns.load(Ordering::Relaxed))).0
    }

    /// The GPU of the slice held now, if any.
    pub fn granted(&self) -> Option<u32> {
        self.session().region.granted()
    }

    /// The launch gate: return once the tenant holds a slice of a GPU. Inside a slice
    /// this is one atomic load; outside, it asks the daemon for a slice (one
    /// outstanding request per process) and waits — futex on the grant word — until
    /// the policy grants one. `Err` if the daemon went away.
    #[inline]
    pub fn acquire(&self) -> Result<(), CuResult> {
        // a launch is under way: the slice is in use
        self.last_idle.store(0, Ordering::Relaxed);
        if self.region().granted().is_some() {
            return Ok(());
        }
        self.acquire_slow()
    }

    /// Whether launches counted at the mean may still run.
    pub fn in_flight(&self) -> bool {
        self.unsynced.load(Ordering::Relaxed)
    }

    /// One look by the gate's watcher thread (`quiet`: the launch count it saw last,
    /// and since when). Launches in flight unmeasured are waited for and measured
    /// once the slice has ended, or once none has arrived for [`SLICE_SPIN`]; a slice
    /// whose holder has nothing in flight and launched nothing for [`SLICE_SPIN`] is
    /// given back (work conserving, FairGV §3.2.2), so the GPU goes to whoever wants
    /// it — a program that launches once and then computes on the CPU does not keep it
    /// for the whole slice.
    pub fn watch(&self, quiet: &mut (u64, u64)) {
        let session = self.session();
        let now = epoch_ns();
        let granted = session.region.granted().is_some();
        if self.unsynced.load(Ordering::Relaxed) {
            let launches = self.launches.load(Ordering::Relaxed);
            // a program waiting at its pacing mark is as busy as one launching
            if granted && (launches != quiet.0 || self.pacing.load(Ordering::Relaxed)) {
                *quiet = (launches, now);
                return;
            }
            // the decision is the gate's rule's, as in the simulator's program engine
            let holder = Holder {
                ended: !granted,
                unmeasured: true,
                quiet_for: Some(Nanos(now.saturating_sub(quiet.1))),
            };
            if RULE.step(holder) != Step::Measure {
                return;
            }
            if !granted {
                line(format_args!("work runs past its slice: measured, then owed"));
                self.give_back(Waiter::Watcher, GiveBack::InFlight);
            } else if let Ok(_one) = self.settling.lock()
                && self.in_flight()
            {
                // nothing launched for the spin budget: wait for what runs, so that the
                // slice is given back once nothing does
                self.settle(Waiter::Watcher);
                self.last_idle.store(epoch_ns(), Ordering::Relaxed);
                session.region.set_gate_busy(false);
            }
            return;
        }
        // a launch under way (or none since the slice was granted) is not quiet
        let idle = self.last_idle.load(Ordering::Relaxed);
        if idle == 0 || !granted {
            return;
        }
        let holder = Holder {
            ended: false,
            unmeasured: false,
            quiet_for: Some(Nanos(now.saturating_sub(idle))),
        };
        if RULE.step(holder) != Step::GiveBack {
            return;
        }
        // claimed: a launch starting now (which clears it) keeps the slice instead
        if self.last_idle.compare_exchange(idle, 0, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return;
        }
        line(format_args!("idle for {SLICE_SPIN:?} with nothing in flight: slice given back"));
        self.give_back(Waiter::Watcher, GiveBack::Idle);
    }

    #[cold]
    fn acquire_slow(&self) -> Result<(), CuResult> {
        // the last slice's work still running is measured (and owed) before the next
        // slice, which it must not be counted in
        self.give_back(Waiter::Program, GiveBack::InFlight);
        self.note_slice_wait();
        let waiting = monotonic();
        // the wait is not the program's own time (however it ends)
        let _counted = WaitCounted(&self.own_clock, waiting);
        loop {
            self.request_slice()?;
            if self.session().region.wait_grant(Duration::from_millis(100)) {
                return Ok(());
            }
            let session = self.session();
            if session.region.is_closed() {
                // a daemon that stopped: one that took its place takes the program back
                if self.readopt(session.id).is_err() {
                    return Err(gone("it stopped"));
                }
            }
        }
    }

    /// Make sure a slice request is outstanding: the previous one's completion (its
    /// slice ended) is collected, and a new one submitted if none is pending.
    fn request_slice(&self) -> Result<(), CuResult> {
        let stale = self.session().id;
        match self.try_request_slice() {
            Ok(()) => Ok(()),
            // the daemon went away: one that restarted takes the program back
            Err(why) => match self.readopt(stale) {
                Ok(()) => self.try_request_slice().map_err(|why| gone(&why)),
                Err(_) => Err(gone(&why)),
            },
        }
    }

    /// [`Tenant::request_slice`] on the current session; `Err`: why the daemon is gone.
    fn try_request_slice(&self) -> Result<(), String> {
        // not while the watcher gives the last slice back (its release names it)
        let _one = self.settling.lock().map_err(|_| "poisoned".to_string())?;
        let session = self.session();
        let mut client = session.client.lock().map_err(|_| "poisoned".to_string())?;
        let mut outstanding = session.outstanding.lock().map_err(|_| "poisoned".to_string())?;
        if let Some(h) = *outstanding {
            match client.wait(h, Duration::ZERO) {
                // the slice ended (done), or the daemon gives no more
                Ok(c) if c.outcome == Outcome::Cancelled(reason::SHUTDOWN) => {
                    return Err("it is shutting down".into());
                }
                Ok(_) => *outstanding = None,
                Err(ClientError::TimedOut) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        if outstanding.is_none() {
            self.submit_slice(&session, &mut client, &mut outstanding)?;
        }
        Ok(())
    }

    /// Ask for the next slice (its accounting starts from nothing); the caller holds
    /// `settling` and the session's client and outstanding request.
    fn submit_slice(
        &self,
        session: &crate::tenant::Session,
        client: &mut tessera_client::Client,
        outstanding: &mut Option<u64>,
    ) -> Result<(), String> {
        let h = client
            .submit_slice(session.id, self.slice, self.launch_facts())
            .map_err(|e| e.to_string())?;
        self.launches.store(0, Ordering::Relaxed);
        self.accounted_ns.store(0, Ordering::Relaxed);
        self.slice_end_ns.store(self.slice.as_nanos() as u64, Ordering::Relaxed);
        self.measured_ns.store(0, Ordering::Relaxed);
        self.settled_ns.store(0, Ordering::Relaxed);
        session.region.set_slice_used(0, false);
        *outstanding = Some(h);
        Ok(())
    }
}

/// A monotonic clock's time since the interposer first read it: the span of a program's
/// calls needs no clock shared with the daemon, and a wall clock stepped back would make
/// a span of 0 (interactive) out of nothing.
fn monotonic() -> Nanos {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    Nanos(START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64)
}

/// Adds the time since its start to the own clock's waits when dropped.
struct WaitCounted<'a>(&'a tessera_core::interactive::OwnClock, Nanos);

impl Drop for WaitCounted<'_> {
    fn drop(&mut self) {
        self.0.waited(monotonic().saturating_sub(self.1));
    }
}
