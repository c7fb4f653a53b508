//! Kernel slicing of fat binaries (issue 58): what the CUDA runtime and `nvcc`'s
//! programs hand the driver. The program's PTX is packed into fat binaries by NVIDIA's
//! own `fatbinary` (PyPI's CUDA 13.0 nvcc wheel) — compressed with Zstandard (its
//! default), as an LZ4 block, and stored as is — and loaded with `cuModuleLoadData`
//! and `cuLibraryLoadData`, bare or inside the CUDA runtime's wrapper. With slicing on,
//! the PTX for the GPU (the fake's compute capability 8.0) is taken out, rewritten and
//! loaded with its twin: each launch runs as sub-kernels and computes what it computes
//! whole. Off, the driver is given the fat binary. One whose only PTX is for a newer
//! GPU runs whole, said once in the interposer's log.

use crate::common::*;
use crate::interposer::build_migrate_app;
use std::process::Command;

#[test]
fn fat_binaries_carrying_ptx_are_sliced_as_their_ptx_is() {
    let Some(s) = setup("fatbin", 1) else { return };
    let Some(cuda13) = tessera_driver::testing::nvidia_artifacts_or_skip_for("13.0", "fatbinary")
    else {
        return;
    };
    let app = build_migrate_app(&s);
    let fake_log = s.dir.join("libcuda.so.1.log");
    let interposer_log = s.dir.join("interposer.log");
    let take = |p: &std::path::Path| {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        let _ = std::fs::remove_file(p);
        text
    };
    let result = |out: &str| out.lines().find(|l| l.starts_with("result")).map(String::from);
    // the program's own PTX, packed by fatbinary
    let ptx = s.dir.join("axpy.ptx");
    let (code, out, err) = run(s.app_at(&app, &["1"], &[("PTX_OUT", ptx.to_str().unwrap())]));
    assert_eq!(code, 0, "{out}{err}");
    let pack = |name: &str, mode: &str, sm: u32| {
        let fatbin = s.dir.join(format!("{name}.fatbin"));
        let out = Command::new(cuda13.join("bin/fatbinary"))
            .arg("--64")
            .arg(format!("--create={}", fatbin.display()))
            .arg(format!("--compress-mode={mode}"))
            .arg(format!("--image3=kind=ptx,sm={sm},file={}", ptx.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "fatbinary: {}", String::from_utf8_lossy(&out.stderr));
        fatbin.to_str().unwrap().to_string()
    };
    let (zstd, lz4, plain) =
        (pack("zstd", "default", 80), pack("lz4", "speed", 80), pack("plain", "none", 80));
    let newer = pack("newer", "none", 90);
    let (code, whole, err) = run(s.app_at(&app, &["3", "4096"], &[]));
    assert_eq!(code, 0, "{whole}{err}");
    let env = [
        ("TESSERA_KERNEL_SLICING", "1"),
        ("TESSERA_KERNEL_SLICE_MIN_BLOCKS", "4"),
        ("TESSERA_KERNEL_SLICE_BLOCKS", "5"),
        ("FAKE_CUDA_LOG", "1"),
    ];
    let one = ["0 5 of 16 1 1", "5 5 of 16 1 1", "10 5 of 16 1 1", "15 1 of 16 1 1"];
    // (what, the fat binary, more settings)
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
    let cases: [Case; 9] = [
        ("Zstandard", &zstd, &[]),
        ("LZ4", &lz4, &[]),
        ("stored as is", &plain, &[]),
        ("in the runtime's wrapper", &zstd, &[("WRAPPED", "1")]),
        ("as a library", &zstd, &[("LIBRARY", "1")]),
        ("by cuModuleLoadFatBinary", &zstd, &[("FATBINARY", "1")]),
        ("wrapped, by cuModuleLoadFatBinary", &zstd, &[("FATBINARY", "1"), ("WRAPPED", "1")]),
        ("from a file, cuModuleLoad", &zstd, &[("FATBIN_FILE", &zstd)]),
        ("from a file, cuLibraryLoadFromFile", &zstd, &[("FATBIN_FILE", &zstd), ("LIBRARY", "1")]),
    ];
    for (what, fatbin, extra) in cases {
        let with = [env.as_slice(), &[("FATBIN", fatbin)], extra].concat();
        let (code, out, err) = run(s.app_at(&app, &["3", "4096"], &with));
        assert_eq!(code, 0, "{what}: {out}{err}");
        assert_eq!(result(&out), result(&whole), "{what}: {out}");
        assert!(result(&out).is_some_and(|r| r.starts_with("result ok")), "{what}: {out}");
        let log = take(&fake_log);
        let slices: Vec<&str> = log.lines().filter_map(|l| l.strip_prefix("axpy slice ")).collect();
        assert_eq!(slices, [one, one, one].concat(), "{what}: {log}");
        // the driver compiled the rewritten text, not the fat binary (nor read the file)
        assert!(!log.contains("a fat binary"), "{what}: {log}");
        assert!(
            !log.contains("cuModuleLoad ") && !log.contains("cuLibraryLoadFromFile "),
            "{what}: {log}"
        );
    }
    // slicing off: the driver is given the fat binary, and the launches run whole
    let off = [("FATBIN", plain.as_str()), ("FAKE_CUDA_LOG", "1")];
    let (code, out, err) = run(s.app_at(&app, &["3", "4096"], &off));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(result(&out), result(&whole), "{out}");
    let log = take(&fake_log);
    assert!(log.contains("cuModuleLoadData on 0 (a fat binary)"), "{log}");
    assert!(!log.contains("axpy slice"), "{log}");
    // and by cuModuleLoadFatBinary, and from a file: the driver's own, as given
    for extra in [("FATBINARY", "1"), ("FATBIN_FILE", plain.as_str())] {
        let (code, out, err) =
            run(s.app_at(&app, &["3", "4096"], &[off.as_slice(), &[extra]].concat()));
        assert_eq!(code, 0, "{extra:?}: {out}{err}");
        assert_eq!(result(&out), result(&whole), "{extra:?}: {out}");
        let log = take(&fake_log);
        assert!(log.contains("(a fat binary)"), "{extra:?}: {log}");
        assert!(!log.contains("axpy slice"), "{extra:?}: {log}");
    }
    // PTX only for compute_90, above the GPU's 8.0: loaded as given, whole, said once
    let _ = take(&interposer_log);
    let (code, out, err) =
        run(s.app_at(&app, &["3", "4096"], &[env.as_slice(), &[("FATBIN", &newer)]].concat()));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(result(&out), result(&whole), "{out}");
    let log = take(&fake_log);
    assert!(log.contains("cuModuleLoadData on 0 (a fat binary)"), "{log}");
    assert!(!log.contains("axpy slice"), "{log}");
    let said = take(&interposer_log);
    assert!(
        said.contains("a fat binary is loaded as given, its kernels whole (no PTX for compute_80 or below (it carries compute_90))"),
        "{said}"
    );
}
