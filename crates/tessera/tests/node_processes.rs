//! The composed node policy end to end with real processes (issue 30, item 3): a
//! `tessera daemon --policy node` process on three emulated 1 GiB GPUs, and each
//! tenant a process of its own (this test binary run again in a client role), once as
//! plain processes and once each in its own pid namespace, as a container platform
//! runs them. An SLA tenant keeps its SLA in the pool; a Slurm job's two tenants
//! weighted 1 : 3 share its GPU 1 : 3; a 600 MiB newcomer that fits only beside the
//! job, overloading its GPU, is moved off once the 700 MiB tenant's GPU frees.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tessera_client::proto::{JobGrant, TenantClass};
use tessera_client::{Client, Outcome, TaskRequest, TenantOptions};

const MIB: u64 = 1 << 20;
const SPEEDUP: f64 = 4.0;
const ROLE: &str = "TESSERA_NODE_TEST_ROLE";
const JOB: u64 = 31;
/// The scenario's length after its start, wall clock.
const RUN: Duration = Duration::from_secs(4);

/// A process killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn task(ms: u64) -> TaskRequest {
    TaskRequest {
        kernel: 1,
        cost: Duration::from_millis(ms),
        memory: 0,
        input: vec![],
        output_len: 0,
    }
}

/// Keep two tasks of `tenant` in flight until `until`; the GPU each ran on, in order.
fn keep_busy(c: &mut Client, tenant: u64, until: SystemTime) -> Vec<Option<u32>> {
    let mut gpus = Vec::new();
    let mut inflight = 0;
    loop {
        let more = SystemTime::now() < until;
        while more && inflight < 2 {
            c.submit(tenant, &task(20)).expect("submit");
            inflight += 1;
        }
        if inflight == 0 {
            return gpus;
        }
        let done = c.wait_any(Duration::from_secs(30)).expect("every task ends");
        assert_eq!(done.outcome, Outcome::Done, "{done:?}");
        gpus.push(done.gpu);
        inflight -= 1;
    }
}

/// A client's result line on stdout, which its parent reads.
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*).expect("stdout")
    }};
}

/// The client roles, each run in a process of its own: `role start_ms socket`. Each
/// prints one `RESULT` line.
fn client_role(role: &str, start_ms: u64, socket: &Path) {
    let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(start_ms + ms);
    let end = at(RUN.as_millis() as u64);
    let wait_until = |t: SystemTime| {
        if let Ok(d) = t.duration_since(SystemTime::now()) {
            std::thread::sleep(d);
        }
    };
    let mut c = Client::connect(socket).expect("connect");
    match role {
        "big" => {
            wait_until(at(0));
            let t =
                c.register(TenantOptions { memory: 700 * MIB, ..TenantOptions::batch() }).unwrap();
            let gpus = keep_busy(&mut c, t, at(1000));
            // the GPU it leaves (which one depends on whether the service registered
            // first: the pool's reservation holds only while a service is registered)
            let gpu = gpus.last().copied().flatten().map_or(-1, i64::from);
            report!("RESULT big tasks={} gpu={gpu}", gpus.len());
        }
        "light" | "heavy" => {
            wait_until(at(100));
            let weight = if role == "light" { 1 } else { 3 };
            let options = TenantOptions {
                job: Some(JOB),
                weight,
                memory: 100 * MIB,
                ..TenantOptions::batch()
            };
            let t = c.register(options).unwrap();
            let gpus = keep_busy(&mut c, t, end);
            let on_job_gpu = gpus.iter().all(|g| *g == Some(1));
            let st = c.status().unwrap();
            let ms = st.tenants.iter().find(|x| x.tenant == t).map_or(0.0, |x| x.gpu_ms);
            report!("RESULT {role} gpu_ms={ms} on_job_gpu={on_job_gpu}");
        }
        "newcomer" => {
            wait_until(at(300));
            let t =
                c.register(TenantOptions { memory: 600 * MIB, ..TenantOptions::batch() }).unwrap();
            let gpus = keep_busy(&mut c, t, end);
            let b = c.status().unwrap().balance.expect("the node policy reports its balancer");
            let moved_to: Vec<String> = b
                .recent
                .iter()
                .filter(|m| m.from == 1 && m.reason == "balance" && m.tenant == Some(t))
                .map(|m| m.to.to_string())
                .collect();
            let gpu = |g: Option<&Option<u32>>| g.copied().flatten().map_or(-1, i64::from);
            report!(
                "RESULT newcomer first={} last={} moved_from_1_to={}",
                gpu(gpus.first()),
                gpu(gpus.last()),
                moved_to.join(",")
            );
        }
        "sla" => {
            wait_until(at(0));
            let sla = Duration::from_millis(200);
            let uf = c
                .register(TenantOptions {
                    class: TenantClass::UserFacing,
                    sla,
                    ..TenantOptions::batch()
                })
                .unwrap();
            let (mut met, mut total) = (0, 0);
            while SystemTime::now() < end {
                let sent = Instant::now();
                let h = c.submit(uf, &task(20)).unwrap();
                let done = c.wait(h, Duration::from_secs(30)).unwrap();
                assert_eq!(done.outcome, Outcome::Done);
                total += 1;
                met += usize::from(sent.elapsed().mul_f64(SPEEDUP) <= sla);
                std::thread::sleep(Duration::from_millis(50).div_f64(SPEEDUP));
            }
            report!("RESULT sla met={met} total={total}");
        }
        other => panic!("unknown role {other}"),
    }
}

/// Run again in a client role: this test does nothing unless started so.
#[test]
fn client_process() {
    let Ok(spec) = std::env::var(ROLE) else { return };
    let mut parts = spec.splitn(3, ' ');
    let (role, start, socket) = (parts.next(), parts.next(), parts.next());
    let (Some(role), Some(start), Some(socket)) = (role, start, socket) else {
        panic!("bad role spec {spec:?}")
    };
    client_role(role, start.parse().expect("start ms"), Path::new(socket));
}

fn namespaces_work() -> bool {
    let ok = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "SKIPPED: `unshare --pid --fork --mount-proc` does not work here (needs root or user namespaces)"
        );
    }
    ok
}

/// One client process in `role`, under `prefix` (e.g. `unshare`) if any.
fn spawn_client(prefix: &[&str], role: &str, start_ms: u64, socket: &Path) -> Child {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    cmd.arg(crate::common::harness_name(module_path!(), "client_process"))
        .args(["--exact", "--nocapture", "--test-threads", "1"])
        .env(ROLE, format!("{role} {start_ms} {}", socket.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a client")
}

/// The `RESULT` line's `key=value` fields of a finished client.
fn result(child: Child, role: &str) -> std::collections::BTreeMap<String, String> {
    let out = child.wait_with_output().expect("client ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{role} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        // the harness may have written "test client_process ... " before it
        .find_map(|l| l.split_once(&format!("RESULT {role} ")).map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("{role} printed no result: {stdout}"));
    line.split(' ')
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// The scenarios are timed: one at a time, so that the other's processes do not
/// share the cores with them.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn scenario(prefix: &[&str], tag: &str) {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("node-processes-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (socket, ledger) = (dir.join("tessera.sock"), dir.join("ledger"));
    let daemon = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["daemon", "--emulate", "--speedup", "4", "--gpus", "3", "--gpu-memory-mib", "1024"])
        .args(["--policy", "node", "--sla-ms", "200", "--socket"])
        .arg(&socket)
        .arg("--ledger")
        .arg(&ledger)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut daemon = Killed(daemon);
    let t = Instant::now();
    while Client::connect_control(&socket).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "daemon did not come up");
        assert!(daemon.0.try_wait().unwrap().is_none(), "daemon exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    // what Slurm's prolog does: the job on GPU 1, for this uid
    let me = rustix::process::geteuid().as_raw();
    Client::connect(&socket)
        .unwrap()
        .job_start(JobGrant {
            job: JOB,
            uid: me,
            gpus: vec![1],
            shards: 4,
            partition: "batch".into(),
            qos: String::new(),
            comment: String::new(),
        })
        .unwrap();
    // the clients start together, half a second from now (process start-up is not
    // part of the scenario)
    let start = now_ms() + 500;
    let roles = ["big", "light", "heavy", "newcomer", "sla"];
    let children: Vec<(Child, &str)> =
        roles.iter().map(|r| (spawn_client(prefix, r, start, &socket), *r)).collect();
    let mut results = std::collections::BTreeMap::new();
    for (child, role) in children {
        results.insert(role, result(child, role));
    }
    let get = |role: &str, key: &str| -> String {
        results[role].get(key).cloned().unwrap_or_else(|| panic!("{role}: no {key}"))
    };
    let num = |role: &str, key: &str| -> f64 { get(role, key).parse().expect("a number") };
    eprintln!("{tag}: {results:?}");
    let (met, total) = (num("sla", "met"), num("sla", "total"));
    assert!(total > 20.0 && met / total >= 0.95, "SLA met by {met} of {total} requests");
    let (light, heavy) = (num("light", "gpu_ms"), num("heavy", "gpu_ms"));
    assert!(
        (0.25..=0.42).contains(&(light / heavy)),
        "weights 1 : 3 received {light} : {heavy} ms"
    );
    assert_eq!(get("light", "on_job_gpu"), "true");
    assert_eq!(get("heavy", "on_job_gpu"), "true");
    assert_eq!(get("newcomer", "first"), "1", "the newcomer fits only beside the job");
    let freed = get("big", "gpu");
    assert_ne!(freed, "1", "the 700 MiB tenant ran beside the job");
    assert_eq!(get("newcomer", "last"), freed, "and is moved to the freed GPU");
    assert!(
        get("newcomer", "moved_from_1_to").split(',').any(|to| to == freed),
        "the balancer reports the move to GPU {freed}"
    );
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&daemon.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(daemon.0.wait().unwrap().success(), "the daemon drains and exits cleanly");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn node_policy_with_each_tenant_a_process() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    scenario(&[], "plain");
}

#[test]
fn node_policy_with_each_tenant_in_its_own_pid_namespace() {
    if std::env::var(ROLE).is_ok() || !namespaces_work() {
        return;
    }
    scenario(&["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"], "pidns");
}
