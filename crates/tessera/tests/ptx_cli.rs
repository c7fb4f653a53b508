//! `tessera ptx slice` as an operator runs it (issue 58 item 2): the module with the
//! twins on standard output, a line per kernel on standard error, a clear error for a
//! file that is not PTX it can read.

use std::process::Command;

fn tessera() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
}

#[test]
fn ptx_slice_prints_the_twins_and_says_why_a_kernel_stays_whole() {
    let file =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../tessera-ptx/tests/data/edge/handwritten.ptx");
    let out = tessera().args(["ptx", "slice", file, "--grid", "900,900"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ptx = String::from_utf8(out.stdout).unwrap();
    let said = String::from_utf8(out.stderr).unwrap();
    let original = std::fs::read_to_string(file).unwrap();
    assert!(ptx.len() > original.len());
    assert!(ptx.contains(".visible .entry aligned_array__tessera_slice("));
    assert!(!ptx.contains("in_clusters__tessera_slice"));
    assert!(said.contains("aligned_array: sliced as aligned_array__tessera_slice"), "{said}");
    assert!(said.contains("bytes 56, 60, 64, 68"), "{said}");
    assert!(said.contains("in_clusters: left unsliced: it uses thread-block clusters"), "{said}");
    assert!(said.contains("900x900x1 blocks: 540 sub-kernels of up to 1500 blocks"), "{said}");
    // the interposer's sizes, given as it takes them or as flags
    let out = tessera()
        .args(["ptx", "slice", file, "--grid", "100,1,1", "--blocks", "7"])
        .env("TESSERA_KERNEL_SLICE_MIN_BLOCKS", "50")
        .output()
        .unwrap();
    let said = String::from_utf8(out.stderr).unwrap();
    assert!(said.contains("100x1x1 blocks: 15 sub-kernels of up to 7 blocks"), "{said}");
    let out = tessera().args(["ptx", "slice", file, "--blocks", "0"]).output().unwrap();
    assert!(!out.status.success(), "0 blocks per sub-kernel refused");
    // per multiprocessor (the interposer's default form): an H200's 132 at 62.5 make
    // 8,250 blocks a sub-kernel; another number per multiprocessor from the variable
    let grid = ["ptx", "slice", file, "--grid", "900,900"];
    let out = tessera().args(grid).args(["--sms", "132"]).output().unwrap();
    let said = String::from_utf8(out.stderr).unwrap();
    assert!(said.contains("900x900x1 blocks: 99 sub-kernels of up to 8250 blocks"), "{said}");
    let out = tessera()
        .args(grid)
        .args(["--sms", "132"])
        .env("TESSERA_KERNEL_SLICE_BLOCKS_PER_SM", "31.25")
        .output()
        .unwrap();
    let said = String::from_utf8(out.stderr).unwrap();
    assert!(said.contains("900x900x1 blocks: 197 sub-kernels of up to 4125 blocks"), "{said}");
    let both = tessera().args(grid).args(["--blocks", "7", "--blocks-per-sm", "3"]).output();
    assert!(!both.unwrap().status.success(), "a number of blocks and one per SM refused");
    let zero = tessera().args(grid).args(["--blocks-per-sm", "0"]).output().unwrap();
    assert!(!zero.status.success(), "0 blocks per multiprocessor refused");
    let json = tessera().args(["ptx", "slice", file, "--json"]).output().unwrap();
    let kernels: serde_json::Value =
        serde_json::from_slice(String::from_utf8(json.stderr).unwrap().trim().as_bytes()).unwrap();
    assert_eq!(kernels.as_array().unwrap().len(), 3);
    let dir = std::env::temp_dir().join(format!("tessera-ptx-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.ptx");
    std::fs::write(&bad, ".entry k( .param .pred p ) { ret; }\n").unwrap();
    let out = tessera().args(["ptx", "slice"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8(out.stderr).unwrap();
    assert!(said.contains("is not PTX the rewrite can read") && said.contains(".pred p"), "{said}");
    // a binary module is named as such, not read as text
    let cubin = dir.join("k.cubin");
    std::fs::write(&cubin, b"\x7fELF\x02\x01\x01\x33binary").unwrap();
    let out = tessera().args(["ptx", "slice"]).arg(&cubin).output().unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8(out.stderr).unwrap();
    assert!(said.contains("binary module (a cubin), not PTX"), "{said}");
    // a fat binary: its PTX for the GPU is rewritten, as the interposer does; one with
    // no PTX at or below the GPU's architecture is said so
    match tessera_driver::testing::nvidia_artifacts_for("13.0") {
        Ok(cuda13) => {
            let fatbin = dir.join("k.fatbin");
            let made = Command::new(cuda13.join("bin/fatbinary"))
                .arg("--64")
                .arg(format!("--create={}", fatbin.display()))
                .arg(format!("--image3=kind=ptx,sm=90,file={file}"))
                .output()
                .unwrap();
            assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
            let out = tessera().args(["ptx", "slice"]).arg(&fatbin).output().unwrap();
            let said = String::from_utf8(out.stderr).unwrap();
            assert!(out.status.success(), "{said}");
            assert!(
                String::from_utf8(out.stdout).unwrap().contains("aligned_array__tessera_slice(")
            );
            assert!(
                said.contains("aligned_array: sliced as aligned_array__tessera_slice"),
                "{said}"
            );
            let out =
                tessera().args(["ptx", "slice", "--arch", "80"]).arg(&fatbin).output().unwrap();
            assert!(!out.status.success());
            let said = String::from_utf8(out.stderr).unwrap();
            assert!(said.contains("a fat binary whose kernels would run unsliced"), "{said}");
            assert!(
                said.contains("no PTX for compute_80 or below (it carries compute_90)"),
                "{said}"
            );
        }
        Err(why) => eprintln!("SKIPPED (a fat binary): NVIDIA's CUDA 13.0 fatbinary: {why}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
