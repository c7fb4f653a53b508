//! The ledger with its file locked: the state read, changed and committed, the sanity
//! check's sweep of dead clients, and waking waiters once the lock is released.

use super::*;

/// What the caller of [`Ledger::locked`] finds: the state, with the file locked.
pub(super) struct Locked<'a> {
    pub(super) ledger: &'a Ledger,
    pub(super) local: MutexGuard<'a, Local>,
    pub(super) state: State,
    /// Memory was granted to waiters: wake them once the lock is released.
    pub(super) wake: bool,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.local.file.unlock();
        if self.wake {
            let _ =
                futex::wake(self.local.file.wake_word(), futex::Flags::empty(), i32::MAX as u32);
        }
    }
}

impl Locked<'_> {
    pub(super) fn commit(&mut self) -> Result<(), LedgerError> {
        if self.wake {
            self.local.file.bump_wake();
        }
        self.state.generation = self.state.generation.wrapping_add(1);
        let header = self.local.header;
        self.local.file.write_state(&header, &self.state).map_err(|source| LedgerError::Io {
            what: "writing",
            path: self.ledger.path.clone(),
            source,
        })?;
        self.local.seen = self.state.generation;
        Ok(())
    }

    pub(super) fn holder_index(&self, gpu: u32, client: u64) -> Option<usize> {
        self.state.holders.iter().position(|h| h.gpu == gpu && h.client == client)
    }

    pub(super) fn add_holding(
        &mut self,
        gpu: u32,
        client: u64,
        pid: u32,
        bytes: u64,
    ) -> Result<u64, LedgerError> {
        let i = match self.holder_index(gpu, client) {
            Some(i) => i,
            None => {
                if self.state.holders.len() >= self.state.max_holders as usize {
                    return Err(LedgerError::TableFull {
                        table: "holder",
                        capacity: self.state.max_holders,
                    });
                }
                self.state.holders.push(HolderRow { client, gpu, pid, bytes: 0 });
                self.state.holders.len() - 1
            }
        };
        self.state.holders[i].bytes += bytes;
        self.state.gpus[gpu as usize].used += bytes;
        Ok(self.state.holders[i].bytes)
    }

    /// The sanity check (schedGPU §3): release what dead clients hold, drop their
    /// waiting requests and their records; then, if anything was released, let the
    /// notification policy grant it on every GPU. Returns whether the ledger changed
    /// (the caller commits).
    pub(super) fn sweep(&mut self) -> bool {
        let me = self.ledger.record.client;
        let dir = self.ledger.records_dir.clone();
        let mut verdict: HashMap<u64, bool> = HashMap::new();
        let liveness = &mut self.local.liveness;
        let mut alive =
            |id: u64| id == me || *verdict.entry(id).or_insert_with(|| liveness.is_alive(&dir, id));
        let (holders, waiters) = (self.state.holders.len(), self.state.waiters.len());
        let gpus = &mut self.state.gpus;
        self.state.holders.retain(|h| {
            let keep = alive(h.client);
            if !keep {
                tracing::info!(
                    client = h.client,
                    pid = h.pid,
                    gpu = h.gpu,
                    bytes = h.bytes,
                    "released memory of a dead client"
                );
                gpus[h.gpu as usize].used -= h.bytes;
            }
            keep
        });
        self.state.waiters.retain(|w| alive(w.client));
        for (&id, &live) in &verdict {
            if !live {
                let _ = std::fs::remove_file(dir.join(id.to_string()));
            }
        }
        let present: std::collections::HashSet<u64> = self
            .state
            .holders
            .iter()
            .map(|h| h.client)
            .chain(self.state.waiters.iter().map(|w| w.client))
            .collect();
        self.local.liveness.retain(|id| present.contains(&id));
        self.state.last_sweep_ns = now_ns();
        let changed = holders != self.state.holders.len() || waiters != self.state.waiters.len();
        if changed {
            self.notify_all();
        }
        changed
    }

    /// Grant memory on `gpu` to waiters as the notification policy decides.
    pub(super) fn notify(&mut self, gpu: u32) {
        let row = self.state.gpus[gpu as usize];
        let idx: Vec<usize> = (0..self.state.waiters.len())
            .filter(|&i| {
                let w = &self.state.waiters[i];
                w.granted == 0 && w.gpu == gpu
            })
            .collect();
        if idx.is_empty() {
            return;
        }
        let views: Vec<Waiter> = idx
            .iter()
            .map(|&i| {
                let w = &self.state.waiters[i];
                Waiter { bytes: Bytes(w.bytes), priority: w.priority.min(255) as u8, seq: w.seq }
            })
            .collect();
        let policy = policy_from_code(self.state.policy);
        for k in select_grants(policy, Bytes(row.total - row.used), &views) {
            let w = self.state.waiters[idx[k]];
            if self.add_holding(gpu, w.client, w.pid, w.bytes).is_ok() {
                self.state.waiters[idx[k]].granted = 1;
                self.wake = true;
            }
        }
    }

    pub(super) fn notify_all(&mut self) {
        for g in 0..self.state.gpus.len() as u32 {
            self.notify(g);
        }
    }

    pub(super) fn check_gpu(&self, gpu: u32) -> Result<GpuRow, LedgerError> {
        self.state
            .gpus
            .get(gpu as usize)
            .copied()
            .ok_or(LedgerError::NoSuchGpu { gpu, count: self.state.gpus.len() as u32 })
    }

    pub(super) fn status(&self) -> LedgerStatus {
        let s = &self.state;
        LedgerStatus {
            policy: policy_from_code(s.policy),
            gpus: (0..s.gpus.len())
                .map(|g| GpuStatus {
                    total: s.gpus[g].total,
                    used: s.gpus[g].used,
                    waiting: s
                        .waiters
                        .iter()
                        .filter(|w| w.granted == 0 && w.gpu as usize == g)
                        .count(),
                })
                .collect(),
            holdings: s
                .holders
                .iter()
                .map(|h| Holding { client: h.client, pid: h.pid, gpu: h.gpu, bytes: h.bytes })
                .collect(),
            max_holders: s.max_holders,
            max_waiters: s.max_waiters,
        }
    }
}
