//! The daemon and its clients as separate processes, as users run them.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_client::{Client, Outcome, TaskRequest, TenantOptions};

fn tessera() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
}

fn tmp(name: &str) -> PathBuf {
    let p =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// A daemon process killed when the test ends, however it ends.
struct DaemonProcess(Child);

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_daemon(socket: &PathBuf, ledger: &PathBuf, extra: &[&str]) -> DaemonProcess {
    let child = tessera()
        .args([
            "daemon",
            "--emulate",
            "--speedup",
            "10",
            "--gpus",
            "2",
            "--policy",
            "flexy",
            "--socket",
        ])
        .arg(socket)
        .arg("--ledger")
        .arg(ledger)
        .args(extra)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = DaemonProcess(child);
    let t = Instant::now();
    while Client::connect_control(socket).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "daemon did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn sigterm(child: &DaemonProcess) {
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
}

/// A client process killed with SIGKILL in the middle of a stream of tasks leaves no
/// tenant, no queued task and no memory behind.
#[test]
fn a_client_killed_mid_stream_leaves_nothing_behind() {
    let (socket, ledger) = (tmp("kill.sock"), tmp("kill-ledger"));
    let mut daemon = start_daemon(&socket, &ledger, &[]);
    // the victim: a demo client replaying a long batch job
    let workload = tmp("kill-workload.json");
    let job = serde_json::json!({"kernels": [{"name": "k", "mean": 500_000_000u64}], "jobs": [{
        "arrival": 0, "tenant": {"id": 0, "class": {"class": "batch"}, "weight": 1, "priority": 0, "memory": 0},
        "kernel": 0, "tasks": vec![500_000_000u64; 40], "window": 8, "submission": "window"}]});
    std::fs::write(&workload, job.to_string()).unwrap();
    let mut victim = tessera()
        .arg("demo-client")
        .arg("--socket")
        .arg(&socket)
        .arg("--workload")
        .arg(&workload)
        .args(["--job", "0", "--speedup", "10", "--epoch-ms", "0"])
        .spawn()
        .unwrap();
    let mut control = Client::connect_control(&socket).unwrap();
    let t = Instant::now();
    while control.status().unwrap().tenants.first().is_none_or(|x| x.queued == 0) {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(5));
    }
    victim.kill().unwrap();
    victim.wait().unwrap();
    let t = Instant::now();
    loop {
        let s = control.status().unwrap();
        if s.tenants.is_empty() && s.gpus.iter().all(|g| g.busy == "idle" && g.memory_used == 0) {
            assert!(s.totals.cancelled > 0, "its queued tasks were cancelled");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "leftovers: {s:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // and the daemon serves the next client
    let mut c = Client::connect(&socket).unwrap();
    let tenant = c.register(TenantOptions::batch()).unwrap();
    let h = c
        .submit(tenant, &TaskRequest { cost: Duration::from_millis(10), ..Default::default() })
        .unwrap();
    assert_eq!(c.wait(h, Duration::from_secs(10)).unwrap().outcome, Outcome::Done);
    sigterm(&daemon);
    assert!(daemon.0.wait().unwrap().success());
}

/// SIGTERM drains: queued tasks are cancelled with a reason, the running ones finish,
/// the socket is removed and the daemon exits cleanly; a second daemon on the same
/// socket is refused while the first runs.
#[test]
fn sigterm_drains_and_a_second_daemon_is_refused() {
    let (socket, ledger) = (tmp("term.sock"), tmp("term-ledger"));
    let mut daemon = start_daemon(&socket, &ledger, &[]);
    let second = tessera()
        .args(["daemon", "--emulate", "--socket"])
        .arg(&socket)
        .arg("--ledger")
        .arg(&ledger)
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("already running"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );

    let mut c = Client::connect(&socket).unwrap();
    let tenant = c.register(TenantOptions::batch()).unwrap();
    let handles: Vec<u64> = (0..6)
        .map(|_| {
            c.submit(
                tenant,
                &TaskRequest { cost: Duration::from_millis(2000), ..Default::default() },
            )
            .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    sigterm(&daemon);
    let outcomes: Vec<Outcome> =
        handles.iter().map(|h| c.wait(*h, Duration::from_secs(20)).unwrap().outcome).collect();
    assert!(daemon.0.wait().unwrap().success());
    let done = outcomes.iter().filter(|o| **o == Outcome::Done).count();
    let shut = outcomes
        .iter()
        .filter(|o| **o == Outcome::Cancelled(tessera_client::region::reason::SHUTDOWN))
        .count();
    assert_eq!(done + shut, 6, "every task ended: {outcomes:?}");
    assert!(done >= 1 && shut >= 1, "{outcomes:?}");
    assert_eq!(leftovers(&socket, &ledger), Vec::<PathBuf>::new(), "a finished run leaves nothing");
}

/// Run `command` (a daemon expected to refuse to start) for at most 20 s: its exit
/// status (`None`: it was still running, and was killed) and its stderr.
fn exits_within(command: &mut Command, tag: &str) -> (Option<std::process::ExitStatus>, String) {
    let errfile = tmp(&format!("{tag}.err"));
    let mut child = command.stderr(std::fs::File::create(&errfile).unwrap()).spawn().unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(&errfile).unwrap_or_default();
    let _ = std::fs::remove_file(&errfile);
    (status, err)
}

/// What a daemon on `socket` and `ledger` could leave behind: the socket, its lock,
/// the ledger's daemon lock, the ledger and its records directory.
fn leftovers(socket: &std::path::Path, ledger: &std::path::Path) -> Vec<PathBuf> {
    let with = |p: &std::path::Path, s: &str| {
        let mut o = p.as_os_str().to_os_string();
        o.push(s);
        PathBuf::from(o)
    };
    [
        socket.to_path_buf(),
        with(socket, ".lock"),
        ledger.to_path_buf(),
        with(ledger, ".daemon"),
        with(ledger, ".clients"),
    ]
    .into_iter()
    .filter(|p| std::fs::symlink_metadata(p).is_ok())
    .collect()
}

/// Emulation is never a silent default: without `--emulate` (or `--cuda`) the daemon
/// uses the CUDA driver, and where none loads it refuses to start, says to pass
/// `--emulate`, and leaves nothing behind. Before, it emulated 4 GPUs without a word.
#[test]
fn without_a_driver_the_daemon_refuses_to_emulate_unasked() {
    let (socket, ledger) = (tmp("auto.sock"), tmp("auto-ledger"));
    let mut daemon = tessera();
    daemon.args(["daemon", "--socket"]).arg(&socket).arg("--ledger").arg(&ledger);
    let (status, err) = exits_within(daemon.env("RUST_BACKTRACE", "1"), "auto");
    if err.contains("CUDA GPU(s) from") {
        eprintln!("SKIPPED: a CUDA driver loads on this machine; the daemon used it");
        return;
    }
    assert!(status.is_some_and(|s| !s.success()), "it started without a driver: {err}");
    assert!(err.contains("pass --emulate"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line, no backtrace: {err}");
    assert_eq!(leftovers(&socket, &ledger), Vec::<PathBuf>::new());
}

/// The start banner names the executor and the GPUs as found; a one-GPU node starts
/// with the default policy (before: "minimum reservation K=1 must be smaller than the
/// number of GPUs").
#[test]
fn the_banner_names_the_emulated_gpus_and_one_gpu_is_enough() {
    let (socket, ledger) = (tmp("banner.sock"), tmp("banner-ledger"));
    let mut daemon = tessera()
        .args(["daemon", "--emulate", "--gpus", "1", "--gpu-memory-mib", "2048", "--socket"])
        .arg(&socket)
        .arg("--ledger")
        .arg(&ledger)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // (after the warning that the one GPU cannot be reserved for user-facing work)
    // (the pipe stays open until the daemon exits: it writes on as it drains)
    let mut stderr =
        std::io::BufRead::lines(std::io::BufReader::new(daemon.stderr.take().unwrap()));
    let banner = stderr
        .by_ref()
        .map(Result::unwrap)
        .find(|l| l.starts_with("tesserad listening"))
        .unwrap_or_default();
    let daemon = DaemonProcess(daemon);
    assert!(banner.contains("policy node"), "{banner}");
    assert!(banner.contains("1 EMULATED GPU(s) of 2048 MiB"), "{banner}");
    sigterm(&daemon);
    let mut daemon = daemon;
    stderr.for_each(drop);
    assert!(daemon.0.wait().unwrap().success());
    assert_eq!(leftovers(&socket, &ledger), Vec::<PathBuf>::new());
}

/// One daemon per node: a second daemon on another socket but the same ledger is
/// refused, naming the first one's pid and socket, and leaves the first one's files
/// alone; a socket of another user at the path is never replaced.
#[test]
fn a_second_daemon_on_the_same_ledger_is_refused() {
    let (socket, ledger) = (tmp("one.sock"), tmp("one-ledger"));
    let daemon = start_daemon(&socket, &ledger, &[]);
    let other = tmp("two.sock");
    let mut second = tessera();
    second.args(["daemon", "--emulate", "--socket"]).arg(&other).arg("--ledger").arg(&ledger);
    let (status, err) = exits_within(&mut second, "second");
    assert!(status.is_some_and(|s| !s.success()), "a second daemon started: {err}");
    let first = format!("pid {} socket {}", daemon.0.id(), socket.display());
    assert!(err.contains("already running on ledger") && err.contains(&first), "{err}");
    assert!(!other.exists() && socket.exists(), "the first daemon's socket stays, no second");
    assert!(Client::connect_control(&socket).is_ok(), "the first daemon still serves");
    sigterm(&daemon);
    let mut daemon = daemon;
    assert!(daemon.0.wait().unwrap().success());

    if rustix::process::geteuid().is_root() {
        // another user's socket at the path
        let theirs = tmp("theirs.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let mut mine = tessera();
        mine.args(["daemon", "--emulate", "--socket"])
            .arg(&theirs)
            .arg("--ledger")
            .arg(tmp("theirs-ledger"));
        let (status, err) = exits_within(&mut mine, "theirs");
        assert!(status.is_some_and(|s| !s.success()), "{err}");
        assert!(err.contains("not a socket of this user"), "{err}");
        let meta = std::fs::symlink_metadata(&theirs).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 65534, "their socket stays");
        let _ = std::fs::remove_file(&theirs);
    } else {
        eprintln!("SKIPPED (part): another user's socket needs root to make");
    }
}

#[test]
fn the_demo_runs_and_compares_with_the_simulator() {
    let out = tessera().args(["demo", "--jobs", "6", "--speedup", "20"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    // one table row per policy, and a verdict row per policy against every simulation
    for policy in ["RoundRobin", "P-MinRes1", "F-MinRes1"] {
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with(policy)).collect();
        assert_eq!(rows.len(), 2, "{text}");
        assert_eq!(rows[1].matches("yes").count() + rows[1].matches("NO").count(), 3, "{text}");
    }
    assert!(text.contains("daemon agrees with its own policy's simulation for"), "{text}");
    // it says which reading of Flexy's workload it runs
    assert!(text.contains("main reading uf2n-window"), "{text}");
}

#[test]
fn status_without_a_daemon_says_so() {
    let out = tessera().args(["status", "--socket"]).arg(tmp("nobody.sock")).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no tesserad at"));
}

/// After `kill -9` of the daemon a wait used to run out its whole timeout, or block
/// forever without one; now it fails with a typed error within a bounded time.
#[test]
fn a_client_notices_a_dead_daemon() {
    let (socket, ledger) = (tmp("dead.sock"), tmp("dead-ledger"));
    let mut daemon = start_daemon(&socket, &ledger, &[]);
    let mut c = Client::connect(&socket).unwrap();
    let t = c.register(TenantOptions::batch()).unwrap();
    let task = TaskRequest {
        kernel: 1,
        cost: Duration::from_secs(50), // under max_task_ms; it will not finish
        memory: 0,
        input: vec![],
        output_len: 0,
    };
    let h = c.submit(t, &task).unwrap();
    daemon.0.kill().unwrap(); // SIGKILL: no drain, no goodbye
    daemon.0.wait().unwrap();
    let started = Instant::now();
    let r = c.wait(h, Duration::MAX);
    assert!(matches!(r, Err(tessera_client::ClientError::DaemonGone)), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(60), "noticed, not timed out");
    let r = c.wait_any(Duration::from_secs(3600));
    assert!(matches!(r, Err(tessera_client::ClientError::DaemonGone)), "{r:?}");
}

/// A thousand connected clients, with the daemon started under the common soft limit
/// of 1,024 descriptors: it raises the limit, and serves them all from one control
/// thread (it used to stop near 500 clients, with a thread per connection).
#[test]
fn a_thousand_clients_are_served_by_one_control_thread() {
    // this process holds two descriptors per client too
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let hard = limit.maximum.unwrap_or(u64::MAX);
    if hard < 4096 {
        eprintln!("SKIPPED: the hard descriptor limit ({hard}) is below 4096");
        return;
    }
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit { current: limit.maximum, ..limit },
    );
    let (socket, ledger) = (tmp("many.sock"), tmp("many-ledger"));
    let config = tmp("many.toml");
    std::fs::write(&config, "max_conns_per_uid = 1100\n").unwrap();
    let child = Command::new("sh")
        .args(["-c", "ulimit -Sn 1024 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .args(["daemon", "--emulate", "--speedup", "10", "--gpus", "2", "--policy", "flexy"])
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(&socket)
        .arg("--ledger")
        .arg(&ledger)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let daemon = DaemonProcess(child);
    let t = Instant::now();
    while Client::connect_control(&socket).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "daemon did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut clients: Vec<Client> = (0..1000)
        .map(|i| Client::connect(&socket).unwrap_or_else(|e| panic!("client {i}: {e}")))
        .collect();
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.0.id())).unwrap();
    let threads: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    // main, core, control, one per GPU, and the signal handler's: not one per client
    assert!(threads < 16, "{threads} threads for 1,000 clients");
    let last = clients.last_mut().unwrap();
    let t = last.register(TenantOptions::batch()).unwrap();
    let task = TaskRequest {
        kernel: 1,
        cost: Duration::from_millis(1),
        memory: 0,
        input: vec![],
        output_len: 0,
    };
    let h = last.submit(t, &task).unwrap();
    assert_eq!(last.wait(h, Duration::from_secs(20)).unwrap().outcome, Outcome::Done);
}

/// Another user (here uid 65534, on a socket opened to everyone) sees only its own
/// tenants in status, and may register batch tenants but not user-facing ones unless
/// the operator lists it in `user_facing_uids`.
#[test]
fn another_user_sees_only_its_own_and_registers_batch_only() {
    use std::os::unix::process::CommandExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: needs root to act as another user");
        return;
    }
    // the checkout may sit where uid 65534 cannot reach the binary (under /root, say)
    let reachable =
        tessera().arg("--version").uid(65534).gid(65534).output().is_ok_and(|o| o.status.success());
    if !reachable {
        eprintln!("SKIPPED: uid 65534 cannot run {}", env!("CARGO_BIN_EXE_tessera"));
        return;
    }
    let (socket, ledger) = (tmp("other.sock"), tmp("other-ledger"));
    let _daemon = start_daemon(&socket, &ledger, &[]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut mine = Client::connect(&socket).unwrap();
    mine.register(TenantOptions::batch()).unwrap();
    mine.register(TenantOptions::batch()).unwrap();
    assert_eq!(mine.status().unwrap().tenants.len(), 2, "root sees its tenants");
    let as_nobody = |cmd: &mut Command| -> std::process::Output {
        cmd.uid(65534).gid(65534).stderr(Stdio::piped()).output().unwrap()
    };
    let out = as_nobody(tessera().args(["status", "--json", "--socket"]).arg(&socket));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["tenants"].as_array().unwrap().len(), 0, "{report}");
    let job = |class: &str| {
        let path = tmp(&format!("other-{class}.json"));
        let w = serde_json::json!({"kernels": [{"name": "k", "mean": 1_000_000u64}], "jobs": [{
            "arrival": 0, "tenant": {"id": 0, "class": {"class": class, "sla": 200_000_000u64}, "weight": 1, "priority": 0, "memory": 0},
            "kernel": 0, "tasks": vec![1_000_000u64; 2], "window": 1, "submission": "window"}]});
        std::fs::write(&path, w.to_string()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        path
    };
    let client = |workload: &PathBuf| {
        as_nobody(
            tessera()
                .arg("demo-client")
                .arg("--socket")
                .arg(&socket)
                .arg("--workload")
                .arg(workload)
                .args(["--job", "0", "--speedup", "10", "--epoch-ms", "0"]),
        )
    };
    let out = client(&job("batch"));
    assert!(out.status.success(), "batch is allowed: {}", String::from_utf8_lossy(&out.stderr));
    let out = client(&job("user_facing"));
    assert!(!out.status.success(), "user-facing is not");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Forbidden"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Ctrl-C during the demo stops its clients and its daemon and removes its directory
/// (before: the client processes ran on, and the directory with its socket, ledgers
/// and workload stayed); off a terminal, its live line is a line per update.
#[test]
fn the_demo_cleans_up_on_ctrl_c() {
    let dir = tmp("demo-dir");
    let _ = std::fs::remove_dir_all(&dir);
    let mut demo = tessera()
        .args(["demo", "--jobs", "6", "--speedup", "2", "--dir"])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // wait for the first live line (clients are running)
    let mut err = std::io::BufReader::new(demo.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("clients") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut err, &mut line).unwrap() > 0, "the demo ended");
    }
    assert!(!line.contains('\r'), "no carriage returns into a pipe: {line:?}");
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&demo),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = demo.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "the demo did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    assert!(!dir.exists(), "the demo's directory is removed");
    // no client of this demo still runs
    let clients = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains(dir.to_str().unwrap()))
        .count();
    assert_eq!(clients, 0, "the demo's clients are gone");
}
