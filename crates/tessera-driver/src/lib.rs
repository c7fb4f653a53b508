//! The CUDA driver API as tessera uses it, for the daemon's CUDA executor and the
//! interposer: every entry point typed as NVIDIA's `cuda.h` declares it, and resolved at
//! run time, so that tessera builds and runs where no driver is installed.
//!
//! The parameter types come from `cudarc`'s `driver::sys`, bindings generated from the
//! CUDA 12.9 headers: [`driver_api!`] declares each entry point once and checks, at
//! compile time, that its parameters are exactly those of the generated binding — a
//! hand-written signature that drifts from the header does not compile. Results are
//! kept as raw `u32` codes ([`CuResult`]) rather than the generated enum, because a
//! driver newer than the headers may return a code the enum does not have.
//!
//! Module map:
//! - [`api`] (`unsafe`: function pointers from a library): the entry points and their
//!   resolution from any symbol look-up.
//! - [`library`] (`unsafe`: `dlopen`): opening a driver library by path.
//! - [`context`] (`unsafe`: calls into the driver): one GPU as a program uses it
//!   (memory, PTX kernels, launches), for `tessera selftest`'s programs.
//! - [`probe`] (`unsafe`: calls into the driver and NVML): what a node's NVIDIA
//!   libraries say of it (versions, devices), for `tessera doctor`.
//! - [`testing`]: for tests, NVIDIA's published artefacts (`cuda.h`, `libcudart.so.12`,
//!   `ptxas`, fetched from PyPI) and a fake driver built against that `cuda.h`.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod api;
pub mod context;
pub mod library;
pub mod probe;
pub mod testing;

pub use api::{CuResult, DriverApi, status};
pub use context::{ContextError, Gpu, Kernel};
pub use cudarc::driver::sys;
pub use library::{DriverLibrary, LibraryError};

/// A device UUID as `nvidia-smi -L` and `CUDA_VISIBLE_DEVICES` write it: `GPU-` and
/// its 16 bytes in hex, grouped 4-2-2-2-6.
pub fn uuid_text(uuid: &sys::CUuuid) -> String {
    let b: Vec<u8> = uuid.bytes.iter().map(|c| *c as u8).collect();
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!("GPU-{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16))
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuids_are_written_as_the_driver_reads_them() {
        let mut u = super::sys::CUuuid { bytes: [0; 16] };
        u.bytes[0] = 0xfa_u8 as std::ffi::c_char;
        u.bytes[15] = 1;
        assert_eq!(super::uuid_text(&u), "GPU-fa000000-0000-0000-0000-000000000001");
    }
}
