//! The core's loop: poll the rings and the mailbox, feed the policy the clock's ticks,
//! and, with nothing to do, spin briefly, then sleep on the doorbell futex until a
//! client, a report or the next tick wakes it.

use super::*;

impl Core {
    /// Run until shut down and drained.
    pub fn run(mut self) {
        let tick = self.policy.tick_interval();
        let mut next_tick = tick.map(|t| self.clock.now() + t);
        let mut idle_since: Option<Instant> = None;
        loop {
            let pass = Instant::now();
            // what happens on each pass, in order
            let worked = self.read_mailbox()
                | self.look_at_doorbells()
                | self.poll_rings()
                | self.migrations_arrive()
                | self.overrun_slices()
                | self.tick(&mut next_tick, tick);
            if self.drained() {
                break;
            }
            if worked {
                idle_since = None;
                self.host.reset();
                if let Some(m) = &self.metrics {
                    m.loop_latency.observe(pass.elapsed().as_secs_f64());
                }
            } else if self.spin(&mut idle_since) {
                self.sleep(next_tick);
                idle_since = None;
                self.host.reset();
            }
        }
        // answer what arrived during the last pass, then tell every client we are gone
        self.poll_rings();
        for c in self.conns.values() {
            c.region.mark_closed();
        }
        tracing::info!("core drained; stopping executors");
        self.exec.stop();
    }

    /// Control requests, disconnections and executor reports.
    pub(super) fn read_mailbox(&mut self) -> bool {
        let mut worked = false;
        while let Ok(m) = self.rx.try_recv() {
            self.mailbox.pending.fetch_sub(1, Ordering::SeqCst);
            self.handle(m);
            worked = true;
        }
        worked
    }

    /// Quiet rings whose clients rang their doorbells become active (never blocking).
    pub(super) fn look_at_doorbells(&mut self) -> bool {
        if self.active.len() < self.conns.len() {
            self.wait_for_bells(Duration::ZERO);
        }
        false
    }

    /// The policy's periodic tick, when it asks for one and it is due.
    pub(super) fn tick(&mut self, next_tick: &mut Option<Nanos>, period: Option<Nanos>) -> bool {
        if let (Some(t), Some(period)) = (*next_tick, period)
            && self.clock.now() >= t
        {
            self.deliver(Event::Tick);
            *next_tick = Some(self.clock.now() + period);
            return true;
        }
        false
    }

    /// Whether a drain is over: nothing runs (anything queued was cancelled when its
    /// tenant left), or it outlasted `drain_timeout` (what still runs is abandoned).
    pub(super) fn drained(&mut self) -> bool {
        if self.draining
            && self.tasks.values().all(|t| t.started.is_none())
            && self.gpus.iter().all(|g| !g.resetting)
        {
            return true;
        }
        if self.drain_started.is_some_and(|t| t.elapsed() > self.limits.drain_timeout) {
            self.abandon_running();
            return true;
        }
        false
    }

    /// Nothing to do: on a quiet host, spin [`SPIN`] (a pure spin first; then giving
    /// the core to a runnable client at each turn: a client woken onto the core's own
    /// CPU would otherwise wait out the spin); on a busy host, not at all — a yield
    /// there hands the CPU to a CPU-bound thread for a whole time slice (see
    /// [`host_load`]). Whether the core should sleep now.
    pub(super) fn spin(&mut self, idle_since: &mut Option<Instant>) -> bool {
        let now = Instant::now();
        if self.limits.block_when_busy && self.host.busy(now, true) {
            return true;
        }
        let idle = now.saturating_duration_since(*idle_since.get_or_insert(now));
        if idle < PURE_SPIN {
            std::hint::spin_loop();
        } else if idle < SPIN {
            std::thread::yield_now();
        }
        idle >= SPIN
    }

    /// What a ring the core polls says to its client: that the core polls it
    /// (`POLLING`: no doorbell, a spin pays) on a quiet host; `BUSY` on a busy one.
    pub(super) fn awake_state(&mut self) -> u32 {
        if self.limits.block_when_busy && self.host.busy(Instant::now(), false) {
            daemon_state::BUSY
        } else {
            daemon_state::POLLING
        }
    }

    /// What a ring says while the core sleeps: `ASLEEP`, or `BUSY` on a busy host.
    pub(super) fn asleep_state(&mut self) -> u32 {
        if self.limits.block_when_busy && self.host.busy(Instant::now(), false) {
            daemon_state::BUSY
        } else {
            daemon_state::ASLEEP
        }
    }

    /// Sleep on the doorbells until something happens, the policy's next tick or the
    /// next migration's arrival (at most 100 ms). Every ring goes quiet with the core:
    /// each client rings its doorbell with its next request, which makes its ring
    /// active again.
    pub(super) fn sleep(&mut self, next_tick: Option<Nanos>) {
        let next_arrival = self.arriving.iter().map(|(at, _, _)| *at).min();
        let wake = match (next_tick, next_arrival) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = wake.map_or(Duration::from_millis(100), |t| {
            self.clock.wall(t.saturating_sub(self.clock.now())).min(Duration::from_millis(100))
        });
        self.mailbox.sleeping.store(true, Ordering::SeqCst);
        let asleep = self.asleep_state();
        for (_, r, _) in &self.active {
            r.set_daemon_state(asleep);
        }
        let pending = self.active.iter().any(|(_, r, _)| r.has_requests());
        if pending {
            // a request came in as the core was going to sleep: it stays awake, and
            // the active rings stay polled (their clients need not ring, on a quiet
            // host)
            let awake = self.awake_state();
            for (_, r, _) in &self.active {
                r.set_daemon_state(awake);
            }
        } else {
            self.active.clear();
            if self.mailbox.pending.load(Ordering::SeqCst) == 0 {
                self.follow.before_sleep(asleep == daemon_state::BUSY);
                self.wait_for_bells(timeout.max(Duration::from_micros(100)));
            }
        }
        self.mailbox.sleeping.store(false, Ordering::SeqCst);
    }

    /// Wait on the doorbells until one rings or `timeout` (zero: only look): a ringing
    /// client's ring becomes active. The core never reads a client's doorbell (see
    /// [`Conn::bell`]), which is edge-triggered; it reads only its private one, which
    /// no client holds.
    pub(super) fn wait_for_bells(&mut self, timeout: Duration) {
        use rustix::event::epoll;
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut events = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 64];
        let Ok((ready, _)) = epoll::wait(&self.epoll, &mut events, Some(&ts)) else { return };
        let now = Instant::now();
        // on a busy host clients ring with every request, the core awake or not
        let awake = self.awake_state();
        for ev in ready.iter() {
            let data = ev.data.u64();
            if data == 0 {
                self.mailbox.bell.drain();
                continue;
            }
            let Some(c) = self.conns.get_mut(&data) else { continue };
            if c.region.has_requests() {
                if !self.active.iter().any(|(id, _, _)| *id == data) {
                    c.region.set_daemon_state(awake);
                    self.active.push((data, c.region.clone(), now));
                }
                continue;
            }
            if awake == daemon_state::BUSY {
                // its request was served while the core was awake: not spurious
                continue;
            }
            if now.duration_since(c.window) > Duration::from_secs(1) {
                c.window = now;
                c.spurious = 0;
            }
            c.spurious += 1;
            if c.spurious > SPURIOUS_PER_SECOND && c.muted_until.is_none() {
                tracing::warn!(
                    conn = data,
                    pid = c.pid,
                    "client rings its doorbell with nothing to do; muted for a while"
                );
                let _ = epoll::delete(&self.epoll, c.bell.as_fd());
                c.muted_until = Some(now + MUTE);
                self.muted.push(data);
            }
        }
        let conns = &mut self.conns;
        let epoll = &self.epoll;
        let mut unmuted = Vec::new();
        self.muted.retain(|id| {
            let Some(c) = conns.get_mut(id) else { return false };
            if !c.alive {
                return false;
            }
            if c.muted_until.is_some_and(|t| now >= t) {
                c.muted_until = None;
                c.spurious = 0;
                c.window = now;
                listen(epoll, &c.bell, *id, true);
                unmuted.push((*id, c.region.clone()));
                return false;
            }
            true
        });
        // whatever it asked while muted (its rings went unheard) is polled now
        for (id, region) in unmuted {
            if !self.active.iter().any(|(a, _, _)| *a == id) {
                region.set_daemon_state(awake);
                self.active.push((id, region, now));
            }
        }
    }
}
