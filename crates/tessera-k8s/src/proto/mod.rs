//! The kubelet's gRPC APIs, generated from `crates/tessera-k8s/proto/` by
//! `scripts/k8s-protos.sh` and kept in the tree, so that building tessera needs no
//! protobuf compiler. Their wire format is checked against the kubelet's own `.proto`
//! files by the test's kubelet stand-in (docs/kubernetes.md).

#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// Device plugin API `v1beta1` (the kubelet's `Registration`, the plugin's `DevicePlugin`).
pub mod deviceplugin {
    include!("deviceplugin.rs");
}

/// Pod resources API `v1` (the kubelet's `PodResourcesLister`).
pub mod podresources {
    include!("podresources.rs");
}

/// DRA kubelet plugin API `v1` (the driver's `DRAPlugin`).
pub mod dra {
    include!("dra.rs");
}

/// Plugin registration API `v1` (the plugin's `Registration`, which the kubelet calls).
pub mod pluginregistration {
    include!("pluginregistration.rs");
}
