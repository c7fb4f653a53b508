//! `tessera k8s …`: tessera on a Kubernetes node (docs/kubernetes.md).

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use tessera_k8s::config::PluginConfig;

/// Kubernetes: the device plugin a DaemonSet runs beside the daemon.
#[derive(Debug, Subcommand)]
pub enum K8sCommand {
    /// Serve the kubelet's device plugin API: advertise each GPU's memory in units as
    /// `tessera.io/gpu-memory`, and make each container given units a tenant of this
    /// node's daemon with exactly that memory on one GPU.
    DevicePlugin(DevicePluginArgs),
    /// Print the DRA `ResourceSlice` of this node (JSON): one device per GPU the daemon
    /// has, whose memory several claims may consume. The driver does not publish it
    /// itself (it has no API server client): apply it, e.g. with kubectl.
    ResourceSlice(ResourceSliceArgs),
}

/// Which node, and the configuration (its driver name, unit and daemon socket).
#[derive(Debug, Args)]
pub struct ResourceSliceArgs {
    /// The node's name in the cluster.
    #[arg(long)]
    pub node: String,
    /// The plugin's configuration (as for `device-plugin`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The daemon's socket (overrides the file's `daemon_socket`).
    #[arg(long)]
    pub socket: Option<PathBuf>,
}

fn load(config: &Option<PathBuf>) -> Result<PluginConfig> {
    let default = PathBuf::from("/etc/tessera/k8s.toml");
    Ok(match config {
        Some(p) => PluginConfig::load(p)?,
        None if default.exists() => PluginConfig::load(&default)?,
        None => PluginConfig::default(),
    })
}

/// The device plugin's settings: its file, and what the command line overrides.
#[derive(Debug, Args)]
pub struct DevicePluginArgs {
    /// Its configuration (TOML; docs/kubernetes.md). Without this flag,
    /// /etc/tessera/k8s.toml when it exists, else the defaults.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The daemon's socket (overrides the file's `daemon_socket`).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// The kubelet's device-plugin directory (overrides `device_plugin_dir`).
    #[arg(long)]
    pub device_plugin_dir: Option<PathBuf>,
    /// The kubelet's pod resources socket (overrides `pod_resources_socket`).
    #[arg(long)]
    pub pod_resources_socket: Option<PathBuf>,
    /// Where the plugin keeps its allocations (overrides `state`).
    #[arg(long)]
    pub state: Option<PathBuf>,
}

/// Run a `tessera k8s` command.
pub fn run(cmd: K8sCommand) -> Result<()> {
    match cmd {
        K8sCommand::DevicePlugin(a) => {
            let mut cfg = load(&a.config)?;
            if let Some(s) = a.socket {
                cfg.daemon_socket = s;
            }
            if let Some(d) = a.device_plugin_dir {
                cfg.device_plugin_dir = d;
            }
            if let Some(p) = a.pod_resources_socket {
                cfg.pod_resources_socket = p;
            }
            if let Some(s) = a.state {
                cfg.state = s;
            }
            cfg.check()?;
            tessera_k8s::serve::run_until_signalled(cfg).context("the device plugin")?;
            Ok(())
        }
        K8sCommand::ResourceSlice(a) => {
            let mut cfg = load(&a.config)?;
            if let Some(s) = a.socket {
                cfg.daemon_socket = s;
            }
            let status = tessera_client::Client::connect_control(&cfg.daemon_socket)
                .and_then(|mut c| c.status())
                .with_context(|| format!("the daemon at {}", cfg.daemon_socket.display()))?;
            let gpus: Vec<(u32, u64)> =
                status.gpus.iter().map(|g| (g.gpu, g.memory_total)).collect();
            let slice =
                tessera_k8s::dra::resource_slice(&cfg.dra.driver, &a.node, &gpus, cfg.unit_bytes);
            let mut value = serde_json::to_value(&slice)?;
            // the object's type, as the API server serves it
            value["apiVersion"] = "resource.k8s.io/v1".into();
            value["kind"] = "ResourceSlice".into();
            println!("{}", serde_json::to_string_pretty(&value)?);
            Ok(())
        }
    }
}
