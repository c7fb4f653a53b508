//! The PTX a fat binary carries (issue 58): what the CUDA runtime and `nvcc` hand the
//! driver is a fatbin — several images of one module, each a cubin for an SM or PTX
//! for a virtual architecture, PTX compressed by default (LZ4 or Zstandard). The driver
//! runs the cubin that matches the GPU, else compiles the best PTX; to slice a kernel,
//! the interposer takes that PTX instead, rewrites it and hands the driver the text.
//!
//! The layout, as NVIDIA's `fatbinary` writes it (checked against its output in
//! `tests/fatbin.rs`; all little-endian): a 16-byte header — magic `0xBA55ED50`, a
//! version (`u16`), the header's size (`u16`) and the size of the entries after it
//! (`u64`) — then entries, each a header of its own size and a payload: kind (`u16`: 1
//! PTX, 2 ELF), a version (`u16`), the entry header's size (`u32`), the payload's size
//! (`u64`), at 16 the compressed length (`u32`), at 24 the PTX version (minor, major:
//! `u16` each), at 28 the architecture (`u32`, 80 for sm_80/compute_80), at 40 flags
//! (`u64`: `0x2000` LZ4, `0x8000` Zstandard), at 56 the uncompressed length (`u64`).
//! Anything else (another magic, an entry that runs past the end, a flag this build
//! does not know) is a [`FatbinError`], and the module runs whole.

use std::io::Read as _;

/// A fat binary's magic (its first four bytes, little-endian).
pub const MAGIC: u32 = 0xBA55_ED50;
/// The magic of the wrapper the CUDA runtime registers a fat binary by
/// (`__fatBinC_Wrapper_t`: magic, version, a pointer to the fat binary, ...).
pub const WRAPPER_MAGIC: u32 = 0x4662_43B1;

/// An entry's payload is compressed with LZ4 (a raw block).
const LZ4: u64 = 0x2000;
/// An entry's payload is compressed with Zstandard (one frame).
const ZSTD: u64 = 0x8000;
/// Flags this build reads past: 64-bit, debug, Linux, host, and the two compressions.
const KNOWN: u64 = 0x1 | 0x2 | 0x10 | 0x40 | LZ4 | ZSTD;
/// The most a PTX payload may expand to (a module's text, never gigabytes).
const MAX_PTX: u64 = 1 << 30;
/// The most a payload may expand per stored byte (PTX compresses a few times; a header
/// claiming more is corrupt, and must not make a program allocate it).
const MAX_RATIO: u64 = 1_024;
/// An entry header's least size: the fields read here end at byte 64.
const ENTRY_HEADER: u64 = 64;

/// Why a fat binary's PTX could not be had.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FatbinError {
    /// Not a fat binary.
    #[error("not a fat binary (magic {0:#010x})")]
    NotFatbin(u32),
    /// Shorter than its header says.
    #[error("truncated: {what} needs {need} bytes, {have} given")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        need: u64,
        /// Bytes there.
        have: u64,
    },
    /// An entry with flags this build does not read (a new compression, say).
    #[error("entry {index} has flags {flags:#x} this build does not know")]
    UnknownFlags {
        /// The entry.
        index: usize,
        /// Its flags.
        flags: u64,
    },
    /// A compressed payload that does not decompress to its stated length.
    #[error("entry {index}: {why}")]
    Corrupt {
        /// The entry.
        index: usize,
        /// What went wrong.
        why: String,
    },
    /// No PTX for an architecture at or below the GPU's.
    #[error("no PTX for compute_{arch} or below (it carries {carried})")]
    NoPtx {
        /// The GPU's architecture (major × 10 + minor).
        arch: u32,
        /// What the fat binary carries, for the log.
        carried: String,
    },
}

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// PTX text.
    Ptx,
    /// A cubin (ELF) for one SM.
    Elf,
    /// Something else (the raw kind).
    Other(u16),
}

/// How an entry's payload is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// As is (PTX: NUL-padded text).
    None,
    /// A raw LZ4 block.
    Lz4,
    /// A Zstandard frame.
    Zstd,
}

/// One image of a fat binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What it holds.
    pub kind: Kind,
    /// The architecture it is for (major × 10 + minor).
    pub arch: u32,
    /// How its payload is stored.
    pub compression: Compression,
    /// Where its payload lies in the fat binary: start and length (the compressed
    /// bytes when compressed).
    pub payload: (usize, usize),
    /// Its length once decompressed (0 when stored as is).
    pub uncompressed: u64,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn need(what: &'static str, need: u64, have: usize) -> Result<(), FatbinError> {
    if need > have as u64 {
        return Err(FatbinError::Truncated { what, need, have: have as u64 });
    }
    Ok(())
}

/// Whether `head` (a module image's first bytes) begins a fat binary.
pub fn is_fatbin(head: &[u8]) -> bool {
    head.len() >= 4 && u32_at(head, 0) == MAGIC
}

/// The whole length of the fat binary whose first 16 bytes are `head`: what to read
/// of an image handed over by pointer alone.
pub fn len(head: &[u8]) -> Result<u64, FatbinError> {
    need("the header", 16, head.len())?;
    let magic = u32_at(head, 0);
    if magic != MAGIC {
        return Err(FatbinError::NotFatbin(magic));
    }
    let header = u64::from(u16_at(head, 6));
    if header < 16 {
        return Err(FatbinError::Truncated { what: "the header", need: 16, have: header });
    }
    header.checked_add(u64_at(head, 8)).ok_or(FatbinError::Truncated {
        what: "the entries",
        need: u64::MAX,
        have: head.len() as u64,
    })
}

/// Every entry of the fat binary `b`.
pub fn entries(b: &[u8]) -> Result<Vec<Entry>, FatbinError> {
    let total = len(b)?;
    need("the entries", total, b.len())?;
    let mut at = usize::from(u16_at(b, 6));
    let end = total as usize;
    let mut out = Vec::new();
    while at < end {
        let index = out.len();
        need("an entry header", at as u64 + ENTRY_HEADER, end)?;
        let header = u64::from(u32_at(b, at + 4));
        let size = u64_at(b, at + 8);
        // every entry moves the walk on: a header shorter than its fields, or sizes that
        // overflow, are corrupt (a loop that never ends otherwise)
        if header < ENTRY_HEADER {
            return Err(FatbinError::Truncated {
                what: "an entry header",
                need: ENTRY_HEADER,
                have: header,
            });
        }
        let next = (at as u64).checked_add(header).and_then(|s| s.checked_add(size));
        let Some(next) = next.filter(|n| *n <= end as u64) else {
            return Err(FatbinError::Truncated {
                what: "an entry",
                need: (at as u64).saturating_add(header).saturating_add(size),
                have: end as u64,
            });
        };
        let start = at + header as usize;
        let flags = u64_at(b, at + 40);
        if flags & !KNOWN != 0 {
            return Err(FatbinError::UnknownFlags { index, flags });
        }
        let compression = match (flags & LZ4 != 0, flags & ZSTD != 0) {
            (false, false) => Compression::None,
            (true, false) => Compression::Lz4,
            (false, true) => Compression::Zstd,
            (true, true) => return Err(FatbinError::UnknownFlags { index, flags }),
        };
        let stored = match compression {
            Compression::None => size,
            _ => u64::from(u32_at(b, at + 16)).min(size),
        };
        out.push(Entry {
            kind: match u16_at(b, at) {
                1 => Kind::Ptx,
                2 => Kind::Elf,
                k => Kind::Other(k),
            },
            arch: u32_at(b, at + 28),
            compression,
            payload: (start, stored as usize),
            uncompressed: u64_at(b, at + 56),
        });
        at = next as usize;
    }
    Ok(out)
}

/// An entry's payload as stored, decompressed.
pub fn payload(b: &[u8], index: usize, e: &Entry) -> Result<Vec<u8>, FatbinError> {
    let (start, n) = e.payload;
    let stored =
        start.checked_add(n).and_then(|end| b.get(start..end)).ok_or(FatbinError::Truncated {
            what: "an entry's payload",
            need: start as u64 + n as u64,
            have: b.len() as u64,
        })?;
    let corrupt = |why: String| FatbinError::Corrupt { index, why };
    let most = MAX_PTX.min((n as u64).saturating_mul(MAX_RATIO));
    match e.compression {
        Compression::None => Ok(stored.to_vec()),
        _ if e.uncompressed > most => {
            Err(corrupt(format!("says {} bytes expand to {}", n, e.uncompressed)))
        }
        Compression::Lz4 => lz4_flex::block::decompress(stored, e.uncompressed as usize)
            .map_err(|why| corrupt(format!("LZ4: {why}"))),
        Compression::Zstd => {
            let mut out = Vec::new();
            ruzstd::decoding::StreamingDecoder::new(stored)
                .map_err(|why| corrupt(format!("Zstandard: {why}")))?
                .take(e.uncompressed)
                .read_to_end(&mut out)
                .map_err(|why| corrupt(format!("Zstandard: {why}")))?;
            if out.len() as u64 != e.uncompressed {
                return Err(corrupt(format!(
                    "Zstandard: {} bytes, {} stated",
                    out.len(),
                    e.uncompressed
                )));
            }
            Ok(out)
        }
    }
}

/// The PTX text the driver would compile for a GPU of architecture `arch` (major ×
/// 10 + minor) when the fat binary `b` has no cubin for it: the PTX entry of the
/// highest architecture at or below `arch`, decompressed, up to its first NUL.
pub fn ptx_for(b: &[u8], arch: u32) -> Result<String, FatbinError> {
    let all = entries(b)?;
    let best = all
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == Kind::Ptx && e.arch <= arch)
        .max_by_key(|(i, e)| (e.arch, std::cmp::Reverse(*i)));
    let Some((index, e)) = best else {
        let carried: Vec<String> = all
            .iter()
            .map(|e| match e.kind {
                Kind::Ptx => format!("compute_{}", e.arch),
                Kind::Elf => format!("sm_{}", e.arch),
                Kind::Other(k) => format!("kind {k}"),
            })
            .collect();
        return Err(FatbinError::NoPtx { arch, carried: carried.join(", ") });
    };
    let mut text = payload(b, index, e)?;
    if let Some(nul) = text.iter().position(|c| *c == 0) {
        text.truncate(nul);
    }
    String::from_utf8(text)
        .map_err(|_| FatbinError::Corrupt { index, why: "PTX that is not UTF-8".into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fat binary of `entries` (kind, arch, flags, stored payload, uncompressed
    /// length), laid out as `fatbinary` lays one out (80-byte entry headers).
    pub(crate) fn build(entries: &[(u16, u32, u64, &[u8], u64)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, arch, flags, payload, uncompressed) in entries {
            let padded = payload.len().div_ceil(8) * 8;
            let mut h = vec![0u8; 80];
            h[0..2].copy_from_slice(&kind.to_le_bytes());
            h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
            h[4..8].copy_from_slice(&80u32.to_le_bytes());
            h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
            let compressed = if *flags & (LZ4 | ZSTD) != 0 { payload.len() as u32 } else { 0 };
            h[16..20].copy_from_slice(&compressed.to_le_bytes());
            h[26..28].copy_from_slice(&8u16.to_le_bytes());
            h[28..32].copy_from_slice(&arch.to_le_bytes());
            h[40..48].copy_from_slice(&flags.to_le_bytes());
            h[56..64].copy_from_slice(&uncompressed.to_le_bytes());
            body.extend_from_slice(&h);
            body.extend_from_slice(payload);
            body.resize(body.len() + padded - payload.len(), 0);
        }
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&16u16.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn the_best_ptx_at_or_below_the_gpus_architecture_is_taken() {
        let ptx70 = b".version 7.0\n.target sm_70\n";
        let ptx90 = b".version 8.0\n.target sm_90\n";
        let lz4 = lz4_flex::block::compress(b".version 8.0\n.target sm_80\n");
        let b = build(&[
            (1, 70, 0x11, ptx70, 0),
            (2, 80, 0x11, b"\x7fELF....", 0),
            (1, 80, 0x11 | LZ4, &lz4, 27),
            (1, 90, 0x11, ptx90, 0),
        ]);
        assert_eq!(len(&b[..16]).unwrap(), b.len() as u64);
        assert_eq!(entries(&b).unwrap().len(), 4);
        assert_eq!(ptx_for(&b, 80).unwrap(), ".version 8.0\n.target sm_80\n");
        assert_eq!(ptx_for(&b, 75).unwrap(), ".version 7.0\n.target sm_70\n");
        assert_eq!(ptx_for(&b, 100).unwrap(), ".version 8.0\n.target sm_90\n");
        assert_eq!(
            ptx_for(&b, 60),
            Err(FatbinError::NoPtx {
                arch: 60,
                carried: "compute_70, sm_80, compute_80, compute_90".into()
            })
        );
    }

    proptest::proptest! {
        /// Any bytes behind a fat binary's magic are read or refused, never a panic or
        /// an endless walk (an entry header of 0 bytes once looped forever).
        #[test]
        fn any_bytes_are_read_or_refused(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400), fat in 0u64..400) {
            let mut b = MAGIC.to_le_bytes().to_vec();
            b.extend_from_slice(&1u16.to_le_bytes());
            b.extend_from_slice(&16u16.to_le_bytes());
            b.extend_from_slice(&fat.to_le_bytes());
            b.extend_from_slice(&body);
            let _ = ptx_for(&b, 90);
            if let Ok(all) = entries(&b) {
                for (i, e) in all.iter().enumerate() {
                    let _ = payload(&b, i, e);
                }
            }
        }
    }

    #[test]
    fn bad_fat_binaries_are_errors_not_panics() {
        let ptx = b".version 8.0\n";
        let good = build(&[(1, 80, 0x11, ptx, 0)]);
        // every truncation
        for cut in 0..good.len() {
            assert!(ptx_for(&good[..cut], 80).is_err(), "cut at {cut}");
        }
        assert_eq!(len(b"\x7fELF------------"), Err(FatbinError::NotFatbin(0x464c_457f)));
        let unknown = build(&[(1, 80, 0x11 | 0x100_0000, ptx, 0)]);
        assert!(matches!(ptx_for(&unknown, 80), Err(FatbinError::UnknownFlags { .. })));
        // a compressed payload that is not what it says
        let lying = build(&[(1, 80, 0x11 | LZ4, b"\xff\xff\xff", 5_000)]);
        assert!(matches!(ptx_for(&lying, 80), Err(FatbinError::Corrupt { .. })));
        let huge = build(&[(1, 80, 0x11 | ZSTD, b"\x28\xb5\x2f\xfd", u64::MAX)]);
        assert!(matches!(ptx_for(&huge, 80), Err(FatbinError::Corrupt { .. })));
        // an entry header that claims to run past the end
        let mut long = good.clone();
        long[16 + 4..16 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(ptx_for(&long, 80), Err(FatbinError::Truncated { .. })));
        // an entry of 0 bytes (header and payload): refused, not walked forever
        let mut zero = build(&[]);
        zero[8..16].copy_from_slice(&64u64.to_le_bytes());
        zero.extend_from_slice(&[0u8; 64]);
        assert!(matches!(entries(&zero), Err(FatbinError::Truncated { .. })));
        // a payload size that overflows the walk
        let mut wrap = good.clone();
        wrap[16 + 8..16 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(ptx_for(&wrap, 80), Err(FatbinError::Truncated { .. })));
        // a payload said to expand far beyond what compression gives
        let claims = build(&[(1, 80, 0x11 | LZ4, b"\x10a", 1 << 20)]);
        assert!(matches!(ptx_for(&claims, 80), Err(FatbinError::Corrupt { .. })));
    }
}
