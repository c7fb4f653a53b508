//! Opening a ledger file: what it holds, attaching to it (checked against the live
//! clients' records), and the integrity check's repair from those records.

use super::*;

/// What the file at the path holds.
pub(super) enum Found {
    Sound(Header, State),
    OtherVersion(u32),
    /// Zeroed, truncated, or a ledger whose header or both copies are damaged.
    Damaged,
    /// Bytes that are not a ledger's.
    Foreign,
}

pub(super) fn examine(f: &LedgerFile, guess: usize) -> Found {
    match f.read_state(guess) {
        Some((header, Ok(state))) => return Found::Sound(header, state),
        Some((_, Err(CopyFault::OtherVersion(v)))) => return Found::OtherVersion(v),
        Some((header, Err(_))) if header.magic == MAGIC => return Found::Damaged,
        _ => {}
    }
    let first = f.prefix(PAGE as usize);
    // a layout-1 file began with its futex word and checksums, its magic at 16
    if first.len() >= 28 && first[16..24] == MAGIC {
        let v = u32::from_le_bytes(first[24..28].try_into().expect("4 bytes"));
        if v != VERSION && v != 0 {
            return Found::OtherVersion(v);
        }
    }
    match f.header() {
        Some(h) if h.magic == MAGIC && h.version != VERSION => Found::OtherVersion(h.version),
        Some(h) if h.magic == MAGIC => Found::Damaged,
        _ if first.iter().all(|&b| b == 0) => Found::Damaged,
        _ => Found::Foreign,
    }
}

/// A ledger rebuilt from the live clients' records.
pub(super) fn rebuild(shape: &LedgerShape, live: &[LiveRecord]) -> (State, u64) {
    let mut state = State::fresh(&shape.gpus, shape.policy, shape.max_holders, shape.max_waiters);
    // tickets still held by waiting threads must not be handed out again
    state.next_seq = now_ns();
    let mut dropped = 0u64;
    for r in live {
        for (gpu, &bytes) in r.body.held.iter().enumerate().take(shape.gpus.len()) {
            if bytes == 0 {
                continue;
            }
            let row = &mut state.gpus[gpu];
            if row.used + bytes <= row.total && state.holders.len() < shape.max_holders as usize {
                row.used += bytes;
                state.holders.push(HolderRow {
                    client: r.body.client,
                    gpu: gpu as u32,
                    pid: r.body.pid,
                    bytes,
                });
            } else {
                dropped += bytes;
            }
        }
    }
    (state, dropped)
}

/// Open (creating it if missing) the ledger at `path`, locked, and its state — checked
/// against the live clients' records: a state that lacks memory they hold (an old copy,
/// or an empty ledger put in the file's place) is rebuilt from them. `seen`: the newest
/// generation the caller knew of (a rebuilt or new file's generation goes past it).
pub(super) fn attach(
    path: &Path,
    records_dir: &Path,
    access: Access,
    fallback: Fallback<'_>,
    seen: Option<u32>,
) -> Result<(LedgerFile, Header, State), LedgerError> {
    let past =
        |g: u32| seen.map_or(g, |s| if older(g, s) { s } else { g }).wrapping_add(GENERATION_JUMP);
    for _ in 0..16 {
        let file = match LedgerFile::open(path, access).map_err(|e| file_error(path, e))? {
            Opened::File(f) => f,
            Opened::Missing => {
                records::ensure_dir(records_dir, access).map_err(|e| dir_error(records_dir, e))?;
                // a ledger unlinked under live clients is rebuilt from their records
                let live = records::scan(records_dir).live;
                let shape = live.first().map(|r| r.body.shape()).map_or_else(fallback, Ok)?;
                let (mut state, dropped) = rebuild(&shape, &live);
                state.generation = past(0);
                let header = Header::new(shape.max_holders, shape.max_waiters);
                if !live.is_empty() {
                    tracing::warn!(path = %path.display(), clients = live.len(), dropped, "ledger file missing: recreated from the live clients' records");
                }
                let created = LedgerFile::create(path, access, &header, &state)
                    .map_err(|e| file_error(path, e))?;
                if created {
                    tracing::info!(path = %path.display(), gpus = ?shape.gpus, "created ledger");
                }
                continue; // open what is there now (ours, or one that appeared first)
            }
        };
        file.lock().map_err(|source| LedgerError::Io {
            what: "locking",
            path: path.into(),
            source,
        })?;
        if !file.is_at(path) {
            file.unlock();
            continue; // replaced between open and lock
        }
        let found = examine(&file, 4096);
        let got = match found {
            // checked on every open (a scan of the records directory: opens are rare
            // beside reservations, and an old copy can be of any age)
            Found::Sound(header, state) => {
                let live = records::scan(records_dir).live;
                if behind_records(&state, &live) {
                    tracing::error!(path = %path.display(), clients = live.len(), "the ledger file lacks memory live clients hold (an old copy, or another ledger put in its place): rebuilding it from their records");
                    repair(&file, path, live, fallback, past(state.generation))
                } else {
                    Ok((header, state))
                }
            }
            Found::OtherVersion(found) => {
                Err(LedgerError::Incompatible { path: path.into(), found })
            }
            Found::Foreign => {
                // only a ledger's own damage may be repaired: with no live client's
                // record of one, these bytes are someone else's file
                let dir_ok = std::fs::symlink_metadata(records_dir).is_ok_and(|m| {
                    !m.file_type().is_symlink() && access.refusal(&m, true).is_none()
                });
                let live = if dir_ok { records::scan(records_dir).live } else { Vec::new() };
                if !live.is_empty() {
                    repair(&file, path, live, fallback, past(0))
                } else {
                    Err(LedgerError::NotALedger { path: path.into() })
                }
            }
            Found::Damaged => {
                records::ensure_dir(records_dir, access).map_err(|e| dir_error(records_dir, e))?;
                repair(&file, path, records::scan(records_dir).live, fallback, past(0))
            }
        };
        return match got {
            Ok((header, state)) => Ok((file, header, state)),
            Err(e) => {
                file.unlock();
                Err(e)
            }
        };
    }
    Err(LedgerError::Io {
        what: "opening",
        path: path.into(),
        source: std::io::Error::other("the ledger file keeps being replaced"),
    })
}

/// The integrity check's last resort: rebuild a damaged ledger from the live clients'
/// records (or, if none is alive, nothing is held and it starts afresh from `fallback`).
/// Call with the file locked.
pub(super) fn repair(
    file: &LedgerFile,
    path: &Path,
    live: Vec<LiveRecord>,
    fallback: Fallback<'_>,
    generation: u32,
) -> Result<(Header, State), LedgerError> {
    let shape = match live.first() {
        Some(r) => r.body.shape(),
        None => fallback().map_err(|e| LedgerError::Unrepairable {
            path: path.into(),
            reason: format!("no live client has a record of it, and {e}"),
        })?,
    };
    let (mut state, dropped) = rebuild(&shape, &live);
    state.generation = generation;
    let mut header = Header::new(shape.max_holders, shape.max_waiters);
    header.wake = file.wake_value().wrapping_add(1);
    let io = |source| LedgerError::Io { what: "repairing", path: path.into(), source };
    file.write_state(&header, &state).map_err(io)?;
    file.write_header(&header).map_err(io)?;
    if file.len() < header.file_size() {
        // a truncated file: restore its full length (and the futex word's page)
        let f = std::fs::OpenOptions::new().write(true).open(path).map_err(io)?;
        f.set_len(header.file_size()).map_err(io)?;
    }
    if live.is_empty() {
        tracing::warn!(path = %path.display(), "ledger damaged and no live client held memory: started afresh");
    } else {
        tracing::error!(
            path = %path.display(),
            clients = live.len(),
            dropped_bytes = dropped,
            "ledger damaged: rebuilt from the records of {} live clients; waiting requests re-queue",
            live.len()
        );
    }
    Ok((header, state))
}

pub(super) fn resolve_gpus(source: &GpuSource) -> Result<Vec<u64>, LedgerError> {
    let gpus = match source {
        GpuSource::Explicit(g) => g.iter().map(|b| b.0).collect::<Vec<_>>(),
        GpuSource::Nvml => crate::nvml::gpu_memory().map_err(LedgerError::NoGpus)?,
    };
    if gpus.is_empty() || gpus.len() > MAX_GPUS || gpus.contains(&0) {
        return Err(LedgerError::NoGpus(format!(
            "need 1..={MAX_GPUS} GPUs of non-zero memory, got {gpus:?}"
        )));
    }
    Ok(gpus)
}
