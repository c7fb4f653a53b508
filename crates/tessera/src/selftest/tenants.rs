//! The self-test's surroundings: its daemon (its own, or the one it was pointed at),
//! a scratch directory, and its programs started as tenants (`tessera run … --
//! tessera selftest-worker ROLE`) or directly, each read line by line with a deadline.

use super::SelftestArgs;
use anyhow::{Context, Result, anyhow, bail};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The daemon, the scratch directory and how to start programs.
pub(super) struct Tenants {
    exe: PathBuf,
    preload: PathBuf,
    socket: PathBuf,
    scratch: PathBuf,
    daemon: Option<tesserad::Daemon>,
    driver_dir: Option<PathBuf>,
}

/// What a program without tessera sees of device 0.
#[derive(Debug)]
pub(super) struct View {
    pub name: String,
    pub total: u64,
}

/// Take `cpu` out of the calling thread's CPU mask when others remain; the mask as it
/// was, to restore, when it did.
fn keep_off(cpu: Option<usize>) -> Option<rustix::thread::CpuSet> {
    let cpu = cpu?;
    let all = rustix::thread::sched_getaffinity(None).ok()?;
    let mut rest = all;
    rest.unset(cpu);
    let others = (0..rustix::thread::CpuSet::MAX_CPU).any(|c| rest.is_set(c));
    (others && rustix::thread::sched_setaffinity(None, &rest).is_ok()).then_some(all)
}

impl Tenants {
    pub fn new(args: &SelftestArgs) -> Result<Tenants> {
        let exe = std::env::current_exe().context("finding the tessera binary")?;
        let preload = match args.preload.clone().or_else(crate::run::default_preload) {
            Some(p) if p.is_file() => std::fs::canonicalize(p)?,
            Some(p) => bail!("the interposer {} does not exist", p.display()),
            None => bail!("libtessera_cuda.so was not found beside tessera: give --preload"),
        };
        let scratch = std::env::temp_dir().join(format!("tessera-selftest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        let answers = |socket: &PathBuf| {
            tessera_client::Client::connect_control(socket).and_then(|mut c| c.status()).is_ok()
        };
        let (socket, daemon) = match &args.socket {
            Some(s) if answers(s) => (s.clone(), None),
            Some(s) => bail!("no daemon answers at {}", s.display()),
            None if answers(&crate::default_socket()) => (crate::default_socket(), None),
            None => {
                std::fs::create_dir_all(scratch.join("locks"))?;
                let config = tesserad::config::DaemonConfig {
                    socket: scratch.join("d.sock"),
                    ledger: scratch.join("ledger"),
                    gpu_lock_dir: scratch.join("locks"),
                    executor: tesserad::config::ExecutorKind::Cuda {
                        library: args.driver.clone(),
                        gpus: None,
                    },
                    policy: tesserad::config::PolicyName::Fair,
                    ..tesserad::config::DaemonConfig::default()
                };
                // the daemon's threads (spawned now, inheriting this thread's mask) stay
                // off the launch check's CPU, whose programs would otherwise share it
                // with them
                let mask = keep_off(args.launch_cpu);
                let daemon = tesserad::Daemon::start(&config)
                    .map_err(|e| anyhow!("starting a daemon on this node's GPUs: {e}"));
                if let Some(all) = mask {
                    let _ = rustix::thread::sched_setaffinity(None, &all);
                }
                let daemon = daemon?;
                (config.socket, Some(daemon))
            }
        };
        // a driver given by path is found by the programs too
        let driver_dir = args.driver.as_ref().and_then(|d| d.parent()).map(PathBuf::from);
        Ok(Tenants { exe, preload, socket, scratch, daemon, driver_dir })
    }

    pub fn daemon_text(&self) -> String {
        match self.daemon {
            Some(_) => "its own (policy fair), on this node's GPUs".into(),
            None => format!("the running one at {}", self.socket.display()),
        }
    }

    /// The daemon's status.
    pub fn status(&self) -> Result<tessera_client::proto::StatusReport> {
        let mut c = tessera_client::Client::connect_control(&self.socket)
            .with_context(|| format!("reaching the daemon at {}", self.socket.display()))?;
        Ok(c.status()?)
    }

    /// Memory the ledger has granted on the node's GPU 0.
    pub fn ledger_used(&self) -> Result<u64> {
        let status = self.status()?;
        status
            .gpus
            .iter()
            .find(|g| g.gpu == 0)
            .map(|g| g.memory_used)
            .context("the daemon has no GPU 0")
    }

    pub fn scratch(&self) -> &std::path::Path {
        &self.scratch
    }

    fn worker(&self, command: &mut Command, label: &str, role: &[String]) {
        command
            .arg(&self.exe)
            .arg("selftest-worker")
            .args(role)
            // every program on the node's first GPU, which the fair shares need
            .env("CUDA_VISIBLE_DEVICES", "0")
            // on the fake driver: one time line for all the programs, as a GPU is
            .env("FAKE_CUDA_TIMELINE", self.scratch.join("timeline"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Ok(log) = std::fs::File::create(self.scratch.join(format!("{label}.log"))) {
            command.stderr(log);
        }
        if let Some(dir) = &self.driver_dir {
            let mut path = dir.as_os_str().to_os_string();
            if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
                path.push(":");
                path.push(old);
            }
            command.env("LD_LIBRARY_PATH", path);
        }
    }

    /// `role` as a tenant: `tessera run` with `memory` MiB and `weight`.
    pub fn tenant(
        &self,
        label: &str,
        memory: Option<u64>,
        weight: Option<u32>,
        role: &[String],
    ) -> Result<Running> {
        let mut c = Command::new(&self.exe);
        c.arg("run").arg("--socket").arg(&self.socket).arg("--preload").arg(&self.preload);
        if let Some(m) = memory {
            c.arg("--memory").arg(format!("{m}MiB"));
        }
        if let Some(w) = weight {
            c.arg("--weight").arg(w.to_string());
        }
        c.arg("--");
        self.worker(&mut c, label, role);
        Running::start(label, c, &self.scratch)
    }

    /// `role` without tessera.
    pub fn direct(&self, label: &str, role: &[String]) -> Result<Running> {
        let mut c = Command::new("env");
        c.arg("-u").arg("LD_PRELOAD");
        self.worker(&mut c, label, role);
        Running::start(label, c, &self.scratch)
    }

    /// What a program without tessera sees of device 0.
    pub fn unmanaged_view(&self) -> Result<View> {
        let v = self.direct("view", &["share".into()])?.finish(Duration::from_secs(60))?;
        Ok(View {
            name: v["name"].as_str().unwrap_or("?").to_owned(),
            total: v["total"].as_u64().unwrap_or(0),
        })
    }
}

impl Drop for Tenants {
    fn drop(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// A started program: its JSON lines as they come, its stdin.
pub(super) struct Running {
    label: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    log: PathBuf,
    /// The last line `next` read.
    last: Option<String>,
}

impl Running {
    fn start(label: &str, mut c: Command, scratch: &std::path::Path) -> Result<Running> {
        let mut child = c.spawn().with_context(|| format!("starting the {label} program"))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Running {
            label: label.into(),
            stdin: child.stdin.take(),
            child,
            lines,
            log: scratch.join(format!("{label}.log")),
            last: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Why the program failed: its stderr's last lines.
    fn why(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        if tail.is_empty() { "it said nothing".into() } else { tail.join(" / ") }
    }

    /// Its next JSON line, within `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Result<serde_json::Value> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                self.last = Some(line.clone());
                serde_json::from_str(&line)
                    .with_context(|| format!("the {} program wrote {line:?}", self.label))
            }
            Err(RecvTimeoutError::Timeout) => {
                bail!("the {} program said nothing for {:?}: {}", self.label, timeout, self.why())
            }
            Err(RecvTimeoutError::Disconnected) => {
                let _ = self.child.wait();
                bail!("the {} program ended: {}", self.label, self.why())
            }
        }
    }

    /// Write a line to its stdin.
    pub fn send(&mut self, line: &str) -> Result<()> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    /// Kill it (SIGKILL), now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Close its stdin, and its last JSON line once it ended (successfully) within
    /// `timeout`.
    pub fn finish(mut self, timeout: Duration) -> Result<serde_json::Value> {
        self.stdin = None;
        let deadline = Instant::now() + timeout;
        let mut last = self.last.take();
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => last = Some(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    self.kill();
                    bail!(
                        "the {} program did not end within {timeout:?}: {}",
                        self.label,
                        self.why()
                    );
                }
            }
        }
        let status = self.child.wait()?;
        if !status.success() {
            bail!("the {} program failed ({status}): {}", self.label, self.why());
        }
        let line = last.with_context(|| format!("the {} program wrote nothing", self.label))?;
        serde_json::from_str(&line)
            .with_context(|| format!("the {} program wrote {line:?}", self.label))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}
