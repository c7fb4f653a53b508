//! A daemon killed with SIGKILL and started again — what systemd's `Restart=on-failure`
//! does — loses no reservation and grants nothing twice (issue 51, item 2), with real
//! processes: `tessera daemon` on one emulated 1 GiB GPU, and unmodified programs under
//! `tessera run` on the fake driver (NVIDIA's `cuda.h`; skipped with the reason where it
//! cannot be fetched). Three restarts in a row.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_client::Client;

const MIB: u64 = 1 << 20;

/// A process killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_daemon(socket: &Path, ledger: &Path) -> Killed {
    start_daemon_as(socket, ledger, "round-robin", "10")
}

/// `tessera daemon` on one emulated 1 GiB GPU under `policy`, at `speedup`.
fn start_daemon_as(socket: &Path, ledger: &Path, policy: &str, speedup: &str) -> Killed {
    let child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["daemon", "--emulate", "--speedup", speedup, "--gpus", "1", "--gpu-memory-mib"])
        .arg("1024")
        .args(["--policy", policy, "--socket"])
        .arg(socket)
        .arg("--ledger")
        .arg(ledger)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = Killed(child);
    let t = Instant::now();
    while Client::connect_control(socket).and_then(|mut c| c.status()).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "the daemon did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// A program of memory_app's `hold` mode under `tessera run`, driven line by line.
struct Program {
    child: Killed,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Program {
    fn start(s: &Setup, args: &[&str], wait: &str) -> Program {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .arg("run")
            .arg("--preload")
            .arg(&s.preload)
            .arg("--socket")
            .arg(&s.socket)
            .arg("--")
            .arg(&s.app)
            .args(args)
            .env("LD_LIBRARY_PATH", &s.dir)
            .env("TESSERA_MEMORY_WAIT", wait)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Program { child: Killed(child), stdin, stdout }
    }

    /// The next line starting with `allocated`, `freed`, `done` or `error`.
    fn next(&mut self) -> String {
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).unwrap() == 0 {
                let mut err = String::new();
                if let Some(mut e) = self.child.0.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                panic!("the program ended: {err}");
            }
            if ["allocated", "freed", "done", "error"].iter().any(|w| line.starts_with(w)) {
                return line.trim().to_string();
            }
        }
    }

    fn say(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }
}

struct Setup {
    dir: PathBuf,
    app: PathBuf,
    preload: PathBuf,
    socket: PathBuf,
    _scratch: common::Scratch,
}

/// What the daemon at `socket` reports: its tenants' (pid, memory held) and the GPU's
/// granted memory.
fn books(socket: &Path) -> (Vec<(u32, u64)>, u64) {
    let s = Client::connect_control(socket).unwrap().status().unwrap();
    (s.tenants.iter().map(|t| (t.pid, t.memory_held)).collect(), s.gpus[0].memory_used)
}

/// A program that is asked for 768 MiB on the GPU where `a` holds 768 MiB of 1,024
/// gets out-of-memory at once (it does not wait): nothing is granted twice.
fn no_double_grant(s: &Setup) {
    let mut b = Program::start(s, &["hold", "768"], "none");
    let first = b.next();
    assert!(first.starts_with("error alloc 2"), "a second 768 MiB was granted: {first}");
}

#[test]
fn a_killed_daemon_restarted_three_times_loses_no_reservation_and_grants_nothing_twice() {
    let Some(scratch) = common::scratch("restart") else { return };
    scratch.fake_driver();
    let app = tessera_driver::testing::build_c_program(
        &scratch.artifacts,
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tessera-cuda/tests/memory_app.c"),
        &scratch.dir.join("memory_app"),
    )
    .unwrap();
    let preload = scratch.bin.join("libtessera_cuda.so");
    let s = Setup {
        dir: scratch.dir.clone(),
        app,
        preload,
        socket: scratch.dir.join("d.sock"),
        _scratch: scratch,
    };
    let ledger = s.dir.join("ledger");
    let mut daemon = start_daemon(&s.socket, &ledger);
    let mut a = Program::start(&s, &["hold", "768"], "forever");
    assert_eq!(a.next().split_whitespace().next(), Some("allocated"));
    // a program that dies while the daemon is down
    let mut d = Program::start(&s, &["hold", "100"], "forever");
    assert_eq!(d.next().split_whitespace().next(), Some("allocated"));
    no_double_grant(&s);
    for round in 0..3 {
        daemon.0.kill().unwrap();
        daemon.0.wait().unwrap();
        if round == 0 {
            d.child.0.kill().unwrap();
            d.child.0.wait().unwrap();
        }
        daemon = start_daemon(&s.socket, &ledger);
        // A is re-adopted without doing anything: it shows in status under its own pid,
        // holding its memory (it registers first, then the daemon adopts)
        let t = Instant::now();
        loop {
            let (tenants, _) = books(&s.socket);
            if tenants.iter().any(|(pid, held)| *pid == a.pid() && *held >= 768 * MIB) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "round {round}: A was not re-adopted: {tenants:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        no_double_grant(&s);
        // the dead program's 100 MiB came back; A's 768 MiB (and at most one lease
        // chunk) are all that is granted
        let t = Instant::now();
        loop {
            let (tenants, used) = books(&s.socket);
            if (768 * MIB..=(768 + 64) * MIB).contains(&used) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "round {round}: {used} bytes granted, tenants {tenants:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // A's later frees return its memory: then another program's 768 MiB fits
    a.say("free");
    assert_eq!(a.next().split_whitespace().next(), Some("freed"));
    let mut b = Program::start(&s, &["hold", "768"], "2000");
    let got = b.next();
    assert!(got.starts_with("allocated"), "after A's free: {got}");
    b.say("exit");
    assert_eq!(b.next(), "done");
    a.say("exit");
    assert_eq!(a.next(), "done");
    let (_, used) = books(&s.socket);
    let t = Instant::now();
    let mut used = used;
    while used != 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "{used} bytes still granted at the end");
        std::thread::sleep(Duration::from_millis(50));
        used = books(&s.socket).1;
    }
    drop(daemon);
}

/// The nice values of process `pid`'s threads.
fn nices(pid: u32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return vec![] };
    tasks
        .flatten()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // after the command's closing parenthesis, the 17th field is the nice
            stat.rsplit(')').next()?.split_whitespace().nth(16)?.parse().ok()
        })
        .collect()
}

/// A coscheduling boost does not outlive the daemon that gave it (issue 58 item 4; "a
/// crash of any of our processes grants nothing twice"): a fair daemon raises an
/// interactive program's threads (a 50 us kernel, a synchronous wait and 200 us of CPU
/// work per iteration, beside a batch program of 20 ms kernels) while its slices last;
/// killed with SIGKILL while they are raised, it cannot put them back, and the program's
/// interposer does once it finds its daemon gone (within a second). A child the program
/// forks while raised (a DataLoader worker) starts at the program's own nice: the boost
/// is its parent's slice's. Root only (raising a priority needs CAP_SYS_NICE).
#[test]
fn a_coscheduling_boost_ends_when_its_daemon_is_killed() {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").map_or(1, |m| m.uid()) != 0 {
        eprintln!("SKIPPED: raising a thread's priority needs root (CAP_SYS_NICE)");
        return;
    }
    let Some(scratch) = common::scratch("cosched-kill") else { return };
    scratch.fake_driver();
    let app = tessera_driver::testing::build_c_program(
        &scratch.artifacts,
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tessera-cuda/tests/driver_app.c"),
        &scratch.dir.join("driver_app"),
    )
    .unwrap();
    let (socket, ledger) = (scratch.dir.join("d.sock"), scratch.dir.join("ledger"));
    let mut daemon = start_daemon_as(&socket, &ledger, "fair", "1");
    let out = scratch.dir.join("interactive.out");
    let program = |args: &[&str], env: &[(&str, &str)], stdout: Stdio| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
        c.arg("run")
            .arg("--preload")
            .arg(scratch.bin.join("libtessera_cuda.so"))
            .arg("--socket")
            .arg(&socket)
            .arg("--")
            .arg(&app)
            .args(args)
            .env("LD_LIBRARY_PATH", &scratch.dir)
            .stdout(stdout)
            .stderr(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        Killed(c.spawn().unwrap())
    };
    let _batch = program(&["launch", "1000", "20"], &[], Stdio::null());
    let interactive = program(
        &["launch", "1000000", "0.05"],
        &[("CPU_US", "200"), ("FORK_WHEN_RAISED", "1")],
        Stdio::from(std::fs::File::create(&out).unwrap()),
    );
    let pid = interactive.0.id();
    let t = Instant::now();
    while !nices(pid).iter().any(|n| *n < 0) {
        assert!(t.elapsed() < Duration::from_secs(15), "never raised: {:?}", nices(pid));
        std::thread::sleep(Duration::from_millis(2));
    }
    let t = Instant::now();
    let said = |what: &str| -> Option<i32> {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix(what)?.trim().parse().ok())
    };
    while said("forked parent nice").is_none() {
        assert!(t.elapsed() < Duration::from_secs(15), "it never forked while raised");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(said("forked parent nice").is_some_and(|n| n < 0));
    assert_eq!(said("forked child nice"), Some(0), "the child kept its parent's boost");
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    let killed = Instant::now();
    while nices(pid).iter().any(|n| *n < 0) {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "still raised {:?} after its daemon was killed: {:?}",
            killed.elapsed(),
            nices(pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(killed.elapsed() < Duration::from_secs(1), "put back after {:?}", killed.elapsed());
}
