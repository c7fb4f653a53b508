//! Inference serving (`policy = "gpulets"`, and under `policy = "node"` the tenants that
//! register a model): tenants register models (a name, a latency
//! profile, an SLO), each task a tenant submits is one request, and the core's gpu-lets
//! policy ([`AdaptiveGpulets`]) tracks each model's rate, schedules gpu-lets by elastic
//! partitioning with interference (gpu-lets §4), batches requests per model and
//! dispatches the batches to partitions. This module holds what the daemon adds: the
//! registry of models, the profiles (the measured V100 MPS profiles, built into the
//! binary), and how long a batch runs on the emulated executor — L(batch, partition) times
//! the interference of the batch running in the GPU's other partition at the time.
//!
//! Emulated only: a partition is a share of the emulated GPU (its tasks' summed demand),
//! and a repartition is immediate (a real MPS server would be restarted with new active
//! thread percentages, taking the 10-15 s the paper reports; `prepare_ms` models that).

use crate::config::GpuletsConfig;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tessera_core::policies::gpulets::{
    AdaptiveGpulets, InterferenceModel, LatencyProfile, Model, Options, ServingPlan, ServingReport,
    elastic_partitioning,
};
use tessera_core::{GpuSpec, Nanos, TenantId};
use tessera_gpu::partition::{Interference, ModelProfile, PartitionError, Profiles};

/// The measured V100 MPS profiles (`data/profiles/v100-igniter`, cited in
/// `data/README.md`).
const V100_PROFILES: &str = include_str!("../../../data/profiles/v100-igniter/gpulet.config.jsonl");
/// The gpu-lets authors' published interference coefficients (RTX 2080 Ti), the default.
const AUTHORS_COEFFICIENTS: &str =
    include_str!("../../../data/profiles/gpulets-2080ti/INT_MODEL_CONSTANT.CSV");

/// Partition sizes the scheduler may use (gpu-lets' `Avail_Parts`), %.
const SIZES: [u32; 6] = [20, 40, 50, 60, 80, 100];

/// Why a model registration or the serving set-up was refused.
#[derive(Debug, thiserror::Error)]
pub enum InferenceError {
    /// No profile of that name.
    #[error("no latency profile {profile:?}; this daemon knows: {known}")]
    UnknownProfile {
        /// The name asked for.
        profile: String,
        /// The names known.
        known: String,
    },
    /// The SLO is shorter than one request alone on a whole GPU.
    #[error(
        "an SLO of {slo_ms} ms is below {profile}'s batch-1 latency on a whole GPU ({min_ms:.2} ms)"
    )]
    SloTooShort {
        /// The profile.
        profile: String,
        /// The SLO asked.
        slo_ms: f64,
        /// Batch 1's latency on a whole GPU.
        min_ms: f64,
    },
    /// A model name is empty or too long.
    #[error("a model name must have 1 to 64 characters")]
    BadName,
    /// The built-in data did not load.
    #[error("built-in profile data: {0}")]
    Data(#[from] PartitionError),
}

/// A registered model.
#[derive(Clone, Debug, PartialEq)]
pub struct ServedModel {
    /// Its name.
    pub name: String,
    /// Its profile's name.
    pub profile: String,
    /// Its SLO, ms.
    pub slo_ms: f64,
}

/// A registered model as status shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelState {
    /// The model.
    pub model: ServedModel,
    /// Its rate at the scheduler's last check, req/s.
    pub rate: Option<f64>,
    /// Its gpu-lets in force: GPU, size %, batch.
    pub gpulets: Vec<(u32, u32, u32)>,
}

/// The daemon's inference state, shared between the core and the policy's rescheduler.
#[derive(Clone, Debug)]
pub struct Inference {
    profiles: Arc<Profiles>,
    interference: Interference,
    /// Registered models by tenant.
    registry: Arc<Mutex<BTreeMap<TenantId, ServedModel>>>,
    /// What the policy last decided.
    report: Arc<Mutex<ServingReport>>,
}

/// A V100 profile as the scheduler takes it (percent of a GPU).
struct Derived<'a>(&'a ModelProfile);

impl LatencyProfile for Derived<'_> {
    fn latency_ms(&self, batch: u32, percent: u32) -> Option<f64> {
        self.0.latency_or_derived_ms(batch, percent * 10)
    }
}

/// gpu-lets §4.4's interference from the models' profiled L2 and DRAM utilization.
struct ByUtilization<'a> {
    profiles: Vec<&'a ModelProfile>,
    coefficients: Interference,
}

impl InterferenceModel for ByUtilization<'_> {
    fn factor(&self, own: (usize, u32, u32), other: (usize, u32, u32)) -> f64 {
        let u =
            |(m, b, p): (usize, u32, u32)| self.profiles.get(m)?.utilization_or_derived(b, p * 10);
        match (u(own), u(other)) {
            (Some(a), Some(b)) => self.coefficients.factor(a, b),
            _ => 1.0,
        }
    }
}

/// Elastic partitioning with interference of `served` (profile, SLO ms) at `rates` on
/// `gpus` GPUs, and the plan to serve it for `tenants`; `None` when not schedulable.
fn schedule(
    served: &[(&ModelProfile, f64)],
    rates: &[f64],
    gpus: usize,
    latency_margin: f64,
    coefficients: Interference,
    tenants: &[TenantId],
) -> Option<(Vec<tessera_core::policies::gpulets::Gpulet>, ServingPlan)> {
    let derived: Vec<Derived<'_>> = served.iter().map(|(p, _)| Derived(p)).collect();
    let models: Vec<Model<'_>> = derived
        .iter()
        .zip(served)
        .zip(rates)
        .map(|((d, (_, slo)), r)| Model { rate: *r, slo_ms: *slo, profile: d })
        .collect();
    let interference =
        ByUtilization { profiles: served.iter().map(|(p, _)| *p).collect(), coefficients };
    let opts = Options { sizes: SIZES.to_vec(), latency_margin, ..Options::paper(gpus) };
    let schedule = elastic_partitioning(&models, &opts, &interference).ok()?;
    let plan = ServingPlan::new(gpus, &schedule, &models, tenants, &opts, &interference);
    Some((schedule, plan))
}

impl Inference {
    /// Whether models of these (profile, SLO ms, rate req/s) are schedulable on `gpus`
    /// GPUs under `cfg`, as the daemon would schedule them (for capacity planning, and
    /// for tests that load the daemon near the schedule's edge).
    pub fn schedulable(
        &self,
        models: &[(&str, f64, f64)],
        gpus: usize,
        cfg: &GpuletsConfig,
    ) -> bool {
        let served: Option<Vec<(&ModelProfile, f64)>> =
            models.iter().map(|(p, slo, _)| Some((self.profiles.models.get(*p)?, *slo))).collect();
        let rates: Vec<f64> = models.iter().map(|m| m.2).collect();
        let tenants: Vec<TenantId> = (0..models.len()).map(|i| TenantId(i as u64)).collect();
        served.is_some_and(|s| {
            schedule(&s, &rates, gpus, cfg.latency_margin, self.interference, &tenants).is_some()
        })
    }

    /// The largest rate `k` (req/s, within 1) at which models of these (profile, SLO ms,
    /// share) are schedulable on `gpus` GPUs with rates `share * k`, searched between 1
    /// and 4,000; `None` unless 1 is schedulable and 4,000 is not. The edge a load near
    /// the schedule's limit is taken from (the inference tests').
    pub fn schedulable_edge(
        &self,
        mix: &[(&str, f64, f64)],
        gpus: usize,
        cfg: &GpuletsConfig,
    ) -> Option<f64> {
        let fits = |k: f64| {
            let models: Vec<(&str, f64, f64)> =
                mix.iter().map(|&(p, slo, share)| (p, slo, share * k)).collect();
            self.schedulable(&models, gpus, cfg)
        };
        let (mut lo, mut hi) = (1.0, 4000.0);
        if !fits(lo) || fits(hi) {
            return None;
        }
        while hi - lo > 1.0 {
            let mid = f64::midpoint(lo, hi);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }

    /// A profile's SLO by the paper's rule, ms: twice its batch 32's latency on a whole
    /// GPU, whole milliseconds.
    pub fn paper_slo_ms(&self, profile: &str) -> Option<f64> {
        Some((2.0 * self.whole_gpu_latency_ms(profile, 32)?).floor())
    }

    /// A profile's latency for `batch` on a whole GPU, ms (the paper's SLO rule is twice
    /// batch 32's).
    pub fn whole_gpu_latency_ms(&self, profile: &str, batch: u32) -> Option<f64> {
        self.profiles.models.get(profile)?.latency_or_derived_ms(batch, 1000)
    }

    /// Load the built-in profiles and the configured (or default) coefficients.
    pub fn new(cfg: &GpuletsConfig) -> Result<Inference, InferenceError> {
        let profiles = Profiles::from_v100_jsonl(V100_PROFILES)?;
        let interference = match cfg.interference {
            Some(c) => Interference { c },
            None => Interference::from_csv(AUTHORS_COEFFICIENTS)?,
        };
        Ok(Inference {
            profiles: Arc::new(profiles),
            interference,
            registry: Arc::default(),
            report: Arc::default(),
        })
    }

    /// Check a registration before the tenant exists.
    pub fn check(&self, name: &str, profile: &str, slo_ms: f64) -> Result<(), InferenceError> {
        if name.is_empty() || name.chars().count() > 64 {
            return Err(InferenceError::BadName);
        }
        let p =
            self.profiles.models.get(profile).ok_or_else(|| InferenceError::UnknownProfile {
                profile: profile.into(),
                known: self.profiles.models.keys().cloned().collect::<Vec<_>>().join(", "),
            })?;
        let min_ms = p.latency_or_derived_ms(1, 1000).unwrap_or(f64::INFINITY);
        if slo_ms < min_ms {
            return Err(InferenceError::SloTooShort { profile: profile.into(), slo_ms, min_ms });
        }
        Ok(())
    }

    /// Record `tenant`'s model (after [`Inference::check`]).
    pub fn admit(&self, tenant: TenantId, model: ServedModel) {
        if let Ok(mut r) = self.registry.lock() {
            r.insert(tenant, model);
        }
    }

    /// Whether `tenant` registered a model (the node policy routes it to gpu-lets).
    pub fn serves_model(&self, tenant: TenantId) -> bool {
        self.registry.lock().is_ok_and(|r| r.contains_key(&tenant))
    }

    /// Forget a tenant's model.
    pub fn forget(&self, tenant: TenantId) {
        if let Ok(mut r) = self.registry.lock() {
            r.remove(&tenant);
        }
    }

    /// Reorganizations decided and reschedules refused (the tracked rates were not
    /// schedulable; the schedule in force kept serving), since the daemon started.
    pub fn decisions(&self) -> (u64, u64) {
        self.report.lock().map_or((0, 0), |r| (r.reorganizations, r.refused))
    }

    /// The model `tenant` serves, its tracked rate and its gpu-lets.
    pub fn model_of(&self, tenant: TenantId) -> Option<ModelState> {
        let model = self.registry.lock().ok()?.get(&tenant)?.clone();
        let report = self.report.lock().ok()?;
        let rate = report.rates.iter().find(|(t, _)| *t == tenant).map(|(_, r)| *r);
        let lets = report
            .gpulets
            .iter()
            .filter_map(|(gpu, size, served)| {
                let (_, batch) = served.iter().find(|(t, _)| *t == tenant)?;
                Some((gpu.0, *size, *batch))
            })
            .collect();
        Some(ModelState { model, rate, gpulets: lets })
    }

    /// How long a batch of `n` requests of `tenant`'s model runs in a partition of
    /// `share_permille`, beside `neighbour` (tenant, batch, share) running in the same
    /// GPU's other partition: L(n, p) times the interference factor (every batch 1-32 is
    /// profiled; a larger one runs as 32).
    pub fn batch_time(
        &self,
        tenant: TenantId,
        n: u32,
        share_permille: u32,
        neighbour: Option<(TenantId, u32, u32)>,
    ) -> Option<Nanos> {
        let registry = self.registry.lock().ok()?;
        let profile = |t: TenantId| self.profiles.models.get(&registry.get(&t)?.profile);
        let padded = |n: u32| n.clamp(1, tessera_core::policies::gpulets::MAX_BATCH);
        let own = profile(tenant)?;
        let b = padded(n);
        let latency = own.latency_or_derived_ms(b, share_permille)?;
        let factor = neighbour
            .and_then(|(t, nb, ns)| {
                let other = profile(t)?.utilization_or_derived(padded(nb), ns)?;
                let mine = own.utilization_or_derived(b, share_permille)?;
                Some(self.interference.factor(mine, other))
            })
            .unwrap_or(1.0);
        Some(Nanos((latency * factor * 1e6).round() as u64))
    }

    /// The policy: [`AdaptiveGpulets`] over `gpus`, its rescheduler running elastic
    /// partitioning with interference over the registered models.
    pub fn policy(&self, gpus: &[GpuSpec], cfg: &GpuletsConfig) -> AdaptiveGpulets {
        let count = gpus.len();
        let profiles = self.profiles.clone();
        let registry = self.registry.clone();
        let coefficients = self.interference;
        let latency_margin = cfg.latency_margin;
        let guard = Nanos::from_millis(cfg.dispatch_guard_ms);
        let reschedule = Box::new(move |_: Nanos, tenants: &[TenantId], rates: &[f64]| {
            let registry = registry.lock().ok()?;
            let served: Vec<(&ModelProfile, f64)> = tenants
                .iter()
                .map(|t| {
                    let m = registry.get(t)?;
                    Some((profiles.models.get(&m.profile)?, m.slo_ms))
                })
                .collect::<Option<_>>()?;
            let (schedule, plan) =
                schedule(&served, rates, count, latency_margin, coefficients, tenants)?;
            Some((schedule, plan.with_guard(guard)))
        });
        AdaptiveGpulets::new(
            gpus,
            (
                Vec::new(),
                ServingPlan::new(
                    count,
                    &[],
                    &[],
                    &[],
                    &Options::paper(count),
                    &tessera_core::policies::gpulets::NoInterference,
                ),
            ),
            Vec::new(),
            Nanos::ZERO,
            Nanos::from_secs(cfg.period_s),
            Nanos::from_millis(cfg.prepare_ms),
            cfg.ewma_alpha,
            0.5,
            reschedule,
        )
        .with_report(self.report.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registration checks: unknown profiles and SLOs below a lone request's latency are
    /// refused with what would be accepted; a batch runs as long as its profile says,
    /// longer beside a neighbour.
    #[test]
    fn registrations_are_checked_and_batches_timed_from_the_profiles() {
        let inf = Inference::new(&GpuletsConfig::default()).unwrap();
        let e = inf.check("m", "bert", 100.0).unwrap_err().to_string();
        assert!(e.contains("resnet50") && e.contains("bert"), "{e}");
        assert!(matches!(inf.check("m", "resnet50", 0.1), Err(InferenceError::SloTooShort { .. })));
        assert!(matches!(inf.check("", "resnet50", 100.0), Err(InferenceError::BadName)));
        inf.check("m", "resnet50", 100.0).unwrap();
        let (a, b) = (TenantId(1), TenantId(2));
        for t in [a, b] {
            inf.admit(
                t,
                ServedModel { name: "m".into(), profile: "resnet50".into(), slo_ms: 100.0 },
            );
        }
        let profile = &inf.profiles.models["resnet50"];
        let alone = inf.batch_time(a, 8, 500, None).unwrap();
        let want = profile.latency_or_derived_ms(8, 500).unwrap();
        assert_eq!(alone, Nanos((want * 1e6).round() as u64));
        // every batch 1-32 is profiled: 5 requests run as a batch of 5, 40 as two of 32's
        // length at most (a batch larger than 32 runs as 32)
        let five = profile.latency_or_derived_ms(5, 500).unwrap();
        assert_eq!(inf.batch_time(a, 5, 500, None), Some(Nanos((five * 1e6).round() as u64)));
        assert_eq!(inf.batch_time(a, 40, 500, None), inf.batch_time(a, 32, 500, None));
        let beside = inf.batch_time(a, 8, 500, Some((b, 8, 500))).unwrap();
        assert!(beside >= alone, "{beside:?} < {alone:?}");
        inf.forget(a);
        assert_eq!(inf.batch_time(a, 8, 500, None), None);
    }
}
