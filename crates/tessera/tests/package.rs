//! The Debian package (issue 29): built with cargo-deb from the workspace
//! (`scripts/build-deb.sh`), installed with `dpkg -i`, its unit checked by systemd's own
//! `systemd-analyze verify`, its daemon started as the unit's `ExecStart` says (as the
//! unit's user, in the runtime directory systemd would make, emulated since there is no
//! GPU), a program run by another user under the installed `tessera run` without
//! flags, and the package purged leaving nothing behind. Needs root (SKIPPED
//! otherwise); it is its own test binary so that no other test runs while the node's
//! socket exists. Beside it, the maintainer scripts alone in a mount namespace: purge
//! removes only what the package made, and nothing in use.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const UNIT: &str = "/usr/lib/systemd/system/tesserad.service";
const SOCKET: &str = "/run/tessera/tesserad.sock";
const LEDGER: &str = "/dev/shm/tessera-ledger";
/// postinst's record of the user and group it made
const CREATED: &str = "/var/lib/tessera/created";

fn run(cmd: &mut Command) -> std::process::Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn installed() -> bool {
    run(Command::new("dpkg-query").args(["-W", "-f", "${Status}", "tessera"]))
        .stdout
        .starts_with(b"install ok installed")
}

fn getent(db: &str, name: &str) -> bool {
    run(Command::new("getent").args([db, name])).status.success()
}

/// Whatever happens, the daemon is stopped and the package purged.
struct Cleanup {
    daemon: Option<Child>,
    /// A directory other users can read, of this test's.
    public: Option<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            common::terminate(&mut d);
        }
        if installed() {
            let _ = Command::new("dpkg").args(["--purge", "tessera"]).output();
        }
        let _ = std::fs::remove_dir_all("/run/tessera");
        if let Some(p) = self.public.take() {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// The `[Service]` settings of a unit file (last one wins, as in systemd).
fn service_settings(unit: &str) -> BTreeMap<String, String> {
    let mut section = "";
    let mut out = BTreeMap::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[Service]"
            && let Some((k, v)) = line.split_once('=')
            && !line.starts_with('#')
        {
            out.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    out
}

#[test]
fn the_debian_package_installs_serves_a_user_and_purges_cleanly() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: installing a package with dpkg needs root");
        return;
    }
    if Command::new("dpkg").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no dpkg on this machine (not Debian)");
        return;
    }
    // the docs' `needs-root` blocks install the package too (tests/doc_commands.rs)
    let _lock = common::package_lock();
    if installed() {
        eprintln!(
            "SKIPPED: a tessera package is installed on this machine; the test would remove it"
        );
        return;
    }
    for (path, what) in [(SOCKET, "a node daemon's socket"), (LEDGER, "a ledger")] {
        if Path::new(path).exists() {
            eprintln!("SKIPPED: {path} exists ({what} of something else on this machine)");
            return;
        }
    }
    if getent("passwd", "tessera") || getent("group", "tessera") {
        // postinst would not make them, and purge would rightly keep them
        eprintln!("SKIPPED: this machine has a tessera user or group of its own");
        return;
    }
    if let Err(why) = common::debian_tool("systemd-analyze", "systemd") {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let Some(scratch) = common::scratch("package") else { return };
    scratch.fake_driver();
    let slurm_dir_before = Path::new("/etc/slurm").exists();

    // build: the workspace's own script, packaging the build this test run made (a
    // release build of its own took minutes of the suite; the packaging is the same)
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = run(Command::new("bash")
        .arg(root.join("scripts/build-deb.sh"))
        .arg(scratch.dir.join("deb"))
        .env("TESSERA_DEB_PROFILE", "test"));
    assert!(out.status.success(), "build-deb.sh: {}", text(&out));
    let deb = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().lines().last().unwrap());
    assert!(deb.extension().is_some_and(|e| e == "deb"), "{}", deb.display());
    // the binaries are stripped; their debug info is in a -dbgsym package beside it
    let dbgsym = std::fs::read_dir(scratch.dir.join("deb"))
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("tessera-dbgsym_"));
    assert!(dbgsym, "no tessera-dbgsym package beside {}", deb.display());

    let mut cleanup = Cleanup { daemon: None, public: None };
    let out = run(Command::new("dpkg").arg("-i").arg(&deb));
    assert!(out.status.success(), "dpkg -i: {}", text(&out));
    for binary in ["/usr/bin/tessera", "/usr/lib/tessera/libtessera_cuda.so"] {
        let sections = text(&run(Command::new("readelf").args(["-S", "-W", binary])));
        assert!(!sections.contains(".debug_info"), "{binary} is not stripped");
    }
    let files: Vec<PathBuf> =
        String::from_utf8_lossy(&run(Command::new("dpkg").args(["-L", "tessera"])).stdout)
            .lines()
            .map(PathBuf::from)
            .collect();
    for want in [
        "/usr/bin/tessera",
        "/usr/lib/tessera/libtessera_cuda.so",
        "/usr/lib/libtessera_ledger.so",
        "/usr/lib/libtessera_client.so",
        "/usr/include/tessera/tessera_ledger.h",
        "/usr/include/tessera/tessera_client.h",
        "/etc/tessera/tesserad.toml",
        "/etc/slurm/tessera-prolog.sh",
        "/etc/slurm/tessera-epilog.sh",
        "/etc/slurm/tessera-taskprolog.sh",
        UNIT,
    ] {
        assert!(files.iter().any(|f| f == Path::new(want)), "{want} not in the package: {files:?}");
        assert!(Path::new(want).is_file(), "{want} not installed");
    }
    assert!(
        getent("group", "tessera") && getent("passwd", "tessera"),
        "postinst made no tessera user and group"
    );
    // and wrote down that it made them, for purge
    let record = std::fs::read_to_string(CREATED).unwrap_or_default();
    assert!(
        record.lines().any(|l| l.starts_with("user tessera "))
            && record.lines().any(|l| l.starts_with("group tessera ")),
        "{CREATED}: {record:?}"
    );
    // the Slurm hooks call the installed command at the node's socket, as docs/slurm.md says
    for hook in ["prolog", "epilog", "task-prolog"] {
        let file = format!("/etc/slurm/tessera-{}.sh", hook.replace('-', ""));
        let body = std::fs::read_to_string(&file).unwrap();
        assert!(
            body.contains(&format!("exec /usr/bin/tessera slurm {hook} --socket {SOCKET}")),
            "{file}: {body}"
        );
        let docs = std::fs::read_to_string(root.join("docs/slurm.md")).unwrap();
        assert!(
            docs.contains(&file)
                && docs.contains(&format!("/usr/bin/tessera slurm {hook} --socket {SOCKET}")),
            "docs/slurm.md does not show {file} as installed"
        );
    }

    // systemd's own check of the unit
    let out = run(Command::new("systemd-analyze").args(["verify", UNIT]));
    assert!(out.status.success(), "systemd-analyze verify: {}", text(&out));
    let said = text(&out);
    assert!(!said.contains("tesserad.service:"), "systemd-analyze has remarks on the unit: {said}");

    // the daemon as ExecStart says, as the unit's user, in the runtime directory
    // systemd makes (emulated: no GPU here)
    let unit = service_settings(&std::fs::read_to_string(UNIT).unwrap());
    let exec: Vec<&str> = unit["ExecStart"].split_whitespace().collect();
    assert_eq!(exec[..2], ["/usr/bin/tessera", "daemon"], "{exec:?}");
    let run_dir = Path::new("/run").join(&unit["RuntimeDirectory"]);
    std::fs::create_dir_all(&run_dir).unwrap();
    let out =
        run(Command::new("chown").arg(format!("{}:{}", unit["User"], unit["Group"])).arg(&run_dir));
    assert!(out.status.success(), "{}", text(&out));
    let out = run(Command::new("chmod").arg(&unit["RuntimeDirectoryMode"]).arg(&run_dir));
    assert!(out.status.success(), "{}", text(&out));
    let daemon = Command::new("setpriv")
        .args(["--reuid", &unit["User"], "--regid", &unit["Group"], "--init-groups", "--"])
        .args(&exec)
        .arg("--emulate")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let daemon = cleanup.daemon.insert(daemon);
    common::wait_for_socket(daemon, Path::new(SOCKET)).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(SOCKET).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o666, "every user reaches the node socket");
    // the ledger shared with the tessera group, nobody else
    let meta = std::fs::metadata(LEDGER).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    let gid =
        String::from_utf8_lossy(&run(Command::new("getent").args(["group", "tessera"])).stdout)
            .split(':')
            .nth(2)
            .unwrap()
            .trim()
            .parse::<u32>()
            .unwrap();
    assert_eq!(meta.gid(), gid, "the ledger belongs to group tessera");
    // metrics on loopback
    let mut conn =
        std::net::TcpStream::connect("127.0.0.1:9400").expect("metrics on 127.0.0.1:9400");
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut page = String::new();
    conn.read_to_string(&mut page).unwrap();
    assert!(page.starts_with("HTTP/1.") && page.contains("tessera_"), "{page:.300}");

    // another user's program, under the installed `tessera run` with no flags: it
    // finds the interposer in /usr/lib/tessera and the daemon at the node's socket
    let dir = &scratch.dir;
    let src = root.join("crates/tessera-cuda/tests/driver_app.c");
    let app =
        tessera_driver::testing::build_c_program(&scratch.artifacts, &src, &dir.join("driver_app"))
            .unwrap();
    // another user must reach the program and the fake driver: the checkout may sit in
    // a directory only root can enter (mktemp's 0700), so they go to one of their own
    let dir = &Path::new("/tmp").join(format!("tessera-package-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir(dir).unwrap();
    cleanup.public = Some(dir.clone());
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy(&app, dir.join("driver_app")).unwrap();
    std::fs::copy(scratch.dir.join("libcuda.so.1"), dir.join("libcuda.so.1")).unwrap();
    let app = dir.join("driver_app");
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "--"])
            .args(args)
            .env_remove("TESSERA_SOCKET")
            .env_remove("XDG_RUNTIME_DIR")
            .env("LD_LIBRARY_PATH", dir)
            // the fake driver shows the machine the daemon emulates: 4 GPUs of 4 GiB
            .env("FAKE_CUDA_DEVICES", "4")
            .env("FAKE_CUDA_DEVICE_MIB", "4096")
            .current_dir("/")
            .output()
            .unwrap()
    };
    let out = as_nobody(&[
        "/usr/bin/tessera",
        "run",
        "--memory",
        "512MiB",
        "--",
        app.to_str().unwrap(),
        "meminfo",
        "100",
    ]);
    let said = text(&out);
    assert!(out.status.success(), "tessera run as nobody: {said}");
    assert!(
        said.contains("meminfo 536870912 536870912"),
        "the daemon's share, not the GPU's: {said}"
    );
    // and the daemon counted it: status through the node socket, no flags
    let out = as_nobody(&["/usr/bin/tessera", "status", "--json"]);
    assert!(out.status.success(), "tessera status: {}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["executor"].as_str().unwrap().starts_with("emulated"), "{report}");
    assert_eq!(report["gpus"].as_array().unwrap().len(), 4);

    // the installed doctor: daemon, socket, ledger and interposer fine; the driver the
    // configuration asks for is missing here, and it says so and fails
    let out = run(Command::new("/usr/bin/tessera").arg("doctor").env_remove("TESSERA_SOCKET"));
    let said = text(&out);
    for ok in [
        "ok    daemon",
        "ok    socket",
        "ok    ledger",
        "ok    interposer  /usr/lib/tessera/libtessera_cuda.so",
        "ok    config      /etc/tessera/tesserad.toml",
    ] {
        assert!(said.contains(ok), "doctor lacks {ok:?}: {said}");
    }
    assert!(said.contains("FAIL  driver") && !out.status.success(), "{said}");

    // stop as systemd would: SIGTERM, then the runtime directory goes
    let mut daemon = cleanup.daemon.take().unwrap();
    let status = common::terminate(&mut daemon);
    let mut log = String::new();
    daemon.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    assert!(status.success(), "the daemon's exit: {status}\n{log}");
    std::fs::remove_dir_all(&run_dir).unwrap();

    // purge: nothing left
    let out = run(Command::new("dpkg").args(["--purge", "tessera"]));
    assert!(out.status.success(), "dpkg --purge: {}", text(&out));
    // the package's files, and its own directories (the system's, /usr/bin and such, stay)
    let left: Vec<&PathBuf> = files
        .iter()
        .filter(|f| f.exists() && (!f.is_dir() || f.to_string_lossy().contains("tessera")))
        .collect();
    assert!(left.is_empty(), "left after purge: {left:?}");
    for gone in [
        "/etc/tessera",
        "/usr/lib/tessera",
        "/usr/include/tessera",
        "/usr/share/doc/tessera",
        "/var/lib/tessera",
        LEDGER,
        "/run/tessera",
    ] {
        assert!(!Path::new(gone).exists(), "{gone} left after purge");
    }
    if !slurm_dir_before {
        assert!(!Path::new("/etc/slurm").exists(), "/etc/slurm left after purge");
    }
    assert!(
        !getent("group", "tessera") && !getent("passwd", "tessera"),
        "the tessera user or group left after purge"
    );
}

/// Purge removes only what the package made, and nothing in use ("the front door",
/// item 5): `packaging/debian/postinst configure` and `postrm purge` run on a node of
/// their own — a mount namespace where /etc is a copy of this machine's and /run,
/// /dev/shm and /var are empty (`tests/data/postrm_purge.sh`) — in five scenarios:
/// another owner's ledger at the package's path, held open by a process of that owner,
/// stays (the runtime directory, user and group the package made go); the package's
/// daemon's own ledger stays while a client holds it open; with nobody using it, it
/// goes with its lock file, its clients' records, the runtime directory, the user and
/// the group and postinst's record; a site's own `tessera` user and group stay; and a
/// site's own group stays, with its id, when the user the package made in it goes.
/// Before, purge removed every one of them. Needs root and mount namespaces (SKIPPED
/// otherwise, with why).
#[test]
fn purge_removes_only_what_the_package_made_and_nothing_in_use() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: the maintainer scripts' users and groups need root");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/postrm_purge.sh");
    // the copy of /etc: not under a path the namespace replaces
    let scratch =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("postrm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let out = match Command::new("unshare")
        .args(["--mount", "--propagation", "private", "bash"])
        .arg(&script)
        .arg(&root)
        .arg(&scratch)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("SKIPPED: no unshare (util-linux) to make a mount namespace: {e}");
            return;
        }
    };
    let _ = std::fs::remove_dir_all(&scratch);
    let (said, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() && err.starts_with("unshare:") {
        eprintln!("SKIPPED: no mount namespace here: {}", err.trim());
        return;
    }
    assert!(out.status.success(), "{script:?}: {said}{err}");
    let expect = |scenario: &str, lines: &[&str]| {
        for line in lines {
            let line = format!("{scenario} {line}");
            assert!(said.lines().any(|l| l == line), "no {line:?} in\n{said}{err}");
        }
    };
    let gone = ["run-dir absent", "user absent", "group absent", "record absent"];
    // another owner's live ledger: kept, and purge says why; the rest goes
    expect("other-owners-live-ledger", &["ledger present"]);
    expect("other-owners-live-ledger", &gone);
    assert!(
        said.contains(
            "other-owners-live-ledger said: tessera: purge leaves /dev/shm/tessera-ledger "
        ) && said.contains("/dev/shm/tessera-ledger belongs to uid 65534, not to the tessera user"),
        "{said}"
    );
    // the package's ledger in use: kept, records and all
    expect("in-use-ledger", &["ledger present", "records present"]);
    expect("in-use-ledger", &gone);
    assert!(
        said.contains("in-use-ledger said: tessera: purge leaves /dev/shm/tessera-ledger ")
            && said.contains("/dev/shm/tessera-ledger is in use"),
        "{said}"
    );
    // nobody's using it: all of it goes, and purge says nothing
    expect("unused", &["ledger absent", "records absent"]);
    expect("unused", &gone);
    assert!(!said.contains("unused said:"), "{said}");
    // a site's own user and group stay
    expect("site-user-and-group", &["user present", "group present"]);
    expect(
        "site-user-and-group",
        &[
            "said: tessera: purge leaves the user tessera: the package did not make it",
            "said: tessera: purge leaves the group tessera: the package did not make it",
        ],
    );
    // a site's own group stays, the same group, when the package's user in it goes
    let before = said
        .lines()
        .find_map(|l| l.strip_prefix("site-group group-id-before "))
        .unwrap_or_else(|| panic!("{said}"));
    expect("site-group", &["user absent", "group present", &format!("group-id {before}")]);
}
