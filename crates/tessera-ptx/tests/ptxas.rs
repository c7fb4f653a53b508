//! The rewrite against NVIDIA's own tools (issue 58 item 2): the PTX that numba-cuda
//! (NVVM, and its LTO-IR as nvJitLink links it to PTX) and NVRTC emit for a set of
//! kernels, and kernels written for the edge cases, rewritten and assembled by `ptxas`
//! (PyPI's CUDA 12.9 wheel) for sm_80 and sm_90.
//! Each corpus kernel must get a twin, and the module with the twins must assemble,
//! the twin's symbol in the cubin. No GPU: that the twin computes what the original
//! does is the GPU check's (`scripts/gpu-check.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;
use tessera_driver::testing::nvidia_artifacts_or_skip;
use tessera_ptx::{Outcome, Unsliced, rewrite};

/// The corpus compilers' python (`scripts/python-client.sh numba-cuda`), or why none.
fn corpus_python() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/python-client.sh");
    let out =
        Command::new("bash").arg(&script).arg("numba-cuda").output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("").to_string());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Assemble `ptx` for `arch` with `ptxas`; the cubin, or ptxas' complaint.
fn assemble(
    ptxas: &Path,
    ptx: &str,
    arch: &str,
    dir: &Path,
    name: &str,
) -> Result<Vec<u8>, String> {
    let src = dir.join(format!("{name}.{arch}.ptx"));
    let bin = dir.join(format!("{name}.{arch}.cubin"));
    std::fs::write(&src, ptx).map_err(|e| e.to_string())?;
    let out = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    std::fs::read(&bin).map_err(|e| e.to_string())
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn the_twins_of_real_compilers_ptx_assemble_with_ptxas() {
    let Some(artifacts) = nvidia_artifacts_or_skip("ptxas") else { return };
    let ptxas = artifacts.join("bin/ptxas");
    let dir = std::env::temp_dir().join(format!("tessera-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files: Vec<(String, String)> = Vec::new();
    let edge = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/edge/handwritten.ptx");
    files.push(("handwritten".into(), std::fs::read_to_string(&edge).unwrap()));
    match corpus_python() {
        Ok(python) => {
            let corpus = dir.join("corpus");
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/corpus.py");
            let out = Command::new(&python).arg(&script).arg(&corpus).output().unwrap();
            assert!(out.status.success(), "corpus.py: {}", String::from_utf8_lossy(&out.stderr));
            let mut names: Vec<PathBuf> =
                std::fs::read_dir(&corpus).unwrap().map(|e| e.unwrap().path()).collect();
            names.sort();
            assert!(names.len() >= 9, "{names:?}");
            // numba's default path: LTO-IR linked to PTX by nvJitLink (issue 58)
            assert!(
                names.iter().filter(|p| p.to_string_lossy().contains("numba_lto_")).count() == 4,
                "{names:?}"
            );
            for p in names {
                let name = p.file_stem().unwrap().to_string_lossy().into_owned();
                files.push((name, std::fs::read_to_string(&p).unwrap()));
            }
        }
        Err(why) => eprintln!("SKIPPED (numba-cuda and NVRTC's corpus): {why}"),
    }
    let mut twins = 0;
    for (name, ptx) in &files {
        let r = rewrite(ptx).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!r.kernels.is_empty(), "{name}: no kernel found");
        for k in &r.kernels {
            match (&k.outcome, name.as_str(), k.name.as_str()) {
                (Outcome::Sliced { .. }, _, _) => twins += 1,
                (Outcome::Unsliced(Unsliced::Clusters { .. }), "handwritten", "in_clusters") => {}
                (o, _, _) => panic!("{name}: {} left unsliced: {o:?}", k.name),
            }
        }
        for arch in ["sm_80", "sm_90"] {
            // the hand-written module targets sm_90 (clusters)
            if name == "handwritten" && arch == "sm_80" {
                continue;
            }
            assemble(&ptxas, ptx, arch, &dir, &format!("{name}.orig")).unwrap_or_else(|e| {
                panic!("{name}: the original does not assemble for {arch}: {e}")
            });
            let cubin = assemble(&ptxas, &r.ptx, arch, &dir, name).unwrap_or_else(|e| {
                panic!("{name}: the rewrite does not assemble for {arch}: {e}")
            });
            for k in &r.kernels {
                if let Outcome::Sliced { twin, .. } = &k.outcome {
                    assert!(contains(&cubin, twin), "{name}: {twin} is not in the {arch} cubin");
                }
            }
        }
    }
    assert!(twins >= 2, "twins made: {twins}");
    let _ = std::fs::remove_dir_all(&dir);
}
