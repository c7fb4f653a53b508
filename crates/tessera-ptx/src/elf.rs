//! How long a cubin is: the driver's `cuModuleLoadData` and `cuLibraryLoadData` take a
//! cubin (an ELF file) by its address alone, so the interposer, to recognise a cubin it
//! has seen before (nvJitLink's output, whose PTX it kept: issue 58), must learn its
//! length from its own headers, as the driver does. The extent is the furthest byte any
//! header names: the section header table, every section with bytes in the file, the
//! program header table and every segment.
//!
//! The headers are read through a callback so that the caller decides how bytes are
//! reached (the interposer reads the program's memory, a test a file); every offset is
//! checked against a limit before it is asked for ([`extent_within`]: the interposer's
//! is the length of the kept cubin whose header the image's equals; else
//! [`MAX_CUBIN`]), so a header can make the caller read no further than that.

/// The longest cubin recognised (1 GiB): a header naming more is refused, not read.
pub const MAX_CUBIN: u64 = 1 << 30;

/// The ELF magic.
pub const MAGIC: [u8; 4] = *b"\x7fELF";

/// The ELF64 header's length.
pub const HEADER_LEN: usize = 64;

/// Why a cubin's length could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ElfError {
    /// Not ELF, or not the 64-bit little-endian ELF every cubin is.
    #[error("not a 64-bit little-endian ELF file")]
    NotElf64,
    /// A header names bytes beyond [`MAX_CUBIN`] (or sizes that overflow).
    #[error("a header names bytes beyond {MAX_CUBIN} (at {at})")]
    TooLong {
        /// The offset it names.
        at: u64,
    },
    /// A table entry shorter than the ELF64 structure it holds.
    #[error("{what} entries of {size} bytes (ELF64's are {need})")]
    EntrySize {
        /// Which table.
        what: &'static str,
        /// The size the header gives.
        size: u16,
        /// ELF64's.
        need: u16,
    },
    /// The caller could not read bytes the headers name.
    #[error("{len} bytes at {at} could not be read")]
    Unreadable {
        /// Offset.
        at: u64,
        /// Length.
        len: usize,
    },
}

/// A section type with no bytes in the file (`.bss`, `.nv.shared.*`).
const SHT_NOBITS: u32 = 8;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// `offset + count × size`, refused beyond `limit`.
fn end(offset: u64, count: u64, size: u64, limit: u64) -> Result<u64, ElfError> {
    count
        .checked_mul(size)
        .and_then(|n| n.checked_add(offset))
        .filter(|e| *e <= limit)
        .ok_or(ElfError::TooLong { at: offset })
}

/// The length of the ELF64 file whose bytes `read(offset, len)` returns (`None` where
/// it cannot), reading its header and its two header tables only.
pub fn extent(read: &mut dyn FnMut(u64, usize) -> Option<Vec<u8>>) -> Result<u64, ElfError> {
    extent_within(MAX_CUBIN, read)
}

/// [`extent`] of a file no longer than `limit` (at most [`MAX_CUBIN`]): no byte at or
/// beyond `limit` is asked for, and a header naming one is [`ElfError::TooLong`].
pub fn extent_within(
    limit: u64,
    read: &mut dyn FnMut(u64, usize) -> Option<Vec<u8>>,
) -> Result<u64, ElfError> {
    let limit = limit.min(MAX_CUBIN);
    let unreadable = |at, len| ElfError::Unreadable { at, len };
    if limit < HEADER_LEN as u64 {
        return Err(ElfError::TooLong { at: 0 });
    }
    let h = read(0, HEADER_LEN).ok_or(unreadable(0, HEADER_LEN))?;
    // class 2 (64-bit), data 1 (little-endian)
    if h.len() < HEADER_LEN || h[..4] != MAGIC || h[4] != 2 || h[5] != 1 {
        return Err(ElfError::NotElf64);
    }
    let (phoff, shoff) = (u64_at(&h, 0x20), u64_at(&h, 0x28));
    let (phentsize, phnum) = (u16_at(&h, 0x36), u16_at(&h, 0x38));
    let (shentsize, shnum) = (u16_at(&h, 0x3a), u16_at(&h, 0x3c));
    if (shnum > 0 || shoff != 0) && shentsize < 64 {
        return Err(ElfError::EntrySize { what: "section", size: shentsize, need: 64 });
    }
    // ELF's extended numbering: with more sections than 0xff00, or more segments than
    // 0xfffe, the count is in the first section header (its size, its info field)
    let first = if (shnum == 0 && shoff != 0) || phnum == 0xffff {
        end(shoff, 1, 64, limit)?;
        Some(read(shoff, 64).ok_or(unreadable(shoff, 64))?)
    } else {
        None
    };
    let shnum = match (&first, shnum) {
        (Some(f), 0) if f.len() >= 64 => u64_at(f, 0x20),
        (_, n) => u64::from(n),
    };
    let phnum = match (&first, phnum) {
        (Some(f), 0xffff) if f.len() >= 64 => u64::from(u32_at(f, 0x2c)),
        (_, n) => u64::from(n),
    };
    let mut furthest = HEADER_LEN as u64;
    if shnum > 0 {
        let table_end = end(shoff, shnum, u64::from(shentsize), limit)?;
        furthest = furthest.max(table_end);
        let len = (table_end - shoff) as usize;
        let table = read(shoff, len).ok_or(unreadable(shoff, len))?;
        for s in table.chunks_exact(usize::from(shentsize)) {
            if u32_at(s, 4) != SHT_NOBITS {
                furthest = furthest.max(end(u64_at(s, 0x18), 1, u64_at(s, 0x20), limit)?);
            }
        }
    }
    if phnum > 0 {
        if phentsize < 56 {
            return Err(ElfError::EntrySize { what: "program", size: phentsize, need: 56 });
        }
        let table_end = end(phoff, phnum, u64::from(phentsize), limit)?;
        furthest = furthest.max(table_end);
        let len = (table_end - phoff) as usize;
        let table = read(phoff, len).ok_or(unreadable(phoff, len))?;
        for p in table.chunks_exact(usize::from(phentsize)) {
            furthest = furthest.max(end(u64_at(p, 0x08), 1, u64_at(p, 0x20), limit)?);
        }
    }
    Ok(furthest)
}

/// [`extent`] of an ELF file held in memory, every read inside `bytes`.
pub fn extent_of(bytes: &[u8]) -> Result<u64, ElfError> {
    extent(&mut |at, len| {
        let at = usize::try_from(at).ok()?;
        bytes.get(at..at.checked_add(len)?).map(<[u8]>::to_vec)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64: header, one section of `data` bytes at 64, its section table
    /// after it (two entries: the null section and the data).
    fn elf(data: usize, nobits_tail: u64) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = 2;
        b[5] = 1;
        let shoff = 64 + data as u64;
        b[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        b[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        b[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        b.extend(std::iter::repeat_n(0xab, data));
        b.extend([0u8; 64]);
        let mut s = [0u8; 64];
        s[4..8].copy_from_slice(&1u32.to_le_bytes());
        s[0x18..0x20].copy_from_slice(&64u64.to_le_bytes());
        s[0x20..0x28].copy_from_slice(&(data as u64).to_le_bytes());
        b.extend(s);
        // a no-bits section reaching past the file: not counted
        let mut n = [0u8; 64];
        n[4..8].copy_from_slice(&SHT_NOBITS.to_le_bytes());
        n[0x18..0x20].copy_from_slice(&64u64.to_le_bytes());
        n[0x20..0x28].copy_from_slice(&nobits_tail.to_le_bytes());
        b.extend(n);
        b
    }

    #[test]
    fn the_section_table_and_sections_bound_the_file() {
        let b = elf(100, 1 << 20);
        assert_eq!(extent_of(&b), Ok(b.len() as u64));
        // with bytes after it, still the headers' extent
        let mut longer = b.clone();
        longer.extend([1, 2, 3]);
        assert_eq!(extent_of(&longer), Ok(b.len() as u64));
    }

    #[test]
    fn no_byte_past_the_limit_is_asked_for() {
        let b = elf(100, 0);
        let n = b.len() as u64;
        let mut furthest = 0u64;
        let mut read = |at: u64, len: usize| {
            furthest = furthest.max(at + len as u64);
            b.get(at as usize..at as usize + len).map(<[u8]>::to_vec)
        };
        assert_eq!(extent_within(n, &mut read), Ok(n));
        assert_eq!(extent_within(n - 1, &mut read), Err(ElfError::TooLong { at: 64 + 100 }));
        assert_eq!(extent_within(10, &mut read), Err(ElfError::TooLong { at: 0 }));
        assert!(furthest <= n, "{furthest}");
    }

    #[test]
    fn extended_numbering_counts_from_the_first_section() {
        // e_shnum 0: the count is section 0's size; e_phnum 0xffff: its info field
        let mut b = elf(100, 0);
        b[0x3c..0x3e].copy_from_slice(&0u16.to_le_bytes());
        let first = 64 + 100;
        b[first + 0x20..first + 0x28].copy_from_slice(&3u64.to_le_bytes());
        assert_eq!(extent_of(&b), Ok(b.len() as u64));
        // a program table of one segment after the file, counted through sh_info
        b[0x38..0x3a].copy_from_slice(&0xffffu16.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        let phoff = b.len() as u64;
        b[0x20..0x28].copy_from_slice(&phoff.to_le_bytes());
        b[first + 0x2c..first + 0x30].copy_from_slice(&1u32.to_le_bytes());
        b.extend([0u8; 56]);
        assert_eq!(extent_of(&b), Ok(b.len() as u64));
        // without the count's first section: refused, not read past
        b[0x28..0x30].copy_from_slice(&(MAX_CUBIN - 8).to_le_bytes());
        assert!(matches!(extent_of(&b), Err(ElfError::TooLong { .. })));
    }

    #[test]
    fn corrupt_headers_are_refused_without_reading_far() {
        let mut b = elf(8, 0);
        b[0x28..0x30].copy_from_slice(&(MAX_CUBIN).to_le_bytes());
        assert_eq!(extent(&mut |_, _| None), Err(ElfError::Unreadable { at: 0, len: 64 }));
        assert_eq!(extent_of(&b), Err(ElfError::TooLong { at: MAX_CUBIN }));
        let mut c = elf(8, 0);
        c[0x3a..0x3c].copy_from_slice(&8u16.to_le_bytes());
        assert!(matches!(extent_of(&c), Err(ElfError::EntrySize { .. })));
        let mut d = elf(8, 0);
        d[4] = 1;
        assert_eq!(extent_of(&d), Err(ElfError::NotElf64));
        assert_eq!(extent_of(&d[..10]), Err(ElfError::Unreadable { at: 0, len: 64 }));
        // a section whose size overflows
        let mut e = elf(8, 0);
        let at = 64 + 8 + 64 + 0x20;
        e[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(extent_of(&e), Err(ElfError::TooLong { .. })));
    }
}
