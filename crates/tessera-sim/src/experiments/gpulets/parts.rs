//! The parts of a measurement, kept by what decides each, so that a sensitivity re-run
//! computes only what its constant reaches (issue 55).
//!
//! Of the constants of ours, only `batching_charged` reaches the `paper` set's
//! schedulability, serving and rate searches, and none reaches the `v100` set's; Figure
//! 14's run reads all four. The sensitivity's eight re-measures therefore recompute the
//! `paper` parts twice at most (and `batching_charged`'s high value is the one used, so
//! once), the `v100` parts never, and Figure 14 for each.

use super::fluctuating::Fluctuating;
use super::throughput::MixThroughput;
use super::{AtMaxRate, Constants, GpuletsConfig, SetResults};
use crate::experiments::ExperimentError;
use std::collections::HashMap;
use std::sync::Mutex;

/// A part's values by key; the first computation of a key is kept.
#[derive(Debug)]
struct Memo<V>(Mutex<HashMap<String, V>>);

impl<V> Default for Memo<V> {
    fn default() -> Self {
        Memo(Mutex::new(HashMap::new()))
    }
}

impl<V: Clone> Memo<V> {
    /// The value of `key`, computed with `f` if it is not kept (outside the lock: two
    /// threads asking for one key at once both compute it, and get the same value).
    fn get_or(
        &self,
        key: String,
        f: impl FnOnce() -> Result<V, ExperimentError>,
    ) -> Result<V, ExperimentError> {
        if let Some(v) = self.0.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(v);
        }
        let v = f()?;
        if let Ok(mut m) = self.0.lock() {
            m.entry(key).or_insert_with(|| v.clone());
        }
        Ok(v)
    }

    fn len(&self) -> usize {
        self.0.lock().map_or(0, |m| m.len())
    }
}

/// The `paper` set's schedulability and serving, its maximum served rates and the
/// runs at them.
pub(super) type PaperParts = (SetResults, Vec<MixThroughput>, Vec<AtMaxRate>);

/// The parts computed within one experiment (its main run and its sensitivity
/// re-runs); scoped to it, so a test that runs the experiment twice computes it twice.
#[derive(Debug, Default)]
pub(super) struct Parts {
    paper: Memo<PaperParts>,
    v100: Memo<SetResults>,
    fluctuating: Memo<Fluctuating>,
}

impl Parts {
    /// The `paper` parts of `cfg`: they read the seed, the scale and the batching
    /// charge.
    pub fn paper(
        &self,
        cfg: &GpuletsConfig,
        f: impl FnOnce() -> Result<PaperParts, ExperimentError>,
    ) -> Result<PaperParts, ExperimentError> {
        self.paper.get_or(paper_key(cfg), f)
    }

    /// The `v100` set's schedulability and serving: the seed and the scale alone.
    pub fn v100(
        &self,
        cfg: &GpuletsConfig,
        f: impl FnOnce() -> Result<SetResults, ExperimentError>,
    ) -> Result<SetResults, ExperimentError> {
        self.v100.get_or(v100_key(cfg), f)
    }

    /// Figure 14's run: the seed, the scale and every constant.
    pub fn fluctuating(
        &self,
        cfg: &GpuletsConfig,
        f: impl FnOnce() -> Result<Fluctuating, ExperimentError>,
    ) -> Result<Fluctuating, ExperimentError> {
        self.fluctuating.get_or(fluctuating_key(cfg), f)
    }

    /// How many of each part were computed: (`paper`, `v100`, Figure 14).
    pub fn computed(&self) -> (usize, usize, usize) {
        (self.paper.len(), self.v100.len(), self.fluctuating.len())
    }
}

fn paper_key(cfg: &GpuletsConfig) -> String {
    format!("{}|{}|{}", cfg.seed, cfg.scale.to_bits(), cfg.constants.batching_charged.to_bits())
}

fn v100_key(cfg: &GpuletsConfig) -> String {
    format!("{}|{}", cfg.seed, cfg.scale.to_bits())
}

fn fluctuating_key(cfg: &GpuletsConfig) -> String {
    // every field by name, so that a constant added to `Constants` does not compile
    // here until it is decided whether Figure 14 reads it
    let Constants { batching_charged, base_rate, ewma_alpha, idle_share } = cfg.constants;
    format!(
        "{}|{}|{}|{}|{}|{}",
        cfg.seed,
        cfg.scale.to_bits(),
        batching_charged.to_bits(),
        base_rate.to_bits(),
        ewma_alpha.to_bits(),
        idle_share.to_bits()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value is kept and given again; an error is not kept.
    #[test]
    fn a_memo_keeps_values_not_errors() {
        let memo: Memo<u32> = Memo::default();
        let fail = || Err(ExperimentError::Config("no".into()));
        assert!(memo.get_or("a".into(), fail).is_err());
        assert_eq!(memo.len(), 0);
        assert_eq!(memo.get_or("a".into(), || Ok(7)).unwrap(), 7);
        assert_eq!(memo.get_or("a".into(), fail).unwrap(), 7, "kept, not computed again");
        assert_eq!(memo.get_or("b".into(), || Ok(8)).unwrap(), 8);
        assert_eq!(memo.len(), 2);
    }

    /// Each part's key changes exactly with what the part reads: the batching charge
    /// reaches the `paper` parts and Figure 14, Figure 14's own constants only Figure 14,
    /// nothing of ours the `v100` set; the seed and the scale every part.
    #[test]
    fn a_parts_key_changes_with_what_it_reads() {
        let used = GpuletsConfig::paper(1);
        let keys = |c: &GpuletsConfig| (paper_key(c), v100_key(c), fluctuating_key(c));
        let base = keys(&used);
        let with = |f: &dyn Fn(&mut GpuletsConfig)| {
            let mut c = used.clone();
            f(&mut c);
            let k = keys(&c);
            (k.0 != base.0, k.1 != base.1, k.2 != base.2)
        };
        assert_eq!(with(&|c| c.constants.batching_charged = 0.0), (true, false, true));
        assert_eq!(with(&|c| c.constants.base_rate = 40.0), (false, false, true));
        assert_eq!(with(&|c| c.constants.ewma_alpha = 0.1), (false, false, true));
        assert_eq!(with(&|c| c.constants.idle_share = 0.7), (false, false, true));
        assert_eq!(with(&|c| c.seed = 2), (true, true, true));
        assert_eq!(with(&|c| c.scale = 0.1), (true, true, true));
        assert_eq!(with(&|_| ()), (false, false, false));
    }
}
