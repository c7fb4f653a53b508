//! The policy interface, and building a policy from its configuration.

use crate::action::Action;
use crate::event::Event;
use crate::model::GpuSpec;
use crate::policies::memsafe::NotificationPolicy;
use crate::policies::{
    credit, fair, flexy, least_loaded, memsafe, node, pid, priority, round_robin,
};
use crate::units::Nanos;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A scheduling policy: a deterministic state machine from events to actions.
///
/// Contract: `on_event` is called once per event with a non-decreasing `now`; the
/// policy appends its actions to `actions` and never reads a clock, sleeps, spawns
/// threads or does I/O. Same events at the same times give the same actions.
pub trait Policy: Send + fmt::Debug {
    /// A short label for reports, e.g. `F-MinRes1`.
    fn label(&self) -> String;

    /// React to `event`, which happened at `now`.
    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>);

    /// How often the policy wants [`Event::Tick`]; `None` for never.
    fn tick_interval(&self) -> Option<Nanos> {
        None
    }

    /// Until when a [`Event::Tick`] would change nothing and ask for nothing, as of
    /// the last event delivered: a driver may pass over the ticks before it (the
    /// simulator does; a tick is then counted as delivered). Zero (the default): every
    /// tick may act.
    fn quiet_until(&self) -> Nanos {
        Nanos::ZERO
    }

    /// GPUs currently reserved for user-facing work whatever the load (Flexy's K);
    /// reported so that the PID variant's K can be observed.
    fn min_reservation(&self) -> usize {
        0
    }

    /// The GPU this policy runs `tenant`'s work on, for policies that give each tenant
    /// one (DCUDA's placement); drivers place the tenant's program there. `None`: the
    /// policy places task by task.
    fn home(&self, _tenant: crate::TenantId) -> Option<crate::GpuId> {
        None
    }
}

/// A policy configuration is invalid for this node.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    /// Reserving every GPU for user-facing work would starve batch work forever.
    #[error("minimum reservation K={k} must be smaller than the number of GPUs ({gpus})")]
    ReservationTooLarge {
        /// Requested K.
        k: usize,
        /// GPUs in the node.
        gpus: usize,
    },
    /// A policy needs at least one GPU.
    #[error("the node has no GPUs")]
    NoGpus,
    /// An SLA of zero cannot be met and would divide by zero in Flexy's estimate.
    #[error("the SLA must be positive")]
    ZeroSla,
    /// A co-locating policy that may run no task on a GPU would run nothing.
    #[error("tasks per GPU must be at least 1")]
    NoColocation,
}

/// Gains of the PID controller that adapts Flexy's K at run time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PidGains {
    /// Proportional gain, GPUs per unit of normalised latency error.
    pub kp: f64,
    /// Integral gain, GPUs per (unit error x second).
    pub ki: f64,
    /// Derivative gain, GPUs per (unit error / second).
    pub kd: f64,
    /// Target latency as a fraction of the SLA.
    pub setpoint: f64,
    /// Control period.
    pub period: Nanos,
}

impl Default for PidGains {
    fn default() -> Self {
        // Chosen by reasoning, not tuned against the paper's figures: at a sustained
        // error of one SLA the integral adds a GPU every 5 s, and a quiet node (error
        // -0.5) drains a full integral of 3 GPUs in 30 s.
        PidGains { kp: 1.0, ki: 0.2, kd: 0.0, setpoint: 0.5, period: Nanos::from_secs(1) }
    }
}

/// Everything needed to build a policy, by name. Serialisable so that experiment
/// results record exactly which policy produced them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "policy")]
pub enum PolicyConfig {
    /// Round-robin over non-empty tenants, no class distinction (Flexy §II-A).
    RoundRobin,
    /// User-facing before batch (Flexy §II-B), with K GPUs reserved for user-facing
    /// work and optionally GPU reset as preemption (§II-D).
    Priority {
        /// GPUs reserved for user-facing tasks.
        reserve: usize,
        /// Reset latency, when the policy may reset GPUs running batch tasks.
        reset: Option<Nanos>,
    },
    /// Flexy's elastic user-facing pool, Algorithm 1 (§II-C).
    Flexy {
        /// Minimum reservation K.
        reserve: usize,
        /// Reset latency, when the policy may reset GPUs running batch tasks.
        reset: Option<Nanos>,
        /// The common user-facing SLA.
        sla: Nanos,
        /// k: how many recent user-facing task times estimate le.
        history: usize,
        /// How Algorithm 1 orders the GPUs (packing unless said).
        #[serde(default)]
        order: flexy::PoolOrder,
    },
    /// Flexy with K adapted by a PID controller on user-facing latency (the paper's
    /// proposed future work, §II-C2).
    FlexyPid {
        /// The common user-facing SLA.
        sla: Nanos,
        /// k, as for Flexy.
        history: usize,
        /// Controller gains.
        gains: PidGains,
    },
    /// schedGPU: memory admission with a wait queue and a notification policy.
    MemSafe {
        /// Which waiters are served when memory is freed.
        notification: NotificationPolicy,
    },
    /// First-come first-served, each task to the least-loaded GPU, up to `per_gpu`
    /// co-running tasks per GPU (DCUDA §5's least-loaded baseline; needs a driver that
    /// shares GPUs when `per_gpu` > 1).
    LeastLoaded {
        /// Tasks that may run at once on one GPU.
        per_gpu: usize,
    },
    /// Xen's credit scheduler applied to GPUs (FairGV §5.3's Credit baseline).
    Credit,
    /// Credit with Pegasus's strict coscheduling (FairGV §5.3's Strict, Algorithm 2):
    /// needs a driver that reports the host CPU scheduler's switches
    /// (`CoscheduleRequested`); without them it is Credit.
    Strict,
    /// FairGV's fair queuing by tenant weight (§3.2.1), one quantum per GPU at a time;
    /// the GPU waits up to `spin` for the tenant whose turn it is (§3.2.2).
    Fair {
        /// The spin budget.
        spin: Nanos,
    },
    /// The composed node policy: Flexy's pool for user-facing tenants, hierarchical
    /// fair queuing for batch tenants on the other GPUs, each on a home GPU chosen and
    /// rebalanced by DCUDA's monitor and balancer, homes admitted by memory.
    Node {
        /// Its parameters (Flexy's within).
        params: node::NodeParams,
    },
}

impl PolicyConfig {
    /// The label used in reports and figures (the paper's names where it has one).
    pub fn label(&self) -> String {
        match self {
            PolicyConfig::RoundRobin => "RoundRobin".into(),
            PolicyConfig::Priority { reset: Some(_), .. } => "P-Reset".into(),
            PolicyConfig::Priority { reserve, reset: None } => format!("P-MinRes{reserve}"),
            PolicyConfig::Flexy { reset: Some(_), order, .. } => {
                format!("F-Reset{}", order.suffix())
            }
            PolicyConfig::Flexy { reserve, reset: None, order, .. } => {
                format!("F-MinRes{reserve}{}", order.suffix())
            }
            PolicyConfig::FlexyPid { .. } => "F-PID".into(),
            PolicyConfig::MemSafe { notification } => format!("schedGPU {}", notification.label()),
            PolicyConfig::LeastLoaded { per_gpu } => format!("LeastLoaded{per_gpu}"),
            PolicyConfig::Fair { .. } => "FairGV".into(),
            PolicyConfig::Credit => "Credit".into(),
            PolicyConfig::Strict => "Strict".into(),
            PolicyConfig::Node { .. } => "Node".into(),
        }
    }

    /// Whether this configuration can run on a node of `gpus` GPUs.
    pub fn validate(&self, gpus: usize) -> Result<(), PolicyError> {
        if gpus == 0 {
            return Err(PolicyError::NoGpus);
        }
        let check_k = |k: usize| {
            if k >= gpus { Err(PolicyError::ReservationTooLarge { k, gpus }) } else { Ok(()) }
        };
        let check_sla =
            |sla: Nanos| if sla == Nanos::ZERO { Err(PolicyError::ZeroSla) } else { Ok(()) };
        match self {
            PolicyConfig::Priority { reserve, .. } => check_k(*reserve),
            PolicyConfig::Flexy { reserve, sla, .. } => check_k(*reserve).and(check_sla(*sla)),
            PolicyConfig::FlexyPid { sla, .. } => check_sla(*sla),
            PolicyConfig::LeastLoaded { per_gpu: 0 } => Err(PolicyError::NoColocation),
            PolicyConfig::Node { params } => {
                check_k(params.flexy.reserve).and(check_sla(params.flexy.sla))
            }
            _ => Ok(()),
        }
    }

    /// Build the policy for a node with these GPUs.
    pub fn build(&self, gpus: &[GpuSpec]) -> Result<Box<dyn Policy>, PolicyError> {
        self.validate(gpus.len())?;
        Ok(match self {
            PolicyConfig::RoundRobin => Box::new(round_robin::RoundRobin::new(gpus)),
            PolicyConfig::Priority { reserve, reset } => {
                Box::new(priority::Priority::new(gpus, *reserve, *reset))
            }
            PolicyConfig::Flexy { reserve, reset, sla, history, order } => {
                Box::new(flexy::Flexy::new(
                    gpus,
                    flexy::FlexyParams {
                        reserve: *reserve,
                        reset: *reset,
                        sla: *sla,
                        history: *history,
                        order: *order,
                    },
                ))
            }
            PolicyConfig::FlexyPid { sla, history, gains } => {
                Box::new(pid::FlexyPid::new(gpus, *sla, *history, *gains))
            }
            PolicyConfig::MemSafe { notification } => {
                Box::new(memsafe::MemSafe::new(gpus, *notification))
            }
            PolicyConfig::LeastLoaded { per_gpu } => {
                Box::new(least_loaded::LeastLoaded::new(gpus, *per_gpu))
            }
            PolicyConfig::Fair { spin } => Box::new(fair::FairQueuing::new(gpus).with_spin(*spin)),
            PolicyConfig::Credit => Box::new(credit::Credit::new(gpus)),
            PolicyConfig::Strict => Box::new(credit::Credit::strict(gpus)),
            PolicyConfig::Node { params } => Box::new(node::NodePolicy::new(gpus, *params)),
        })
    }
}
