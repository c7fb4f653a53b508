//! The ledger file: opened without following symlinks and checked against the ledger's
//! [`Access`]; created atomically (written under a temporary name, then renamed into
//! place without replacing anything), so that no one ever sees a half-made ledger and a
//! failed creation leaves nothing behind.
//!
//! The state is read and written with `pread`/`pwrite`, never through a mapping: a
//! file truncated under a running client then reads short (and is repaired) instead of
//! killing the client with `SIGBUS`. The only mapping is of the header page, and only
//! its address is used — as the futex word waiters sleep on — never dereferenced by
//! this process: the kernel answers `EFAULT` if that page is gone. This module holds
//! the ledger's only `unsafe` outside the C ABI.
#![allow(unsafe_code)]

use crate::access::Access;
use crate::layout::{COPIES, CopyFault, CopyHead, Header, PAGE, State, WAKE_OFFSET};
use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{FlockOperation, flock};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::AtomicU32;

/// What opening the path found.
#[derive(Debug)]
pub(crate) enum Opened {
    File(LedgerFile),
    Missing,
}

/// Why the file cannot be used.
#[derive(Debug)]
pub(crate) enum FileError {
    Io(&'static str, io::Error),
    Insecure(String),
}

/// The ledger file, open read-write.
#[derive(Debug)]
pub(crate) struct LedgerFile {
    file: File,
    dev: u64,
    ino: u64,
    wake: MmapRaw,
}

impl LedgerFile {
    fn from_file(file: File, access: Access) -> Result<LedgerFile, FileError> {
        let meta = file.metadata().map_err(|e| FileError::Io("inspecting", e))?;
        if let Some(reason) = access.refusal(&meta, false) {
            return Err(FileError::Insecure(reason));
        }
        let wake = MmapOptions::new()
            .len(PAGE as usize)
            .map_raw(&file)
            .map_err(|e| FileError::Io("mapping", e))?;
        Ok(LedgerFile { file, dev: meta.dev(), ino: meta.ino(), wake })
    }

    /// Open the ledger at `path` if there is one.
    pub(crate) fn open(path: &Path, access: Access) -> Result<Opened, FileError> {
        match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(crate::access::open_flags())
            .open(path)
        {
            Ok(file) => Ok(Opened::File(Self::from_file(file, access)?)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Opened::Missing),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                Err(FileError::Insecure("is a symbolic link".into()))
            }
            Err(e) => Err(FileError::Io("opening", e)),
        }
    }

    /// Create the ledger at `path` holding `header` and `state`, unless a file appeared
    /// there first (then `Ok(false)`: open that one instead).
    pub(crate) fn create(
        path: &Path,
        access: Access,
        header: &Header,
        state: &State,
    ) -> Result<bool, FileError> {
        let mut tmp_name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        tmp_name.push(format!(".new-{}", crate::records::random_id()));
        let created = access
            .create_atomically(&path.with_file_name(tmp_name), path, |file| {
                file.set_len(header.file_size())?;
                write_state(file, header, state)?;
                file.write_all_at(bytemuck::bytes_of(header), 0)
            })
            .map_err(|e| FileError::Io("creating", e))?;
        Ok(created.is_some())
    }

    /// Take the exclusive file lock (blocking).
    pub(crate) fn lock(&self) -> io::Result<()> {
        loop {
            match flock(&self.file, FlockOperation::LockExclusive) {
                Err(rustix::io::Errno::INTR) => continue,
                other => return other.map_err(Into::into),
            }
        }
    }

    /// Release the file lock.
    pub(crate) fn unlock(&self) {
        let _ = flock(&self.file, FlockOperation::Unlock);
    }

    /// Whether `path` still names this file (not unlinked, not replaced).
    pub(crate) fn is_at(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino)
    }

    /// Whether this file still has a name: unlinking it, or renaming another file over
    /// it, drops its link count to 0. One `fstat`, cheaper than looking the path up.
    pub(crate) fn is_linked(&self) -> bool {
        rustix::fs::fstat(&self.file).is_ok_and(|st| st.st_nlink > 0)
    }

    /// Header and state in one `pread` of `guess` body bytes (a second one if the body
    /// is longer): the state, or why it was not accepted (`None`: no sound header).
    pub(crate) fn read_state(&self, guess: usize) -> Option<(Header, Result<State, CopyFault>)> {
        let head_len = std::mem::size_of::<CopyHead>();
        let want = COPIES as usize + head_len + guess;
        let mut buf = vec![0u8; want];
        let got = self.file.read_at(&mut buf, 0).ok()?;
        if got < COPIES as usize + head_len {
            return None;
        }
        let header: Header = bytemuck::pod_read_unaligned(&buf[..COPIES as usize]);
        if !header.is_sound() {
            return None;
        }
        let at = COPIES as usize;
        let copy: CopyHead = bytemuck::pod_read_unaligned(&buf[at..at + head_len]);
        let len = copy.len as usize;
        if len as u64 > header.slot_size() - head_len as u64 {
            return Some((header, Err(CopyFault::Damaged)));
        }
        let body_at = at + head_len;
        if body_at + len > got {
            buf.resize(body_at + len, 0);
            if self.file.read_exact_at(&mut buf[got..], got as u64).is_err() {
                return Some((header, Err(CopyFault::Damaged)));
            }
        }
        Some((header, State::decode(&header, copy.crc, &buf[body_at..body_at + len])))
    }

    /// File length.
    pub(crate) fn len(&self) -> u64 {
        self.file.metadata().map_or(0, |m| m.len())
    }

    /// The first `n` bytes (fewer if the file is shorter).
    pub(crate) fn prefix(&self, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match self.file.read_at(&mut buf[got..], got as u64) {
                Ok(0) | Err(_) => break,
                Ok(k) => got += k,
            }
        }
        buf.truncate(got);
        buf
    }

    /// The header, if the file is long enough to hold one.
    pub(crate) fn header(&self) -> Option<Header> {
        let bytes = self.prefix(std::mem::size_of::<Header>());
        (bytes.len() == std::mem::size_of::<Header>()).then(|| bytemuck::pod_read_unaligned(&bytes))
    }

    /// Write `state` (one `pwrite`).
    pub(crate) fn write_state(&self, header: &Header, state: &State) -> io::Result<()> {
        write_state(&self.file, header, state)
    }

    /// Rewrite the header (after a repair), keeping the futex word's value.
    pub(crate) fn write_header(&self, header: &Header) -> io::Result<()> {
        self.file.write_all_at(bytemuck::bytes_of(header), 0)
    }

    /// The futex word's current value, read through the file.
    pub(crate) fn wake_value(&self) -> u32 {
        let mut b = [0u8; 4];
        self.file.read_exact_at(&mut b, WAKE_OFFSET).map_or(0, |()| u32::from_le_bytes(b))
    }

    /// Bump the futex word (call with the file lock held, so increments do not race).
    pub(crate) fn bump_wake(&self) {
        let next = self.wake_value().wrapping_add(1);
        let _ = self.file.write_all_at(&next.to_le_bytes(), WAKE_OFFSET);
    }

    /// The futex word's address, for `futex` calls only.
    pub(crate) fn wake_word(&self) -> &AtomicU32 {
        // SAFETY: the mapping is PAGE bytes long, page-aligned, and lives as long as
        // `self`; WAKE_OFFSET is 4-byte aligned and inside it. The reference is only
        // passed to the futex system call, never loaded or stored through by this
        // process, so a page that vanished (file truncated by someone) cannot fault us:
        // the kernel reports EFAULT instead. Other processes change the word only by
        // pwrite, which the kernel's futex comparison sees through the shared page.
        unsafe { &*(self.wake.as_ptr().add(WAKE_OFFSET as usize) as *const AtomicU32) }
    }
}

fn write_state(file: &File, header: &Header, state: &State) -> io::Result<()> {
    let bytes = state.encode();
    debug_assert!(bytes.len() as u64 <= header.slot_size());
    file.write_all_at(&bytes, COPIES)
}
