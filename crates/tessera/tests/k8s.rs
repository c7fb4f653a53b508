//! Issue 54: the device plugin against a kubelet stand-in, over the kubelet's own wire
//! protocol. The stand-in (`tests/data/kubelet_standin.py`) is built with grpcio-tools
//! from the kubelet's own device plugin `.proto` (scripts/kubelet-protos.sh) and
//! tessera's transcription of the pod resources API (no registry carries the
//! kubelet's); it registers the plugin, follows its `ListAndWatch`, admits pods with
//! `GetPreferredAllocation` and `Allocate`, and lists them. Each pod's container is
//! processes in their own mount and pid namespaces (`unshare`), with exactly the
//! mounts and environment `Allocate` returned, running a C program on the fake driver
//! (the node's driver libraries, which NVIDIA's container toolkit would mount, are the
//! fake's, by `LD_LIBRARY_PATH`). The daemon runs on one emulated 4 GiB GPU under
//! `fair`, with `require_token_in_containers`.
//!
//! What the fake cannot show: `Allocate` returns no device nodes here (the node has no
//! `/dev/nvidia*`), and a process that strips `LD_PRELOAD` reaches the fake driver
//! directly — on a real node it reaches the GPU outside tessera as it would outside any
//! interposer (HAMi's included); what the test shows is that it gets nothing through the
//! daemon: no tenant, no memory of the ledger's, no GPU time the daemon grants.
//!
//! Root only (mount and pid namespaces); SKIPPED with the reason otherwise, or where
//! PyPI, crates.io or NVIDIA's header cannot be reached.

use crate::common;

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_client::Client;

const GIB: u64 = 1 << 30;

/// The kubelet stand-in, asked one command at a time.
struct Kubelet {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Kubelet {
    fn ask(&mut self, line: &str) -> Value {
        writeln!(self.input, "{line}").unwrap();
        let mut answer = String::new();
        self.output.read_line(&mut answer).unwrap();
        assert!(!answer.is_empty(), "the kubelet stand-in exited at {line:?}");
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A command running `script` (sh) as a pod's container: its own mount and pid
/// namespaces, the mounts `allocated` names made there (read-only where it says),
/// and an environment of exactly its `envs` and `extra`.
fn container(allocated: &Value, script: &str, extra: &[(&str, &str)]) -> Command {
    let mut setup = String::from("set -e\n");
    // the container's own view of the top directories the mounts go under
    let mut tops: Vec<String> = allocated["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let c = m["container_path"].as_str().unwrap();
            format!("/{}", c.trim_start_matches('/').split('/').next().unwrap())
        })
        .collect();
    tops.sort();
    tops.dedup();
    for t in &tops {
        setup += &format!("mkdir -p {t}\nmount -t tmpfs pod {t}\n");
    }
    for m in allocated["mounts"].as_array().unwrap() {
        let (c, h) = (m["container_path"].as_str().unwrap(), m["host_path"].as_str().unwrap());
        if Path::new(h).is_dir() {
            setup += &format!("mkdir -p {c}\n");
        } else {
            setup += &format!("mkdir -p $(dirname {c})\ntouch {c}\n");
        }
        setup += &format!("mount --bind {h} {c}\n");
        if m["read_only"].as_bool().unwrap() {
            setup += &format!("mount -o remount,bind,ro {c}\n");
        }
    }
    let mut env: Vec<String> = allocated["envs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect();
    env.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
    env.push("PATH=/usr/bin:/bin".into());
    setup += "exec env -i \"$@\"\n";
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--propagation",
        "private",
    ])
    .args(["sh", "-c", &setup, "container"])
    .args(&env)
    .args(["sh", "-c", script])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

fn output(c: &mut Command) -> (i32, String) {
    let out = c.output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// The kernels in a program's books (`FAKE_CUDA_BOOKS`): (start, end) ns.
fn kernels(books: &Path) -> Vec<(u64, u64)> {
    std::fs::read_to_string(books)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let v: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (v.len() == 3).then(|| (v[1], v[2]))
        })
        .collect()
}

/// The pod allocations the daemon holds: (weight, memory) by job id.
fn pod_jobs(socket: &Path) -> Vec<(u64, u32, u64)> {
    let mut c = Client::connect_control(socket).unwrap();
    let s = c.status().unwrap();
    s.jobs
        .iter()
        .filter(|j| j.uid == u32::MAX)
        .map(|j| (j.job, j.weight, j.memory_entitled))
        .collect()
}

fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(25));
    }
    start.elapsed()
}

fn start_plugin(bin: &Path, config: &Path, log: &Path) -> Killed {
    Killed(
        Command::new(bin.join("tessera"))
            .args(["k8s", "device-plugin", "--config"])
            .arg(config)
            .env("RUST_LOG", "tessera_k8s=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// A node for the tests: the daemon on one emulated 4 GiB GPU (fair queuing, tokens
/// required in containers), the kubelet stand-in, the plugin with `extra` appended to
/// its configuration; `None` after a SKIPPED line.
struct TestNode {
    scratch: common::Scratch,
    python: PathBuf,
    app: PathBuf,
    daemon: Option<tesserad::Daemon>,
    socket: PathBuf,
    kubelet: Kubelet,
    kubelet_root: PathBuf,
    /// The stand-in's `TMPDIR`.
    standin_tmp: PathBuf,
    plugin: Killed,
    plugin_toml: PathBuf,
    log: PathBuf,
}

impl TestNode {
    fn start(tag: &str, extra: &str) -> Option<TestNode> {
        if !root() {
            eprintln!("SKIPPED: a pod's mount and pid namespaces (unshare) need root");
            return None;
        }
        let scratch = common::scratch(tag)?;
        let python = match common::python_client("grpcio-tools") {
            Ok(p) => p,
            Err(why) => {
                eprintln!("SKIPPED: grpcio-tools could not be installed from PyPI: {why}");
                return None;
            }
        };
        let protos = match Command::new("bash").arg(script("kubelet-protos.sh")).output() {
            Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: the kubelet's protos could not be fetched from crates.io: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                return None;
            }
            Err(e) => panic!("{e}"),
        };
        let dir = scratch.dir.clone();
        scratch.fake_driver();
        let app = tessera_driver::testing::build_c_program(
            &scratch.artifacts,
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tessera-cuda/tests/driver_app.c"),
            &dir.join("driver_app"),
        )
        .unwrap();
        let mut config = common::fake_node_config(&dir, 1);
        config.gpu_memory_mib = 4096;
        config.policy = tesserad::config::PolicyName::Fair;
        config.kubernetes.require_token_in_containers = true;
        let daemon = tesserad::Daemon::start(&config).unwrap();
        let socket = config.socket.clone();
        // the kubelet stand-in
        let kubelet_root = dir.join("kubelet");
        // the stand-in's temporary directory, which it must leave as it found it
        let standin_tmp = dir.join("standin-tmp");
        std::fs::create_dir_all(&standin_tmp).unwrap();
        let standin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kubelet_standin.py");
        let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tessera-k8s/proto");
        let mut child = Command::new(&python)
            .arg(&standin)
            .arg(&protos)
            .arg(&ours)
            .arg(&kubelet_root)
            .arg("tessera.io/gpu-memory")
            .env("TMPDIR", &standin_tmp)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (input, answers) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        let kubelet = Kubelet { child, input, output: BufReader::new(answers) };
        // the plugin, as the DaemonSet runs it
        let plugin_toml = dir.join("k8s.toml");
        let interposer = std::fs::canonicalize(scratch.bin.join("libtessera_cuda.so")).unwrap();
        std::fs::write(
            &plugin_toml,
            format!(
                "daemon_socket = {:?}\ndevice_plugin_dir = {:?}\npod_resources_socket = {:?}\n\
                 interposer = {:?}\nstate = {:?}\npoll_ms = 100\ncontrol_devices = []\n\
                 cdi_dir = {:?}\n\
                 [weights]\nnamespaces = {{ team-a = 3, team-b = 1 }}\n{extra}",
                socket,
                kubelet_root.join("device-plugins"),
                kubelet_root.join("pod-resources/kubelet.sock"),
                interposer,
                dir.join("plugin-state.json"),
                dir.join("cdi"),
            ),
        )
        .unwrap();
        let log = dir.join("plugin.log");
        let plugin = start_plugin(&scratch.bin, &plugin_toml, &log);
        Some(TestNode {
            scratch,
            python,
            app,
            daemon: Some(daemon),
            socket,
            kubelet,
            kubelet_root,
            standin_tmp,
            plugin,
            plugin_toml,
            log,
        })
    }

    fn plugin_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `script` in a container of `allocated` (see [`container`]), with the fake driver
    /// as the node's driver and `extra` in its environment.
    fn run_in(&self, allocated: &Value, script: &str, extra: &[(&str, String)]) -> (i32, String) {
        let mut e: Vec<(&str, String)> = vec![
            ("LD_LIBRARY_PATH", self.scratch.dir.display().to_string()),
            ("FAKE_CUDA_DEVICE_MIB", "4096".into()),
        ];
        e.extend(extra.iter().cloned());
        let pairs: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        output(&mut container(allocated, script, &pairs))
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.shutdown();
        }
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts").join(name)
}

#[test]
fn pods_get_their_share_through_the_device_plugin_and_nothing_leaks() {
    let Some(mut n) = TestNode::start("k8s", "") else { return };
    let dir = n.scratch.dir.clone();
    let socket = n.socket.clone();
    let log = n.log.clone();
    let plugin_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let kubelet = &mut n.kubelet;
    let r = kubelet.ask("wait_registered 1 20");
    assert_eq!(r["ok"], true, "never registered: {r}\n{}", plugin_log());
    let reg = &r["registrations"][0];
    assert_eq!(reg["resource"], "tessera.io/gpu-memory");
    assert_eq!(reg["preferred"], true);
    let r = kubelet.ask("wait_health gpu0-3 Healthy 10");
    assert_eq!(r["ok"], true, "{r}\n{}", plugin_log());
    assert_eq!(r["devices"].as_object().unwrap().len(), 4, "4 units of 1 GiB: {r}");

    // pods A (2 units, team-a) and B (1 unit, team-b)
    let a = kubelet.ask("allocate a team-a main 2");
    let b = kubelet.ask("allocate b team-b main 1");
    assert!(a.get("error").is_none() && b.get("error").is_none(), "{a}\n{b}\n{}", plugin_log());
    assert_eq!(a["units"].as_array().unwrap().len(), 2);
    for (pod, alloc) in [("a", &a), ("b", &b)] {
        let envs = &alloc["envs"];
        assert_eq!(envs["LD_PRELOAD"], "/opt/tessera/libtessera_cuda.so", "{pod}: {alloc}");
        assert_eq!(envs["TESSERA_SOCKET"], "/run/tessera/d.sock", "{pod}: {alloc}");
        assert_eq!(envs["TESSERA_TOKEN"].as_str().unwrap().len(), 32, "{pod}: {alloc}");
        assert!(alloc["mounts"].as_array().unwrap().iter().all(|m| m["read_only"] == true));
    }
    assert!(
        !plugin_log().contains(a["envs"]["TESSERA_TOKEN"].as_str().unwrap()),
        "tokens are not logged"
    );
    // the plugin learns each pod's namespace from the pod resources list: its weight
    until("the namespaces' weights reach the daemon", Duration::from_secs(10), || {
        let mut w: Vec<(u32, u64)> = pod_jobs(&socket).iter().map(|j| (j.1, j.2)).collect();
        w.sort();
        w == [(1, GIB), (3, 2 * GIB)]
    });

    let env = |extra: &[(&'static str, String)]| -> Vec<(&'static str, String)> {
        let mut e = vec![
            ("LD_LIBRARY_PATH", dir.display().to_string()),
            ("FAKE_CUDA_DEVICE_MIB", "4096".into()),
        ];
        e.extend(extra.iter().cloned());
        e
    };
    let run_in = |alloc: &Value, script: &str, extra: &[(&'static str, String)]| {
        let e = env(extra);
        let pairs: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        output(&mut container(alloc, script, &pairs))
    };
    let app_s = n.app.display().to_string();

    // each sees its own memory, and is refused past it
    let (code, out) = run_in(&a, &format!("{app_s} meminfo 0"), &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("meminfo {} {}", 2 * GIB, 2 * GIB)), "A sees its 2 GiB: {out}");
    let (code, out) = run_in(&b, &format!("{app_s} meminfo 0"), &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("meminfo {GIB} {GIB}")), "B sees its 1 GiB: {out}");
    let (code, out) = run_in(&b, &format!("{app_s} alloc 1100 0"), &[]);
    assert!(code == 2 && out.contains("error alloc 2"), "B past its GiB: {out}");
    let (code, out) = run_in(&a, &format!("{app_s} alloc 2100 0"), &[]);
    assert!(code == 2 && out.contains("error alloc 2"), "A past its 2 GiB: {out}");
    // two processes of pod A share its 2 GiB
    let (code, out) = run_in(
        &a,
        &format!(
            "{app_s} alloc 1500 3000 > first.out & sleep 1; \
             {app_s} alloc 600 0; echo second=$?; {app_s} alloc 400 0; echo third=$?; wait; cat first.out"
        )
        .replace("first.out", &dir.join("first.out").display().to_string()),
        &[],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("second=2") && out.contains("third=0"),
        "A's two processes share 2 GiB: {out}"
    );
    assert!(out.contains("allocated"), "{out}");

    // stripping LD_PRELOAD, dropping the token, forging one
    let status = |s: &Path| Client::connect_control(s).unwrap().status().unwrap();
    let tenants_before = status(&socket).tenants_total;
    let mut stripped = a.clone();
    stripped["envs"].as_object_mut().unwrap().remove("LD_PRELOAD");
    let (code, out) = run_in(&stripped, &format!("{app_s} alloc 100 0"), &[]);
    assert_eq!(code, 0, "the fake driver serves it directly: {out}");
    let s = status(&socket);
    assert_eq!(s.tenants_total, tenants_before, "no tenant through the daemon");
    assert_eq!(s.gpus[0].memory_used, 0, "no memory of the daemon's");
    let mut tokenless = a.clone();
    tokenless["envs"].as_object_mut().unwrap().remove("TESSERA_TOKEN");
    let (code, out) = run_in(&tokenless, &format!("{app_s} alloc 100 0"), &[]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("register with their allocation's token"), "{out}");
    let mut forged = a.clone();
    forged["envs"]["TESSERA_TOKEN"] = "0123456789abcdef0123456789abcdef".into();
    let (code, out) = run_in(&forged, &format!("{app_s} alloc 100 0"), &[]);
    assert!(code != 0 && out.contains("no allocation on this node has this token"), "{out}");

    // a container's root is not the node's admin: it can neither make an allocation
    // nor end another pod's
    let admin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/admin_from_container.py");
    let (code, out) = run_in(
        &b,
        &format!(
            "{} {} /run/tessera/d.sock {}",
            n.python.display(),
            admin.display(),
            a["envs"]["TESSERA_TOKEN"].as_str().unwrap()
        ),
        &[],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("not a container's").count(), 2, "{out}");
    assert_eq!(pod_jobs(&socket).len(), 2, "A's and B's allocations, and no other");

    // GPU time by the namespaces' weights, 3:1, measured from the fake's books
    let timeline = dir.join("timeline");
    let books = |p: &str| dir.join(format!("books-{p}"));
    let spawn = |alloc: &Value, pod: &str| {
        let e = env(&[
            ("FAKE_CUDA_TIMELINE", timeline.display().to_string()),
            ("FAKE_CUDA_BOOKS", books(pod).display().to_string()),
            ("FAKE_CUDA_STATS", "0".into()),
        ]);
        let pairs: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Killed(container(alloc, &format!("{app_s} launch 80 20"), &pairs).spawn().unwrap())
    };
    let (mut pa, mut pb) = (spawn(&a, "a"), spawn(&b, "b"));
    // while A's program runs, pod B's container presenting A's token is refused: a
    // token enters its own container's processes only
    let a_job = pod_jobs(&socket).iter().find(|j| j.2 == 2 * GIB).unwrap().0;
    until("A's program registers", Duration::from_secs(10), || {
        let mut c = Client::connect_control(&socket).unwrap();
        c.job_info(a_job).is_ok_and(|j| !j.tenants.is_empty())
    });
    let mut b_with_a = b.clone();
    b_with_a["envs"]["TESSERA_TOKEN"] = a["envs"]["TESSERA_TOKEN"].clone();
    let (code, out) = run_in(&b_with_a, &format!("{app_s} alloc 100 0"), &[]);
    assert!(code != 0 && out.contains("in use by another container's processes"), "{out}");
    for (p, name) in [(&mut pa, "A"), (&mut pb, "B")] {
        let status = p.0.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut p.0.stderr.take().unwrap(), &mut err).unwrap();
        assert!(status.success(), "{name}: {err}");
    }
    let runs = [kernels(&books("a")), kernels(&books("b"))];
    let from = runs.iter().map(|r| r.first().map_or(0, |k| k.0)).max().unwrap();
    let to = runs.iter().map(|r| r.last().map_or(0, |k| k.1)).min().unwrap();
    let got: Vec<f64> = runs
        .iter()
        .map(|r| {
            r.iter().map(|(s, e)| (*e).min(to).saturating_sub((*s).max(from))).sum::<u64>() as f64
        })
        .collect();
    let share = got[0] / (got[0] + got[1]);
    eprintln!(
        "A received {share:.3} of the GPU while both ran ({:.2} s)",
        (to - from) as f64 / 1e9
    );
    assert!((share - 0.75).abs() <= 0.08, "A's share {share:.3}, want 0.75 ± 0.08");

    // pod B deleted: its allocation ends within 5 s, its unit free for another
    let b_job = pod_jobs(&socket).iter().find(|j| j.2 == GIB).unwrap().0;
    kubelet.ask("delete b");
    let took = until("B's allocation ends", Duration::from_secs(5), || {
        pod_jobs(&socket).iter().all(|j| j.0 != b_job)
    });
    eprintln!("B's allocation ended {took:?} after its pod was deleted");
    let c = kubelet.ask("allocate c team-b main 1");
    assert!(c.get("error").is_none(), "B's unit again: {c}");
    assert_eq!(c["units"], b["units"], "{c}");

    // the kubelet restarts: the plugin registers again within 5 s
    let before = kubelet.ask("wait_registered 1 0")["registrations"].as_array().unwrap().len();
    let restarted = kubelet.ask("restart")["now"].as_f64().unwrap();
    let r = kubelet.ask(&format!("wait_registered {} 5", before + 1));
    assert_eq!(
        r["ok"],
        true,
        "no registration within 5 s of the kubelet's restart: {r}\n{}",
        plugin_log()
    );
    let again = r["registrations"].as_array().unwrap().last().unwrap()["at"].as_f64().unwrap();
    eprintln!("registered again {:.2} s after the kubelet's restart", again - restarted);
    assert_eq!(kubelet.ask("wait_health gpu0-3 Healthy 5")["ok"], true);

    // the plugin is killed and restarted: A's allocation survives
    let _ = n.plugin.0.kill();
    let _ = n.plugin.0.wait();
    n.plugin = start_plugin(&n.scratch.bin, &n.plugin_toml, &log);
    let count = kubelet.ask("wait_registered 0 0")["registrations"].as_array().unwrap().len();
    assert_eq!(
        kubelet.ask(&format!("wait_registered {} 10", count + 1))["ok"],
        true,
        "{}",
        plugin_log()
    );
    std::thread::sleep(Duration::from_millis(500)); // a few of its checks
    assert!(
        pod_jobs(&socket).iter().any(|j| j.0 == a_job && j.1 == 3),
        "A's allocation: {:?}",
        pod_jobs(&socket)
    );
    let (code, out) = run_in(&a, &format!("{app_s} meminfo 0"), &[]);
    assert!(code == 0 && out.contains(&format!("meminfo {} {}", 2 * GIB, 2 * GIB)), "{out}");
    // the restarted plugin knows A's allocation (its book): A's pod deleted, it ends
    kubelet.ask("delete a");
    until("A's allocation ends after the plugin's restart", Duration::from_secs(5), || {
        pod_jobs(&socket).iter().all(|j| j.0 != a_job)
    });

    // the daemon goes away: every unit Unhealthy
    n.daemon.take().unwrap().shutdown();
    let r = kubelet.ask("wait_health gpu0-0 Unhealthy 5");
    assert_eq!(r["ok"], true, "{r}");
    kubelet.ask("quit");
    // nor does the test's kubelet leave anything behind outside the test's directory
    // (its generated modules once piled up in /tmp, two directories per run)
    let left: Vec<_> =
        std::fs::read_dir(&n.standin_tmp).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "the kubelet stand-in left {left:?} in its TMPDIR");
}

/// A `ResourceClaim` in `namespace` named `name` (uid `claim-<name>`) allocated `memory`
/// of GPU 0's device on node `node-a`, as the scheduler leaves it.
fn claim(namespace: &str, name: &str, memory: &str) -> Value {
    serde_json::json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("claim-{name}")},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.tessera.io",
            "capacity": {"requests": {"memory": memory}},
        }}]}},
        "status": {"allocation": {"devices": {"results": [{
            "request": "gpu", "driver": "gpu.tessera.io", "pool": "node-a", "device": "gpu-0",
            "consumedCapacity": {"memory": memory},
        }]}}},
    })
}

/// What a CDI runtime would make of the spec of CDI device `id` in `cdi_dir`: the
/// environment and mounts it names, in the form [`container`] takes.
fn cdi_edits(cdi_dir: &Path, id: &str) -> Value {
    let (kind, name) = id.split_once('=').unwrap();
    let path = cdi_dir.join(format!("{}-{name}.json", kind.replace('/', "_")));
    let spec: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(spec["kind"], kind);
    let dev = spec["devices"].as_array().unwrap().iter().find(|d| d["name"] == name).unwrap();
    let edits = &dev["containerEdits"];
    let envs: serde_json::Map<String, Value> = edits["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let (k, v) = e.as_str().unwrap().split_once('=').unwrap();
            (k.to_string(), Value::from(v))
        })
        .collect();
    let mounts: Vec<Value> = edits["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            serde_json::json!({
                "container_path": m["containerPath"],
                "host_path": m["hostPath"],
                "read_only": m["options"].as_array().unwrap().iter().any(|o| o == "ro"),
            })
        })
        .collect();
    serde_json::json!({"envs": envs, "mounts": mounts})
}

/// Issue 54, item 5: the DRA driver. Its `ResourceSlice` (one device per GPU whose
/// memory several claims consume) is valid against Kubernetes 1.34's schema; the
/// kubelet stand-in finds it through plugin registration (the kubelet's own
/// `pluginregistration` proto) and prepares claims over `DRAPlugin` (tessera's
/// transcription): claims of 3 GiB and 1 GiB on one 4 GiB GPU are prepared, their
/// containers (CDI edits applied as a runtime would) see and are held to their
/// memory, a third claim that would exceed the GPU is refused by the driver, and fits
/// once a claim is unprepared; preparing a claim again answers the same.
#[test]
fn dra_claims_consume_a_gpus_memory_and_one_too_many_is_refused() {
    let Some(mut n) = TestNode::start("k8s-dra", "") else { return };
    let dir = n.scratch.dir.clone();
    let registry = n.kubelet_root.join("plugins_registry");
    let claims = dir.join("claims");
    let cdi = dir.join("cdi");
    std::fs::write(
        &n.plugin_toml,
        std::fs::read_to_string(&n.plugin_toml).unwrap()
            + &format!(
                "[dra]\nenabled = true\nplugins_registry = {:?}\nplugin_dir = {:?}\n\
                 claims_dir = {:?}\nstate = {:?}\n",
                registry,
                n.kubelet_root.join("plugins/gpu.tessera.io"),
                claims,
                dir.join("dra-state.json"),
            ),
    )
    .unwrap();
    // the plugin started before [dra] was written: again, with it
    let _ = n.plugin.0.kill();
    let _ = n.plugin.0.wait();
    n.plugin = start_plugin(&n.scratch.bin, &n.plugin_toml, &n.log);

    // the ResourceSlice it would publish, and the claims the test supplies, against
    // Kubernetes 1.34's schema
    let out = Command::new(n.scratch.bin.join("tessera"))
        .args(["k8s", "resource-slice", "--node", "node-a", "--config"])
        .arg(&n.plugin_toml)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let slice: Value = serde_json::from_slice(&out.stdout).unwrap();
    let device = &slice["spec"]["devices"][0];
    assert_eq!(device["name"], "gpu-0");
    assert_eq!(device["allowMultipleAllocations"], true);
    assert_eq!(device["capacity"]["memory"]["value"], (4 * GIB).to_string());
    let (a, b, c) =
        (claim("team-a", "a", "3Gi"), claim("team-b", "b", "1Gi"), claim("team-b", "c", "1Gi"));
    let mut objects = vec![dir.join("slice.json")];
    std::fs::write(&objects[0], &out.stdout).unwrap();
    for x in [&a, &b, &c] {
        let ns = x["metadata"]["namespace"].as_str().unwrap();
        let name = x["metadata"]["name"].as_str().unwrap();
        std::fs::create_dir_all(claims.join(ns)).unwrap();
        let path = claims.join(ns).join(format!("{name}.json"));
        std::fs::write(&path, x.to_string()).unwrap();
        objects.push(path);
    }
    let check = Command::new("bash")
        .arg(script("check-k8s-manifests.sh"))
        .arg("1.34.0")
        .args(&objects)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    if said.contains("did not validate") || check.status.success() {
        assert!(check.status.success(), "the slice and the claims against 1.34: {said}");
        eprintln!("{said}");
    } else {
        eprintln!("SKIPPED (the schema check only): kubernetes-validate: {said}");
    }

    // the kubelet's plugin watcher finds the driver
    let info = n.kubelet.ask("dra_register 10");
    assert_eq!(info["type"], "DRAPlugin", "{info}\n{}", n.plugin_log());
    let kubelet = &mut n.kubelet;
    assert_eq!(info["name"], "gpu.tessera.io");
    assert_eq!(info["versions"], serde_json::json!(["v1.DRAPlugin"]));

    let pa = kubelet.ask("dra_prepare team-a a claim-a");
    let pb = kubelet.ask("dra_prepare team-b b claim-b");
    for p in [&pa, &pb] {
        assert_eq!(p["error"], "", "{p}");
        assert_eq!(p["devices"][0]["device"], "gpu-0", "{p}");
        assert_eq!(p["devices"][0]["pool"], "node-a", "{p}");
        assert_eq!(p["devices"][0]["requests"], serde_json::json!(["gpu"]), "{p}");
    }
    let again = kubelet.ask("dra_prepare team-a a claim-a");
    assert_eq!(again, pa, "preparing a claim again answers the same");
    // the driver restarts: its prepared claims are in its book (C, below, is refused
    // for A's and B's memory by the driver itself, not by the daemon)
    let _ = n.plugin.0.kill();
    let _ = n.plugin.0.wait();
    n.plugin = start_plugin(&n.scratch.bin, &n.plugin_toml, &n.log);
    let info = n.kubelet.ask("dra_register 10");
    assert_eq!(info["type"], "DRAPlugin", "{info}\n{}", n.plugin_log());
    let kubelet = &mut n.kubelet;
    let again = kubelet.ask("dra_prepare team-a a claim-a");
    assert_eq!(again, pa, "after the restart too");
    let pc = kubelet.ask("dra_prepare team-b c claim-c");
    let e = pc["error"].as_str().unwrap();
    assert!(
        e.contains("its prepared claims hold") && pc["devices"] == serde_json::json!([]),
        "the driver refuses: {pc}"
    );

    // the containers, with the CDI edits a runtime would apply
    let id = |p: &Value| p["devices"][0]["cdi"][0].as_str().unwrap().to_string();
    let (ea, eb) = (cdi_edits(&cdi, &id(&pa)), cdi_edits(&cdi, &id(&pb)));
    assert_eq!(ea["envs"]["LD_PRELOAD"], "/opt/tessera/libtessera_cuda.so");
    let app = n.app.display().to_string();
    let (code, out) = n.run_in(&ea, &format!("{app} meminfo 0"), &[]);
    assert!(code == 0 && out.contains(&format!("meminfo {} {}", 3 * GIB, 3 * GIB)), "{out}");
    let (code, out) = n.run_in(&eb, &format!("{app} meminfo 0"), &[]);
    assert!(code == 0 && out.contains(&format!("meminfo {GIB} {GIB}")), "{out}");
    let (code, out) = n.run_in(&ea, &format!("{app} alloc 3200 0"), &[]);
    assert!(code == 2 && out.contains("error alloc 2"), "A past its 3 GiB: {out}");
    let (code, out) = n.run_in(&eb, &format!("{app} alloc 1100 0"), &[]);
    assert!(code == 2 && out.contains("error alloc 2"), "B past its GiB: {out}");
    let weights: Vec<(u32, u64)> = pod_jobs(&n.socket).iter().map(|j| (j.1, j.2)).collect();
    assert!(weights.contains(&(3, 3 * GIB)) && weights.contains(&(1, GIB)), "{weights:?}");

    // B unprepared: its allocation ended, its spec gone, its memory the GPU's, and C fits
    let kubelet = &mut n.kubelet;
    assert_eq!(kubelet.ask("dra_unprepare team-b b claim-b")["error"], "");
    let left: Vec<u64> = pod_jobs(&n.socket).iter().map(|j| j.2).collect();
    assert_eq!(left, vec![3 * GIB], "B's allocation ended");
    assert!(
        !std::fs::read_dir(&cdi).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("claim-claim-b"))
    );
    let pc = kubelet.ask("dra_prepare team-b c claim-c");
    assert_eq!(pc["error"], "", "{pc}");
    kubelet.ask("quit");
}
