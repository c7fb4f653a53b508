//! The shared mapping of the ledger file. The only module of the ledger (besides the C
//! ABI) with `unsafe`: it reads and writes [`State`] copies and lends out the futex word.
//!
//! Protocol that makes the accesses sound: the primary and backup states are read and
//! written only by a process that holds the file's exclusive `flock` (see `ledger.rs`),
//! so no two processes access them at once; the futex word is only accessed atomically.
//! A process that ignores the protocol (or a test that corrupts the file) can at worst
//! make us read a torn [`State`], which is still a valid value (all plain integers,
//! `Pod`) and is then rejected by its checksum.
#![allow(unsafe_code)]

use crate::layout::{REGION_SIZE, Region, State};
use memmap2::MmapMut;
use std::fs::File;
use std::ptr::addr_of_mut;
use std::sync::atomic::{AtomicU32, Ordering, compiler_fence};

/// The ledger file, mapped shared.
#[derive(Debug)]
pub(crate) struct Mapping {
    map: MmapMut,
}

impl Mapping {
    /// Map `file`, growing it to the region size first if it is shorter. Call with the
    /// file lock held when the file may be new.
    pub(crate) fn new(file: &File) -> std::io::Result<Mapping> {
        if file.metadata()?.len() < REGION_SIZE as u64 {
            file.set_len(REGION_SIZE as u64)?;
        }
        // SAFETY: the file is a regular file of at least REGION_SIZE bytes that we keep
        // open; other processes may map and modify it, which is the point: all access to
        // the mapping goes through the methods below under the protocol in the module
        // docs. Truncation by a foreign process would fault; the ledger never truncates.
        let map = unsafe { MmapMut::map_mut(file)? };
        assert!(map.len() >= REGION_SIZE);
        Ok(Mapping { map })
    }

    fn region(&self) -> *mut Region {
        let ptr = self.map.as_ptr() as *mut Region;
        debug_assert_eq!(ptr as usize % std::mem::align_of::<Region>(), 0, "mmap is page-aligned");
        ptr
    }

    /// Copy out the primary and backup states with their stored checksums.
    pub(crate) fn load(&self) -> (State, u32, State, u32) {
        let r = self.region();
        // SAFETY: `r` points to a live, aligned Region inside the mapping (checked size,
        // page alignment). We hold the file lock, so no cooperating process writes these
        // fields now; State and u32 accept any bit pattern, so even a torn read yields a
        // valid value, which the caller verifies by checksum.
        unsafe {
            (
                std::ptr::read(addr_of_mut!((*r).primary)),
                std::ptr::read(addr_of_mut!((*r).primary_crc)),
                std::ptr::read(addr_of_mut!((*r).backup)),
                std::ptr::read(addr_of_mut!((*r).backup_crc)),
            )
        }
    }

    /// Write `state` to the primary copy, then to the backup copy, each followed by its
    /// checksum: a process killed part-way leaves one good copy.
    pub(crate) fn store(&self, state: &State) {
        let crc = state.crc();
        let r = self.region();
        // SAFETY: as in `load`: valid aligned pointers into the mapping, exclusive access
        // under the file lock; writing Pod values.
        // The fences keep the compiler from reordering the four writes: a process killed
        // between them must leave at least one copy whose checksum matches.
        unsafe {
            std::ptr::write(addr_of_mut!((*r).primary), *state);
            std::ptr::write(addr_of_mut!((*r).primary_crc), crc);
            compiler_fence(Ordering::SeqCst);
            std::ptr::write(addr_of_mut!((*r).backup), *state);
            std::ptr::write(addr_of_mut!((*r).backup_crc), crc);
        }
        compiler_fence(Ordering::SeqCst);
    }

    /// Write only the primary copy (tests use this to simulate a torn write).
    #[cfg(test)]
    pub(crate) fn store_primary_only(&self, state: &State, crc: u32) {
        let r = self.region();
        // SAFETY: as in `store`.
        unsafe {
            std::ptr::write(addr_of_mut!((*r).primary), *state);
            std::ptr::write(addr_of_mut!((*r).primary_crc), crc);
        }
    }

    /// The futex word waiters sleep on.
    pub(crate) fn wake_word(&self) -> &AtomicU32 {
        let r = self.region();
        // SAFETY: the word lies inside the mapping, is 4-byte aligned (first field of a
        // page-aligned repr(C) struct), lives as long as `self`, and is only ever
        // accessed atomically, by us and by every other process.
        unsafe { &*addr_of_mut!((*r).wake) }
    }
}
