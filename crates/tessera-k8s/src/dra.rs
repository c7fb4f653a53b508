//! The DRA driver (Kubernetes 1.34+, consumable capacity, KEP-5075): each GPU is one
//! device whose `memory` capacity several claims consume; preparing a claim makes the
//! memory the scheduler gave it a tessera allocation, handed to the container as a CDI
//! device. The `ResourceSlice` the driver would publish is [`resource_slice`]; the
//! claims it prepares are read from `[dra] claims_dir` (reading them from the API server
//! is not built).

use crate::node::{Node, daemon};
use crate::proto::dra::Device as PreparedDevice;
use k8s_openapi::api::resource::v1 as resource;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tessera_client::pod::{PodGrant, Token};

/// A claim the driver cannot prepare or unprepare.
#[derive(Debug, thiserror::Error)]
pub enum DraError {
    /// Its `ResourceClaim` cannot be read.
    #[error("cannot read ResourceClaim {namespace}/{name}: {why}")]
    NoClaim {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Why.
        why: String,
    },
    /// The object read is another claim than the kubelet named.
    #[error("ResourceClaim {0} has another uid than the kubelet's")]
    OtherUid(String),
    /// The claim has no allocation of this driver's devices.
    #[error("ResourceClaim {0} has no device of driver {1} allocated")]
    NotOurs(String, String),
    /// A device this node does not have.
    #[error("device {0:?} is not one of this node's GPUs (gpu-<N>, listed by the daemon)")]
    NoSuchDevice(String),
    /// The allocation names no memory, or one that is not a quantity.
    #[error("the allocation of {device} consumes no readable memory capacity ({got:?})")]
    NoMemory {
        /// The device.
        device: String,
        /// What it said.
        got: Option<String>,
    },
    /// More memory than the GPU has left for claims.
    #[error("GPU {gpu} has {has} bytes, its prepared claims hold {held}: {asked} more do not fit")]
    OverCapacity {
        /// The GPU.
        gpu: u32,
        /// What the claim consumes.
        asked: u64,
        /// What the GPU's prepared claims hold.
        held: u64,
        /// The GPU's memory.
        has: u64,
    },
    /// The daemon refused or cannot be reached.
    #[error("the tessera daemon did not take the claim: {0}")]
    Daemon(String),
    /// The book or a CDI spec cannot be written.
    #[error("{0}")]
    Keep(String),
}

/// A claim prepared on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prepared {
    /// Its namespace (its weight's key).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// What its containers' processes present.
    pub token: Token,
    /// Its GPU.
    pub gpu: u32,
    /// Bytes it consumes.
    pub memory: u64,
    /// Its weight.
    pub weight: u32,
    /// Its CDI device's name.
    pub cdi: String,
    /// What was answered: (request, pool, device) per allocated device.
    pub devices: Vec<(String, String, String)>,
}

/// A Kubernetes quantity in bytes: a plain integer, or with a binary (`Ki`…`Ei`) or
/// decimal (`k`, `M`, `G`, `T`, `P`, `E`) suffix; `None` for anything else (fractions,
/// exponents, negatives).
pub fn bytes_of(q: &str) -> Option<u64> {
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (digits, suffix) = q.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let scale: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// The name of GPU `gpu`'s device.
pub fn device_name(gpu: u32) -> String {
    format!("gpu-{gpu}")
}

fn gpu_of(device: &str) -> Option<u32> {
    let n = device.strip_prefix("gpu-")?;
    (n == "0" || !n.starts_with('0')).then(|| n.parse().ok()).flatten()
}

/// The `ResourceSlice` of node `node` for `gpus` (index, bytes): one device per GPU,
/// `gpu-<N>`, whose `memory` several claims may consume (`allowMultipleAllocations`),
/// in whole `unit_bytes` (the request policy: at least one unit, in steps of one, one
/// by default).
pub fn resource_slice(
    driver: &str,
    node: &str,
    gpus: &[(u32, u64)],
    unit_bytes: u64,
) -> resource::ResourceSlice {
    let devices = gpus
        .iter()
        .map(|&(gpu, memory)| {
            let whole = memory / unit_bytes * unit_bytes;
            let capacity = resource::DeviceCapacity {
                value: Quantity(whole.to_string()),
                request_policy: Some(resource::CapacityRequestPolicy {
                    default: Some(Quantity(unit_bytes.to_string())),
                    valid_range: Some(resource::CapacityRequestPolicyRange {
                        min: Quantity(unit_bytes.to_string()),
                        max: Some(Quantity(whole.to_string())),
                        step: Some(Quantity(unit_bytes.to_string())),
                    }),
                    valid_values: None,
                }),
            };
            let index =
                resource::DeviceAttribute { int: Some(i64::from(gpu)), ..Default::default() };
            resource::Device {
                name: device_name(gpu),
                allow_multiple_allocations: Some(true),
                attributes: Some([("index".to_string(), index)].into()),
                capacity: Some([("memory".to_string(), capacity)].into()),
                ..Default::default()
            }
        })
        .collect();
    resource::ResourceSlice {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(format!("{node}-{}", driver.replace('.', "-"))),
            ..Default::default()
        },
        spec: resource::ResourceSliceSpec {
            driver: driver.into(),
            node_name: Some(node.into()),
            pool: resource::ResourcePool {
                name: node.into(),
                generation: 1,
                resource_slice_count: 1,
            },
            devices: Some(devices),
            ..Default::default()
        },
    }
}

/// The claims prepared, and the file that keeps them (by claim uid).
#[derive(Debug)]
pub struct Dra {
    node: Arc<Node>,
    path: PathBuf,
    claims: Mutex<BTreeMap<String, Prepared>>,
}

impl Dra {
    /// The driver on `node`, its book read from `[dra] state`.
    pub fn open(node: Arc<Node>) -> Result<Dra, DraError> {
        let path = node.cfg.dra.state.clone();
        let claims = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                DraError::Keep(format!(
                    "{} is not the DRA driver's claims ({e}): move it away to start with none",
                    path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(DraError::Keep(format!("{}: {e}", path.display()))),
        };
        Ok(Dra { node, path, claims: Mutex::new(claims) })
    }

    fn save(&self, claims: &BTreeMap<String, Prepared>) -> Result<(), DraError> {
        // written as a CDI spec is: root only (tokens), renamed into place
        let json = serde_json::to_value(claims).expect("claims serialise");
        crate::cdi::write(&self.path, &json).map_err(|e| DraError::Keep(e.to_string()))
    }

    /// The prepared claims.
    pub fn prepared(&self) -> Vec<Prepared> {
        self.claims.lock().expect("claims").values().cloned().collect()
    }

    /// Give the daemon every prepared claim again (after its restart).
    pub fn regrant_all(&self) {
        // under the lock: a claim unprepared meanwhile is not given back
        let claims = self.claims.lock().expect("claims");
        for p in claims.values() {
            let grant = grant_of(p);
            if let Err(e) = daemon(&self.node.cfg)
                .and_then(|mut c| c.pod_start(grant).map_err(|e| e.to_string()))
            {
                tracing::warn!(claim = %p.name, error = %e, "the daemon did not take a claim");
            }
        }
    }

    fn read_claim(&self, namespace: &str, name: &str) -> Result<resource::ResourceClaim, DraError> {
        let bad =
            |why: String| DraError::NoClaim { namespace: namespace.into(), name: name.into(), why };
        // names are DNS labels and subdomains: no path can be made of them
        let ok = |s: &str| !s.is_empty() && !s.contains('/') && s != "." && s != "..";
        if !ok(namespace) || !ok(name) {
            return Err(bad("not a namespace and name".into()));
        }
        let path = self.node.cfg.dra.claims_dir.join(namespace).join(format!("{name}.json"));
        let bytes = std::fs::read(&path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
        serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))
    }

    /// Prepare the claim `namespace/name` (`uid`): the memory its allocation consumes on
    /// this driver's device becomes an allocation in the daemon, answered as a CDI
    /// device. Preparing a claim again answers the same.
    pub fn prepare(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Vec<PreparedDevice>, DraError> {
        // held throughout, daemon call included: two calls for one claim (a claim two
        // pods share) prepare it once, and the capacity check sees every claim
        let mut claims = self.claims.lock().expect("claims");
        if let Some(p) = claims.get(uid) {
            return Ok(self.answer(p));
        }
        let claim = self.read_claim(namespace, name)?;
        if claim.metadata.uid.as_deref() != Some(uid) {
            return Err(DraError::OtherUid(format!("{namespace}/{name}")));
        }
        let driver = &self.node.cfg.dra.driver;
        let results: Vec<resource::DeviceRequestAllocationResult> = claim
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .unwrap_or_default()
            .into_iter()
            .filter(|r| &r.driver == driver)
            .collect();
        // one GPU per claim: a claim's memory is one allocation of the daemon's
        let Some(first) = results.first() else {
            return Err(DraError::NotOurs(format!("{namespace}/{name}"), driver.clone()));
        };
        let gpu =
            gpu_of(&first.device).ok_or_else(|| DraError::NoSuchDevice(first.device.clone()))?;
        let mut memory = 0u64;
        for r in &results {
            if r.device != first.device {
                return Err(DraError::NoSuchDevice(format!(
                    "{} beside {} (a claim's memory is on one GPU)",
                    r.device, first.device
                )));
            }
            let q = r.consumed_capacity.as_ref().and_then(|c| c.get("memory")).map(|q| q.0.clone());
            let b = q.as_deref().and_then(bytes_of).filter(|b| *b > 0);
            memory = b
                .and_then(|b| memory.checked_add(b))
                .ok_or(DraError::NoMemory { device: r.device.clone(), got: q })?;
        }
        let has = self
            .node
            .gpu_memory(gpu)
            .ok_or_else(|| DraError::NoSuchDevice(first.device.clone()))?;
        let held: u64 = claims.values().filter(|p| p.gpu == gpu).map(|p| p.memory).sum();
        if held.saturating_add(memory) > has {
            return Err(DraError::OverCapacity { gpu, asked: memory, held, has });
        }
        let token = Token::random().map_err(|e| DraError::Keep(e.to_string()))?;
        let p = Prepared {
            namespace: namespace.into(),
            name: name.into(),
            token,
            gpu,
            memory,
            weight: self.node.cfg.weights.of(namespace),
            cdi: format!("claim-{uid}"),
            devices: results
                .iter()
                .map(|r| (r.request.clone(), r.pool.clone(), r.device.clone()))
                .collect(),
        };
        // the spec and the book first: a driver that dies after the daemon's grant
        // would otherwise leave an allocation no one ends
        let edits = self.node.edits_for(gpu, &token, &format!("{}/{}", first.device, memory));
        let kind = self.cdi_kind();
        let spec_path = crate::cdi::spec_path(&self.node.cfg.cdi_dir, &kind, &p.cdi);
        crate::cdi::write(&spec_path, &crate::cdi::spec(&kind, &p.cdi, &edits))
            .map_err(|e| DraError::Keep(e.to_string()))?;
        claims.insert(uid.into(), p.clone());
        let undo = |claims: &mut BTreeMap<String, Prepared>| {
            claims.remove(uid);
            let _ = std::fs::remove_file(&spec_path);
        };
        if let Err(e) = self.save(&claims) {
            undo(&mut claims);
            return Err(e);
        }
        if let Err(e) = daemon(&self.node.cfg)
            .and_then(|mut c| c.pod_start(grant_of(&p)).map_err(|e| e.to_string()))
        {
            undo(&mut claims);
            let _ = self.save(&claims);
            return Err(DraError::Daemon(e));
        }
        tracing::info!(claim = %format!("{namespace}/{name}"), gpu, memory, weight = p.weight, "claim prepared");
        Ok(self.answer(&p))
    }

    /// Unprepare the claim `uid`: its allocation ends; a claim not prepared here is
    /// unprepared already.
    pub fn unprepare(&self, uid: &str) -> Result<(), DraError> {
        let mut claims = self.claims.lock().expect("claims");
        let Some(p) = claims.get(uid).cloned() else { return Ok(()) };
        daemon(&self.node.cfg)
            .and_then(|mut c| c.pod_end(p.token).map_err(|e| e.to_string()))
            .map_err(DraError::Daemon)?;
        let spec = crate::cdi::spec_path(&self.node.cfg.cdi_dir, &self.cdi_kind(), &p.cdi);
        let _ = std::fs::remove_file(spec);
        claims.remove(uid);
        self.save(&claims)?;
        tracing::info!(claim = %format!("{}/{}", p.namespace, p.name), "claim unprepared");
        Ok(())
    }

    /// The CDI kind of the driver's devices.
    pub fn cdi_kind(&self) -> String {
        format!("{}/claim", self.node.cfg.dra.driver)
    }

    fn answer(&self, p: &Prepared) -> Vec<PreparedDevice> {
        let id = format!("{}={}", self.cdi_kind(), p.cdi);
        let mut by_device: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for (request, pool, device) in &p.devices {
            by_device.entry((pool.clone(), device.clone())).or_default().push(request.clone());
        }
        by_device
            .into_iter()
            .map(|((pool_name, device_name), request_names)| PreparedDevice {
                request_names,
                pool_name,
                device_name,
                cdi_device_ids: vec![id.clone()],
            })
            .collect()
    }

    /// The claims directory the driver reads.
    pub fn claims_dir(&self) -> &Path {
        &self.node.cfg.dra.claims_dir
    }
}

fn grant_of(p: &Prepared) -> PodGrant {
    PodGrant {
        token: p.token,
        gpu: p.gpu,
        memory: p.memory,
        weight: p.weight,
        name: format!("{}/{} (claim)", p.namespace, p.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_bytes() {
        assert_eq!(bytes_of("3Gi"), Some(3 << 30));
        assert_eq!(bytes_of("1073741824"), Some(1 << 30));
        assert_eq!(bytes_of("2G"), Some(2_000_000_000));
        assert_eq!(bytes_of("512Mi"), Some(512 << 20));
        for bad in ["", "Gi", "1.5Gi", "1e9", "-1", "3GB", "16Ei"] {
            assert_eq!(bytes_of(bad), None, "{bad}");
        }
        assert_eq!(gpu_of("gpu-3"), Some(3));
        assert_eq!(gpu_of("gpu-03"), None);
    }

    #[test]
    fn the_slice_offers_each_gpus_whole_units_to_several_claims() {
        let s = resource_slice(
            "gpu.tessera.io",
            "node-a",
            &[(0, 4 << 30), (1, (4 << 30) + 7)],
            1 << 30,
        );
        let d = s.spec.devices.unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].name, "gpu-1");
        assert_eq!(d[1].allow_multiple_allocations, Some(true));
        let c = &d[1].capacity.as_ref().unwrap()["memory"];
        assert_eq!(c.value.0, (4u64 << 30).to_string(), "whole units only");
        assert_eq!(s.spec.pool.name, "node-a");
    }
}
