//! The metrics endpoint scraped by a real Prometheus server (Debian's `prometheus`,
//! installed by the test when missing): a daemon on one emulated GPU under fair
//! queuing runs two client processes at weights 1:3, and PromQL queries through
//! Prometheus's HTTP API return their received shares; every expression of the
//! Grafana dashboard in `docs/grafana` evaluates without error.
//!
//! Needs root to install the package; where Prometheus cannot be had the test says
//! SKIPPED with the reason.

use crate::common;

use std::io::{BufRead as _, Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How far a received share may be from its weight's: fair queuing on one emulated
/// GPU gives each its weight's share of the GPU time; slices are charged as they ran
/// and the window is 10 s of 20 ms tasks, so the shares settle within a few percent.
const SHARE_BOUND: f64 = 0.08;

fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "prometheus test: {msg}");
}

/// Children killed when the test ends, however it ends.
struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in self.0.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET path` on `addr` over HTTP/1.0: (status, body).
fn get(addr: &str, path: &str) -> std::io::Result<(u32, String)> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    Ok((status, body))
}

fn url_encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A PromQL query through Prometheus's HTTP API: the result vector, or the error.
fn query(prom: &str, q: &str) -> Result<Vec<serde_json::Value>, String> {
    let (status, body) = get(prom, &format!("/api/v1/query?query={}", url_encode(q)))
        .map_err(|e| format!("querying {q}: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| format!("{q}: {status} {e}: {body}"))?;
    if v["status"] != "success" {
        return Err(format!("{q}: {body}"));
    }
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

fn value(sample: &serde_json::Value) -> f64 {
    sample["value"][1].as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
}

#[test]
fn prometheus_scrapes_the_shares_of_two_programs_at_weights_1_to_3() {
    if let Err(why) = common::debian_tool("prometheus", "prometheus") {
        say(&format!("SKIPPED: {why}"));
        return;
    }
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("prom-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("d.sock");
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["daemon", "--emulate", "--gpus", "1", "--policy", "fair", "--socket"])
        .arg(&socket)
        .arg("--ledger")
        .arg(dir.join("ledger"))
        .args(["--metrics-listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // the banner's second line says where the metrics are
    let mut lines = std::io::BufReader::new(daemon.stderr.take().unwrap()).lines();
    let metrics = lines
        .by_ref()
        .take(5)
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("metrics: http://")?.strip_suffix("/metrics").map(String::from)
        })
        .expect("the daemon names its metrics address");
    std::thread::spawn(move || lines.for_each(drop));
    let mut children = Killed(vec![daemon]);
    // the endpoint answers before Prometheus is pointed at it
    let (status, text) = get(&metrics, "/metrics").unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("tessera_gpu_memory_capacity_bytes{gpu=\"0\"} 4294967296"), "{text}");
    assert!(text.trim_end().ends_with("# EOF"), "OpenMetrics ends with # EOF");
    assert_eq!(get(&metrics, "/other").unwrap().0, 404);

    let light = common::demo_client(&dir, &socket, 1, 3000);
    let heavy = common::demo_client(&dir, &socket, 3, 3000);
    let (light_pid, heavy_pid) = (light.id(), heavy.id());
    children.0.push(light);
    children.0.push(heavy);

    let prom = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: tessera\n    static_configs:\n      - targets: ['{metrics}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    children.0.push(
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address={prom}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    // both tenants scraped, then 12 s more: past the daemon's 10 s share window
    let t = Instant::now();
    let both = loop {
        let found = query(&prom, "tessera_tenant_received_share").unwrap_or_default();
        if found.len() == 2 {
            break Instant::now();
        }
        if t.elapsed() > Duration::from_secs(60) {
            let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
            panic!("Prometheus never saw both tenants: {found:?}\n{log}");
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    std::thread::sleep(Duration::from_secs(12).saturating_sub(both.elapsed()));
    let by_pid = |samples: &[serde_json::Value]| {
        let of = |pid: u32| {
            samples
                .iter()
                .find(|s| s["metric"]["pid"].as_str() == Some(pid.to_string().as_str()))
                .map(value)
                .unwrap_or(f64::NAN)
        };
        (of(light_pid), of(heavy_pid))
    };
    // the daemon's gauge of received shares, as Prometheus stored it
    let gauge = query(&prom, "tessera_tenant_received_share").unwrap();
    let (l, h) = by_pid(&gauge);
    // the same from the GPU-time counters, computed by Prometheus
    let rate = query(
        &prom,
        "sum by (pid) (rate(tessera_tenant_gpu_seconds_total[10s])) / ignoring (pid) group_left sum(rate(tessera_tenant_gpu_seconds_total[10s]))",
    )
    .unwrap();
    let (lr, hr) = by_pid(&rate);
    let weights = query(&prom, "tessera_tenant_weight").unwrap();
    let (lw, hw) = by_pid(&weights);
    say(&format!(
        "weights {lw}:{hw}: received share (gauge) {l:.3} / {h:.3}, from the counters {lr:.3} / {hr:.3} (want 0.25 / 0.75 within {SHARE_BOUND})"
    ));
    assert_eq!((lw, hw), (1.0, 3.0), "{weights:?}");
    for (got, want, what) in [
        (l, 0.25, "gauge, weight 1"),
        (h, 0.75, "gauge, weight 3"),
        (lr, 0.25, "counters, weight 1"),
        (hr, 0.75, "counters, weight 3"),
    ] {
        assert!(
            (got - want).abs() <= SHARE_BOUND,
            "{what}: received {got:.3}, want {want} within {SHARE_BOUND}"
        );
    }

    // the dashboard: every expression evaluates (that it names only exported metrics
    // is tesserad's unit test `the_dashboard_names_only_exported_metrics`)
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/grafana/tessera-node.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let exprs: Vec<&str> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    assert!(exprs.len() >= 15, "the dashboard has {} expressions", exprs.len());
    for e in &exprs {
        query(&prom, e).unwrap_or_else(|why| panic!("a dashboard expression fails: {why}"));
    }
    drop(children);
    let _ = std::fs::remove_dir_all(&dir);
}
