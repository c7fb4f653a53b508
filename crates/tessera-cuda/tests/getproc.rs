//! `cuGetProcAddress` by version (issue 52, item 1): for every entry point the fake
//! driver implements, at every version a variant was introduced (and the one before),
//! at 12000–12090 and 13000, with and without the per-thread-stream flag, the driver
//! answers the variant NVIDIA's `cudaTypedefs.h` says that version resolves to
//! (`cuStreamGetCaptureInfo` at 11030 is `_v2`, at 12030 `_v3`; `cuMemcpyHtoD` with the
//! flag is `cuMemcpyHtoD_v2_ptds`; a version older than every variant finds nothing),
//! and under the interposer a governed variant is answered by the interposer's hook of
//! that exact variant — never the real function, never another variant's hook. The
//! table is the header's (`tessera_driver::testing::proc_variants`), for CUDA 12.9's
//! and 13.0's headers; the fake is built against each. SKIPPED where the headers
//! cannot be fetched.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tessera_driver::testing::{ProcVariant, proc_variants, resolve};
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, ExecutorKind};

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD: u64 = 2;

/// The dynamic symbols `library` defines.
fn exports(library: &Path) -> BTreeSet<String> {
    let out = Command::new("nm").args(["-D", "--defined-only"]).arg(library).output().unwrap();
    assert!(out.status.success(), "nm {}", library.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
        .collect()
}

/// The questions: each name the fake implements a variant of, at each version that
/// matters, with and without the per-thread flag.
fn questions(variants: &[ProcVariant], fake: &BTreeSet<String>) -> Vec<(String, u32, u64)> {
    let names: BTreeSet<&str> =
        variants.iter().filter(|v| fake.contains(&v.symbol)).map(|v| v.name.as_str()).collect();
    let mut asked = Vec::new();
    for name in names {
        let mut versions: BTreeSet<u32> = (12000..=12090).step_by(10).collect();
        versions.insert(13000);
        for v in variants.iter().filter(|v| v.name == name) {
            versions.extend([v.version, v.version - 1]);
        }
        for version in versions {
            for flags in [0, PER_THREAD] {
                asked.push((name.to_owned(), version, flags));
            }
        }
    }
    asked
}

/// `getproc_app` fed `questions`: each line's answer, `(result, library, symbol)`.
fn ask(
    app: &Path,
    env: &[(&str, &std::ffi::OsStr)],
    questions: &[(String, u32, u64)],
) -> Vec<(i32, String, String)> {
    let mut child = Command::new(app)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = String::new();
    for (name, version, flags) in questions {
        input.push_str(&format!("{name} {version} {flags}\n"));
    }
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "getproc_app: {}", String::from_utf8_lossy(&out.stderr));
    let answers: Vec<(i32, String, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[3].parse().unwrap(), f[4].to_owned(), f[5].to_owned())
        })
        .collect();
    assert_eq!(answers.len(), questions.len(), "an answer per question");
    answers
}

fn check(version: &str) {
    let Some(artifacts) =
        tessera_driver::testing::nvidia_artifacts_or_skip_for(version, "cudaTypedefs.h")
    else {
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("getproc-{version}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fake =
        tessera_driver::testing::build_fake_driver(&artifacts, &dir.join("libcuda.so.1")).unwrap();
    let app = tessera_driver::testing::build_c_program(
        &artifacts,
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/getproc_app.c"),
        &dir.join("getproc_app"),
    )
    .unwrap();
    let preload = std::env::current_exe().unwrap().parent().unwrap().join("libtessera_cuda.so");
    let variants = proc_variants(&artifacts).unwrap();
    let (fake_has, hooked) = (exports(&fake), exports(&preload));
    let asked = questions(&variants, &fake_has);
    assert!(asked.len() > 500, "{} questions", asked.len());

    let daemon = Daemon::start(&DaemonConfig {
        socket: dir.join("d.sock"),
        ledger: dir.join("ledger"),
        gpus: 1,
        gpu_memory_mib: 1024,
        executor: ExecutorKind::Emulated { speedup: 10.0 },
        ..DaemonConfig::default()
    })
    .unwrap();
    let libs = dir.as_os_str();
    let direct = ask(&app, &[("LD_LIBRARY_PATH", libs)], &asked);
    let socket = dir.join("d.sock");
    let interposed = ask(
        &app,
        &[
            ("LD_LIBRARY_PATH", libs),
            ("LD_PRELOAD", preload.as_os_str()),
            ("TESSERA_SOCKET", socket.as_os_str()),
            ("TESSERA_LEDGER", dir.join("ledger").as_os_str()),
        ],
        &asked,
    );
    daemon.shutdown();

    let mut wrong = Vec::new();
    let mut governed = 0;
    for (i, (name, v, flags)) in asked.iter().enumerate() {
        let want =
            resolve(&variants, name, *v, *flags == PER_THREAD).filter(|s| fake_has.contains(*s));
        let want_direct = want.map(|s| ("libcuda.so.1", s));
        let want_hooked = want.map(|s| {
            if hooked.contains(s) {
                governed += 1;
                ("libtessera_cuda.so", s)
            } else {
                ("libcuda.so.1", s)
            }
        });
        for (how, got, want) in
            [("direct", &direct[i], want_direct), ("interposed", &interposed[i], want_hooked)]
        {
            let got_pair = (got.0 == 0).then_some((got.1.as_str(), got.2.as_str()));
            if got_pair != want {
                wrong.push(format!("{how} {name} {v} flags {flags}: got {got:?}, want {want:?}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        wrong.is_empty(),
        "CUDA {version}: {} wrong answers:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(governed > 300, "CUDA {version}: only {governed} answers were hooks");
    eprintln!("CUDA {version}: {} questions, {governed} answered by a hook", asked.len());
}

#[test]
fn cuda_12_9_versions_resolve_to_their_variants_hooks() {
    check("12.9");
}

#[test]
fn cuda_13_0_versions_resolve_to_their_variants_hooks() {
    check("13.0");
}
