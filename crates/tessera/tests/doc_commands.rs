//! Every command shown in the README and docs/ (the lines of their `sh`, `bash` and
//! `console` blocks) is checked against the code, so that none goes stale:
//!
//! - every `tessera` command line (however it is invoked: `tessera`,
//!   `target/release/tessera`, `/usr/bin/tessera`, `cargo run -p tessera --`) must parse
//!   with the command line as built now;
//! - the quick ones that need only a daemon, a ledger or a few seconds (`status`,
//!   `ledger status`, `slurm gres-conf`, `doctor`, `sim schedgpu`, `bench
//!   transport`…) are run for real, against a scratch emulated daemon, and must succeed;
//!   every emulated `tessera daemon` line is started as written (its socket, ledger,
//!   event log and metrics made the test's own), must answer `tessera status` and drain
//!   cleanly on SIGTERM;
//! - `cargo` lines must name packages and test targets that exist; `bash scripts/…`
//!   lines scripts that exist and parse (`bash -n`);
//! - the rest (long experiments, the daemon itself, other programs: `curl`, `jq`,
//!   `srun`, a user's program) are parsed only; the test prints which, and why.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug)]
struct DocCommand {
    /// `docs/x.md:12`.
    at: String,
    words: Vec<String>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "results") {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut out);
    out.sort();
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

fn doc_commands() -> Vec<DocCommand> {
    let mut out = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(root()).unwrap_or(&page).display().to_string();
        let mut block: Option<String> = None;
        let mut pending = String::new();
        let mut pending_at = 0;
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            if let Some(tag) = trimmed.strip_prefix("```") {
                block = match block {
                    None => Some(tag.trim().to_string()),
                    Some(_) => None,
                };
                continue;
            }
            let Some(tag) = block.as_deref() else { continue };
            let line = match tag {
                "sh" | "bash" | "shell" => trimmed,
                "console" => match trimmed.strip_prefix("$ ") {
                    Some(cmd) => cmd,
                    None => continue,
                },
                _ => continue,
            };
            if pending.is_empty() {
                pending_at = i + 1;
            }
            if let Some(head) = line.strip_suffix('\\') {
                pending.push_str(head);
                pending.push(' ');
                continue;
            }
            pending.push_str(line);
            let mut w = words(&std::mem::take(&mut pending));
            if w.first().is_some_and(|x| x == "exec") {
                w.remove(0);
            }
            if !w.is_empty() {
                out.push(DocCommand { at: format!("{name}:{pending_at}"), words: w });
            }
        }
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

fn workspace_packages() -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        let manifest = std::fs::read_to_string(e.path().join("Cargo.toml")).unwrap_or_default();
        if let Some(name) = manifest.lines().find_map(|l| l.strip_prefix("name = ")) {
            out.push(name.trim_matches('"').to_string());
        }
    }
    out
}

/// Commands run for real: quick, and needing at most a daemon and a ledger.
fn runs_for_real(args: &[String]) -> bool {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    matches!(
        a.as_slice(),
        ["status", ..]
            | ["ledger", "status", ..]
            | ["slurm", "gres-conf", ..]
            | ["doctor", ..]
            | ["sim", "schedgpu", ..]
            | ["bench", "transport", ..]
    )
}

/// A documented emulated daemon, started as written but with its socket, ledger, event
/// log and metrics port made the test's own: it must come up, answer `tessera status`
/// and drain cleanly on SIGTERM.
fn serve_once(args: &[String], dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).unwrap();
    let socket = dir.join("d.sock");
    let mut real: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--socket" | "--ledger" => {
                it.next();
            }
            "--events" => {
                it.next();
                real.extend(["--events".into(), dir.join("events.jsonl").display().to_string()]);
            }
            "--metrics-listen" => {
                it.next();
                real.extend([
                    "--metrics-listen".into(),
                    dir.join("metrics.sock").display().to_string(),
                ]);
            }
            _ => real.push(a.clone()),
        }
    }
    real.extend(["--socket".into(), socket.display().to_string()]);
    real.extend(["--ledger".into(), dir.join("ledger").display().to_string()]);
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(&real)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if let Err(why) = common::wait_for_socket(&mut daemon, &socket) {
        let _ = daemon.kill();
        let _ = daemon.wait();
        return Err(why);
    }
    let status = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("status")
        .arg("--socket")
        .arg(&socket)
        .output()
        .unwrap();
    let exit = common::terminate(&mut daemon);
    if !status.status.success() {
        return Err(format!("tessera status: {}", String::from_utf8_lossy(&status.stderr)));
    }
    if !exit.success() {
        return Err(format!("did not drain cleanly: {exit}"));
    }
    Ok(())
}

/// Why a parsed command is not run here, and what runs it instead.
fn why_not_run(args: &[String]) -> &'static str {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["daemon", ..] => "needs a GPU: tesserad's tests run the cuda executor on the fake driver",
        ["run", ..] => "runs a program the docs only name: tests/run.rs runs real ones",
        ["top", ..] => "interactive: tests/top.rs drives it under tmux",
        ["slurm", ..] => "one of Slurm's hooks: tests/slurm.rs runs them under a real slurmd",
        ["demo", ..] | ["sim", ..] | ["bench", ..] => {
            "a minute or more at full size: tests/cli.rs, tests/daemon_processes.rs and the crates' tests run reduced ones (tessera-sim's tests/fairgv.rs writes fairgv's files from a short run)"
        }
        _ => "not quick or self-contained",
    }
}

#[test]
fn every_documented_command_parses_and_the_quick_ones_run() {
    let commands = doc_commands();
    assert!(commands.len() > 20, "found only {} commands: {commands:?}", commands.len());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("doc-commands-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("d.sock");
    let ledger = dir.join("ledger");
    let _daemon = tesserad::Daemon::start(&tesserad::config::DaemonConfig {
        socket: socket.clone(),
        ledger: ledger.clone(),
        gpus: 2,
        gpu_memory_mib: 1024,
        executor: tesserad::config::ExecutorKind::Emulated { speedup: 10.0 },
        ..tesserad::config::DaemonConfig::default()
    })
    .unwrap();
    let packages = workspace_packages();
    let (mut failures, mut ran, mut parsed, mut not_run) = (Vec::new(), 0, 0, Vec::new());
    for c in &commands {
        let w = &c.words;
        if let Some(args) = tessera_args(w) {
            let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
                .args(&args)
                .env("TESSERA_ONLY_PARSE_ARGS", "1")
                .output()
                .unwrap();
            if !out.status.success() {
                failures.push(format!(
                    "{}: `tessera {}` does not parse: {}",
                    c.at,
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                ));
                continue;
            }
            parsed += 1;
            if args[0] == "daemon" && args.iter().any(|a| a == "--emulate") {
                if let Err(why) = serve_once(&args, &dir.join(format!("daemon-{ran}"))) {
                    failures.push(format!("{}: `tessera {}`: {why}", c.at, args.join(" ")));
                }
                ran += 1;
                continue;
            }
            if !runs_for_real(&args) {
                not_run.push(format!(
                    "{}: tessera {} (parsed; {})",
                    c.at,
                    args.join(" "),
                    why_not_run(&args)
                ));
                continue;
            }
            // for real: this test's daemon and ledger, outputs into the scratch directory
            let mut real = Vec::new();
            let mut it = args.iter();
            while let Some(a) = it.next() {
                real.push(a.clone());
                match a.as_str() {
                    "--socket" => {
                        it.next();
                        real.push(socket.display().to_string());
                    }
                    "--out" => {
                        it.next();
                        real.push(dir.join(format!("out-{ran}")).display().to_string());
                    }
                    _ => {}
                }
            }
            let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
                .args(&real)
                .env("TESSERA_SOCKET", &socket)
                .env("TESSERA_LEDGER", &ledger)
                .current_dir(&dir)
                .output()
                .unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            // doctor exits 1 for what this machine lacks (a GPU); it must still check
            let ok = if args[0] == "doctor" {
                said.contains(" checks: ") && out.status.code().is_some_and(|c| c <= 1)
            } else {
                out.status.success()
            };
            if !ok {
                failures.push(format!("{}: `tessera {}` failed: {said}", c.at, real.join(" ")));
            }
            ran += 1;
        } else if w[0] == "cargo" {
            for (flag, valid) in [("-p", &packages), ("--package", &packages)] {
                for (i, x) in w.iter().enumerate() {
                    if x == flag && !w.get(i + 1).is_some_and(|p| valid.contains(p)) {
                        failures.push(format!(
                            "{}: no package {:?} in the workspace",
                            c.at,
                            w.get(i + 1)
                        ));
                    }
                }
            }
            if let Some(i) = w.iter().position(|x| x == "--test") {
                let target = &w[i + 1];
                let found = std::fs::read_dir(root().join("crates"))
                    .unwrap()
                    .flatten()
                    .any(|e| e.path().join("tests").join(format!("{target}.rs")).is_file());
                if !found {
                    failures.push(format!("{}: no test target {target}", c.at));
                }
            }
            not_run.push(format!(
                "{}: {} (packages and targets checked; builds are not re-run here)",
                c.at,
                w.join(" ")
            ));
        } else if w[0] == "bash" && w.get(1).is_some_and(|s| s.starts_with("scripts/")) {
            let script = root().join(&w[1]);
            let ok =
                Command::new("bash").arg("-n").arg(&script).status().is_ok_and(|s| s.success());
            if !ok {
                failures.push(format!("{}: {} is missing or does not parse", c.at, w[1]));
            }
            not_run.push(format!(
                "{}: {} (exists and parses; its own test runs it)",
                c.at,
                w.join(" ")
            ));
        } else {
            not_run.push(format!("{}: {} (another program)", c.at, w.join(" ")));
        }
    }
    eprintln!(
        "{} documented commands: {parsed} tessera command lines parsed, {ran} run for real; not run:",
        commands.len()
    );
    for n in &not_run {
        eprintln!("  {n}");
    }
    assert!(failures.is_empty(), "stale documented commands:\n{}", failures.join("\n"));
    assert!(ran >= 4, "only {ran} commands were run for real");
}

#[test]
fn the_splitter_reads_shell_lines_as_the_docs_write_them() {
    assert_eq!(words("tessera status   # like nvidia-smi"), ["tessera", "status"]);
    assert_eq!(words("tessera daemon --cuda &"), ["tessera", "daemon", "--cuda"]);
    assert_eq!(words("curl -s x | grep y"), ["curl", "-s", "x"]);
    assert_eq!(words("jq -c 'select(.tenant == 7)' f"), ["jq", "-c", "select(.tenant == 7)", "f"]);
    assert_eq!(words("a --x='b c'#d"), ["a", "--x=b c#d"]);
    let args =
        tessera_args(&words("cargo run --release -p tessera -- sim fairgv --out x")).unwrap();
    assert_eq!(args, ["sim", "fairgv", "--out", "x"]);
    assert_eq!(
        tessera_args(&words("srun --gres=shard:2 tessera slurm smoke")).unwrap(),
        ["slurm", "smoke"]
    );
    assert_eq!(tessera_args(&words("cargo test --workspace")), None);
}
