//! `tessera doctor`: checks a node the way its users would trip on it, and says for
//! each thing wrong how to fix it.
//!
//! Each check gives one [`Finding`]. A [`Verdict::Fail`] is something a user trips on
//! (no driver for a daemon that needs one, no daemon, a ledger anyone can write, an
//! interposer that does not load, a gres.conf that advertises GPUs the daemon does not
//! have); a [`Verdict::Warn`] works today but surprises someone (other users cannot
//! reach the socket); a [`Verdict::Note`] is information (no Slurm here). The pure
//! checks take what they judge as arguments, so that each rule is tested apart from
//! the node it runs on.
#![forbid(unsafe_code)]

use crate::config::{DaemonConfig, ExecutorKind};
use std::fs::Metadata;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tessera_client::proto::StatusReport;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Fine.
    Ok,
    /// Information; nothing to do.
    Note,
    /// Works, but someone will be surprised.
    Warn,
    /// A user trips on it.
    Fail,
}

impl Verdict {
    /// As printed: `ok`, `note`, `WARN`, `FAIL`.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Note => "note",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        }
    }
}

/// One check's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What was checked: `config`, `driver`, `nvml`, `daemon`, `socket`, `ledger`,
    /// `interposer`, `slurm`.
    pub check: &'static str,
    /// How it came out.
    pub verdict: Verdict,
    /// What was found.
    pub what: String,
    /// How to fix it, when something is to be fixed.
    pub fix: Option<String>,
}

impl Finding {
    fn new(check: &'static str, verdict: Verdict, what: impl Into<String>) -> Finding {
        Finding { check, verdict, what: what.into(), fix: None }
    }

    fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = Some(fix.into());
        self
    }

    /// One line: `FAIL  ledger      /dev/shm/x is writable by everyone — fix: ...`.
    pub fn line(&self) -> String {
        let mut s = format!("{:<5} {:<11} {}", self.verdict.label(), self.check, self.what);
        if let Some(fix) = &self.fix {
            s.push_str(" — fix: ");
            s.push_str(fix);
        }
        s
    }
}

/// Where the examined configuration came from.
#[derive(Debug)]
pub enum ConfigSource {
    /// This file.
    File(PathBuf),
    /// No file (this one was looked for): the built-in defaults.
    Defaults(PathBuf),
    /// The file would not do (the daemon would refuse it): the built-in defaults were
    /// examined instead.
    Broken(String),
}

/// What `tessera doctor` examines.
#[derive(Debug)]
pub struct Node {
    /// The daemon's configuration.
    pub config: DaemonConfig,
    /// Where it came from.
    pub config_source: ConfigSource,
    /// The socket to reach the daemon at.
    pub socket: PathBuf,
    /// The interposer `tessera run` would preload, if one was found.
    pub interposer: Option<PathBuf>,
    /// NVML to probe (default `libnvidia-ml.so.1`).
    pub nvml: Option<PathBuf>,
    /// Slurm's gres.conf.
    pub gres_conf: PathBuf,
    /// `/etc/passwd`'s text: the node's users, for the socket's mode.
    pub passwd: String,
}

/// Run every check.
pub fn examine(node: &Node) -> Vec<Finding> {
    let mut out = vec![config_finding(node)];
    let cuda_executor = matches!(node.config.executor, ExecutorKind::Cuda { .. });
    let library = match &node.config.executor {
        ExecutorKind::Cuda { library, .. } => library.clone(),
        ExecutorKind::Emulated { .. } => None,
    };
    let driver = tessera_driver::probe::probe_driver(library.as_deref());
    out.push(driver_finding(&driver, cuda_executor));
    out.push(nvml_finding(
        &tessera_driver::probe::probe_nvml(node.nvml.as_deref()),
        driver.as_ref().ok().map(|d| d.device_memory.len()),
        cuda_executor,
    ));
    let status = tessera_client::Client::connect_control(&node.socket)
        .and_then(|mut c| c.status())
        .map_err(|e| e.to_string());
    out.push(daemon_finding(
        &node.socket,
        &status,
        driver.as_ref().ok().map(|d| d.device_memory.len()),
    ));
    out.push(match std::fs::metadata(&node.socket) {
        Ok(meta) => socket_finding(&node.socket, &meta, &other_users(&node.passwd, meta.uid())),
        Err(_) => {
            Finding::new("socket", Verdict::Note, format!("{} is not there", node.socket.display()))
        }
    });
    out.push(ledger_finding(
        &node.config,
        std::fs::symlink_metadata(&node.config.ledger).ok().as_ref(),
    ));
    out.push(interposer_finding(node.interposer.as_deref()));
    let daemon_gpus = status.as_ref().ok().map(|s| s.gpus.len());
    out.push(match std::fs::read_to_string(&node.gres_conf) {
        Ok(text) => gres_finding(
            &node.gres_conf,
            &text,
            daemon_gpus,
            status
                .as_ref()
                .ok()
                .map_or(node.config.slurm.shards_per_gpu, |s| s.slurm_shards_per_gpu),
        ),
        Err(_) => Finding::new(
            "slurm",
            Verdict::Note,
            format!("no {} (not a Slurm node)", node.gres_conf.display()),
        ),
    });
    out
}

fn config_finding(node: &Node) -> Finding {
    let executor = match &node.config.executor {
        ExecutorKind::Cuda { .. } => "real GPUs (cuda executor)".to_string(),
        ExecutorKind::Emulated { .. } => {
            format!("{} emulated GPUs of {} MiB", node.config.gpus, node.config.gpu_memory_mib)
        }
    };
    match &node.config_source {
        ConfigSource::File(path) => Finding::new(
            "config",
            Verdict::Ok,
            format!("{}: policy {}, {executor}", path.display(), node.config.policy.name()),
        ),
        ConfigSource::Defaults(looked) => Finding::new(
            "config",
            Verdict::Note,
            format!("no {}: the built-in defaults ({executor})", looked.display()),
        ),
        ConfigSource::Broken(why) => Finding::new(
            "config",
            Verdict::Fail,
            format!("{why} (the rest is checked against the defaults)"),
        )
        .fix("correct the key it names; every key is in docs/configuration.md"),
    }
}

/// The CUDA driver: a daemon on real GPUs needs it.
pub fn driver_finding(
    driver: &Result<tessera_driver::probe::DriverReport, String>,
    cuda_executor: bool,
) -> Finding {
    match driver {
        Ok(d) if d.device_memory.is_empty() => Finding::new(
            "driver",
            if cuda_executor { Verdict::Fail } else { Verdict::Note },
            format!("{}: CUDA {} driver, but no GPUs", d.path.display(), d.cuda_version_text()),
        )
        .fix("check `nvidia-smi`; a GPU the kernel driver does not see is not tessera's to share"),
        Ok(d) => Finding::new(
            "driver",
            Verdict::Ok,
            format!(
                "{}: CUDA {} driver, {} GPUs ({})",
                d.path.display(),
                d.cuda_version_text(),
                d.device_memory.len(),
                d.device_memory
                    .iter()
                    .map(|b| format!("{} MiB", b >> 20))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Err(why) if cuda_executor => Finding::new("driver", Verdict::Fail, why.clone()).fix(
            "install NVIDIA's driver (libcuda.so.1), or set [executor] library; without GPUs, \
             try tessera on emulated ones (`tessera daemon --emulate`)",
        ),
        Err(why) => Finding::new(
            "driver",
            Verdict::Note,
            format!("{why} (the daemon is configured for emulated GPUs)"),
        ),
    }
}

/// NVML: what programs' `nvidia-smi`, pynvml and the like read (through the
/// interposer, each its own share).
pub fn nvml_finding(
    nvml: &Result<tessera_driver::probe::NvmlReport, String>,
    driver_gpus: Option<usize>,
    cuda_executor: bool,
) -> Finding {
    match nvml {
        Ok(n) if driver_gpus.is_some_and(|g| g != n.devices as usize) => Finding::new(
            "nvml",
            Verdict::Warn,
            format!(
                "{}: NVML {} sees {} GPUs, the CUDA driver {}",
                n.path.display(),
                n.nvml_version,
                n.devices,
                driver_gpus.unwrap_or(0)
            ),
        )
        .fix("CUDA_VISIBLE_DEVICES or a device cgroup hides some from one of them; check both in the daemon's environment"),
        Ok(n) => Finding::new(
            "nvml",
            Verdict::Ok,
            format!(
                "{}: NVML {}, kernel driver {}, {} GPUs",
                n.path.display(),
                n.nvml_version,
                n.driver_version,
                n.devices
            ),
        ),
        Err(why) => Finding::new("nvml", if cuda_executor { Verdict::Warn } else { Verdict::Note }, why.clone())
            .fix("install NVIDIA's driver utilities (libnvidia-ml.so.1): without it programs' NVML calls (nvidia-smi, pynvml) fail"),
    }
}

/// The daemon answers a status query.
pub fn daemon_finding(
    socket: &Path,
    status: &Result<StatusReport, String>,
    driver_gpus: Option<usize>,
) -> Finding {
    match status {
        Ok(s) => {
            let f = Finding::new(
                "daemon",
                Verdict::Ok,
                format!(
                    "tesserad at {}: {} GPUs ({}), policy {}, {} tenants, up {:.0} s",
                    socket.display(),
                    s.gpus.len(),
                    s.executor,
                    s.policy,
                    s.tenants_total,
                    s.uptime_s
                ),
            );
            match driver_gpus {
                Some(n) if s.executor.starts_with("emulated") => Finding {
                    verdict: Verdict::Warn,
                    what: format!("{} — emulated, while the driver here has {n} real GPUs", f.what),
                    ..f
                }
                .fix("configure [executor] kind = \"cuda\" and restart it (systemctl restart tesserad)"),
                _ => f,
            }
        }
        Err(why) => Finding::new(
            "daemon",
            Verdict::Fail,
            format!("no tesserad at {}: {why}", socket.display()),
        )
        .fix(
            "start it (`systemctl start tesserad`, or `tessera daemon --config FILE`); \
             its log says why it stopped (`journalctl -u tesserad`)",
        ),
    }
}

/// The node's users other than `owner` who log in (uid 1000 and up, not `nobody`),
/// from `/etc/passwd`'s text.
pub fn other_users(passwd: &str, owner: u32) -> Vec<String> {
    passwd
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let uid: u32 = f.nth(1)?.parse().ok()?;
            (uid >= 1000 && uid != 65534 && uid != owner).then(|| name.to_string())
        })
        .collect()
}

/// The socket's mode against the node's users: the daemon checks each request by uid,
/// but a socket they cannot open keeps them out before it can.
pub fn socket_finding(socket: &Path, meta: &Metadata, others: &[String]) -> Finding {
    let mode = meta.permissions().mode() & 0o777;
    let what = format!("{} mode {mode:03o}, owner uid {}", socket.display(), meta.uid());
    if mode & 0o006 == 0o006 || others.is_empty() {
        return Finding::new("socket", Verdict::Ok, what);
    }
    let named = others.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    Finding::new(
        "socket",
        Verdict::Warn,
        format!("{what}: {} other users ({named}{}) cannot reach tesserad", others.len(), if others.len() > 3 { ", ..." } else { "" }),
    )
    .fix("set socket_mode = 0o666 in the daemon's configuration (each request is still checked against its uid)")
}

/// The ledger's file: shared with its group, or private to the daemon's user, and
/// never writable by anyone else (they could forge allocations).
pub fn ledger_finding(config: &DaemonConfig, meta: Option<&Metadata>) -> Finding {
    let path = config.ledger.display();
    let Some(meta) = meta else {
        return Finding::new(
            "ledger",
            Verdict::Note,
            format!("{path} is not there yet (the daemon makes it when it starts)"),
        );
    };
    if !meta.is_file() {
        return Finding::new("ledger", Verdict::Fail, format!("{path} is not a regular file"))
            .fix(format!("remove it (`rm {path}`) and restart the daemon"));
    }
    let mode = meta.permissions().mode() & 0o777;
    let what = format!("{path}: owner uid {}, group {}, mode {mode:03o}", meta.uid(), meta.gid());
    match &config.ledger_group {
        Some(group) => {
            let Some(gid) = tessera_ledger::access::resolve_group(group) else {
                return Finding::new(
                    "ledger",
                    Verdict::Fail,
                    format!("{what}; its group {group:?} does not exist"),
                )
                .fix(format!("create it (`groupadd --system {group}`) and restart the daemon"));
            };
            if mode & 0o002 != 0 {
                Finding::new(
                    "ledger",
                    Verdict::Fail,
                    format!("{what}: writable by users outside group {group}"),
                )
                .fix(format!("chmod o-rwx {path}; then find out who changed it"))
            } else if meta.gid() != gid {
                Finding::new("ledger", Verdict::Fail, format!("{what}: not group {group} ({gid}); its clients are refused"))
                    .fix(format!("stop the daemon, remove {path}, start it again (it makes the file with its group)"))
            } else if mode & 0o060 != 0o060 {
                Finding::new(
                    "ledger",
                    Verdict::Warn,
                    format!("{what}: group {group} cannot read and write it"),
                )
                .fix(format!("chmod g+rw {path}"))
            } else {
                Finding::new("ledger", Verdict::Ok, format!("{what}, shared with group {group}"))
            }
        }
        None if mode & 0o022 != 0 => {
            Finding::new("ledger", Verdict::Fail, format!("{what}: writable by other users"))
                .fix(format!("chmod go-w {path}; to share a ledger, set ledger_group"))
        }
        None => Finding::new("ledger", Verdict::Ok, format!("{what}, private to its owner")),
    }
}

/// The interposer: there, and loadable into a program (a dynamic loader that cannot
/// preload it says so on stderr and runs the program unmanaged).
pub fn interposer_finding(interposer: Option<&Path>) -> Finding {
    let Some(path) = interposer else {
        return Finding::new("interposer", Verdict::Fail, "libtessera_cuda.so not found beside tessera nor in ../lib/tessera/")
            .fix("install the tessera package, or build it (`cargo build --release -p tessera-cuda`) beside tessera");
    };
    // a program that does nothing, with the interposer preloaded and no daemon to find
    let probe = std::process::Command::new("/bin/true")
        .env("LD_PRELOAD", path)
        .env("TESSERA_SOCKET", "/nonexistent/tessera-doctor.sock")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match probe {
        Ok(out)
            if out.status.success() && !String::from_utf8_lossy(&out.stderr).contains("ld.so") =>
        {
            Finding::new(
                "interposer",
                Verdict::Ok,
                format!("{} loads into programs", path.display()),
            )
        }
        Ok(out) => {
            let said = String::from_utf8_lossy(&out.stderr);
            Finding::new(
                "interposer",
                Verdict::Fail,
                format!(
                    "{} does not load: {}",
                    path.display(),
                    said.lines().next().unwrap_or("the probe failed").trim()
                ),
            )
            .fix("reinstall it from the same build as tessera")
        }
        Err(e) => Finding::new(
            "interposer",
            Verdict::Warn,
            format!("{}: could not run /bin/true to try it: {e}", path.display()),
        ),
    }
}

/// A gres.conf's GPUs and shards, as Slurm reads them: `(gpus, shards)`.
pub fn gres_counts(text: &str) -> (u64, u64) {
    let (mut gpus, mut shards) = (0, 0);
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut name = None;
        let (mut count, mut files) = (None, 1);
        for field in line.split_whitespace() {
            let Some((k, v)) = field.split_once('=') else { continue };
            match k.to_ascii_lowercase().as_str() {
                "name" => name = Some(v.to_ascii_lowercase()),
                "count" => count = v.parse::<u64>().ok(),
                // `File=/dev/nvidia[0-3]` names four devices
                "file" => files = crate::slurm::expand_hostlist(v).len().max(1) as u64,
                _ => {}
            }
        }
        match name.as_deref() {
            // a gpu line has a device per file unless it counts them
            Some("gpu") => gpus += count.unwrap_or(files),
            // a shard line's Count is shared among its files
            Some("shard") => shards += count.unwrap_or(0),
            _ => {}
        }
    }
    (gpus, shards)
}

/// Slurm's gres.conf against the daemon: jobs given a GPU or shards the daemon does not
/// have are refused at their Prolog.
pub fn gres_finding(
    path: &Path,
    text: &str,
    daemon_gpus: Option<usize>,
    shards_per_gpu: u32,
) -> Finding {
    let (gpus, shards) = gres_counts(text);
    let what = format!("{}: {gpus} GPUs, {shards} shards", path.display());
    let Some(have) = daemon_gpus else {
        return Finding::new(
            "slurm",
            Verdict::Note,
            format!("{what}; not compared (no daemon to ask)"),
        );
    };
    let want_shards = have as u64 * u64::from(shards_per_gpu);
    if gpus == have as u64 && shards == want_shards {
        Finding::new(
            "slurm",
            Verdict::Ok,
            format!("{what}, as tesserad has them ({have} × {shards_per_gpu} shards)"),
        )
    } else {
        Finding::new(
            "slurm",
            Verdict::Fail,
            format!("{what}; tesserad has {have} GPUs × {shards_per_gpu} shards = {want_shards}"),
        )
        .fix(format!(
            "regenerate it: `tessera slurm gres-conf > {}`, put its Gres= line in slurm.conf, restart slurmd",
            path.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_conf_counts_devices_by_file_ranges_and_shards_by_count() {
        let text = "AutoDetect=off\nName=gpu File=/dev/nvidia[0-3]\nName=gpu Type=a100 File=/dev/nvidia4 # spare\n\
                    Name=shard Count=32 File=/dev/nvidia[0-3]\nName=shard Count=8 File=/dev/nvidia4\n# Name=gpu File=/dev/nvidia9\n";
        assert_eq!(gres_counts(text), (5, 40));
        assert_eq!(gres_counts("Name=gpu Count=2\n"), (2, 0));
        let ok = gres_finding(
            Path::new("g"),
            "Name=gpu File=/dev/nvidia[0-1]\nName=shard Count=16 File=/dev/nvidia[0-1]\n",
            Some(2),
            8,
        );
        assert_eq!(ok.verdict, Verdict::Ok, "{ok:?}");
        let bad = gres_finding(
            Path::new("g"),
            "Name=gpu File=/dev/nvidia[0-1]\nName=shard Count=8 File=/dev/nvidia[0-1]\n",
            Some(2),
            8,
        );
        assert_eq!(bad.verdict, Verdict::Fail, "shards differ: {bad:?}");
        assert_eq!(gres_finding(Path::new("g"), "", None, 8).verdict, Verdict::Note);
    }

    #[test]
    fn the_socket_warns_only_when_other_login_users_are_shut_out() {
        let passwd = "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/usr/sbin/nologin\n\
                      svc:x:999:999::/:/bin/false\nalice:x:1000:1000::/home/alice:/bin/sh\nbob:x:1001:1001::/home/bob:/bin/sh\n";
        assert_eq!(other_users(passwd, 1000), ["bob"]);
        assert!(other_users(passwd, 0).len() == 2);
        let dir = std::env::temp_dir().join(format!("doctor-socket-{}", std::process::id()));
        std::fs::write(&dir, "").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o600)).unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        let shut = socket_finding(&dir, &meta, &other_users(passwd, 0));
        assert_eq!(shut.verdict, Verdict::Warn, "{shut:?}");
        assert!(shut.fix.as_deref().unwrap().contains("socket_mode = 0o666"));
        assert_eq!(
            socket_finding(&dir, &meta, &[]).verdict,
            Verdict::Ok,
            "nobody else to shut out"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o666)).unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!(socket_finding(&dir, &meta, &other_users(passwd, 0)).verdict, Verdict::Ok);
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn a_ledger_writable_outside_its_group_or_of_another_group_fails() {
        let path = std::env::temp_dir().join(format!("doctor-ledger-{}", std::process::id()));
        std::fs::write(&path, "").unwrap();
        let gid = std::fs::metadata(&path).unwrap().gid();
        let config = |group: Option<String>| DaemonConfig {
            ledger: path.clone(),
            ledger_group: group,
            ..DaemonConfig::default()
        };
        let judge = |c: &DaemonConfig, mode: u32| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            ledger_finding(c, Some(&std::fs::symlink_metadata(&path).unwrap())).verdict
        };
        let private = config(None);
        assert_eq!(judge(&private, 0o600), Verdict::Ok);
        assert_eq!(judge(&private, 0o620), Verdict::Fail);
        assert_eq!(judge(&private, 0o606), Verdict::Fail);
        let shared = config(Some(gid.to_string()));
        assert_eq!(judge(&shared, 0o660), Verdict::Ok);
        assert_eq!(judge(&shared, 0o640), Verdict::Warn, "the group cannot write");
        assert_eq!(judge(&shared, 0o662), Verdict::Fail);
        let other = config(Some((gid + 1).to_string()));
        assert_eq!(judge(&other, 0o660), Verdict::Fail, "another group's file");
        assert_eq!(ledger_finding(&private, None).verdict, Verdict::Note);
        std::fs::remove_file(&path).unwrap();
    }
}
