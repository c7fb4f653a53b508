//! Flexy with its minimum reservation K adapted at run time by a PID controller on
//! user-facing latency — the paper's proposed future work (Flexy §II-C2: "one may
//! adapt K at runtime, using, e.g., a proportional-integral-derivative (PID)
//! controller ... giving all GPUs to batch jobs when the user load is persistently
//! low (e.g. at night) ... reserve one (1) or more GPUs ... during bursty, highly
//! fluctuating user-facing traffic").
//!
//! Every control period the controller measures the worst user-facing latency of the
//! period — the slowest task that finished, or the age of the oldest still waiting —
//! as a fraction of the SLA, and compares it with a setpoint below 1:
//!
//! ```text
//! e = worst_latency / SLA - setpoint
//! I = clamp(I + e * dt, 0, (N - 1) / ki)        (anti-windup)
//! K = clamp(round(kp * e + ki * I + kd * de/dt), 0, N - 1)
//! ```
//!
//! A quiet node has worst latency 0, so e = -setpoint and K drains to 0. A burst
//! raises e and K at once (proportional term); the integral keeps GPUs reserved
//! between the bursts of a bursty period. A controller cannot see a burst before it
//! starts: what "rises before bursts" means here is that K stays raised across the
//! gaps of a bursty period, so the next burst of that period finds GPUs reserved.

use crate::action::Action;
use crate::board::Classes;
use crate::event::Event;
use crate::model::GpuSpec;
use crate::policies::flexy::{Flexy, FlexyParams, PoolOrder};
use crate::policy::{PidGains, Policy};
use crate::units::Nanos;

/// Flexy whose K follows a PID controller.
#[derive(Debug)]
pub struct FlexyPid {
    flexy: Flexy,
    sla: Nanos,
    gains: PidGains,
    max_k: usize,
    integral: f64,
    last_error: Option<f64>,
    worst_in_period: Nanos,
}

impl FlexyPid {
    /// The PID variant over `gpus`, starting at K = 0.
    pub fn new(gpus: &[GpuSpec], sla: Nanos, history: usize, gains: PidGains) -> FlexyPid {
        let flexy = Flexy::new(
            gpus,
            FlexyParams { reserve: 0, reset: None, sla, history, order: PoolOrder::Packing },
        );
        FlexyPid {
            flexy,
            sla,
            gains,
            max_k: gpus.len().saturating_sub(1),
            integral: 0.0,
            last_error: None,
            worst_in_period: Nanos::ZERO,
        }
    }

    fn control(&mut self, now: Nanos) {
        let waiting = self
            .flexy
            .board()
            .oldest_queued_since(Classes::UserFacing)
            .map_or(Nanos::ZERO, |since| now - since);
        let worst = self.worst_in_period.max(waiting);
        self.worst_in_period = Nanos::ZERO;

        let g = self.gains;
        let dt = g.period.as_secs_f64();
        let error = worst.as_secs_f64() / self.sla.as_secs_f64() - g.setpoint;
        let integral_cap = if g.ki > 0.0 { self.max_k as f64 / g.ki } else { 0.0 };
        self.integral = (self.integral + error * dt).clamp(0.0, integral_cap);
        let derivative = self.last_error.map_or(0.0, |last| (error - last) / dt);
        self.last_error = Some(error);
        let output = g.kp * error + g.ki * self.integral + g.kd * derivative;
        let k = output.round().clamp(0.0, self.max_k as f64) as usize;
        self.flexy.set_reserve(k);
    }
}

impl Policy for FlexyPid {
    fn label(&self) -> String {
        "F-PID".into()
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        if let Event::TaskFinished { task, placement, .. } = event {
            // Latency of a finishing user-facing task, read before Flexy forgets it.
            if let Some(r) = self
                .flexy
                .board()
                .state(placement.gpu)
                .running()
                .iter()
                .find(|r| r.spec.id == *task)
                && r.class.is_user_facing()
            {
                self.worst_in_period = self.worst_in_period.max(now - r.submitted);
            }
        }
        if matches!(event, Event::Tick) {
            self.control(now);
        }
        self.flexy.on_event(now, event, actions);
    }

    fn tick_interval(&self) -> Option<Nanos> {
        Some(self.gains.period)
    }

    fn min_reservation(&self) -> usize {
        self.flexy.reserve()
    }
}
