//! `tessera run -- PROGRAM ARGS`: start an unmodified CUDA program as a tesserad tenant,
//! the way `nsys` or `mpirun` start programs: the interposer (`libtessera_cuda.so`) is
//! preloaded and the tenant's settings are passed in its `TESSERA_*` variables; then the
//! program replaces this process, so signals and the exit status are its own.

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ClassArg {
    UserFacing,
    Batch,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OnNoDaemonArg {
    /// cuInit fails with a CUDA error and a message.
    Fail,
    /// Run unmanaged, with a warning.
    Passthrough,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Tenant class.
    #[arg(long, value_enum, default_value = "batch")]
    class: ClassArg,
    /// User-facing SLA, ms.
    #[arg(long)]
    sla_ms: Option<u64>,
    /// Weight for fair sharing, 1 to 1000 (what the daemon accepts).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    weight: Option<u32>,
    /// Priority (0-255).
    #[arg(long)]
    priority: Option<u8>,
    /// Memory limit, e.g. 4GiB, 4096MiB or 4G (binary units).
    #[arg(long, value_parser = size_text)]
    memory: Option<String>,
    /// When memory is short: forever, none, or a wait in ms.
    #[arg(long)]
    memory_wait: Option<String>,
    /// GPUs to be placed on.
    #[arg(long)]
    gpus: Option<u32>,
    /// tesserad's socket.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Without a daemon.
    #[arg(long, value_enum)]
    on_no_daemon: Option<OnNoDaemonArg>,
    /// Make the program movable between GPUs (DCUDA's migration: managed memory and
    /// virtual handles; driver-API programs with PTX modules; see docs/migration.md).
    #[arg(long)]
    migratable: bool,
    /// Move the program to real GPU D after K kernel launches (`K:D`; implies
    /// --migratable). A manual order, until the daemon's balancer gives it.
    #[arg(long, value_name = "K:D")]
    migrate_at: Option<String>,
    /// The interposer library (default: libtessera_cuda.so beside this program, else the
    /// installed /usr/lib/tessera/libtessera_cuda.so).
    #[arg(long)]
    preload: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, last = true)]
    program: Vec<String>,
}

/// The interposer beside the running `tessera` binary (both are built into the same
/// target directory by `cargo build --release`), in its `deps/`, or in `../lib/tessera/`
/// where the Debian package installs it: the newest of those there, since `cargo test` relinks the one in `deps/` without always copying it up,
/// and an interposer from an older build is refused by the daemon.
pub(crate) fn default_preload() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("libtessera_cuda.so"),
        dir.join("deps/libtessera_cuda.so"),
        // installed: /usr/bin/tessera beside /usr/lib/tessera/ (the Debian package)
        dir.join("../lib/tessera/libtessera_cuda.so"),
    ]
    .into_iter()
    // reversed: of equally new ones (cargo hard-links deps/'s copy up) the first wins,
    // the path a person expects rather than deps/
    .rev()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max_by_key(|(modified, _)| *modified)
    .map(|(_, p)| p)
}

pub fn run(a: RunArgs) -> Result<()> {
    let preload = match a.preload.clone().or_else(default_preload) {
        Some(p) if p.is_file() => p,
        Some(p) => bail!("the interposer {} does not exist", p.display()),
        None => bail!(
            "libtessera_cuda.so was not found beside tessera: build it with `cargo build --release -p tessera-cuda`, or give --preload"
        ),
    };
    let preload = std::fs::canonicalize(&preload)
        .with_context(|| format!("resolving {}", preload.display()))?;
    let (program, args) = a.program.split_first().context("no program to run")?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).env("LD_PRELOAD", preload_list(&preload));
    let class = match a.class {
        ClassArg::UserFacing => "user-facing",
        ClassArg::Batch => "batch",
    };
    cmd.env("TESSERA_CLASS", class);
    let numbers = [
        ("TESSERA_SLA_MS", a.sla_ms.map(|v| v.to_string())),
        ("TESSERA_WEIGHT", a.weight.map(|v| v.to_string())),
        ("TESSERA_PRIORITY", a.priority.map(|v| v.to_string())),
        ("TESSERA_GPUS", a.gpus.map(|v| v.to_string())),
        ("TESSERA_MEMORY", a.memory.clone()),
        ("TESSERA_MEMORY_WAIT", a.memory_wait.clone()),
        (
            "TESSERA_ON_NO_DAEMON",
            a.on_no_daemon.map(|o| {
                match o {
                    OnNoDaemonArg::Fail => "fail",
                    OnNoDaemonArg::Passthrough => "passthrough",
                }
                .to_string()
            }),
        ),
    ];
    for (k, v) in numbers {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    if let Some(s) = &a.socket {
        cmd.env("TESSERA_SOCKET", s);
    }
    if a.migratable || a.migrate_at.is_some() {
        cmd.env("TESSERA_MIGRATION", "1");
    }
    if let Some(order) = &a.migrate_at {
        cmd.env("TESSERA_MIGRATE_AT", order);
    }
    // only returns if the program could not be started
    let err = cmd.exec();
    Err(err).with_context(|| format!("cannot start {program}"))
}

/// The interposer first, before whatever the environment already preloads.
fn preload_list(preload: &Path) -> std::ffi::OsString {
    let mut list = preload.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        list.push(":");
        list.push(old);
    }
    list
}

/// A size as given, once it parses (the program reads it again from the environment):
/// a bad one is refused here, where it was typed, not at the program's `cuInit`.
fn size_text(s: &str) -> Result<String, tessera_core::SizeError> {
    s.parse::<tessera_core::Bytes>().map(|_| s.to_string())
}
