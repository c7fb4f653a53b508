//! The plugin's side of the node: its book of allocations, the units it advertises and
//! their health, and what it asks of the daemon. Blocking (the daemon's client is); the
//! gRPC side calls it off its runtime's threads.

use crate::allocations::{Allocation, Book, BookError, Listed};
use crate::config::PluginConfig;
use crate::proto::deviceplugin::{CdiDevice, ContainerAllocateResponse, Device, DeviceSpec, Mount};
use crate::units::{self, UnitError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tessera_client::Client;
use tessera_client::pod::Token;

/// `Allocate` cannot give what the kubelet asked.
#[derive(Debug, thiserror::Error)]
pub enum AllocateError {
    /// Device ids that are not units of one GPU.
    #[error(transparent)]
    Units(#[from] UnitError),
    /// A unit this node does not have (now).
    #[error("{0} is not a unit this plugin advertises now")]
    Unknown(String),
    /// The daemon refused or cannot be reached.
    #[error("the tessera daemon did not take the allocation: {0}")]
    Daemon(String),
    /// The book or a CDI spec cannot be written: nothing was given.
    #[error("{0}")]
    Keep(String),
}

/// What the plugin knows of the daemon's GPUs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Gpus {
    /// Each GPU the daemon has (or had) and its bytes; `true` while the daemon lists it.
    pub gpus: Vec<(u32, u64, bool)>,
    /// Whether the daemon answered at the last check.
    pub daemon_up: bool,
    /// The daemon's uptime at the last check (a smaller one: it restarted).
    pub uptime_s: f64,
}

/// The plugin's state, shared by its gRPC service and its watch loop.
#[derive(Debug)]
pub struct Node {
    /// Its configuration.
    pub cfg: PluginConfig,
    book: Mutex<Book>,
    gpus: Mutex<Gpus>,
    /// Allocations out of the book whose end the daemon has not heard yet (it did not
    /// answer): told again at each check.
    unended: Mutex<Vec<Allocation>>,
}

/// A control connection to the daemon, with a timeout.
pub(crate) fn daemon(cfg: &PluginConfig) -> Result<Client, String> {
    let mut c = Client::connect_control(&cfg.daemon_socket)
        .map_err(|e| format!("{}: {e}", cfg.daemon_socket.display()))?;
    c.set_timeout(Duration::from_secs(5)).map_err(|e| e.to_string())?;
    Ok(c)
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Node {
    /// The node's plugin state, with the book kept at the configured path.
    pub fn open(cfg: PluginConfig) -> Result<Node, BookError> {
        let book = Book::open(&cfg.state)?;
        Ok(Node {
            cfg,
            book: Mutex::new(book),
            gpus: Mutex::new(Gpus::default()),
            unended: Mutex::new(Vec::new()),
        })
    }

    /// The allocations now.
    pub fn allocations(&self) -> Vec<Allocation> {
        self.book.lock().expect("book").all().to_vec()
    }

    /// The units to advertise: each GPU's whole units, `Unhealthy` where the daemon
    /// no longer lists the GPU or does not answer.
    pub fn devices(&self) -> Vec<Device> {
        let g = self.gpus.lock().expect("gpus");
        let mut out = Vec::new();
        for &(gpu, memory, listed) in &g.gpus {
            let health = if listed && g.daemon_up { "Healthy" } else { "Unhealthy" };
            for index in 0..units::units_of(memory, self.cfg.unit_bytes) {
                out.push(Device {
                    id: units::Unit { gpu, index }.to_string(),
                    health: health.into(),
                    topology: None,
                });
            }
        }
        out
    }

    /// Ask the daemon for its GPUs; returns whether it restarted (or came back) since
    /// the last check, when the plugin gives it its allocations again.
    pub fn check_daemon(&self) -> bool {
        let status = daemon(&self.cfg).and_then(|mut c| c.status().map_err(|e| e.to_string()));
        let mut g = self.gpus.lock().expect("gpus");
        match status {
            Ok(s) => {
                let came_back = !g.daemon_up || s.uptime_s < g.uptime_s;
                for (gpu, memory, listed) in &mut g.gpus {
                    let now = s.gpus.iter().find(|r| r.gpu == *gpu);
                    *listed = now.is_some();
                    if let Some(r) = now {
                        *memory = r.memory_total;
                    }
                }
                for r in &s.gpus {
                    if !g.gpus.iter().any(|(gpu, ..)| *gpu == r.gpu) {
                        g.gpus.push((r.gpu, r.memory_total, true));
                    }
                }
                g.gpus.sort_unstable();
                g.daemon_up = true;
                g.uptime_s = s.uptime_s;
                if came_back {
                    tracing::info!(gpus = s.gpus.len(), "the tessera daemon answers");
                }
                came_back
            }
            Err(e) => {
                if g.daemon_up {
                    tracing::warn!(error = %e, "the tessera daemon does not answer: units Unhealthy");
                }
                g.daemon_up = false;
                false
            }
        }
    }

    /// Give the daemon every allocation again (after its restart, or the plugin's):
    /// the same grant twice is the same allocation.
    pub fn regrant_all(&self) {
        // under the book's lock: an allocation ended meanwhile is not given back
        let book = self.book.lock().expect("book");
        for a in book.all() {
            self.grant(a);
        }
    }

    fn grant(&self, a: &Allocation) -> bool {
        match daemon(&self.cfg).and_then(|mut c| c.pod_start(a.grant()).map_err(|e| e.to_string()))
        {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(units = ?a.units, error = %e, "the daemon did not take an allocation");
                false
            }
        }
    }

    fn end(&self, a: &Allocation) {
        if let Some(name) = &a.cdi {
            let path = crate::cdi::spec_path(&self.cfg.cdi_dir, &self.cfg.resource, name);
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove a CDI spec");
            }
        }
        match daemon(&self.cfg).and_then(|mut c| c.pod_end(a.token).map_err(|e| e.to_string())) {
            Ok(closed) => {
                tracing::info!(units = ?a.units, pod = ?a.pod, closed, "allocation ended")
            }
            Err(e) => {
                tracing::warn!(units = ?a.units, error = %e, "the daemon did not end an allocation: told again later");
                self.unended.lock().expect("unended").push(a.clone());
            }
        }
    }

    /// Tell the daemon again of the ends it did not hear.
    pub fn retry_ends(&self) {
        let pending = std::mem::take(&mut *self.unended.lock().expect("unended"));
        for a in pending {
            self.end(&a);
        }
    }

    /// One container's `Allocate`: its units (of one GPU) become an allocation in the
    /// book and the daemon, answered with what makes the container its tenant.
    pub fn allocate(&self, ids: &[String]) -> Result<ContainerAllocateResponse, AllocateError> {
        let (gpu, mut unit_list) = units::one_gpu(ids)?;
        let advertised: Vec<String> = self.devices().into_iter().map(|d| d.id).collect();
        if let Some(u) = ids.iter().find(|u| !advertised.contains(u)) {
            return Err(AllocateError::Unknown(u.chars().take(64).collect()));
        }
        unit_list.sort_unstable();
        unit_list.dedup();
        let random = || Token::random().map_err(|e| AllocateError::Keep(e.to_string()));
        let token = random()?;
        let cdi = if self.cfg.cdi {
            // a name of its own, not the token's
            let t = random()?.to_string();
            Some(format!("{}-{}", units::Unit { gpu, index: unit_list[0].index }, &t[..12]))
        } else {
            None
        };
        let a = Allocation {
            token,
            gpu,
            units: unit_list.iter().map(ToString::to_string).collect(),
            memory: unit_list.len() as u64 * self.cfg.unit_bytes,
            weight: self.cfg.weights.default,
            pod: None,
            made_ms: now_ms(),
            cdi: cdi.clone(),
        };
        // the book first: a plugin that dies after the daemon's grant would otherwise
        // leave an allocation no one ends
        let gone = {
            let mut book = self.book.lock().expect("book");
            let gone = book.add(a.clone());
            if let Err(e) = book.save() {
                book.remove(&token);
                return Err(AllocateError::Keep(e.to_string()));
            }
            gone
        };
        for old in &gone {
            self.end(old);
        }
        let refuse = |why: String| {
            let mut book = self.book.lock().expect("book");
            book.remove(&token);
            let _ = book.save();
            why
        };
        daemon(&self.cfg)
            .and_then(|mut c| c.pod_start(a.grant()).map_err(|e| e.to_string()))
            .map_err(|e| AllocateError::Daemon(refuse(e)))?;
        let edits = self.edits(&a);
        match cdi {
            None => Ok(edits),
            Some(name) => {
                let path = crate::cdi::spec_path(&self.cfg.cdi_dir, &self.cfg.resource, &name);
                let spec = crate::cdi::spec(&self.cfg.resource, &name, &edits);
                if let Err(e) = crate::cdi::write(&path, &spec) {
                    self.end(&a);
                    return Err(AllocateError::Keep(refuse(e.to_string())));
                }
                Ok(ContainerAllocateResponse {
                    annotations: edits.annotations,
                    cdi_devices: vec![CdiDevice { name: format!("{}={name}", self.cfg.resource) }],
                    ..Default::default()
                })
            }
        }
    }

    /// `Allocate` for several containers: all or none (those made before one that
    /// cannot be are ended).
    pub fn allocate_all(
        &self,
        containers: &[Vec<String>],
    ) -> Result<Vec<ContainerAllocateResponse>, AllocateError> {
        let mut made = Vec::new();
        for ids in containers {
            match self.allocate(ids) {
                Ok(r) => made.push(r),
                Err(e) => {
                    for r in &made {
                        self.release(r);
                    }
                    return Err(e);
                }
            }
        }
        Ok(made)
    }

    /// End the allocation an `Allocate` answer gave (its token, in its environment or
    /// its CDI spec's).
    fn release(&self, answer: &ContainerAllocateResponse) {
        let units = answer.annotations.get("tessera.io/units").cloned().unwrap_or_default();
        let gone = {
            let mut book = self.book.lock().expect("book");
            let found = book.all().iter().find(|a| a.units.join(",") == units).cloned();
            if let Some(a) = &found {
                book.remove(&a.token);
                let _ = book.save();
            }
            found
        };
        if let Some(a) = gone {
            self.end(&a);
        }
    }

    /// What makes a container the tenant of `a`: see [`Node::edits_for`].
    fn edits(&self, a: &Allocation) -> ContainerAllocateResponse {
        self.edits_for(a.gpu, &a.token, &a.units.join(","))
    }

    /// What makes a container the tenant of the allocation with `token` on `gpu`: the
    /// interposer and the daemon's socket directory mounted read-only, the interposer
    /// preloaded, the token; its GPU's device nodes (those the node has); `units` as
    /// the annotation `tessera.io/units`.
    pub fn edits_for(&self, gpu: u32, token: &Token, units: &str) -> ContainerAllocateResponse {
        let c = &self.cfg;
        let mut envs = HashMap::new();
        envs.insert("LD_PRELOAD".to_string(), c.container_interposer.display().to_string());
        envs.insert("TESSERA_SOCKET".to_string(), c.container_socket().display().to_string());
        envs.insert("TESSERA_TOKEN".to_string(), token.to_string());
        let mounts = vec![
            Mount {
                container_path: c.container_socket_dir.display().to_string(),
                host_path: c.daemon_socket_dir().display().to_string(),
                read_only: true,
            },
            Mount {
                container_path: c.container_interposer.display().to_string(),
                host_path: c.interposer.display().to_string(),
                read_only: true,
            },
        ];
        let gpu_node = std::path::PathBuf::from(format!("/dev/nvidia{gpu}"));
        let devices = std::iter::once(&gpu_node)
            .chain(&c.control_devices)
            .filter(|p| p.exists())
            .map(|p| DeviceSpec {
                container_path: p.display().to_string(),
                host_path: p.display().to_string(),
                permissions: "rw".into(),
            })
            .collect();
        let annotations =
            [("tessera.io/units".to_string(), units.to_string())].into_iter().collect();
        ContainerAllocateResponse { envs, mounts, devices, annotations, cdi_devices: vec![] }
    }

    /// The memory of GPU `gpu` as the daemon last said, while it lists it.
    pub fn gpu_memory(&self, gpu: u32) -> Option<u64> {
        let g = self.gpus.lock().expect("gpus");
        g.gpus.iter().find(|(i, _, listed)| *i == gpu && *listed).map(|(_, m, _)| *m)
    }

    /// The daemon's GPUs and their memory, while it lists them.
    pub fn gpu_list(&self) -> Vec<(u32, u64)> {
        let g = self.gpus.lock().expect("gpus");
        g.gpus.iter().filter(|(_, _, listed)| *listed).map(|(i, m, _)| (*i, *m)).collect()
    }

    /// Match the book against the kubelet's list: pods learned get their namespace's
    /// weight; allocations of pods gone (or never made) end.
    pub fn reconcile(&self, listed: &[Listed], listed_ms: u64) {
        let ended = {
            let mut book = self.book.lock().expect("book");
            let weights = &self.cfg.weights;
            let grace_ms = self.cfg.unlisted_grace_s.saturating_mul(1000);
            let ch = book.reconcile(listed, |ns| weights.of(ns), listed_ms, grace_ms);
            if !(ch.regranted.is_empty() && ch.ended.is_empty())
                && let Err(e) = book.save()
            {
                tracing::error!(error = %e, "cannot keep the allocations' book");
            }
            // under the book's lock: an allocation ended meanwhile is not given back
            for a in &ch.regranted {
                tracing::info!(pod = ?a.pod, weight = a.weight, "allocation's pod listed");
                self.grant(a);
            }
            ch.ended
        };
        for a in &ended {
            self.end(a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_of_a_gpu_gone_or_of_a_silent_daemon_are_unhealthy() {
        let dir = std::env::temp_dir().join(format!("tessera-k8s-node-{}", std::process::id()));
        let cfg = PluginConfig { state: dir.join("book.json"), ..PluginConfig::default() };
        let node = Node::open(cfg).unwrap();
        *node.gpus.lock().unwrap() = Gpus {
            gpus: vec![(0, 2 << 30, true), (1, (3 << 30) + 5, false)],
            daemon_up: true,
            uptime_s: 1.0,
        };
        let health = |node: &Node| -> Vec<(String, String)> {
            node.devices().into_iter().map(|d| (d.id, d.health)).collect()
        };
        let h = health(&node);
        assert_eq!(h.len(), 5, "2 + 3 whole units: {h:?}");
        assert!(h[..2].iter().all(|(_, s)| s == "Healthy"), "{h:?}");
        assert!(h[2..].iter().all(|(_, s)| s == "Unhealthy"), "GPU 1 is gone: {h:?}");
        node.gpus.lock().unwrap().daemon_up = false;
        assert!(health(&node).iter().all(|(_, s)| s == "Unhealthy"));
    }
}
