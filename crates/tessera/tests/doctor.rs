//! `tessera doctor` on a node it can check end to end: a daemon on the fake CUDA driver
//! (NVIDIA's `cuda.h`) with the fake NVML (NVIDIA's `nvml.h`) — then the same node
//! broken one way at a time, each break named on its own FAIL line with its fix and
//! the exit status 1.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn doctor(dir: &Path, config: &Path, extra: &[&str]) -> (bool, String) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("doctor")
        .arg("--config")
        .arg(config)
        .arg("--nvml")
        .arg(dir.join("libnvidia-ml.so.1"))
        .arg("--gres-conf")
        .arg(dir.join("gres.conf"))
        .args(extra)
        .env_remove("TESSERA_SOCKET")
        .output()
        .unwrap();
    let said =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said)
}

fn line<'a>(said: &'a str, check: &str) -> &'a str {
    said.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(check))
        .unwrap_or_else(|| panic!("no {check} line in:\n{said}"))
}

#[test]
fn doctor_passes_a_healthy_node_and_names_each_break_with_its_fix() {
    let Some(scratch) = common::scratch("doctor") else { return };
    scratch.fake_driver();
    let dir = &scratch.dir;
    tessera_driver::testing::build_fake_nvml(&scratch.artifacts, &dir.join("libnvidia-ml.so.1"))
        .unwrap();
    let socket = dir.join("d.sock");
    let ledger = dir.join("ledger");
    let config = dir.join("tesserad.toml");
    let toml = format!(
        "socket = {socket:?}\nledger = {ledger:?}\nsocket_mode = 0o666\n[executor]\nkind = \"cuda\"\nlibrary = {:?}\n",
        dir.join("libcuda.so.1")
    );
    std::fs::write(&config, &toml).unwrap();
    let daemon = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["daemon", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // stopped however the test ends (a panic must not leave it holding the fake GPU)
    let mut daemon = common::KillOnDrop(daemon);
    common::wait_for_socket(&mut daemon.0, &socket).unwrap();
    // Slurm's gres.conf as `tessera slurm gres-conf` writes it for this daemon
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["slurm", "gres-conf", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(dir.join("gres.conf"), &out.stdout).unwrap();

    // healthy: every check passes, and each says what it found
    let (ok, said) = doctor(dir, &config, &[]);
    assert!(ok, "{said}");
    assert!(!said.contains("FAIL"), "{said}");
    assert!(line(&said, "driver").contains("CUDA 12."), "{said}");
    assert!(line(&said, "driver").contains("2 GPUs"), "{said}");
    assert!(
        line(&said, "nvml").starts_with("ok") && line(&said, "nvml").contains("2 GPUs"),
        "{said}"
    );
    assert!(
        line(&said, "daemon").starts_with("ok")
            && line(&said, "daemon").contains("2 GPUs (cuda (2 devices"),
        "{said}"
    );
    assert!(
        line(&said, "ledger").starts_with("ok") && line(&said, "ledger").contains("mode 600"),
        "{said}"
    );
    assert!(line(&said, "interposer").starts_with("ok"), "{said}");
    assert!(
        line(&said, "slurm").starts_with("ok")
            && line(&said, "slurm").contains("2 GPUs, 16 shards"),
        "{said}"
    );

    // a gres.conf that advertises GPUs the daemon does not have
    std::fs::write(
        dir.join("gres.conf"),
        "Name=gpu File=/dev/nvidia[0-3]\nName=shard Count=32 File=/dev/nvidia[0-3]\n",
    )
    .unwrap();
    let (ok, said) = doctor(dir, &config, &[]);
    assert!(!ok, "{said}");
    let slurm = line(&said, "slurm");
    assert!(slurm.starts_with("FAIL") && slurm.contains("4 GPUs, 32 shards"), "{said}");
    assert!(slurm.contains("fix: regenerate it: `tessera slurm gres-conf >"), "{said}");
    std::fs::write(dir.join("gres.conf"), &out.stdout).unwrap();

    // a ledger anyone can write
    std::fs::set_permissions(&ledger, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (ok, said) = doctor(dir, &config, &[]);
    assert!(!ok && line(&said, "ledger").starts_with("FAIL"), "{said}");
    assert!(line(&said, "ledger").contains("writable by other users — fix: chmod go-w"), "{said}");
    std::fs::set_permissions(&ledger, std::fs::Permissions::from_mode(0o600)).unwrap();

    // an interposer that does not load
    let junk = dir.join("libjunk.so");
    std::fs::write(&junk, "not an ELF object").unwrap();
    let (ok, said) = doctor(dir, &config, &["--preload", junk.to_str().unwrap()]);
    assert!(!ok && line(&said, "interposer").starts_with("FAIL"), "{said}");
    assert!(line(&said, "interposer").contains("does not load"), "{said}");

    // a configuration the daemon would refuse
    let broken = dir.join("broken.toml");
    std::fs::write(&broken, format!("{toml}\npolcy = \"fair\"\n")).unwrap();
    let (ok, said) = doctor(dir, &broken, &[]);
    assert!(!ok && line(&said, "config").starts_with("FAIL") && said.contains("polcy"), "{said}");

    // a driver that is not there, for a daemon on real GPUs
    let no_driver = dir.join("no-driver.toml");
    std::fs::write(&no_driver, toml.replace("libcuda.so.1", "missing/libcuda.so.1")).unwrap();
    let (ok, said) = doctor(dir, &no_driver, &[]);
    assert!(!ok && line(&said, "driver").starts_with("FAIL"), "{said}");
    assert!(line(&said, "driver").contains("fix: install NVIDIA's driver"), "{said}");

    // without its configuration file, the running daemon's ledger is checked, not the
    // built-in default (before: /dev/shm/tessera-ledger, whichever the daemon used);
    // and the interposer found beside tessera is named as built, not by its deps/ copy
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["doctor", "--config"])
        .arg(dir.join("absent.toml"))
        .arg("--socket")
        .arg(&socket)
        .arg("--nvml")
        .arg(dir.join("libnvidia-ml.so.1"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(line(&said, "ledger").contains(&ledger.display().to_string()), "{said}");
    // (when a build put one beside tessera, as `cargo build` does, as new as deps/'s)
    let exe = Path::new(env!("CARGO_BIN_EXE_tessera"));
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let beside = modified(&exe.with_file_name("libtessera_cuda.so"));
    let deps = modified(&exe.with_file_name("deps").join("libtessera_cuda.so"));
    if beside.is_some() && beside >= deps {
        assert!(!line(&said, "interposer").contains("/deps/"), "{said}");
    }

    // no daemon (stopped as a service is, so that it removes its GPU claims in /dev/shm)
    assert!(common::terminate(&mut daemon.0).success());
    assert!(!socket.exists());
    let (ok, said) = doctor(dir, &config, &[]);
    assert!(!ok && line(&said, "daemon").starts_with("FAIL"), "{said}");
    assert!(line(&said, "daemon").contains("fix: start it"), "{said}");
    assert!(said.contains("checks failed"), "{said}");
}
