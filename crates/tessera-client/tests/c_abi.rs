//! The client's C ABI: the committed header matches the code, and a C program using it
//! runs against a daemon.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Set TESSERA_BLESS=1 to rewrite the header after changing the ABI.
#[test]
fn committed_header_is_current() {
    let config = cbindgen::Config::from_file(crate_dir().join("cbindgen.toml")).unwrap();
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir().join("src/ffi.rs"))
        .generate()
        .unwrap();
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let fresh = String::from_utf8(fresh).unwrap();
    let path = crate_dir().join("include/tessera_client.h");
    if std::env::var_os("TESSERA_BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).unwrap_or_default() == fresh,
        "{} is stale: rerun with TESSERA_BLESS=1",
        path.display()
    );
}

#[test]
fn the_c_example_runs_against_a_daemon() {
    let lib = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    assert!(lib.join("libtessera_client.so").is_file(), "cdylib not found in {}", lib.display());
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = tmp.join("client_demo");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(crate_dir().join("include"))
        .arg(crate_dir().join("../../examples/client_demo.c"))
        .arg("-L")
        .arg(&lib)
        .arg("-ltessera_client")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler `{cc}`: {e}"));
    assert!(built.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&built.stderr));

    let tag = std::process::id();
    let ledger = tmp.join(format!("c-client-ledger-{tag}"));
    let _ = std::fs::remove_file(&ledger);
    let cfg = tesserad::config::DaemonConfig {
        socket: tmp.join(format!("c-client-{tag}.sock")),
        ledger,
        gpus: 2,
        executor: tesserad::config::ExecutorKind::Emulated { speedup: 10.0 },
        ..Default::default()
    };
    let daemon = tesserad::Daemon::start(&cfg).unwrap();
    // cargo's LD_LIBRARY_PATH would win over the rpath and may hold an older build
    let run = Command::new(&exe).env_remove("LD_LIBRARY_PATH").arg(&cfg.socket).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "C client failed ({:?}):\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("4 of 4 done"), "{stdout}");
    daemon.shutdown();
}
