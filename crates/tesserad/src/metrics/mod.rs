//! The Prometheus / OpenMetrics endpoint (`[metrics] listen`): per GPU, per tenant,
//! per policy, the ledger and the daemon itself, in the exposition format of the
//! `prometheus-client` crate, served over HTTP on a TCP address or a Unix socket.
//!
//! Who writes what: the core owns the node's state, so on each scrape the HTTP thread
//! asks it (a `Scrape` message) to set the gauges and mirror its totals into the
//! counters, then encodes the registry. What happens between scrapes — GPU time
//! charged, tasks' queue waits and latencies, SLAs met or missed, launch-gate slices,
//! refusals — the core counts as it happens. A scrape the core does not answer within
//! [`SCRAPE_TIMEOUT`] gets `503`.
//!
//! Serving: one thread runs a `mio` event loop over non-blocking sockets, so no client
//! can hold up another or grow the daemon's threads (issue 51: clients that pipeline
//! requests and never read stalled the blocking server it replaced). Each connection
//! gets one answer, then is closed; its request head is capped at [`MAX_REQUEST_HEAD`]
//! and must arrive within [`REQUEST_TIMEOUT`], an answer not read for
//! [`WRITE_STALL_TIMEOUT`] is dropped, and at most [`MAX_CONNECTIONS`] are open (past
//! it the oldest goes). Requests waiting at once share one refresh and one encoding,
//! and the core is asked at most once per [`REFRESH_INTERVAL`].
//!
//! Label cardinality is bounded: the first `max_tenants` tenants open at once get their
//! own labels (tenant, uid, pid, job, class; the gauges add the GPUs it is placed on),
//! every tenant beyond them is counted under `tenant="other"`, and a departed tenant's
//! series are removed.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a scrape waits for the core.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// A gauge of `f64`.
pub type GaugeF = Gauge<f64, AtomicU64>;
/// A counter of `f64`.
pub type CounterF = Counter<f64, AtomicU64>;

/// A GPU's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuLabel {
    /// Its index.
    pub gpu: u32,
}

/// A tenant's labels (stable for its life).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    /// Its id, or `other` for tenants beyond `max_tenants`.
    pub tenant: String,
    /// Its uid (empty under `other`).
    pub uid: String,
    /// Its process (empty under `other`).
    pub pid: String,
    /// Its Slurm job (empty: none).
    pub job: String,
    /// `user_facing` or `batch`.
    pub class: String,
}

/// A tenant's labels with the GPUs it is placed on (gauges only: placement changes).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantGpuLabels {
    #[prometheus(flatten)]
    tenant: TenantLabels,
    /// The GPUs it is placed on, comma-separated (empty: none yet).
    gpu: String,
}

/// A refusal's reason: its error code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    reason: String,
}

/// A task's outcome: `done`, `failed`, `cancelled`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    outcome: &'static str,
}

/// A tenant class: `user_facing`, `batch`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    class: &'static str,
}

fn seconds_histogram() -> Histogram {
    // 100 us to about 100 s
    Histogram::new(exponential_buckets(1e-4, 2.0, 21))
}

/// Every metric the daemon exports (see the metrics section of docs/operators.md for the list).
#[derive(Debug)]
pub struct NodeMetrics {
    registry: Registry,
    names: Vec<String>,
    max_tenants: usize,
    labelled: AtomicUsize,
    last_scrape: Mutex<Option<(Instant, Vec<f64>)>>,
    // per GPU
    pub(crate) gpu_busy_seconds: Family<GpuLabel, CounterF>,
    pub(crate) gpu_busy_ratio: Family<GpuLabel, GaugeF>,
    pub(crate) gpu_sm_utilization: Family<GpuLabel, GaugeF>,
    pub(crate) gpu_memory_capacity: Family<GpuLabel, Gauge>,
    pub(crate) gpu_memory_granted: Family<GpuLabel, Gauge>,
    pub(crate) gpu_memory_waited: Family<GpuLabel, Gauge>,
    pub(crate) gpu_running_tasks: Family<GpuLabel, Gauge>,
    pub(crate) gpu_slices: Family<GpuLabel, Gauge>,
    pub(crate) gpu_partitions: Family<GpuLabel, Gauge>,
    pub(crate) gpu_pool_member: Family<GpuLabel, Gauge>,
    pub(crate) gpu_resetting: Family<GpuLabel, Gauge>,
    pub(crate) gpu_powered: Family<GpuLabel, Gauge>,
    // per tenant
    pub(crate) tenant_weight: Family<TenantGpuLabels, GaugeF>,
    pub(crate) tenant_entitled_share: Family<TenantGpuLabels, GaugeF>,
    pub(crate) tenant_received_share: Family<TenantGpuLabels, GaugeF>,
    pub(crate) tenant_memory_held: Family<TenantGpuLabels, GaugeF>,
    pub(crate) tenant_queued: Family<TenantGpuLabels, GaugeF>,
    pub(crate) tenant_gpu_seconds: Family<TenantLabels, CounterF>,
    pub(crate) tenant_queue_wait: Family<TenantLabels, Histogram>,
    pub(crate) tenant_latency: Family<TenantLabels, Histogram>,
    pub(crate) tenant_sla_met: Family<TenantLabels, Counter>,
    pub(crate) tenant_sla_missed: Family<TenantLabels, Counter>,
    pub(crate) tenant_gate_slices: Family<TenantLabels, Counter>,
    // per policy
    pub(crate) pool_gpus: Gauge,
    pub(crate) resets: Counter,
    pub(crate) migrations: Counter,
    pub(crate) repartitions: Counter,
    pub(crate) refusals: Family<ReasonLabel, Counter>,
    pub(crate) tasks: Family<OutcomeLabel, Counter>,
    // the ledger
    pub(crate) ledger_holders: Family<GpuLabel, Gauge>,
    pub(crate) ledger_waiters: Family<GpuLabel, Gauge>,
    // the daemon
    pub(crate) connections: Gauge,
    pub(crate) rings_open: Gauge,
    pub(crate) rings_active: Gauge,
    pub(crate) tenants_open: Family<ClassLabel, Gauge>,
    pub(crate) tenants_aggregated: Gauge,
    pub(crate) loop_latency: Histogram,
}

impl NodeMetrics {
    /// A registry with every metric, tenants beyond `max_tenants` aggregated.
    pub fn new(max_tenants: usize) -> NodeMetrics {
        let mut registry = Registry::with_prefix("tessera");
        let m = NodeMetrics {
            registry: Registry::default(),
            names: Vec::new(),
            max_tenants,
            labelled: AtomicUsize::new(0),
            last_scrape: Mutex::new(None),
            gpu_busy_seconds: Family::default(),
            gpu_busy_ratio: Family::default(),
            gpu_sm_utilization: Family::default(),
            gpu_memory_capacity: Family::default(),
            gpu_memory_granted: Family::default(),
            gpu_memory_waited: Family::default(),
            gpu_running_tasks: Family::default(),
            gpu_slices: Family::default(),
            gpu_partitions: Family::default(),
            gpu_pool_member: Family::default(),
            gpu_resetting: Family::default(),
            gpu_powered: Family::default(),
            tenant_weight: Family::default(),
            tenant_entitled_share: Family::default(),
            tenant_received_share: Family::default(),
            tenant_memory_held: Family::default(),
            tenant_queued: Family::default(),
            tenant_gpu_seconds: Family::default(),
            tenant_queue_wait: Family::new_with_constructor(seconds_histogram),
            tenant_latency: Family::new_with_constructor(seconds_histogram),
            tenant_sla_met: Family::default(),
            tenant_sla_missed: Family::default(),
            tenant_gate_slices: Family::default(),
            pool_gpus: Gauge::default(),
            resets: Counter::default(),
            migrations: Counter::default(),
            repartitions: Counter::default(),
            refusals: Family::default(),
            tasks: Family::default(),
            ledger_holders: Family::default(),
            ledger_waiters: Family::default(),
            connections: Gauge::default(),
            rings_open: Gauge::default(),
            rings_active: Gauge::default(),
            tenants_open: Family::default(),
            tenants_aggregated: Gauge::default(),
            // 1 us to about 1 s
            loop_latency: Histogram::new(exponential_buckets(1e-6, 2.0, 21)),
        };
        let r = &mut registry;
        let s = Some(Unit::Seconds);
        let b = Some(Unit::Bytes);
        /// Register `metric`, and note its sample names as a scrape shows them.
        fn add(
            (r, names): (&mut Registry, &mut Vec<String>),
            name: &str,
            help: &str,
            unit: Option<Unit>,
            metric: impl prometheus_client::registry::Metric,
        ) {
            use prometheus_client::metrics::MetricType;
            let family = match &unit {
                Some(u) => format!("tessera_{name}_{}", u.as_str()),
                None => format!("tessera_{name}"),
            };
            let suffixes: &[&str] = match metric.metric_type() {
                MetricType::Counter => &["_total"],
                MetricType::Histogram => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{family}{s}")));
            match unit {
                Some(u) => r.register_with_unit(name, help, u, metric),
                None => r.register(name, help, metric),
            }
        }
        let mut names = Vec::new();
        add(
            (r, &mut names),
            "gpu_busy",
            "Time anything ran on the GPU (NVSMI's busy time)",
            s.clone(),
            m.gpu_busy_seconds.clone(),
        );
        add(
            (r, &mut names),
            "gpu_busy_ratio",
            "Fraction of the time since the previous scrape that anything ran on the GPU (NVSMI's utilization)",
            None,
            m.gpu_busy_ratio.clone(),
        );
        add(
            (r, &mut names),
            "gpu_sm_utilization_ratio",
            "Summed share of the GPU's SMs held by the tasks running now (emulated executor; 1 while anything runs on real GPUs)",
            None,
            m.gpu_sm_utilization.clone(),
        );
        add(
            (r, &mut names),
            "gpu_memory_capacity",
            "The GPU's memory",
            b.clone(),
            m.gpu_memory_capacity.clone(),
        );
        add(
            (r, &mut names),
            "gpu_memory_granted",
            "GPU memory granted, as the node's ledger holds it",
            b.clone(),
            m.gpu_memory_granted.clone(),
        );
        add(
            (r, &mut names),
            "gpu_memory_waited",
            "GPU memory asked for by reservations waiting for it",
            b.clone(),
            m.gpu_memory_waited.clone(),
        );
        add(
            (r, &mut names),
            "gpu_running_tasks",
            "Tasks running on the GPU (launch-gate slices included)",
            None,
            m.gpu_running_tasks.clone(),
        );
        add(
            (r, &mut names),
            "gpu_slices",
            "Launch-gate slices held on the GPU now",
            None,
            m.gpu_slices.clone(),
        );
        add(
            (r, &mut names),
            "gpu_partitions",
            "The GPU's partitions (gpu-lets; 0: whole)",
            None,
            m.gpu_partitions.clone(),
        );
        add(
            (r, &mut names),
            "gpu_pool_member",
            "1 if the GPU is in the user-facing pool",
            None,
            m.gpu_pool_member.clone(),
        );
        add(
            (r, &mut names),
            "gpu_resetting",
            "1 while the GPU resets",
            None,
            m.gpu_resetting.clone(),
        );
        add(
            (r, &mut names),
            "gpu_powered",
            "1 if the GPU has tenants placed or work running; 0: idle, could be powered down (tesserad never powers GPUs down itself)",
            None,
            m.gpu_powered.clone(),
        );
        add(
            (r, &mut names),
            "tenant_weight",
            "The tenant's fair-sharing weight",
            None,
            m.tenant_weight.clone(),
        );
        add(
            (r, &mut names),
            "tenant_entitled_share",
            "The tenant's entitled share of GPU time: its weight over the active tenants' (a Slurm job's split among its tenants)",
            None,
            m.tenant_entitled_share.clone(),
        );
        add(
            (r, &mut names),
            "tenant_received_share",
            "The tenant's share of the GPU time charged over the last 10 s of the daemon's time",
            None,
            m.tenant_received_share.clone(),
        );
        add(
            (r, &mut names),
            "tenant_memory_held",
            "GPU memory the tenant holds (its running tasks' and its program's reservations)",
            b.clone(),
            m.tenant_memory_held.clone(),
        );
        add(
            (r, &mut names),
            "tenant_queued_tasks",
            "The tenant's tasks waiting in the queue",
            None,
            m.tenant_queued.clone(),
        );
        add(
            (r, &mut names),
            "tenant_gpu",
            "GPU time charged to the tenant (the daemon's time: emulated GPUs may run faster than the wall clock)",
            s.clone(),
            m.tenant_gpu_seconds.clone(),
        );
        add(
            (r, &mut names),
            "tenant_queue_wait",
            "Time the tenant's tasks waited in the queue before they started",
            s.clone(),
            m.tenant_queue_wait.clone(),
        );
        add(
            (r, &mut names),
            "tenant_task_latency",
            "Time from a task's submission to its end",
            s.clone(),
            m.tenant_latency.clone(),
        );
        add(
            (r, &mut names),
            "tenant_sla_met",
            "User-facing tasks done within their SLA",
            None,
            m.tenant_sla_met.clone(),
        );
        add(
            (r, &mut names),
            "tenant_sla_missed",
            "User-facing tasks done past their SLA",
            None,
            m.tenant_sla_missed.clone(),
        );
        add(
            (r, &mut names),
            "tenant_launch_gate_slices",
            "Slices of a GPU the tenant's launch gate was granted (its kernels ran only within them)",
            None,
            m.tenant_gate_slices.clone(),
        );
        add(
            (r, &mut names),
            "pool_gpus",
            "GPUs in the user-facing pool",
            None,
            m.pool_gpus.clone(),
        );
        add(
            (r, &mut names),
            "gpu_resets",
            "GPU resets (the policy reclaiming a GPU, or a drain timing out)",
            None,
            m.resets.clone(),
        );
        add(
            (r, &mut names),
            "migrations",
            "Tenants moved between GPUs (DCUDA)",
            None,
            m.migrations.clone(),
        );
        add(
            (r, &mut names),
            "repartitions",
            "New gpu-lets schedules put in force",
            None,
            m.repartitions.clone(),
        );
        add(
            (r, &mut names),
            "refusals",
            "Control requests refused, by error code",
            None,
            m.refusals.clone(),
        );
        add((r, &mut names), "tasks", "Tasks ended, by outcome", None, m.tasks.clone());
        add(
            (r, &mut names),
            "ledger_holders",
            "Reservations held in the node's ledger",
            None,
            m.ledger_holders.clone(),
        );
        add(
            (r, &mut names),
            "ledger_waiters",
            "Requests waiting in the node's ledger",
            None,
            m.ledger_waiters.clone(),
        );
        add(
            (r, &mut names),
            "connections",
            "Open control connections",
            None,
            m.connections.clone(),
        );
        add(
            (r, &mut names),
            "rings_open",
            "Clients with shared-memory rings",
            None,
            m.rings_open.clone(),
        );
        add(
            (r, &mut names),
            "rings_active",
            "Rings the core loop polls now (busy lately)",
            None,
            m.rings_active.clone(),
        );
        add(
            (r, &mut names),
            "tenants_open",
            "Open tenants, by class",
            None,
            m.tenants_open.clone(),
        );
        add(
            (r, &mut names),
            "tenants_aggregated",
            "Open tenants counted under tenant=\"other\" (beyond [metrics] max_tenants)",
            None,
            m.tenants_aggregated.clone(),
        );
        add(
            (r, &mut names),
            "event_loop_latency",
            "Time the core loop took over each pass that did work",
            s,
            m.loop_latency.clone(),
        );
        NodeMetrics { registry, names, ..m }
    }

    /// Every sample name a scrape can show (`tessera_tenant_gpu_seconds_total`, ...),
    /// whether or not it has series now.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The labels a new tenant is counted under: its own while fewer than
    /// `max_tenants` have their own, else `other` (with its class).
    pub fn labels_for(
        &self,
        tenant: u64,
        uid: u32,
        pid: u32,
        job: Option<u64>,
        class: &str,
    ) -> TenantLabels {
        let own = self
            .labelled
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_tenants).then_some(n + 1)
            })
            .is_ok();
        if own {
            TenantLabels {
                tenant: tenant.to_string(),
                uid: uid.to_string(),
                pid: pid.to_string(),
                job: job.map(|j| j.to_string()).unwrap_or_default(),
                class: class.into(),
            }
        } else {
            TenantLabels {
                tenant: "other".into(),
                uid: String::new(),
                pid: String::new(),
                job: String::new(),
                class: class.into(),
            }
        }
    }

    /// A tenant left: its own series go (those under `other` stay).
    pub fn forget(&self, labels: &TenantLabels) {
        if labels.tenant == "other" {
            return;
        }
        self.labelled.fetch_sub(1, Ordering::Relaxed);
        self.tenant_gpu_seconds.remove(labels);
        self.tenant_queue_wait.remove(labels);
        self.tenant_latency.remove(labels);
        self.tenant_sla_met.remove(labels);
        self.tenant_sla_missed.remove(labels);
        self.tenant_gate_slices.remove(labels);
    }

    /// The gauge labels of a tenant placed on `gpus`.
    pub fn with_gpus(labels: &TenantLabels, gpus: &[u32]) -> TenantGpuLabels {
        TenantGpuLabels {
            tenant: labels.clone(),
            gpu: gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        }
    }

    /// Clear the per-tenant gauges before a scrape sets them again.
    pub fn clear_tenant_gauges(&self) {
        self.tenant_weight.clear();
        self.tenant_entitled_share.clear();
        self.tenant_received_share.clear();
        self.tenant_memory_held.clear();
        self.tenant_queued.clear();
    }

    /// Each GPU's busy fraction since the previous scrape, given its busy time so far.
    pub fn busy_ratios(&self, busy_s: &[f64]) -> Vec<f64> {
        let now = Instant::now();
        let mut last = self.last_scrape.lock().unwrap_or_else(|p| p.into_inner());
        let ratios = match &*last {
            Some((at, prev)) if now > *at => {
                let span = now.duration_since(*at).as_secs_f64();
                busy_s.iter().zip(prev).map(|(b, p)| ((b - p) / span).clamp(0.0, 1.0)).collect()
            }
            _ => vec![0.0; busy_s.len()],
        };
        *last = Some((now, busy_s.to_vec()));
        ratios
    }

    /// The exposition of every metric (OpenMetrics text).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

/// Raise `counter` to `total` (a count the core keeps itself).
pub fn advance(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

/// Raise `counter` to `total` (seconds the core keeps itself).
pub fn advance_f(counter: &CounterF, total: f64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

/// The label of a refusal's reason.
pub(crate) fn reason(code: tessera_client::proto::ErrorCode) -> ReasonLabel {
    let name = serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{code:?}"));
    ReasonLabel { reason: name }
}

/// The label of a task's outcome.
pub(crate) fn outcome(name: &'static str) -> OutcomeLabel {
    OutcomeLabel { outcome: name }
}

/// The label of a tenant class.
pub(crate) fn class(name: &'static str) -> ClassLabel {
    ClassLabel { class: name }
}

/// Where the endpoint listens: `host:port`, or a Unix socket's absolute path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address.
    Tcp(std::net::SocketAddr),
    /// A Unix socket.
    Unix(std::path::PathBuf),
}

impl std::str::FromStr for Listen {
    type Err = String;
    fn from_str(s: &str) -> Result<Listen, String> {
        if s.starts_with('/') {
            return Ok(Listen::Unix(s.into()));
        }
        s.parse().map(Listen::Tcp).map_err(|_| {
            format!(
                "metrics listen {s:?} is neither host:port (say 127.0.0.1:9400) nor an absolute socket path"
            )
        })
    }
}

mod http;
pub use http::{
    MAX_CONNECTIONS, MAX_REQUEST_HEAD, MetricsError, MetricsServer, REFRESH_INTERVAL,
    REQUEST_TIMEOUT, WRITE_STALL_TIMEOUT,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_beyond_the_bound_are_aggregated_and_a_departure_frees_a_place() {
        let m = NodeMetrics::new(2);
        let a = m.labels_for(1, 1000, 11, None, "batch");
        let b = m.labels_for(2, 1000, 12, Some(7), "batch");
        let c = m.labels_for(3, 1001, 13, None, "user_facing");
        assert_eq!(a.tenant, "1");
        assert_eq!(b.job, "7");
        assert_eq!(c.tenant, "other");
        assert_eq!(c.class, "user_facing");
        m.tenant_gpu_seconds.get_or_create(&a).inc_by(1.5);
        m.tenant_gpu_seconds.get_or_create(&c).inc_by(2.0);
        let text = m.encode();
        assert!(text.contains(r#"tessera_tenant_gpu_seconds_total{tenant="1",uid="1000",pid="11",job="",class="batch"} 1.5"#), "{text}");
        assert!(text.contains(r#"tenant="other""#), "{text}");
        m.forget(&a);
        m.forget(&c); // `other` is never removed
        assert!(!m.encode().contains(r#"tenant="1""#));
        assert!(m.encode().contains(r#"tenant="other""#));
        assert_eq!(m.labels_for(4, 1000, 14, None, "batch").tenant, "4");
    }

    #[test]
    fn counters_follow_the_cores_totals_without_going_back() {
        let m = NodeMetrics::new(4);
        advance(&m.resets, 3);
        advance(&m.resets, 2);
        assert_eq!(m.resets.get(), 3);
        assert!(m.encode().contains("tessera_gpu_resets_total 3"));
    }

    /// The Grafana dashboard in docs/ queries only metrics the daemon exports (its
    /// expressions are evaluated by a real Prometheus in `tests/prometheus.rs`).
    #[test]
    fn the_dashboard_names_only_exported_metrics() {
        let m = NodeMetrics::new(4);
        assert!(
            m.names().contains(&"tessera_tenant_gpu_seconds_total".to_string()),
            "{:?}",
            m.names()
        );
        assert!(m.names().contains(&"tessera_tenant_queue_wait_seconds_bucket".to_string()));
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/grafana/tessera-node.json");
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut used = 0;
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap();
                for name in expr
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| w.starts_with("tessera_"))
                {
                    used += 1;
                    assert!(
                        m.names().iter().any(|n| n == name),
                        "the dashboard's {name} is not exported"
                    );
                }
            }
        }
        assert!(used >= 20, "the dashboard names {used} metrics");
    }

    #[test]
    fn listen_is_an_address_or_a_socket_path() {
        assert_eq!(
            "127.0.0.1:9400".parse::<Listen>().unwrap(),
            Listen::Tcp("127.0.0.1:9400".parse().unwrap())
        );
        assert_eq!(
            "/run/tessera/metrics.sock".parse::<Listen>().unwrap(),
            Listen::Unix("/run/tessera/metrics.sock".into())
        );
        assert!("localhost".parse::<Listen>().is_err());
    }
}
