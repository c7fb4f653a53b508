//! The device plugin's configuration: a TOML file (`/etc/tessera/k8s.toml` in the
//! DaemonSet's ConfigMap; docs/kubernetes.md), every key optional.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A configuration the plugin cannot run with.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this configuration.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its line.
        source: Box<toml::de::Error>,
    },
    /// A value out of its range.
    #[error("{0}")]
    Invalid(String),
}

/// The plugin's settings.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PluginConfig {
    /// The extended resource a pod asks for.
    pub resource: String,
    /// Bytes of GPU memory in one unit the plugin advertises (default 1 GiB).
    pub unit_bytes: u64,
    /// The kubelet's device-plugin directory: its `kubelet.sock`, and where the plugin
    /// serves its own socket.
    pub device_plugin_dir: PathBuf,
    /// The plugin's socket's name in that directory.
    pub endpoint: String,
    /// The kubelet's pod resources socket, followed to free the allocations of pods
    /// that are gone.
    pub pod_resources_socket: PathBuf,
    /// The daemon's control socket on the node.
    pub daemon_socket: PathBuf,
    /// Where the daemon's socket's directory appears in a container (mounted read-only).
    pub container_socket_dir: PathBuf,
    /// The interposer on the node.
    pub interposer: PathBuf,
    /// Where it appears in a container (mounted read-only, `LD_PRELOAD`ed).
    pub container_interposer: PathBuf,
    /// Where the plugin keeps its allocations, so that its restart loses none.
    pub state: PathBuf,
    /// Give containers their share as a CDI device (`cdi_devices` in `Allocate`, with the
    /// spec written in `cdi_dir`) instead of mounts and environment.
    pub cdi: bool,
    /// Where CDI runtimes read specs.
    pub cdi_dir: PathBuf,
    /// How often the plugin checks the kubelet's and the daemon's sockets and the pod
    /// resources list, milliseconds.
    pub poll_ms: u64,
    /// How long an allocation the kubelet never listed in a pod is kept, seconds (a
    /// pod whose container was never made).
    pub unlisted_grace_s: u64,
    /// Device nodes every container with a share gets besides its GPU's `/dev/nvidiaN`
    /// (those that exist on the node).
    pub control_devices: Vec<PathBuf>,
    /// GPU time weights: the cluster admin's, never the pod's own.
    pub weights: Weights,
    /// The DRA driver (Kubernetes 1.34+), served by the same process.
    pub dra: DraConfig,
}

/// The DRA driver's settings.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DraConfig {
    /// Serve it.
    pub enabled: bool,
    /// The driver's name (its `DeviceClass` selects on it).
    pub driver: String,
    /// The kubelet's plugin registration directory (it watches it for sockets).
    pub plugins_registry: PathBuf,
    /// The directory of the driver's DRA socket.
    pub plugin_dir: PathBuf,
    /// Where the driver reads the `ResourceClaim`s it prepares (JSON, as the API server
    /// serves them, `NAMESPACE/NAME.json`): reading them from the API server is not
    /// built.
    pub claims_dir: PathBuf,
    /// Where it keeps the claims it prepared.
    pub state: PathBuf,
}

impl Default for DraConfig {
    fn default() -> Self {
        DraConfig {
            enabled: false,
            driver: "gpu.tessera.io".into(),
            plugins_registry: "/var/lib/kubelet/plugins_registry".into(),
            plugin_dir: "/var/lib/kubelet/plugins/gpu.tessera.io".into(),
            claims_dir: "/var/lib/tessera/claims".into(),
            state: "/var/lib/tessera/dra-claims.json".into(),
        }
    }
}

/// Weights by the pod's namespace (the kubelet's pod resources list names it).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Weights {
    /// A namespace not listed.
    pub default: u32,
    /// Namespace → weight (1-1000).
    pub namespaces: BTreeMap<String, u32>,
}

impl Default for Weights {
    fn default() -> Self {
        Weights { default: 1, namespaces: BTreeMap::new() }
    }
}

impl Weights {
    /// The weight of a pod in `namespace`.
    pub fn of(&self, namespace: &str) -> u32 {
        self.namespaces.get(namespace).copied().unwrap_or(self.default)
    }
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            resource: "tessera.io/gpu-memory".into(),
            unit_bytes: 1 << 30,
            device_plugin_dir: "/var/lib/kubelet/device-plugins".into(),
            endpoint: "tessera-gpu-memory.sock".into(),
            pod_resources_socket: "/var/lib/kubelet/pod-resources/kubelet.sock".into(),
            daemon_socket: "/run/tessera/tesserad.sock".into(),
            container_socket_dir: "/run/tessera".into(),
            interposer: "/usr/lib/tessera/libtessera_cuda.so".into(),
            container_interposer: "/opt/tessera/libtessera_cuda.so".into(),
            state: "/var/lib/tessera/k8s-device-plugin.json".into(),
            cdi: false,
            cdi_dir: "/var/run/cdi".into(),
            poll_ms: 1000,
            unlisted_grace_s: 120,
            control_devices: vec![
                "/dev/nvidiactl".into(),
                "/dev/nvidia-uvm".into(),
                "/dev/nvidia-uvm-tools".into(),
            ],
            weights: Weights::default(),
            dra: DraConfig::default(),
        }
    }
}

impl PluginConfig {
    /// The configuration in `path`, checked.
    pub fn load(path: &Path) -> Result<PluginConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.into(), source })?;
        let c: PluginConfig = toml::from_str(&text)
            .map_err(|e| ConfigError::Parse { path: path.into(), source: Box::new(e) })?;
        c.check()?;
        Ok(c)
    }

    /// Whether its values are usable.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        // the kubelet's rule for extended resources: a domain-qualified name
        if !self.resource.contains('/') || self.resource.starts_with("kubernetes.io/") {
            return bad(format!(
                "resource {:?} must be a domain-qualified name outside kubernetes.io (e.g. tessera.io/gpu-memory)",
                self.resource
            ));
        }
        if self.unit_bytes < 1 << 20 {
            return bad(format!("unit_bytes {} is under 1 MiB", self.unit_bytes));
        }
        if self.endpoint.is_empty()
            || self.endpoint.contains('/')
            || self.endpoint == "kubelet.sock"
        {
            return bad(format!(
                "endpoint {:?} must be a file name in the device-plugin directory other than kubelet.sock",
                self.endpoint
            ));
        }
        if !(10..=60_000).contains(&self.poll_ms) {
            return bad(format!("poll_ms {} is out of 10-60000", self.poll_ms));
        }
        for (ns, w) in std::iter::once(("default", &self.weights.default))
            .chain(self.weights.namespaces.iter().map(|(n, w)| (n.as_str(), w)))
        {
            if !(1..=1000).contains(w) {
                return bad(format!("weight {w} of {ns} is out of 1-1000"));
            }
        }
        let d = &self.dra.driver;
        if !d.contains('.')
            || d.len() > 63
            || !d
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        {
            return bad(format!(
                "dra.driver {d:?} must be a DNS subdomain of at most 63 characters (e.g. gpu.tessera.io)"
            ));
        }
        for p in [&self.container_socket_dir, &self.container_interposer] {
            if !p.is_absolute() {
                return bad(format!("{} must be an absolute path in the container", p.display()));
            }
        }
        Ok(())
    }

    /// The daemon's socket as a container sees it.
    pub fn container_socket(&self) -> PathBuf {
        let name = self.daemon_socket.file_name().unwrap_or_else(|| "tesserad.sock".as_ref());
        self.container_socket_dir.join(name)
    }

    /// The daemon's socket's directory on the node (mounted into containers: a bind
    /// mount of the socket itself would keep a daemon's restarted socket out).
    pub fn daemon_socket_dir(&self) -> PathBuf {
        self.daemon_socket.parent().map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_optional_and_unknown_ones_are_refused() {
        let c: PluginConfig = toml::from_str("").unwrap();
        assert_eq!(c, PluginConfig::default());
        assert!(c.check().is_ok());
        let c: PluginConfig =
            toml::from_str("unit_bytes = 536870912\n[weights]\nnamespaces = { team-a = 3 }\n")
                .unwrap();
        assert_eq!((c.unit_bytes, c.weights.of("team-a"), c.weights.of("other")), (1 << 29, 3, 1));
        let e = toml::from_str::<PluginConfig>("unit = 3\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `unit`"), "{e}");
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        let check = |c: PluginConfig| c.check().unwrap_err().to_string();
        let d = PluginConfig::default;
        assert!(check(PluginConfig { resource: "gpu-memory".into(), ..d() }).contains("domain"));
        assert!(check(PluginConfig { unit_bytes: 4096, ..d() }).contains("under 1 MiB"));
        assert!(
            check(PluginConfig { endpoint: "kubelet.sock".into(), ..d() }).contains("endpoint")
        );
        let mut w = d();
        w.weights.namespaces.insert("x".into(), 0);
        assert!(check(w).contains("weight 0 of x"));
        assert_eq!(d().container_socket(), PathBuf::from("/run/tessera/tesserad.sock"));
    }
}
