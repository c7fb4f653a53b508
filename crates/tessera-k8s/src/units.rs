//! Units of GPU memory as the kubelet sees them: device ids `gpu<G>-<I>`, the `I`th unit
//! of GPU `G`, and the choice of units that keeps one container's on one GPU.

use std::collections::BTreeMap;

/// A device id the plugin did not advertise, or units it cannot give together.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnitError {
    /// Not of the form `gpu<G>-<I>`.
    #[error("device id {0:?} is not one of tessera's units (gpu<G>-<I>)")]
    NotAUnit(String),
    /// Units of more than one GPU for one container.
    #[error(
        "one container's units must be on one GPU, these are on GPUs {0:?} (the kubelet skipped GetPreferredAllocation?)"
    )]
    SeveralGpus(Vec<u32>),
    /// No units at all.
    #[error("a container asked for no units")]
    None,
}

/// One unit: GPU `gpu`'s `index`th.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Unit {
    /// The GPU (the daemon's index).
    pub gpu: u32,
    /// Its place on the GPU.
    pub index: u32,
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gpu{}-{}", self.gpu, self.index)
    }
}

impl std::str::FromStr for Unit {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Unit, UnitError> {
        let bad = || UnitError::NotAUnit(s.chars().take(64).collect());
        let (g, i) = s.strip_prefix("gpu").and_then(|r| r.split_once('-')).ok_or_else(bad)?;
        let num = |x: &str| {
            // canonical decimal only, so that one unit has one id
            (x == "0"
                || (!x.is_empty() && !x.starts_with('0') && x.bytes().all(|b| b.is_ascii_digit())))
            .then(|| x.parse::<u32>().ok())
            .flatten()
        };
        Ok(Unit { gpu: num(g).ok_or_else(bad)?, index: num(i).ok_or_else(bad)? })
    }
}

/// The units of GPU memory on a GPU of `memory` bytes: whole units only.
pub fn units_of(memory: u64, unit_bytes: u64) -> u32 {
    u32::try_from(memory / unit_bytes.max(1)).unwrap_or(u32::MAX)
}

/// The GPU of `ids`, which must all be units of one GPU.
pub fn one_gpu(ids: &[String]) -> Result<(u32, Vec<Unit>), UnitError> {
    let units = ids.iter().map(|s| s.parse()).collect::<Result<Vec<Unit>, _>>()?;
    let mut gpus: Vec<u32> = units.iter().map(|u| u.gpu).collect();
    gpus.sort_unstable();
    gpus.dedup();
    match gpus.as_slice() {
        [] => Err(UnitError::None),
        [g] => Ok((*g, units)),
        _ => Err(UnitError::SeveralGpus(gpus)),
    }
}

/// What `GetPreferredAllocation` answers: `size` of the `available` units on one GPU,
/// the `must_include` ones among them. The GPU is the one the must-include units are
/// on, else the one with the fewest free units that still has `size` (best fit: large
/// free GPUs stay whole for large requests). Where no GPU has `size` free, the kubelet
/// decides (an empty answer is one it accepts); so it does where the must-include
/// units span GPUs.
pub fn preferred(available: &[String], must_include: &[String], size: usize) -> Vec<String> {
    let mut free: BTreeMap<u32, Vec<Unit>> = BTreeMap::new();
    for u in available.iter().filter_map(|s| s.parse::<Unit>().ok()) {
        free.entry(u.gpu).or_default().push(u);
    }
    let pick = |gpu: u32, free: &BTreeMap<u32, Vec<Unit>>| -> Vec<String> {
        let mut out: Vec<String> = must_include.to_vec();
        let mut on = free.get(&gpu).cloned().unwrap_or_default();
        on.sort_unstable();
        for u in on {
            if out.len() >= size {
                break;
            }
            let id = u.to_string();
            if !out.contains(&id) {
                out.push(id);
            }
        }
        out
    };
    if !must_include.is_empty() {
        return match one_gpu(must_include) {
            Ok((g, _)) => {
                let out = pick(g, &free);
                if out.len() == size { out } else { Vec::new() }
            }
            Err(_) => Vec::new(),
        };
    }
    free.iter()
        .filter(|(_, us)| us.len() >= size)
        .min_by_key(|(g, us)| (us.len(), **g))
        .map(|(g, _)| pick(*g, &free))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn unit_ids_are_read_back_exactly() {
        let u = Unit { gpu: 3, index: 12 };
        assert_eq!(u.to_string().parse::<Unit>(), Ok(u));
        for bad in ["gpu1", "gpu-1", "gpux-1", "gpu01-1", "gpu1-", "GPU1-1", "gpu1-1-1", "gpu1-+1"]
        {
            assert!(bad.parse::<Unit>().is_err(), "{bad}");
        }
        assert_eq!(units_of(4 << 30, 1 << 30), 4);
        assert_eq!(units_of((4 << 30) - 1, 1 << 30), 3);
    }

    #[test]
    fn one_containers_units_are_on_one_gpu() {
        assert_eq!(one_gpu(&ids("gpu1-0 gpu1-3")).unwrap().0, 1);
        assert_eq!(one_gpu(&ids("gpu1-0 gpu0-3")), Err(UnitError::SeveralGpus(vec![0, 1])));
        assert_eq!(one_gpu(&[]), Err(UnitError::None));
        assert!(matches!(one_gpu(&ids("nvidia0")), Err(UnitError::NotAUnit(_))));
    }

    #[test]
    fn the_preferred_units_fit_one_gpu_best() {
        // GPU 0 has 3 free, GPU 1 has 2: 2 units go on GPU 1, 3 on GPU 0, 4 nowhere
        let free = ids("gpu0-0 gpu0-1 gpu0-2 gpu1-2 gpu1-3");
        assert_eq!(preferred(&free, &[], 2), ids("gpu1-2 gpu1-3"));
        assert_eq!(preferred(&free, &[], 3), ids("gpu0-0 gpu0-1 gpu0-2"));
        assert_eq!(preferred(&free, &[], 4), Vec::<String>::new());
        // must-include units choose the GPU
        assert_eq!(preferred(&free, &ids("gpu0-2"), 2), ids("gpu0-2 gpu0-0"));
        assert!(preferred(&free, &ids("gpu0-2 gpu1-2"), 2).is_empty());
    }
}
