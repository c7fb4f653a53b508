//! `tesserad`: the daemon that real processes talk to. It runs one of the core's
//! policies in wall-clock time (emulated time, optionally sped up) over an executor.
//!
//! Module map:
//! - [`config`]: TOML configuration, validated.
//! - `server`: the control plane (Unix socket, `SO_PEERCRED`, one thread per client).
//! - `core`: the core loop that owns the policy, polls the shared-memory rings and
//!   carries out actions.
//! - [`executor`]: one thread per GPU, emulated or CUDA.
//! - `cuda`: the CUDA driver loaded at run time (`unsafe`); never run on a real GPU,
//!   exercised against a fake driver library built by a test.
//! - [`events`]: the event log (decisions that change a tenant's fate, as JSON lines).
//! - [`metrics`]: the Prometheus endpoint (`[metrics] listen`).
//! - [`inference`]: inference serving (`policy = "gpulets"`): the model registry, the
//!   built-in profiles, batch run times on emulated partitions.
#![deny(unsafe_code)]

pub mod config;
pub mod config_reference;
mod core;
mod cosched;
mod cuda;
pub mod doctor;
pub mod events;
mod locks;
pub mod metrics;
pub mod pods;
/// The CUDA executor's built-in kernels, in PTX (exported for the test that assembles
/// them with NVIDIA's `ptxas`).
pub use cuda::BUILTIN_PTX;
pub mod executor;
pub mod inference;
pub mod memory;
mod server;
pub mod slurm;

use crate::core::{Clock, Core, Mailbox, Msg};
use crate::server::Server;
use config::{DaemonConfig, ExecutorKind};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use tessera_client::region::Doorbell;
use tessera_core::{Bytes, GpuSpec, Nanos, PolicyConfig};
use tessera_ledger::{GpuSource, Ledger, LedgerConfig};

/// The daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Another daemon holds the socket, the ledger or a GPU.
    #[error("another tesserad is already running on {what} ({holder}); stop it first")]
    AlreadyRunning {
        /// What it holds: "socket /path", "ledger /path" or "GPU <uuid>".
        what: String,
        /// What the lock file says about its holder.
        holder: String,
    },
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The policy does not fit this node.
    #[error(transparent)]
    Policy(#[from] tessera_core::PolicyError),
    /// The CUDA executor was chosen but is unusable.
    #[error("cuda executor: {0}")]
    Cuda(String),
    /// A path the daemon would use holds something it must not touch.
    #[error("refusing to start: {0}")]
    Unsafe(String),
    /// `ledger_group` names no group.
    #[error("ledger_group {0:?} is not a group name or gid")]
    NoSuchGroup(String),
    /// The memory ledger could not be opened.
    #[error(transparent)]
    Ledger(#[from] tessera_ledger::LedgerError),
    /// Inference serving could not be set up.
    #[error(transparent)]
    Inference(#[from] inference::InferenceError),
    /// The events file could not be opened.
    #[error(transparent)]
    Events(#[from] events::EventsFileError),
    /// The metrics endpoint could not start.
    #[error(transparent)]
    Metrics(#[from] metrics::MetricsError),
    /// An I/O error at start-up.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Error.
        source: std::io::Error,
    },
}

/// Every client holds two of the daemon's descriptors (its socket and its doorbell):
/// raise the soft limit to the hard one, so that the common soft limit of 1,024 does
/// not cap the daemon near 500 clients.
fn raise_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit { current: limit.maximum, ..limit };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => tracing::debug!(to = ?limit.maximum, "raised the descriptor limit"),
            Err(e) => tracing::warn!(error = %e, "cannot raise the descriptor limit"),
        }
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let what = what.into();
    move |source| DaemonError::Io { what, source }
}

/// A running daemon.
#[derive(Debug)]
pub struct Daemon {
    server: Arc<Server>,
    socket: PathBuf,
    core: Option<JoinHandle<()>>,
    /// The core thread's kernel thread id.
    core_tid: Option<rustix::thread::Pid>,
    accept: Option<JoinHandle<()>>,
    /// A second handle on the listening socket, to shut it down and so wake the accept
    /// loop even if someone removed the socket file.
    listener: UnixListener,
    /// Its locks, socket and ledger, removed when it stops.
    made: Made,
    /// What it runs on, as found at start ("4 emulated GPUs of 4096 MiB, ...").
    description: String,
    /// Its metrics endpoint, when configured.
    metrics: Option<metrics::MetricsServer>,
}

/// What a daemon's start made on disk: its lock files, its socket, the ledger it uses
/// (removed at the end if no other program uses it). Removed if the start fails, and
/// when the daemon stops.
#[derive(Debug, Default)]
struct Made {
    locks: Vec<locks::InstanceLock>,
    socket: Option<PathBuf>,
    ledger: Option<(PathBuf, tessera_ledger::Access)>,
}

impl Made {
    fn remove(&mut self) {
        if let Some(s) = self.socket.take() {
            let _ = std::fs::remove_file(s);
        }
        if let Some((path, access)) = self.ledger.take() {
            match tessera_ledger::remove_if_unused(&path, access) {
                Ok(true) => {
                    tracing::debug!(path = %path.display(), "removed the ledger (no program uses it)")
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "cannot remove the ledger"),
            }
        }
        for lock in self.locks.drain(..) {
            lock.release();
        }
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `path` with `suffix` appended to its file name.
fn suffixed(path: &std::path::Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_os_string();
    p.push(suffix);
    PathBuf::from(p)
}

impl Daemon {
    /// Start a daemon: take the single-instance lock, bind the socket (mode 0600), open
    /// the ledger, start the executor and the core loop.
    pub fn start(cfg: &DaemonConfig) -> Result<Daemon, DaemonError> {
        cfg.validate()?;
        raise_fd_limit();
        // the CUDA driver, when chosen, decides the GPUs; it must load before anything
        // else is set up, so that a machine without one gets a clear error at once
        let (speedup, driver) = match &cfg.executor {
            ExecutorKind::Emulated { speedup } => (*speedup, None),
            ExecutorKind::Cuda { library, gpus } => {
                let d = cuda::Driver::load(library.as_deref()).map_err(DaemonError::Cuda)?;
                if let Some(n) = gpus
                    && *n != d.device_count()
                {
                    return Err(DaemonError::Cuda(format!(
                        "{n} GPUs were asked for, but the driver reports {}",
                        d.device_count()
                    )));
                }
                (1.0, Some(Arc::new(d)))
            }
        };
        // one daemon per socket, per ledger and per GPU; whatever this start makes is
        // removed again if it fails (and when the daemon stops)
        let mut made = Made::default();
        private_socket_dir(&cfg.socket)?;
        let holder = format!("pid {} socket {}", std::process::id(), cfg.socket.display());
        made.locks.push(locks::InstanceLock::claim(
            &suffixed(&cfg.socket, ".lock"),
            &format!("socket {}", cfg.socket.display()),
            &holder,
        )?);
        made.locks.push(locks::InstanceLock::claim(
            &suffixed(&cfg.ledger, ".daemon"),
            &format!("ledger {}", cfg.ledger.display()),
            &holder,
        )?);
        if let Some(d) = &driver {
            for uuid in d.device_uuids().into_iter().flatten() {
                made.locks.push(locks::InstanceLock::claim(
                    &cfg.gpu_lock_dir.join(format!("tessera-{uuid}.lock")),
                    &format!("GPU {uuid}"),
                    &holder,
                )?);
            }
        }
        // we hold the socket's lock, so a socket of ours left here is stale; anything
        // else at that path (another user's socket included) is not ours to delete
        match std::fs::symlink_metadata(&cfg.socket) {
            Ok(m)
                if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())
                    && std::os::unix::fs::MetadataExt::uid(&m)
                        == rustix::process::geteuid().as_raw() =>
            {
                let _ = std::fs::remove_file(&cfg.socket);
            }
            Ok(_) => {
                return Err(DaemonError::Unsafe(format!(
                    "{} exists and is not a socket of this user; remove it or choose another --socket",
                    cfg.socket.display()
                )));
            }
            Err(_) => {}
        }
        let listener = UnixListener::bind(&cfg.socket)
            .map_err(io(format!("binding {}", cfg.socket.display())))?;
        made.socket = Some(cfg.socket.clone());
        std::fs::set_permissions(&cfg.socket, std::fs::Permissions::from_mode(cfg.socket_mode))
            .map_err(io("setting the socket's permissions (socket_mode)"))?;

        let gpus = match &driver {
            Some(d) => d
                .device_memory()
                .into_iter()
                .enumerate()
                .map(|(i, m)| GpuSpec { id: tessera_core::GpuId(i as u32), memory: Bytes(m) })
                .collect(),
            None => GpuSpec::uniform(cfg.gpus, Bytes::mib(cfg.gpu_memory_mib)),
        };
        // gpulets serves models only; node serves registered models on gpu-lets inside
        // the node, beside every other kind of tenant
        let models_only = cfg.policy == config::PolicyName::Gpulets;
        // (models need emulated partitions: under node on real GPUs there are none)
        let emulated = !matches!(cfg.executor, config::ExecutorKind::Cuda { .. });
        let inference = (models_only || (cfg.policy == config::PolicyName::Node && emulated))
            .then(|| inference::Inference::new(&cfg.gpulets))
            .transpose()?;
        let balance_report = cfg.migration_pause().map(|_| {
            Arc::new(std::sync::Mutex::new(tessera_core::policies::dcuda::DcudaReport::default()))
        });
        let balance = cfg.dcuda_params().zip(balance_report.clone());
        let policy: Box<dyn tessera_core::Policy> =
            match (&inference, cfg.policy_config(gpus.len())) {
                (Some(inf), _) if models_only => Box::new(inf.policy(&gpus, &cfg.gpulets)),
                (None, _) if balance.is_some() => {
                    let (params, report) = balance.as_ref().expect("checked");
                    Box::new(
                        tessera_core::policies::dcuda::Dcuda::new(&gpus, *params)
                            .with_report(report.clone()),
                    )
                }
                (_, Some(PolicyConfig::Node { params })) => {
                    // built here rather than by the configuration: it publishes its
                    // balancer's report for status
                    PolicyConfig::Node { params }.validate(gpus.len())?;
                    let mut node = tessera_core::policies::node::NodePolicy::new(&gpus, params);
                    if let Some(report) = &balance_report {
                        node = node.with_balance_report(report.clone());
                    }
                    if let Some(inf) = &inference {
                        let registry = inf.clone();
                        node = node.with_inference(
                            inf.policy(&gpus, &cfg.gpulets),
                            Box::new(move |t| registry.serves_model(t)),
                        );
                    }
                    Box::new(node)
                }
                (_, Some(p)) => p.build(&gpus)?,
                (_, None) => {
                    return Err(DaemonError::Config(config::ConfigError::Invalid(
                        "the gpulets policy needs its inference state".into(),
                    )));
                }
            };
        let access = match &cfg.ledger_group {
            None => tessera_ledger::Access::Owner,
            Some(g) => tessera_ledger::Access::Group(
                tessera_ledger::access::resolve_group(g)
                    .ok_or_else(|| DaemonError::NoSuchGroup(g.clone()))?,
            ),
        };
        let ledger_config = LedgerConfig {
            access,
            ..LedgerConfig::new(
                &cfg.ledger,
                GpuSource::Explicit(gpus.iter().map(|g| g.memory).collect()),
            )
        };
        let ledger = Ledger::open(&ledger_config)?;
        made.ledger = Some((cfg.ledger.clone(), access));
        let events = Arc::new(events::EventLog::new(cfg.events.as_deref())?);
        let node_metrics = cfg
            .metrics
            .listen
            .is_some()
            .then(|| Arc::new(metrics::NodeMetrics::new(cfg.metrics.max_tenants)));
        let desk = Arc::new(
            memory::MemoryDesk::new(ledger_config, cfg.context_bytes())
                .with_observers(events.clone(), node_metrics.clone()),
        );
        let bell = Arc::new(Doorbell::new().map_err(io("creating the doorbell"))?);
        let (mailbox, rx) = Mailbox::new(bell.clone());
        let perf = executor::EmulatedGpu {
            reset_latency: Nanos::from_millis(cfg.reset_ms.max(1)),
            speed: 1.0,
        };
        let clock = Clock::new(speedup);
        let (exec, executor_name) = match &driver {
            Some(d) => (
                executor::Executor::cuda(d.clone(), mailbox.clone()),
                format!("cuda ({} devices, {})", d.device_count(), d.path().display()),
            ),
            None => (
                executor::Executor::emulated(cfg.gpus, perf, clock, mailbox.clone()),
                format!("emulated x{speedup}"),
            ),
        };
        let connections = Arc::new(server::Connections::default());
        let core = Core::new(
            connections.clone(),
            policy,
            clock,
            rx,
            mailbox.clone(),
            exec,
            Some(ledger),
            &gpus.iter().map(|g| g.memory).collect::<Vec<_>>(),
            executor_name,
            core::Limits {
                slots: cfg.ring_slots,
                slot_bytes: cfg.slot_bytes,
                max_task: Nanos::from_millis(cfg.max_task_ms),
                drain_timeout: std::time::Duration::from_millis(cfg.drain_timeout_ms),
                user_facing_uids: cfg.user_facing_uids.clone(),
                max_tasks_per_uid: cfg.max_tasks_per_uid,
                max_gpu_per_uid: Nanos::from_millis(cfg.max_gpu_ms_per_uid),
                max_tenants_per_conn: cfg.max_tenants_per_conn,
                max_tenants_per_uid: cfg.max_tenants_per_uid,
                departed_running: cfg.departed_running,
                slurm: cfg.slurm.clone(),
                slurm_refusal: cfg.slurm_refusal(),
                require_token_in_containers: cfg.kubernetes.require_token_in_containers,
                block_when_busy: cfg.block_when_busy,
                coscheduling: cfg.coscheduling,
            },
        )
        .with_inference(inference, models_only)
        .with_policy_name(cfg.policy.name())
        .with_ledger_path(&cfg.ledger)
        .with_uuids(driver.as_ref().map(|d| d.device_uuids()).unwrap_or_default())
        .with_memory_desk(desk.clone())
        .with_observers(events, node_metrics.clone())
        .with_balance(balance_report.zip(cfg.migration_pause()), cfg.dcuda.pcie_gb_per_s * 1e9);
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let core = std::thread::Builder::new()
            .name("core".into())
            .spawn(move || {
                let _ = tid_tx.send(rustix::thread::gettid());
                core.run()
            })
            .map_err(io("spawning the core"))?;
        let core_tid = tid_rx.recv().ok();
        let listener_handle = listener.try_clone().map_err(io("cloning the listening socket"))?;
        let built = Server::new(
            mailbox.clone(),
            cfg.ring_slots,
            cfg.slot_bytes,
            cfg.max_conns_per_uid,
            std::time::Duration::from_secs(cfg.idle_timeout_s),
            connections,
            desk,
        );
        let spawned = built.and_then(|(server, poll)| {
            let s = server.clone();
            std::thread::Builder::new()
                .name("control".into())
                .spawn(move || s.run(poll, listener))
                .map(|handle| (server, handle))
        });
        let (server, accept) = match spawned {
            Ok(x) => x,
            Err(e) => {
                // the core and its GPU threads already run: stop them before failing
                mailbox.send(Msg::Shutdown);
                let _ = core.join();
                return Err(io("starting the control loop")(e));
            }
        };
        // the endpoint last: a scrape asks the core, which runs now
        let metrics_server = match (&cfg.metrics.listen, node_metrics) {
            (Some(listen), Some(m)) => {
                let listen: metrics::Listen = listen
                    .parse()
                    .map_err(|e| DaemonError::Config(config::ConfigError::Invalid(e)))?;
                let mb = mailbox.clone();
                let refresh = move || {
                    let (done, answered) = std::sync::mpsc::sync_channel(1);
                    mb.send(Msg::Scrape { done });
                    answered.recv_timeout(metrics::SCRAPE_TIMEOUT).is_ok()
                };
                Some(metrics::MetricsServer::start(&listen, m, refresh)?)
            }
            _ => None,
        };
        let description = match &driver {
            Some(d) => format!(
                "{} CUDA GPU(s) from {}: {}",
                d.device_count(),
                d.path().display(),
                d.device_memory()
                    .iter()
                    .zip(d.device_uuids())
                    .enumerate()
                    .map(|(i, (m, u))| format!(
                        "{i} {} {} MiB",
                        u.unwrap_or_else(|| "(no UUID)".into()),
                        m >> 20
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => format!(
                "{} EMULATED GPU(s) of {} MiB (the simulator's performance model, emulated time x{speedup}; no real GPU is used)",
                gpus.len(),
                cfg.gpu_memory_mib
            ),
        };
        tracing::info!(socket = %cfg.socket.display(), policy = cfg.policy.name(), %description, "tesserad started");
        Ok(Daemon {
            server,
            socket: cfg.socket.clone(),
            core: Some(core),
            core_tid,
            accept: Some(accept),
            listener: listener_handle,
            made,
            description,
            metrics: metrics_server,
        })
    }

    /// Where the metrics endpoint listens, as bound (`None`: not configured).
    pub fn metrics_address(&self) -> Option<&str> {
        self.metrics.as_ref().map(|m| m.address.as_str())
    }

    /// What the daemon runs on, as found at start: the executor and its GPUs.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The core thread's kernel thread id (`/proc/self/task/ID`): what it runs on can
    /// be seen there, e.g. the CPU it waits on while the host is busy.
    pub fn core_thread(&self) -> Option<i32> {
        self.core_tid.map(rustix::thread::Pid::as_raw_nonzero).map(std::num::NonZeroI32::get)
    }

    /// The control socket.
    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// Drain and stop: admit nothing new, cancel queued tasks with a reason, let running
    /// ones finish, remove the socket. Blocks until done.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if self.server.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(mut m) = self.metrics.take() {
            m.stop();
        }
        self.server.mailbox.send(Msg::Shutdown);
        // no new connections; those open are served (refused new sessions) while the
        // core drains, then closed
        let _ = rustix::net::shutdown(&self.listener, rustix::net::Shutdown::Both);
        if let Some(c) = self.core.take() {
            let _ = c.join();
        }
        self.server.exit();
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        self.made.remove();
        tracing::info!("tesserad stopped");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The socket's directory: made private (0700) when missing; refused when another user
/// (not root) owns it — a directory planted under the temporary directory by someone
/// who would then own the daemon's name (`tessera_client::per_user_socket`) — or when
/// everyone may write there without the sticky bit.
fn private_socket_dir(socket: &std::path::Path) -> Result<(), DaemonError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io(format!("creating the socket's directory {}", dir.display())))?;
    }
    let m = std::fs::metadata(dir).map_err(io(format!("reading {}", dir.display())))?;
    let me = rustix::process::geteuid().as_raw();
    if m.uid() != me && m.uid() != 0 {
        return Err(DaemonError::Unsafe(format!(
            "the socket's directory {} belongs to uid {}, not this user: whoever owns it could take the daemon's socket; remove it or choose another --socket",
            dir.display(),
            m.uid()
        )));
    }
    if m.mode() & 0o002 != 0 && m.mode() & 0o1000 == 0 {
        return Err(DaemonError::Unsafe(format!(
            "the socket's directory {} is writable by everyone (and not sticky): anyone could replace the daemon's socket; choose another --socket",
            dir.display()
        )));
    }
    Ok(())
}
