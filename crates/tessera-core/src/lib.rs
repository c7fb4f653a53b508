//! tessera's scheduling core.
//!
//! Every policy is a deterministic state machine: a driver (the simulator or the
//! daemon) tells it what happened ([`Event`]) and the current time ([`Nanos`]), and it
//! answers with [`Action`]s. A policy never reads a clock, sleeps, spawns threads or
//! does I/O, so the same policy object runs in simulated and in wall-clock time.
//!
//! Module map:
//! - [`units`], [`ids`], [`model`]: the vocabulary (time, memory, compute share, GPUs,
//!   tenants, tasks, placements).
//! - [`event`], [`action`]: the whole interface between drivers and policies:
//!   dispatch to GPUs and partitions (single or batched), memory admission, resets,
//!   migration, repartitioning and power states, with their acknowledgements,
//!   failures and a typed refusal for what a driver does not support.
//! - [`policy`]: the [`Policy`] trait and the [`PolicyConfig`] that builds one by name.
//! - [`estimate`]: moving averages used to predict task durations.
//! - [`board`]: the bookkeeping every policy needs (per-GPU state with the tasks
//!   running there — one, or several when the policy co-locates —, partitions, power,
//!   migrations under way, per-tenant FIFO queues), so that a policy module holds only
//!   its decisions.
//! - [`policies`]: one module per policy family, each cited to its paper.
//! - [`gate`]: the launch gate's rule (a slice's accounting, its give-back and its
//!   charge), called by the interposer and by the simulator's program engine.
//! - [`interactive`]: FairGV's classification of CPU-GPU interactive tenants.
#![forbid(unsafe_code)]

pub mod action;
pub mod board;
pub mod estimate;
pub mod event;
mod free_order;
pub mod gate;
mod id_set;
mod id_table;
pub mod ids;
pub mod interactive;
mod lazy_min;
pub mod model;
pub mod policies;
pub mod policy;
mod tenant_map;
pub mod units;
mod vec_map;

pub use action::Action;
pub use event::Event;
pub use ids::{GpuId, MemRequestId, PartitionId, TaskId, TenantId};
pub use model::{GpuSpec, LaunchInfo, Placement, ServiceClass, TaskSpec, TenantSpec};
pub use policy::{Policy, PolicyConfig, PolicyError};
pub use units::{Bytes, Nanos, PerMille, SizeError};
