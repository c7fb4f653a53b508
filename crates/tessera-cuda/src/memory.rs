//! A tenant's memory: every allocation is reserved in the node's ledger through the
//! daemon before the real one (from the process's lease when it can be, without asking),
//! and returned after the free; the daemon's answers, and the book of what is allocated.

use crate::log::{complain, complain_once, line};
use crate::tenant::{Allocation, LEASE_CHUNK, Tenant};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_client::proto::ErrorCode;
use tessera_client::{Client, ClientError};
use tessera_driver::{CuResult, status};

/// Memory connections a process keeps open while idle (more are opened while more of
/// its threads wait for memory at once, and closed after).
const IDLE_MEMORY_CONNECTIONS: usize = 2;

/// Whether an allocation over the program's own limit was reported.
static OVER_LIMIT_REPORTED: AtomicBool = AtomicBool::new(false);

impl Tenant {
    /// Per node GPU, the fraction of the daemon's last busy window
    /// (`proto::BUSY_WINDOW_MS`) that GPU ran this tenant's work, as the daemon charged
    /// it; GPUs it was not charged on are absent.
    pub fn recent_busy(&self) -> Result<HashMap<u32, f64>, CuResult> {
        let filter = tessera_client::StatusFilter { tenant: Some(self.id()), ..Default::default() };
        let report = self.desk(|c| c.status_where(filter)).map_err(|e| {
            complain(&format!("cannot ask tesserad for this tenant's GPU time: {e}"));
            status::UNKNOWN
        })?;
        Ok(report
            .tenants
            .iter()
            .filter(|t| t.tenant == self.id())
            .flat_map(|t| t.gpu_busy.iter().map(|b| (b.gpu, b.busy)))
            .collect())
    }

    /// A memory request on a memory connection, connecting (again) when needed: a
    /// control connection the daemon closed while it was idle is opened anew once; a
    /// daemon that restarted is asked to take the program back first (`readopt`).
    pub(crate) fn desk<R>(
        &self,
        call: impl Fn(&mut Client) -> Result<R, ClientError>,
    ) -> Result<R, ClientError> {
        let stale = self.session().id;
        match self.desk_once(&call) {
            // the daemon went away, or the one at the socket does not know this tenant:
            // if it is a daemon that restarted, it takes the program back (with its
            // reservations) and the request goes again, under the new tenant's id
            Err(
                e @ (ClientError::Connect(_)
                | ClientError::DaemonGone
                | ClientError::Refused { code: ErrorCode::UnknownTenant, .. }),
            ) => match self.readopt(stale) {
                Ok(()) => self.desk_once(&call),
                Err(_) => Err(e),
            },
            other => other,
        }
    }

    /// [`Tenant::desk`] without re-adoption.
    pub(crate) fn desk_once<R>(
        &self,
        call: impl Fn(&mut Client) -> Result<R, ClientError>,
    ) -> Result<R, ClientError> {
        for attempt in 0..2 {
            let idle = self.memory.lock().ok().and_then(|mut pool| pool.pop());
            let mut conn = match idle {
                Some(c) => c,
                None => Client::connect_control(&self.socket)?,
            };
            match call(&mut conn) {
                // closed by the daemon while idle: once more on a new connection
                Err(ClientError::Connect(_) | ClientError::DaemonGone) if attempt == 0 => {}
                other => {
                    if let Ok(mut pool) = self.memory.lock()
                        && pool.len() < IDLE_MEMORY_CONNECTIONS
                    {
                        pool.push(conn);
                    }
                    return other;
                }
            }
        }
        Err(ClientError::DaemonGone)
    }

    /// Reserve `bytes` on `gpu` before the real allocation: within the tenant's limit,
    /// then in the node's ledger through the daemon (waiting as the settings say).
    /// `Err` is the CUDA error the application gets.
    pub fn reserve(&self, gpu: u32, bytes: u64) -> Result<(), CuResult> {
        {
            let mut book = self.book.lock().map_err(|_| status::UNKNOWN)?;
            if let Some(limit) = self.limit
                && book.used.saturating_add(bytes) > limit
            {
                complain_once(
                    &OVER_LIMIT_REPORTED,
                    &format!(
                        "an allocation of {} MiB is refused: this program's limit is {} MiB (TESSERA_MEMORY) and it holds {} MiB (said once)",
                        bytes >> 20,
                        limit >> 20,
                        book.used >> 20
                    ),
                );
                return Err(status::OUT_OF_MEMORY);
            }
            book.used += bytes;
        }
        // the fast path: from this process's lease on the GPU, without asking anyone
        if self.session().region.lease_take(self.node(gpu), bytes) {
            return Ok(());
        }
        // what is left of the lease counts towards it; the rest is asked of the daemon:
        // with one more chunk of lease if that fits at once (within the limit), else
        // exactly what is missing, waiting as the settings say
        let have = self.session().region.lease_reclaim(self.node(gpu));
        if have >= bytes {
            // another thread returned memory meanwhile
            self.return_to_lease(gpu, have - bytes);
            return Ok(());
        }
        let missing = bytes - have;
        let room = self.limit.map_or(u64::MAX, |limit| {
            limit.saturating_sub(self.book.lock().map_or(limit, |b| b.used))
        });
        let chunk = LEASE_CHUNK.min(room);
        if chunk > 0
            && self
                .desk(|c| {
                    c.reserve(
                        self.id(),
                        self.node(gpu),
                        missing + chunk,
                        Some(Duration::ZERO),
                        true,
                    )
                })
                .is_ok()
        {
            self.return_to_lease(gpu, chunk);
            self.keep_record();
            return Ok(());
        }
        match self.desk(|c| c.reserve(self.id(), self.node(gpu), missing, self.wait, false)) {
            Ok(()) => {
                self.keep_record();
                Ok(())
            }
            Err(e) => {
                self.return_to_lease(gpu, have);
                if let Ok(mut book) = self.book.lock() {
                    book.used -= bytes;
                }
                match &e {
                    // not fitting now is the answer the program expects; a deadlock,
                    // or a request that only its own memory stands in the way of, is
                    // not, so it is told why
                    ClientError::Refused { code: ErrorCode::NoMemory, message }
                        if message.contains("deadlock")
                            || message.contains("can never be granted") =>
                    {
                        complain(&format!("allocation refused: {message}"));
                    }
                    ClientError::Refused { code: ErrorCode::NoMemory, .. } => {}
                    other => complain(&format!("the memory reservation failed: {other}")),
                }
                Err(status::OUT_OF_MEMORY)
            }
        }
    }

    /// Make sure the memory this process's context takes on `gpu` is reserved (once per
    /// GPU; the daemon says how much): a real context takes a few hundred MiB before
    /// the first allocation, which admission must not promise to anyone else.
    #[inline]
    pub fn reserve_context(&self, gpu: u32) -> Result<(), CuResult> {
        if gpu < 64 && self.contexts_done.load(Ordering::Relaxed) & (1 << gpu) != 0 {
            return Ok(());
        }
        self.reserve_context_slow(gpu)
    }

    /// The daemon reserves a context once per tenant and GPU (a second request reserves
    /// nothing), so threads racing here need no lock of their own.
    #[cold]
    fn reserve_context_slow(&self, gpu: u32) -> Result<(), CuResult> {
        match self.desk(|c| c.reserve_context(self.id(), self.node(gpu), self.wait)) {
            Ok(bytes) => {
                line(format_args!("context on {gpu}: {bytes} reserved"));
                self.keep_record();
                if gpu < 64 {
                    self.contexts_done.fetch_or(1 << gpu, Ordering::Relaxed);
                }
                Ok(())
            }
            Err(e) => {
                complain(&format!("the memory for a context on GPU {gpu} was refused: {e}"));
                Err(status::OUT_OF_MEMORY)
            }
        }
    }

    /// Keep the ledger record this tenant's reservations are held under open, once it
    /// holds any: they then outlive a crash of the daemon and end with this process
    /// (a restarted daemon adopts them, `readopt`). A daemon that cannot hand it over
    /// only loses that (logged).
    fn keep_record(&self) {
        if self.record_refused.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut kept) = self.record.lock() else { return };
        if kept.is_some() {
            return;
        }
        match self.desk_once(|c| c.keep_ledger_record(self.id())) {
            Ok((client, file)) => {
                crate::real::watch_record(std::os::fd::AsRawFd::as_raw_fd(&file));
                line(format_args!("ledger record {client} kept"));
                *kept = Some((client, file));
            }
            Err(e) => {
                if matches!(e, ClientError::Refused { code: ErrorCode::BadRequest, .. }) {
                    self.record_refused.store(true, Ordering::Relaxed);
                }
                line(format_args!("the ledger record was not handed over: {e}"));
            }
        }
    }

    /// Bytes allocated now, per driver ordinal.
    pub(crate) fn allocated_per_gpu(&self) -> HashMap<u32, u64> {
        let mut per_gpu = HashMap::new();
        if let Ok(book) = self.book.lock() {
            for (gpu, bytes) in book.allocations.values() {
                *per_gpu.entry(*gpu).or_default() += bytes;
            }
        }
        per_gpu
    }

    /// The real allocation did not happen: undo [`Tenant::reserve`].
    pub fn unreserve(&self, gpu: u32, bytes: u64) {
        if let Ok(mut book) = self.book.lock() {
            book.used -= bytes;
        }
        self.return_to_lease(gpu, bytes);
    }

    /// Memory no longer allocated goes back to the GPU's lease; beyond one chunk
    /// unused, it goes back to the daemon.
    fn return_to_lease(&self, gpu: u32, bytes: u64) {
        let excess = self.session().region.lease_return(self.node(gpu), bytes, LEASE_CHUNK);
        if excess > 0 {
            self.give_back_memory(gpu, excess);
        }
    }

    /// Return a reservation to the daemon; a failure (the daemon is gone, and with it
    /// every reservation) is logged only.
    fn give_back_memory(&self, gpu: u32, bytes: u64) {
        if let Err(e) = self.desk(|c| c.unreserve(self.id(), self.node(gpu), bytes)) {
            line(format_args!("unreserve {bytes} on {gpu} failed: {e}"));
        }
    }

    /// The real allocation `what` succeeded.
    pub fn record(&self, what: Allocation, gpu: u32, bytes: u64) {
        if let Ok(mut book) = self.book.lock() {
            book.allocations.insert(what, (gpu, bytes));
        }
    }

    /// `what` was freed: return its reservation. Allocations the interposer did not
    /// make change nothing.
    pub fn release(&self, what: Allocation) {
        let freed = self.book.lock().ok().and_then(|mut b| {
            let (gpu, bytes) = b.allocations.remove(&what)?;
            b.used -= bytes;
            Some((gpu, bytes))
        });
        if let Some((gpu, bytes)) = freed {
            self.return_to_lease(gpu, bytes);
        }
    }

    /// Move every reservation held on `from` to `to` (a migration, DCUDA §3.4): the
    /// target is reserved first, so that on a refusal nothing changes and the program
    /// stays where it is; then the source is returned. The bytes moved, or the error.
    pub fn move_reservations(&self, from: u32, to: u32) -> Result<u64, CuResult> {
        let bytes: u64 = {
            let book = self.book.lock().map_err(|_| status::UNKNOWN)?;
            book.allocations.values().filter(|(g, _)| *g == from).map(|(_, b)| b).sum()
        };
        if bytes > 0 {
            self.desk(|c| c.reserve(self.id(), self.node(to), bytes, Some(Duration::ZERO), false))
                .map_err(|_| status::OUT_OF_MEMORY)?;
            self.give_back_memory(from, bytes);
        }
        if let Ok(mut book) = self.book.lock() {
            for (gpu, _) in book.allocations.values_mut() {
                if *gpu == from {
                    *gpu = to;
                }
            }
        }
        Ok(bytes)
    }

    /// (free, total) as the tenant should see them on `gpu`: its limit and its use
    /// when it has a limit, else the GPU's capacity and what the ledger has not granted.
    pub fn memory_info(&self, gpu: u32) -> Option<(u64, u64)> {
        let used = self.book.lock().ok()?.used;
        match self.limit {
            Some(limit) => Some((limit.saturating_sub(used), limit)),
            // what the ledger has not granted, and this process's own unused lease
            None => {
                self.desk(|c| c.memory_info(self.id(), self.node(gpu))).ok().map(|(free, total)| {
                    ((free + self.session().region.lease_unused(self.node(gpu))).min(total), total)
                })
            }
        }
    }
}
