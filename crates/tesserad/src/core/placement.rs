//! Placing tenants on GPUs, among those a program may see.

use super::*;

impl Core {
    /// Choose `n` GPUs (at most all, or all of `within`) for a new tenant: the least loaded — fewest open
    /// tenants placed there, then fewest running tasks, then lowest index — and count
    /// it there.
    pub(super) fn place(&mut self, n: usize, within: Option<&[u32]>) -> Vec<u32> {
        let mut order: Vec<(usize, usize, u32)> = self
            .gpus
            .iter()
            .enumerate()
            .filter(|(i, _)| within.is_none_or(|w| w.contains(&(*i as u32))))
            .map(|(i, g)| (g.placed, g.running.len(), i as u32))
            .collect();
        order.sort_unstable();
        let chosen: Vec<u32> = order.into_iter().take(n).map(|(_, _, i)| i).collect();
        for g in &chosen {
            self.gpus[*g as usize].placed += 1;
        }
        chosen
    }

    /// The GPUs a program's `CUDA_VISIBLE_DEVICES` entries name, as the driver reads
    /// them: a node index or a UUID (`GPU-` and a unique prefix of the rest) each; the
    /// first entry that names none, or one already named, ends the list. `Err` when no
    /// GPU is left, or a UUID is asked of a daemon that knows none.
    pub(super) fn visible_gpus(&self, entries: &[String]) -> Result<Vec<u32>, String> {
        let mut within: Vec<u32> = Vec::new();
        for entry in entries.iter().map(|e| e.trim()) {
            let found = if entry.starts_with("GPU-") && entry.len() > 4 {
                if self.gpus.iter().all(|g| g.uuid.is_none()) {
                    return Err(format!(
                        "CUDA_VISIBLE_DEVICES names {entry}, but this daemon's GPUs have no \
                         UUIDs (they are emulated): name them by index"
                    ));
                }
                let mut matches = self
                    .gpus
                    .iter()
                    .enumerate()
                    .filter(|(_, g)| g.uuid.as_deref().is_some_and(|u| u.starts_with(entry)));
                match (matches.next(), matches.next()) {
                    (Some((i, _)), None) => Some(i as u32),
                    _ => None,
                }
            } else {
                entry.parse::<u32>().ok().filter(|i| (*i as usize) < self.gpus.len())
            };
            match found {
                Some(g) if !within.contains(&g) => within.push(g),
                _ => break,
            }
        }
        if within.is_empty() {
            return Err(format!(
                "CUDA_VISIBLE_DEVICES ({}) names none of this node's {} GPUs",
                entries.join(","),
                self.gpus.len()
            ));
        }
        Ok(within)
    }
}
