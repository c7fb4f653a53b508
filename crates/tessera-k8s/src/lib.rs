//! tessera on a Kubernetes node (issue 54): a device plugin that advertises each GPU's
//! memory in units as an extended resource (`tessera.io/gpu-memory`) and makes each
//! container that gets units a tenant of the node's tessera daemon, entitled to exactly
//! that memory on one GPU, with the weight the cluster admin gave its namespace.
//!
//! - [`config`]: the plugin's settings;
//! - [`units`]: device ids of units, and the choice that keeps a container's on one GPU;
//! - [`allocations`]: the book of allocations (kept on disk) and its reconciliation
//!   with the kubelet's pod resources list;
//! - [`node`]: the book, the advertised units and the daemon's calls together;
//! - [`plugin`]: the `DevicePlugin` gRPC service;
//! - [`kubelet`]: registration and the pod resources list, as the kubelet's client;
//! - [`cdi`]: the same share as a CDI device;
//! - [`serve`]: the plugin's loop.

pub mod allocations;
pub mod cdi;
pub mod config;
pub mod dra;
pub mod dra_grpc;
pub mod kubelet;
pub mod node;
pub mod plugin;
pub mod proto;
pub mod serve;
pub mod units;
