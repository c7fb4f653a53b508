//! Fat binaries as NVIDIA's `fatbinary` (PyPI's CUDA 13.0 nvcc wheel) writes them
//! (issue 58): PTX for two virtual architectures and a cubin, stored as is, as an LZ4
//! block and as Zstandard (the default), read back by `tessera_ptx::fatbin` to the
//! same text, the right entry for each GPU, and rewritten with twins that `ptxas`
//! assembles; ptxas's cubins' lengths read from their headers (`tessera_ptx::elf`). No
//! GPU.

use std::path::Path;
use std::process::Command;
use tessera_driver::testing::nvidia_artifacts_or_skip_for;
use tessera_ptx::fatbin::{Compression, FatbinError, Kind, entries, payload, ptx_for};
use tessera_ptx::{Outcome, rewrite};

/// A kernel for compute_80 reading its block index and the grid's size.
const PTX80: &str = "\
// one block per element, a grid-stride loop over the rest
.version 7.0
.target sm_80
.address_size 64

.visible .entry scale(.param .u64 x, .param .u32 n)
{
\t.reg .pred %p<2>;
\t.reg .b32 %r<8>;
\t.reg .b64 %rd<4>;
\tld.param.u64 %rd1, [x];
\tld.param.u32 %r1, [n];
\tmov.u32 %r2, %ctaid.x;
\tmov.u32 %r3, %nctaid.x;
$loop:
\tsetp.ge.u32 %p1, %r2, %r1;
\t@%p1 bra $done;
\tmul.wide.u32 %rd2, %r2, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r2;
\tadd.u32 %r2, %r2, %r3;
\tbra $loop;
$done:
\tret;
}
";

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn fatbinarys_images_are_read_back_and_their_ptx_sliced() {
    let Some(artifacts) = nvidia_artifacts_or_skip_for("13.0", "fatbinary") else { return };
    let (fatbinary, ptxas) = (artifacts.join("bin/fatbinary"), artifacts.join("bin/ptxas"));
    let dir = std::env::temp_dir().join(format!("tessera-fatbin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let edge = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/edge/handwritten.ptx");
    let ptx90 = std::fs::read_to_string(&edge).unwrap();
    let (p80, p90, cubin) = (dir.join("k80.ptx"), dir.join("k90.ptx"), dir.join("k90.cubin"));
    std::fs::write(&p80, PTX80).unwrap();
    std::fs::write(&p90, &ptx90).unwrap();
    run(Command::new(&ptxas).arg("-arch=sm_90").arg(&p90).arg("-o").arg(&cubin)).unwrap();
    let mut texts = Vec::new();
    for mode in ["none", "speed", "size", "default"] {
        let fatbin = dir.join(format!("k.{mode}.fatbin"));
        run(Command::new(&fatbinary)
            .arg("--64")
            .arg(format!("--create={}", fatbin.display()))
            .arg(format!("--compress-mode={mode}"))
            .arg(format!("--image3=kind=ptx,sm=80,file={}", p80.display()))
            .arg(format!("--image3=kind=elf,sm=90,file={}", cubin.display()))
            .arg(format!("--image3=kind=ptx,sm=90,file={}", p90.display())))
        .unwrap_or_else(|e| panic!("fatbinary, {mode}: {e}"));
        let b = std::fs::read(&fatbin).unwrap();
        let all = entries(&b).unwrap_or_else(|e| panic!("{mode}: {e}"));
        let mut seen: Vec<(Kind, u32)> = all.iter().map(|e| (e.kind, e.arch)).collect();
        seen.sort_by_key(|(k, a)| (*a, format!("{k:?}")));
        assert_eq!(seen, [(Kind::Ptx, 80), (Kind::Elf, 90), (Kind::Ptx, 90)], "{mode}");
        let compressions: Vec<Compression> =
            all.iter().filter(|e| e.kind == Kind::Ptx).map(|e| e.compression).collect();
        let want = match mode {
            "none" => Compression::None,
            "speed" => Compression::Lz4,
            _ => Compression::Zstd,
        };
        assert!(compressions.iter().all(|c| *c == want), "{mode}: {compressions:?}");
        // the cubin is the one ptxas made, byte for byte (compressed too at "size")
        let (i, elf) = all.iter().enumerate().find(|(_, e)| e.kind == Kind::Elf).unwrap();
        let stored = payload(&b, i, elf).unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert!(stored.starts_with(&std::fs::read(&cubin).unwrap()), "{mode}: the cubin {elf:?}");
        // the driver's choice for each GPU
        let for80 = ptx_for(&b, 80).unwrap();
        let for90 = ptx_for(&b, 90).unwrap();
        assert_eq!(ptx_for(&b, 86).unwrap(), for80, "{mode}: an sm_86 GPU takes compute_80");
        assert!(matches!(ptx_for(&b, 75), Err(FatbinError::NoPtx { arch: 75, .. })), "{mode}");
        // fatbinary drops comments; the code is what was given
        assert!(for80.contains(".visible .entry scale(") && !for80.contains("grid-stride"));
        assert!(for90.contains(".entry no_params()") && for90.contains(".target sm_90"));
        texts.push((for80, for90));
    }
    assert!(texts.windows(2).all(|w| w[0] == w[1]), "every compression reads back the same text");
    // the PTX taken out is sliced, and the twins assemble
    let (for80, _) = &texts[0];
    let r = rewrite(for80).unwrap();
    let Outcome::Sliced { twin, .. } = &r.kernels[0].outcome else {
        panic!("scale left whole: {:?}", r.kernels[0].outcome)
    };
    let sliced = dir.join("sliced.ptx");
    std::fs::write(&sliced, &r.ptx).unwrap();
    let out = dir.join("sliced.cubin");
    run(Command::new(&ptxas).arg("-arch=sm_80").arg(&sliced).arg("-o").arg(&out)).unwrap();
    let bin = std::fs::read(&out).unwrap();
    assert!(bin.windows(twin.len()).any(|w| w == twin.as_bytes()), "{twin} not in the cubin");
    // ptxas's cubins are as long as their headers say (how the interposer finds the
    // length of a cubin handed to the driver by address)
    for c in [&cubin, &out] {
        let b = std::fs::read(c).unwrap();
        assert_eq!(tessera_ptx::elf::extent_of(&b), Ok(b.len() as u64), "{}", c.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
