//! Every command block in README.md and docs/ (`sh`, `bash` and `console`) is run,
//! verbatim, in the order a reader meets it, so that the docs cannot drift from the code.
//!
//! Each page runs in one `bash` session of its own (one test per page), in a scratch
//! directory laid out like the source tree: `scripts/`, `examples/`, `crates/`, `data/`,
//! `packaging/` and `deploy/` are the repository's, `target/release/` holds the build
//! this test suite made, and an empty `docs/results/` takes the experiments' outputs. What a
//! reader's machine would give the commands, the session gives them, named here:
//!
//! - `tessera` on the `PATH` is the suite's build;
//! - `cargo` is a stand-in (written by [`cargo_shim`]) that takes the suite's build for
//!   `cargo build --release`, runs `cargo run --release -p tessera -- ARGS` as
//!   `tessera ARGS`, answers `cargo test --workspace` with the suite it is part of, and
//!   passes anything else (`cargo metadata`, for cargo-deb) to the real cargo;
//! - `XDG_RUNTIME_DIR` and `TESSERA_LEDGER` are the session's own, so the documented
//!   daemons' default socket and ledger are the test's;
//! - `TESSERA_SIM_QUICK=1`, `TESSERA_BENCH_QUICK=1`, `TESSERA_DEMO_JOBS=6` and
//!   `TESSERA_DEMO_SPEEDUP=20` (each documented beside the command it shortens) run the
//!   experiments, benches and demo reduced: their full runs take minutes each.
//!
//! A line that starts a daemon in the background (`... daemon ... &`) is followed, as a
//! reader would wait, by a wait until `tessera status` answers. When the page ends, its
//! background jobs get SIGTERM and must exit cleanly (a daemon drains).
//!
//! Blocks that cannot run here say so in their info string, and the test holds them to
//! it: `sh needs-gpu` (a GPU node) is parsed — each `tessera` line must parse with the
//! command line as built now, each script must exist and parse — and must be followed on
//! its page by a `sh without-gpu` block, the substitute the text names, which runs;
//! `sh needs-root` runs only as root (SKIPPED otherwise), under the lock the package's
//! own test takes, and what it installs is purged after. A block whose first line is
//! `#!` is a file to copy (a Slurm hook): `sh -n` and its `tessera` lines are checked.
//! A `console` block runs its `$ ` lines; what it shows after them is an example.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// Runs in the page's session.
    Run,
    /// Needs a GPU node: parsed only; a `without-gpu` block must follow.
    NeedsGpu,
    /// Runs only as root, under the package lock.
    NeedsRoot,
    /// A file (`#!`): `sh -n` and its `tessera` lines parsed.
    File,
}

#[derive(Debug)]
struct Block {
    /// `docs/x.md:12`.
    at: String,
    kind: Kind,
    /// The `without-gpu` tag.
    substitute: bool,
    /// The commands, one per line (a `console` block's `$ ` lines only).
    lines: Vec<String>,
}

fn page_blocks(page: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(page)).unwrap();
    let (mut out, mut open): (Vec<Block>, Option<(Block, String)>) = (Vec::new(), None);
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            match open.take() {
                Some((mut b, lang)) => {
                    if matches!(lang.as_str(), "sh" | "bash" | "shell" | "console") {
                        if b.lines.first().is_some_and(|l| l.starts_with("#!")) {
                            b.kind = Kind::File;
                        }
                        out.push(b);
                    }
                }
                None => {
                    let mut words = info.split_whitespace();
                    let lang = words.next().unwrap_or("").to_string();
                    let tags: Vec<&str> = words.collect();
                    for t in &tags {
                        assert!(
                            ["needs-gpu", "needs-root", "without-gpu"].contains(t),
                            "{page}:{}: unknown block tag {t:?}",
                            i + 1
                        );
                    }
                    let kind = if tags.contains(&"needs-gpu") {
                        Kind::NeedsGpu
                    } else if tags.contains(&"needs-root") {
                        Kind::NeedsRoot
                    } else {
                        Kind::Run
                    };
                    let b = Block {
                        at: format!("{page}:{}", i + 1),
                        kind,
                        substitute: tags.contains(&"without-gpu"),
                        lines: Vec::new(),
                    };
                    open = Some((b, lang));
                }
            }
            continue;
        }
        if let Some((b, lang)) = open.as_mut() {
            if lang == "console" {
                if let Some(cmd) = trimmed.strip_prefix("$ ") {
                    b.lines.push(cmd.to_string());
                }
            } else {
                b.lines.push(line.to_string());
            }
        }
    }
    out
}

/// Every page with command blocks: README.md and docs/ (not the committed results).
fn pages() -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "results") {
                walk(&p, base, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let mut out = vec!["README.md".to_string()];
    walk(&root().join("docs"), &root(), &mut out);
    out.sort();
    out.retain(|p| !page_blocks(p).is_empty());
    out
}

/// Split a shell line into words: quotes kept together, an unquoted `#` after a space
/// ends it, and it stops at the first `|`, `;`, `&&`, `>` or trailing `&`.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quote, mut started) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, '#') if !started => break,
            (None, '|' | ';' | '>' | '&') => break,
            (None, c) if c.is_whitespace() => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (None, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(word);
    }
    out
}

/// The arguments of a `tessera` command line, however it is invoked.
fn tessera_args(w: &[String]) -> Option<Vec<String>> {
    if w.first().is_some_and(|x| x == "cargo") && w.get(1).is_some_and(|x| x == "run") {
        let p = w.iter().position(|x| x == "-p")?;
        if w.get(p + 1)? != "tessera" {
            return None;
        }
        let dash = w.iter().position(|x| x == "--")?;
        return Some(w[dash + 1..].to_vec());
    }
    let i = w.iter().position(|x| x == "tessera" || x.ends_with("/tessera"))?;
    Some(w[i + 1..].to_vec())
}

/// What is wrong with a block that is not run: a `tessera` line that does not parse, a
/// script that is missing or does not parse, a `#!` file `sh -n` refuses.
fn check_unrun(b: &Block) -> Vec<String> {
    let mut failures = Vec::new();
    if b.kind == Kind::File {
        let out = Command::new("sh")
            .arg("-n")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(b.lines.join("\n").as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        if !out.status.success() {
            failures.push(format!("{}: sh -n: {}", b.at, String::from_utf8_lossy(&out.stderr)));
        }
    }
    for line in &b.lines {
        let w = words(line.strip_prefix("exec ").unwrap_or(line));
        if w.is_empty() {
            continue;
        }
        if let Some(args) = tessera_args(&w) {
            let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
                .args(&args)
                .env("TESSERA_ONLY_PARSE_ARGS", "1")
                .output()
                .unwrap();
            if !out.status.success() {
                failures.push(format!(
                    "{}: `tessera {}` does not parse: {}",
                    b.at,
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        } else if w[0] == "bash" && w.get(1).is_some_and(|s| s.starts_with("scripts/")) {
            let ok = Command::new("bash")
                .arg("-n")
                .arg(root().join(&w[1]))
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                failures.push(format!("{}: {} is missing or does not parse", b.at, w[1]));
            }
        }
    }
    failures
}

/// The `cargo` the pages' sessions find first on the `PATH` (see the module's comment).
fn cargo_shim(real: &Path) -> String {
    format!(
        r#"#!/bin/sh
# The docs' test's cargo (crates/tessera/tests/doc_commands.rs): the suite's own build
# stands in for the documented release build.
case "$1 $2" in
  "build --release"|"build --profile")
    for f in tessera libtessera_cuda.so libtessera_ledger.so libtessera_client.so; do
      [ -e "target/release/$f" ] || {{ echo "cargo (docs test): no target/release/$f" >&2; exit 1; }}
    done
    echo "cargo (docs test): the test suite's build stands in for a release build" >&2
    exit 0 ;;
  "run --release")
    while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
    shift
    exec tessera "$@" ;;
  "test --workspace")
    grep -qx 'cargo test --workspace' .ci/run || {{ echo "cargo (docs test): .ci/run does not run cargo test --workspace" >&2; exit 1; }}
    echo "cargo (docs test): this is the suite that is running" >&2
    exit 0 ;;
esac
exec {real:?} "$@"
"#
    )
}

/// A directory laid out like the source tree, for `page`'s session.
fn scratch(page: &str) -> PathBuf {
    let tag = page.replace(['/', '.'], "-");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("docs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["bin", "run", "target/release", "docs/results"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    use std::os::unix::fs::{PermissionsExt, symlink};
    std::fs::set_permissions(dir.join("run"), std::fs::Permissions::from_mode(0o700)).unwrap();
    for entry in [
        "scripts",
        "examples",
        "crates",
        "data",
        "packaging",
        "deploy",
        ".ci",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        symlink(root().join(entry), dir.join(entry)).unwrap();
    }
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_tessera"));
    let built = exe.parent().unwrap();
    symlink(&exe, dir.join("target/release/tessera")).unwrap();
    symlink(&exe, dir.join("bin/tessera")).unwrap();
    for lib in ["libtessera_cuda.so", "libtessera_ledger.so", "libtessera_client.so"] {
        if let Some(p) =
            [built.join(lib), built.join("deps").join(lib)].into_iter().find(|p| p.is_file())
        {
            symlink(p, dir.join("target/release").join(lib)).unwrap();
        }
    }
    // an absolute path: a bare `cargo` would find this stand-in first on the page's PATH
    // and call itself forever (the test binary run directly, without cargo's CARGO)
    let real = std::env::var_os("CARGO")
        .map(PathBuf::from)
        .or_else(on_path)
        .expect("the real cargo: neither CARGO is set nor is cargo on PATH");
    std::fs::write(dir.join("bin/cargo"), cargo_shim(&real)).unwrap();
    std::fs::set_permissions(dir.join("bin/cargo"), std::fs::Permissions::from_mode(0o755))
        .unwrap();
    dir
}

/// `cargo` on this process's PATH, before the page's stand-in is put ahead of it.
fn on_path() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join("cargo")).find(|p| p.is_file())
}

/// `s` in single quotes for bash.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The page's session: its runnable blocks in order, each line echoed before it runs.
fn session_script(blocks: &[Block], root_ok: bool) -> String {
    let mut s = String::from(
        r#"set -e -o pipefail
__ready() {  # a daemon started in the background: wait, as a reader would, until it answers
  local pid=$1; shift
  for _ in $(seq 200); do
    tessera status "$@" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { echo "the daemon exited" >&2; return 1; }
    sleep 0.05
  done
  echo "no daemon answered within 10 s" >&2; return 1
}
__bg=()
__end() {  # the page's background jobs: SIGTERM, and each must end (or have ended) cleanly
  local rc=0
  for p in "${__bg[@]}"; do
    kill -TERM "$p" 2>/dev/null || true
    wait "$p" || { echo "background job $p ended with status $?" >&2; rc=1; }
  done
  return $rc
}
# the page's background jobs end with it, whether its last block ran or one failed
trap 'rc=$?; __end || rc=1; exit $rc' EXIT
"#,
    );
    for b in blocks {
        let run = match b.kind {
            Kind::Run => true,
            Kind::NeedsRoot => root_ok,
            Kind::NeedsGpu | Kind::File => false,
        };
        if !run {
            continue;
        }
        s.push_str(&format!("echo {} >&2\n", quoted(&format!("### {}", b.at))));
        let mut purge = false;
        for line in &b.lines {
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            s.push_str(&format!("echo {} >&2\n{line}\n", quoted(&format!("$ {line}"))));
            if b.kind == Kind::NeedsRoot && line.trim_start().starts_with("dpkg -i") {
                // what it installs goes again at once: the rest of the page, and the
                // machine, are as before (the runner's, not the page's)
                purge = true;
            }
            let w = words(line);
            let background = line.split(" #").next().unwrap().trim_end().ends_with('&');
            if background {
                s.push_str("__bg+=($!)\n");
            }
            let args = tessera_args(&w).unwrap_or_default();
            if background && args.first().is_some_and(|x| x == "daemon") {
                let socket = args.iter().position(|a| a == "--socket").map(|i| &args[i + 1]);
                let status = socket.map_or(String::new(), |s| format!(" --socket {}", quoted(s)));
                s.push_str(&format!("__ready $!{status}\n"));
            }
        }
        if purge {
            s.push_str("dpkg --purge tessera >/dev/null\n");
        }
    }
    s
}

fn package_installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "tessera"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("ok installed"))
}

/// Run `page`'s blocks; panics with the session's output when one fails.
fn run_page(page: &str) {
    let blocks = page_blocks(page);
    let mut failures = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        if b.kind == Kind::NeedsGpu {
            let next = blocks[i + 1..].iter().find(|n| n.kind != Kind::NeedsGpu);
            if !next.is_some_and(|n| n.substitute) {
                failures.push(format!(
                    "{}: a needs-gpu block without a without-gpu block after it",
                    b.at
                ));
            }
        }
        if b.kind != Kind::Run {
            failures.extend(check_unrun(b));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let needs_root = blocks.iter().any(|b| b.kind == Kind::NeedsRoot);
    let is_root = rustix::process::geteuid().is_root();
    let root_ok = needs_root
        && is_root
        && Command::new("dpkg").arg("--version").output().is_ok()
        && !package_installed();
    let _lock = needs_root.then(common::package_lock);
    for b in blocks.iter().filter(|b| b.kind == Kind::NeedsRoot) {
        if !root_ok {
            eprintln!("SKIPPED: {} (needs root and dpkg, and no tessera package installed)", b.at);
        }
    }
    let dir = scratch(page);
    let path =
        format!("{}:{}", dir.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(session_script(&blocks, root_ok))
        .current_dir(&dir)
        .env("PATH", path)
        .env("XDG_RUNTIME_DIR", dir.join("run"))
        .env("TESSERA_LEDGER", dir.join("ledger"))
        .env("TESSERA_SIM_QUICK", "1")
        .env("TESSERA_BENCH_QUICK", "1")
        .env("TESSERA_DEMO_JOBS", "6")
        .env("TESSERA_DEMO_SPEEDUP", "20")
        .env_remove("TESSERA_SOCKET")
        .env_remove("CARGO_TARGET_DIR")
        .stdin(Stdio::null());
    use std::os::unix::process::CommandExt;
    cmd.process_group(0).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let group = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let out = child.wait_with_output().unwrap();
    // whatever the page left running (a daemon after a failed block) goes with it
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    if root_ok && package_installed() {
        let _ = Command::new("dpkg").args(["--purge", "tessera"]).output();
    }
    let said =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "{page}: a block failed ({}); the session said:\n{said}",
        out.status
    );
    eprintln!("{said}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_splitter_reads_shell_lines_as_the_docs_write_them() {
    assert_eq!(words("tessera status   # like nvidia-smi"), ["tessera", "status"]);
    assert_eq!(words("tessera daemon --cuda &"), ["tessera", "daemon", "--cuda"]);
    assert_eq!(words("curl -s x | grep y"), ["curl", "-s", "x"]);
    assert_eq!(words("jq -c 'select(.tenant == 7)' f"), ["jq", "-c", "select(.tenant == 7)", "f"]);
    let args =
        tessera_args(&words("cargo run --release -p tessera -- sim fairgv --out x")).unwrap();
    assert_eq!(args, ["sim", "fairgv", "--out", "x"]);
    assert_eq!(tessera_args(&words("cargo test --workspace")), None);
}

/// The commands the pages run write only under the reader's tree (the test runs them
/// in a directory of its own, which it removes): a command writing into /tmp left its
/// file there after every run of the suite (`tessera ptx slice ... --out
/// /tmp/sliced.ptx`, before).
#[test]
fn the_pages_commands_write_nothing_into_tmp() {
    let mut found = Vec::new();
    for page in pages() {
        for b in page_blocks(&page).iter().filter(|b| b.kind == Kind::Run) {
            found.extend(
                b.lines.iter().filter(|l| l.contains("/tmp/")).map(|l| format!("{}: {l}", b.at)),
            );
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// Every page with command blocks has its test below, so a new page is not left out.
#[test]
fn every_page_with_commands_is_run() {
    let tested = [
        "README.md",
        "docs/benchmarks.md",
        "docs/install.md",
        "docs/kernel-slicing.md",
        "docs/kubernetes.md",
        "docs/ledger.md",
        "docs/operators.md",
        "docs/policies/dcuda.md",
        "docs/policies/fairgv.md",
        "docs/policies/flexy.md",
        "docs/policies/gpulets.md",
        "docs/policies/schedgpu.md",
        "docs/simulator.md",
        "docs/slurm.md",
        "docs/users.md",
    ];
    assert_eq!(pages(), tested);
}

/// A block that fails fails its page: the runner is not blind.
#[test]
fn a_failing_block_fails_the_session() {
    let b = |lines: &[&str]| Block {
        at: "x.md:1".into(),
        kind: Kind::Run,
        substitute: false,
        lines: lines.iter().map(|s| s.to_string()).collect(),
    };
    let run = |blocks: &[Block]| {
        Command::new("bash").arg("-c").arg(session_script(blocks, false)).output().unwrap()
    };
    assert!(run(&[b(&["true"]), b(&["echo fine"])]).status.success());
    assert!(!run(&[b(&["true"]), b(&["false"]), b(&["true"])]).status.success());
    assert!(!run(&[b(&["true | false"])]).status.success(), "pipefail");
    // a background job that failed before the page ended, and one that does not end
    // cleanly on SIGTERM (a daemon that does not drain)
    assert!(!run(&[b(&["sh -c 'exit 3' &", "sleep 0.2"])]).status.success(), "failed early");
    let undrained = "sh -c 'trap \"exit 3\" TERM; while :; do sleep 0.05; done' &";
    assert!(!run(&[b(&[undrained, "sleep 0.2"])]).status.success(), "not drained");
    let drained = "sh -c 'trap \"exit 0\" TERM; while :; do sleep 0.05; done' &";
    assert!(run(&[b(&[drained, "sleep 0.2"])]).status.success(), "drained");
}

macro_rules! page_tests {
    ($($name:ident => $page:expr,)*) => {$(
        #[test]
        fn $name() {
            run_page($page);
        }
    )*};
}

page_tests! {
    readme => "README.md",
    benchmarks => "docs/benchmarks.md",
    install => "docs/install.md",
    kernel_slicing => "docs/kernel-slicing.md",
    kubernetes => "docs/kubernetes.md",
    ledger => "docs/ledger.md",
    operators => "docs/operators.md",
    policy_dcuda => "docs/policies/dcuda.md",
    policy_fairgv => "docs/policies/fairgv.md",
    policy_flexy => "docs/policies/flexy.md",
    policy_gpulets => "docs/policies/gpulets.md",
    policy_schedgpu => "docs/policies/schedgpu.md",
    simulator => "docs/simulator.md",
    slurm => "docs/slurm.md",
    users => "docs/users.md",
}
