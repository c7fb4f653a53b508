//! A container's share as a CDI device: the spec a CDI-aware runtime (containerd,
//! CRI-O) reads from its spec directory, one file per allocation, naming the same
//! environment, mounts and device nodes `Allocate` would return.

use crate::proto::deviceplugin::ContainerAllocateResponse;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The CDI spec version written (the oldest that has everything used here).
pub const CDI_VERSION: &str = "0.6.0";

/// A spec that cannot be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the CDI spec {path}: {source}")]
pub struct CdiError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// The spec file of the device `name` of `kind` (`vendor/class`) in `dir`.
pub fn spec_path(dir: &Path, kind: &str, name: &str) -> PathBuf {
    dir.join(format!("{}-{name}.json", kind.replace('/', "_")))
}

/// The spec of one device, `kind=name`, making `edits` (an `Allocate` answer's
/// environment, mounts and device nodes).
pub fn spec(kind: &str, name: &str, edits: &ContainerAllocateResponse) -> serde_json::Value {
    let env: Vec<String> = edits.envs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mounts: Vec<_> = edits
        .mounts
        .iter()
        .map(|m| {
            let mut options = vec!["bind"];
            if m.read_only {
                options.push("ro");
            }
            json!({"hostPath": m.host_path, "containerPath": m.container_path, "options": options})
        })
        .collect();
    let nodes: Vec<_> = edits
        .devices
        .iter()
        .map(|d| json!({"path": d.container_path, "hostPath": d.host_path, "permissions": d.permissions}))
        .collect();
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": [{
            "name": name,
            "containerEdits": {"env": env, "mounts": mounts, "deviceNodes": nodes},
        }],
    })
}

/// Write `spec` (a CDI spec, or the plugin's and the DRA driver's books) to `path`,
/// readable by root only (each holds tokens): a new file, synced, renamed into place,
/// so a reader never sees half of one.
pub fn write(path: &Path, spec: &serde_json::Value) -> Result<(), CdiError> {
    let err = |source| CdiError { path: path.into(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(serde_json::to_string_pretty(spec).expect("json").as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

use std::os::unix::fs::OpenOptionsExt;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::deviceplugin::{DeviceSpec, Mount};

    #[test]
    fn a_spec_carries_the_same_edits_as_allocate() {
        let edits = ContainerAllocateResponse {
            envs: [("TESSERA_TOKEN".to_string(), "ab".to_string())].into(),
            mounts: vec![Mount {
                container_path: "/run/tessera".into(),
                host_path: "/run/tessera".into(),
                read_only: true,
            }],
            devices: vec![DeviceSpec {
                container_path: "/dev/nvidia0".into(),
                host_path: "/dev/nvidia0".into(),
                permissions: "rw".into(),
            }],
            ..Default::default()
        };
        let s = spec("tessera.io/gpu-memory", "a1", &edits);
        assert_eq!(s["kind"], "tessera.io/gpu-memory");
        let d = &s["devices"][0];
        assert_eq!(d["name"], "a1");
        assert_eq!(d["containerEdits"]["env"][0], "TESSERA_TOKEN=ab");
        assert_eq!(d["containerEdits"]["mounts"][0]["options"], json!(["bind", "ro"]));
        assert_eq!(d["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidia0");
        assert_eq!(
            spec_path(Path::new("/var/run/cdi"), "tessera.io/gpu-memory", "a1"),
            PathBuf::from("/var/run/cdi/tessera.io_gpu-memory-a1.json")
        );
    }
}
