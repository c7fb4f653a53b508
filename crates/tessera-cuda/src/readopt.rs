//! After the daemon went away — killed, crashed, restarted by systemd's
//! `Restart=on-failure` — the program goes on: its memory stayed reserved in the node's
//! ledger (this process keeps the ledger record the daemon held its reservations under
//! open, so the ledger counts them while the program lives), and once a daemon is back
//! at the socket the program registers with it again, on the same GPUs, and has it adopt
//! those reservations (`Adopt`, granted only to the process the record names). Nothing
//! is lost and nothing is granted twice: no daemon ever grants the memory a live
//! program's record holds.

use crate::log::{complain, line};
use crate::tenant::{LEASE_CHUNK, Session, Tenant};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_client::Client;
use tessera_client::region::epoch_ns;

/// How often a program whose daemon is gone tries again to register with a new one.
pub const READOPT_EVERY: Duration = Duration::from_millis(200);

/// How often the gate's watcher looks whether the daemon is gone (a `recv` peek).
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// When (ns since the epoch) the watcher last looked.
static LOOKED: AtomicU64 = AtomicU64::new(0);

impl Tenant {
    /// For the gate's watcher: at most every [`LOOK_EVERY`], whether the daemon went
    /// away, and if so try to be re-adopted by one at the socket — so that an idle
    /// program is back in `tessera status` soon after a restart, not at its next call.
    pub(crate) fn readopt_if_gone(&self) {
        let now = epoch_ns();
        let last = LOOKED.load(Ordering::Relaxed);
        if now.saturating_sub(last) < LOOK_EVERY.as_nanos() as u64
            || LOOKED.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        let stale = self.session().id;
        if self.daemon_gone() {
            let _ = self.readopt(stale);
        }
    }

    /// Whether the current session's daemon is gone (its connection closed, or its
    /// region marked closed by a daemon that stopped).
    fn daemon_gone(&self) -> bool {
        let session = self.session();
        session.region.is_closed() || session.client.lock().is_ok_and(|c| c.daemon_gone())
    }

    /// Be taken back by the daemon now at the socket, if the one of session `stale` is
    /// gone: register anew on the same GPUs, have it adopt this program's reservations,
    /// and go on with the new session. `Ok` once re-adopted (by this call or another
    /// thread's); `Err`: why not (no daemon yet, tried within [`READOPT_EVERY`], or the
    /// daemon is still there).
    pub(crate) fn readopt(&self, stale: u64) -> Result<(), String> {
        let mut last = self.readopting.lock().map_err(|_| "poisoned".to_string())?;
        if self.session().id != stale {
            return Ok(());
        }
        if !self.daemon_gone() {
            return Err("the daemon is still there".into());
        }
        // a coscheduling boost of the daemon that is gone ends with it
        crate::real::put_back_raised();
        if last.is_some_and(|t| t.elapsed() < READOPT_EVERY) {
            return Err("tried a moment ago".into());
        }
        *last = Some(Instant::now());
        let nodes = self.node_list();
        // on the same GPUs (a migratable program: anywhere, as the first time; it
        // follows its slices where the daemon grants them)
        let within = (!self.migratable).then(|| nodes.iter().map(u32::to_string).collect());
        let mut client = Client::connect(&self.socket).map_err(|e| e.to_string())?;
        let placement = client
            .register_placed_as(self.options, self.gpus_asked, within, self.migratable)
            .map_err(|e| format!("registering again: {e}"))?;
        let (mut placed, mut wanted) = (placement.gpus.clone(), nodes.clone());
        placed.sort_unstable();
        wanted.sort_unstable();
        if placed != wanted && !self.migratable {
            complain(&format!(
                "the restarted tesserad placed this program on GPU(s) {:?}, but it runs on {nodes:?}: not re-adopted",
                placement.gpus
            ));
            return Err("placed elsewhere".into());
        }
        let region = client.region().ok_or("the daemon gave no shared region")?;
        let mut memory = Client::connect_control(&self.socket).map_err(|e| e.to_string())?;
        let old = self.session();
        // what the old daemon leased this process and it has not used: the ledger holds
        // it for this program, so it moves to the new region's lease words
        let leased: Vec<(u32, u64)> =
            nodes.iter().map(|n| (*n, old.region.lease_reclaim(*n))).collect();
        let record = self.record.lock().ok().and_then(|r| r.as_ref().map(|(c, _)| *c));
        let adopted = match record {
            Some(client_id) => {
                let contexts = (0..64u32)
                    .filter(|g| self.contexts_done.load(Ordering::Relaxed) & (1 << g) != 0)
                    .map(|g| self.node(g))
                    .collect();
                memory.adopt(placement.tenant, client_id, contexts).map_err(|e| e.to_string())
            }
            None => Err("this program kept no ledger record".into()),
        };
        crate::real::watch_fork(client.socket_fd());
        self.record_refused.store(false, Ordering::Relaxed);
        self.session.store(Arc::new(Session {
            client: Mutex::new(client),
            id: placement.tenant,
            region: region.clone(),
            outstanding: Mutex::new(None),
        }));
        self.fast_region.store(crate::tenant::publish_region(&region), Ordering::Release);
        // the old daemon's connections
        if let Ok(mut pool) = self.memory.lock() {
            pool.clear();
        }
        match adopted {
            Ok(held) => {
                for (node, bytes) in leased {
                    let excess = region.lease_return(node, bytes, LEASE_CHUNK);
                    if excess > 0 {
                        let _ = memory.unreserve(placement.tenant, node, excess);
                    }
                }
                let mib: u64 = held.iter().map(|(_, b)| b).sum::<u64>() >> 20;
                complain(&format!(
                    "tesserad restarted: this program is its tenant {} now, with the {mib} MiB it held",
                    placement.tenant
                ));
            }
            Err(why) => {
                // the reservations are gone (a daemon that stopped in order released
                // them): what is allocated is reserved again, as far as it fits
                line(format_args!("no reservations adopted: {why}"));
                self.reserve_again(&mut memory, placement.tenant);
            }
        }
        Ok(())
    }

    /// Reserve again, without waiting, what this process has allocated (a new daemon
    /// that could adopt nothing): what does not fit is said, since the ledger no longer
    /// counts it.
    fn reserve_again(&self, memory: &mut Client, tenant: u64) {
        if let Ok(mut kept) = self.record.lock() {
            *kept = None;
        }
        self.contexts_done.store(0, Ordering::Relaxed);
        let per_gpu = self.allocated_per_gpu();
        let mut lost = Vec::new();
        for (gpu, bytes) in per_gpu {
            let node = self.node(gpu);
            if memory.reserve(tenant, node, bytes, Some(Duration::ZERO), false).is_err() {
                lost.push((node, bytes >> 20));
            }
        }
        match memory.keep_ledger_record(tenant) {
            Ok((client, file)) => {
                crate::real::watch_record(std::os::fd::AsRawFd::as_raw_fd(&file));
                if let Ok(mut kept) = self.record.lock() {
                    *kept = Some((client, file));
                }
            }
            Err(e) => line(format_args!("the ledger record was not handed over: {e}")),
        }
        if lost.is_empty() {
            complain(&format!(
                "tesserad restarted: this program is its tenant {tenant} now, its allocations reserved again"
            ));
        } else {
            complain(&format!(
                "tesserad restarted and no longer counted this program's memory; (GPU, MiB) {lost:?} could not be reserved again"
            ));
        }
    }
}
