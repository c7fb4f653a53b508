//! Each client's own record of what it holds, in a small file beside the ledger
//! (`<ledger>.clients/<pid>-<start time>`). If both copies of the ledger are ever
//! corrupt, the ledger is rebuilt from the records of the processes still alive
//! (schedGPU's integrity check, extended: the paper re-initialised empty).

use crate::layout::MAX_GPUS;
use crate::process::ProcessId;
use memmap2::MmapMut;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

const RECORD_SIZE: usize = MAX_GPUS * 8;

/// The directory of client records for the ledger at `ledger`.
pub(crate) fn dir_for(ledger: &Path) -> PathBuf {
    let mut name = ledger.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".clients");
    ledger.with_file_name(name)
}

/// A client: a process and one of its ledger handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ClientId {
    pub(crate) process: ProcessId,
    pub(crate) handle: u32,
}

/// The record file of handle `handle` of process `id`.
pub(crate) fn file_for(dir: &Path, id: ProcessId, handle: u32) -> PathBuf {
    dir.join(format!("{}-{}-{}", id.pid, id.start_time, handle))
}

/// This process's record, mapped: per GPU, the bytes it holds.
#[derive(Debug)]
pub(crate) struct ClientRecord {
    map: MmapMut,
}

impl ClientRecord {
    /// Open (or create) this process's record.
    pub(crate) fn open(dir: &Path, id: ProcessId, handle: u32) -> std::io::Result<ClientRecord> {
        fs::create_dir_all(dir)?;
        let path = file_for(dir, id, handle);
        let file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        if file.metadata()?.len() < RECORD_SIZE as u64 {
            file.set_len(RECORD_SIZE as u64)?;
        }
        let map = map(&file)?;
        Ok(ClientRecord { map })
    }

    /// Record that this process now holds `bytes` on `gpu`.
    pub(crate) fn set(&mut self, gpu: usize, bytes: u64) {
        self.map[gpu * 8..gpu * 8 + 8].copy_from_slice(&bytes.to_le_bytes());
    }
}

#[allow(unsafe_code)]
fn map(file: &fs::File) -> std::io::Result<MmapMut> {
    // SAFETY: a regular file of RECORD_SIZE bytes private to this process by naming
    // convention (pid + start time); others only read it during recovery, under the
    // ledger lock, and any bytes they read are valid u64s.
    unsafe { MmapMut::map_mut(file) }
}

/// The holdings of every live client with a record: (client, per-GPU bytes). Records
/// of dead processes are deleted.
pub(crate) fn live_records(dir: &Path) -> Vec<(ClientId, [u64; MAX_GPUS])> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let mut parts = name.splitn(3, '-');
        let (Some(Ok(pid)), Some(Ok(start_time)), Some(Ok(handle))) = (
            parts.next().map(str::parse),
            parts.next().map(str::parse),
            parts.next().map(str::parse),
        ) else {
            continue;
        };
        let id = ClientId { process: ProcessId { pid, start_time }, handle };
        if !id.process.is_alive() {
            let _ = fs::remove_file(entry.path());
            continue;
        }
        let Ok(bytes) = fs::read(entry.path()) else { continue };
        let mut held = [0u64; MAX_GPUS];
        for (g, chunk) in bytes.chunks_exact(8).take(MAX_GPUS).enumerate() {
            held[g] = u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
        }
        out.push((id, held));
    }
    out.sort_by_key(|(id, _)| *id);
    out
}
