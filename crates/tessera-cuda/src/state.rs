//! The process's life as the interposer sees it: the settings, the real driver, and
//! becoming a tenant — registration in the first `cuInit` (or `nvmlInit`), a forked
//! child's own registration, and the gate's watcher thread. What a tenant is and does
//! is `tenant` and the files beside it.

use crate::config::{Class, Config, MemoryWait, OnNoDaemon};
use crate::real::RealDriver;
use crate::tenant::Session;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use tessera_client::proto::TenantClass;
use tessera_client::{Client, ClientError, TenantOptions};
use tessera_driver::{CuResult, status};

pub use crate::log::complain;
pub use crate::tenant::{Allocation, SYSTEM_NOT_READY, Tenant};

/// The process's interposer state, built on first use.
pub struct State {
    /// The settings, or why they are unusable.
    pub config: Result<Config, String>,
    /// The real driver, or why it cannot be loaded.
    pub real: Result<RealDriver, String>,
    /// Set by the first successful `cuInit`.
    pub mode: OnceLock<Mode>,
    /// Serialises the first `cuInit` (registration happens once).
    pub init_lock: Mutex<()>,
    /// A forked child's own mode, with the fork generation it belongs to.
    forked: Mutex<Option<(u64, &'static Mode)>>,
}

/// Managed (a tenant) or not.
pub enum Mode {
    /// A tenant of tesserad, its memory admitted by the ledger.
    Managed(Box<Tenant>),
    /// Without a daemon, as `TESSERA_ON_NO_DAEMON=passthrough` allows.
    Unmanaged,
}

static STATE: OnceLock<State> = OnceLock::new();

/// The state, built on first use.
pub fn state() -> &'static State {
    STATE.get_or_init(|| {
        let config = Config::from_env().map_err(|e| e.to_string());
        let driver = config
            .as_ref()
            .map(|c| c.driver.clone())
            .unwrap_or_else(|_| std::path::PathBuf::from("libcuda.so.1"));
        let log = config
            .as_ref()
            .ok()
            .and_then(|c| c.log.as_ref())
            .and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok());
        crate::log::open(log);
        State {
            config,
            real: RealDriver::open(&driver),
            mode: OnceLock::new(),
            init_lock: Mutex::new(()),
            forked: Mutex::new(None),
        }
    })
}

impl State {
    /// Append a line to the log file, if one was asked for.
    pub fn log(&self, line: std::fmt::Arguments<'_>) {
        crate::log::line(line);
    }

    /// The tenant, if `cuInit` made the process one. In a child forked from a tenant,
    /// the child's own tenant, registered on its first call here: a child never uses
    /// its parent's connection or ring.
    #[inline]
    pub fn tenant(&self) -> Option<&Tenant> {
        let generation = crate::real::fork_generation();
        let mode = if generation == 0 { self.mode.get() } else { self.forked_mode(generation) };
        match mode {
            Some(Mode::Managed(t)) => Some(t),
            _ => None,
        }
    }

    /// The mode of a forked child (fork generation `generation`): unmanaged if its
    /// parent was, else a tenant of its own, registered now if not yet.
    #[cold]
    fn forked_mode(&self, generation: u64) -> Option<&Mode> {
        static UNMANAGED: Mode = Mode::Unmanaged;
        let parent = self.mode.get()?;
        if !matches!(parent, Mode::Managed(_)) {
            return Some(parent);
        }
        let mut slot = self.forked.lock().ok()?;
        if let Some((g, mode)) = *slot
            && g == generation
        {
            return Some(mode);
        }
        // the driver the child inherited numbers the GPUs its parent was given
        let Some(Mode::Managed(p)) = self.mode.get() else { return Some(parent) };
        let inherited = Binding::Inherited { nodes: p.nodes.clone(), count: p.driver_count() };
        let mode: &'static Mode = match self.register(inherited) {
            Ok(Mode::Managed(t)) => {
                self.log(format_args!("forked: tenant {} on {:?}", t.id(), t.placed));
                Box::leak(Box::new(Mode::Managed(t)))
            }
            Ok(Mode::Unmanaged) | Err(_) => {
                complain(
                    "this forked process could not become a tenant of its own; its CUDA calls run unmanaged",
                );
                &UNMANAGED
            }
        };
        *slot = Some((generation, mode));
        Some(mode)
    }

    /// Become a tenant, before the real `cuInit`: the driver reads
    /// `CUDA_VISIBLE_DEVICES` when it initialises, and is then told the GPUs the daemon
    /// chose (unless the program may migrate). The `cuInit` hook then checks that the
    /// driver shows the program those GPUs.
    pub fn become_tenant(&self) -> Result<(), CuResult> {
        if self.mode.get().is_some() {
            return Ok(());
        }
        let migratable = self.config.as_ref().is_ok_and(|c| c.migration);
        let mode =
            self.register(if migratable { Binding::NodeOrder } else { Binding::Restrict })?;
        let managed = matches!(mode, Mode::Managed(_));
        let _ = self.mode.set(mode);
        if managed {
            // the gate's watcher: gives back a slice its holder leaves idle, and
            // re-registers with a daemon that restarted
            let _ = std::thread::Builder::new().name("tessera-gate".into()).spawn(|| {
                if let Some(t) = state().tenant() {
                    crate::gate::watch_forever(t);
                }
            });
        }
        Ok(())
    }

    /// Register with the daemon: the tenant (or, without a daemon and with
    /// passthrough allowed, unmanaged), its GPUs bound to the driver's ordinals as
    /// `binding` says.
    fn register(&self, binding: Binding) -> Result<Mode, CuResult> {
        let config = match &self.config {
            Ok(c) => c,
            Err(e) => {
                complain(&format!("bad setting: {e}"));
                return Err(status::INVALID_VALUE);
            }
        };
        let options = TenantOptions {
            class: match config.class {
                Class::UserFacing => TenantClass::UserFacing,
                Class::Batch => TenantClass::Batch,
            },
            sla: config.sla,
            weight: config.weight,
            priority: config.priority,
            memory: config.memory.unwrap_or(0),
            job: config.slurm_job,
            token: config.token,
        };
        // the daemon places the program among the GPUs it may see (a forked child's
        // are its parent's, which the inherited variable names)
        let visible = std::env::var("CUDA_VISIBLE_DEVICES")
            .ok()
            .map(|v| v.split(',').map(|e| e.trim().to_string()).collect::<Vec<_>>());
        let migratable = matches!(binding, Binding::NodeOrder);
        let registered = Client::connect(&config.socket).and_then(|mut c| {
            let placement = c.register_placed_as(options, config.gpus, visible, migratable)?;
            Ok((c, placement))
        });
        let (client, placement) = match (registered, config.on_no_daemon) {
            (Ok(x), _) => x,
            (Err(e @ ClientError::Refused { .. }), _) => {
                complain(&format!("tesserad refused this program: {e}"));
                return Err(status::NO_DEVICE);
            }
            (Err(e), OnNoDaemon::Passthrough) => {
                complain(&format!(
                    "no tesserad at {} ({e}): running unmanaged (TESSERA_ON_NO_DAEMON=passthrough)",
                    config.socket.display()
                ));
                return Ok(Mode::Unmanaged);
            }
            (Err(e), OnNoDaemon::Fail) => {
                complain(&format!(
                    "no tesserad at {} ({e}); start it, set TESSERA_SOCKET, or set TESSERA_ON_NO_DAEMON=passthrough to run unmanaged",
                    config.socket.display()
                ));
                return Err(SYSTEM_NOT_READY);
            }
        };
        let id = placement.tenant;
        // memory is reserved in the node's ledger through the daemon, which holds it
        // for this tenant: programs of every user share the one ledger, and none opens
        // its file
        let wait = match config.wait {
            MemoryWait::Forever => None,
            MemoryWait::NoWait => Some(Duration::ZERO),
            MemoryWait::Timeout(d) => Some(d),
        };
        let (placed, nodes, uuids) = match binding {
            Binding::Restrict => {
                // the driver will number exactly these GPUs from 0, in this order: by
                // UUID where the daemon knows them (whatever the driver's own order),
                // else by the index the daemon and the driver share
                let list = if placement.uuids.len() == placement.gpus.len() {
                    placement.uuids.join(",")
                } else {
                    placement.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                };
                crate::real::show_driver_only(&list);
                let placed: Vec<i32> = (0..placement.gpus.len() as i32).collect();
                (placed, placement.gpus.clone(), placement.uuids.clone())
            }
            Binding::NodeOrder => (
                placement.gpus.iter().filter_map(|g| i32::try_from(*g).ok()).collect(),
                Vec::new(),
                Vec::new(),
            ),
            Binding::Inherited { nodes, count } => {
                let placed = if nodes.is_empty() {
                    placement
                        .gpus
                        .iter()
                        .filter(|g| (**g as usize) < count)
                        .filter_map(|g| i32::try_from(*g).ok())
                        .collect()
                } else {
                    placement
                        .gpus
                        .iter()
                        .filter_map(|g| nodes.iter().position(|n| n == g))
                        .filter_map(|i| i32::try_from(i).ok())
                        .collect()
                };
                (placed, nodes, Vec::new())
            }
        };
        if placed.is_empty() {
            complain("tesserad placed this program on no GPU the driver has");
            return Err(status::NO_DEVICE);
        }
        let Some(region) = client.region() else {
            complain("tesserad gave no shared region");
            return Err(SYSTEM_NOT_READY);
        };
        self.log(format_args!("tenant {id} on {placed:?} (node GPUs {:?})", placement.gpus));
        crate::real::note_base_nice();
        crate::real::watch_fork(client.socket_fd());
        Ok(Mode::Managed(Box::new(Tenant {
            fast_region: std::sync::atomic::AtomicPtr::new(crate::tenant::publish_region(&region)),
            session: ArcSwap::from_pointee(Session {
                client: Mutex::new(client),
                id,
                region,
                outstanding: Mutex::new(None),
            }),
            options,
            gpus_asked: config.gpus,
            migratable,
            record: Mutex::new(None),
            record_refused: AtomicBool::new(false),
            readopting: Mutex::new(None),
            slice: config.slice,
            last_launch: Default::default(),
            functions: Mutex::new(HashMap::new()),
            pace_mark: Mutex::new(None),
            pacing: std::sync::atomic::AtomicBool::new(false),
            sync_calls: Mutex::new(Default::default()),
            own_clock: Default::default(),
            launches: AtomicU64::new(0),
            accounted_ns: AtomicU64::new(0),
            slice_end_ns: AtomicU64::new(config.slice.as_nanos() as u64),
            measured_ns: AtomicU64::new(0),
            socket: config.socket.clone(),
            memory: Mutex::new(Vec::new()),
            contexts_done: AtomicU64::new(0),
            last_idle: AtomicU64::new(0),
            unsynced: AtomicBool::new(false),
            context: AtomicU64::new(0),
            unsynced_since: AtomicU64::new(0),
            settled_ns: AtomicU64::new(0),
            settling: Mutex::new(()),
            limit: config.memory,
            placed,
            nodes,
            uuids,
            node_pid: if placement.pid != 0 { placement.pid } else { std::process::id() },
            wait,
            book: Mutex::new(Default::default()),
        })))
    }
}

/// How a tenant's GPUs relate to the driver's ordinals.
enum Binding {
    /// The driver is not initialised yet: it is told to show exactly the placed GPUs
    /// (`CUDA_VISIBLE_DEVICES`), so its ordinals are the program's.
    Restrict,
    /// The driver numbers the node's GPUs as the daemon does (a migratable program,
    /// which the balancer may move to any of them).
    NodeOrder,
    /// A forked child: the driver it inherited shows the node GPUs `nodes` (empty:
    /// in node order), `count` of them.
    Inherited { nodes: Vec<u32>, count: usize },
}
