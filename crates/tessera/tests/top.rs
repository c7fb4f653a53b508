//! `tessera top` read off a real terminal: run under tmux beside a daemon on one
//! emulated GPU under fair queuing with two programs at weights 1:3, the screen
//! (`tmux capture-pane`) shows the GPU, both tenants with their weights, entitled and
//! received shares, and the daemon's recent decisions; it refreshes in place (the
//! shares converge on screen); `q` quits with status 0.
//!
//! tmux is installed from Debian when missing (root); otherwise the test says SKIPPED.

use crate::common;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_client::Client;

/// How far a received share shown may be from its weight's (as in the Prometheus
/// test: fair queuing on one emulated GPU settles within a few percent).
const SHARE_BOUND: f64 = 8.0;

fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "top test: {msg}");
}

/// Processes and the tmux server, stopped when the test ends.
struct Cleanup {
    children: Vec<Child>,
    /// The tmux server's socket, in the test's directory: a server named with `-L`
    /// left its socket in /tmp/tmux-UID after `kill-server`, one per run.
    tmux: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("tmux").arg("-S").arg(&self.tmux).arg("kill-server").output();
        let _ = std::fs::remove_file(&self.tmux);
        for c in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The received share (%) the screen shows on the row of `pid`'s tenant.
fn shown_share(screen: &str, pid: u32) -> Option<f64> {
    let row = screen.lines().find(|l| l.split_whitespace().nth(2) == Some(&pid.to_string()))?;
    // "... 25%  ██████  26%  -  ..." : the received share is the second percentage
    let pcts: Vec<f64> =
        row.split_whitespace().filter_map(|w| w.strip_suffix('%')?.parse().ok()).collect();
    pcts.get(1).copied()
}

#[test]
fn top_shows_the_node_live_under_tmux_and_quits_on_q() {
    if let Err(why) = common::debian_tool("tmux", "tmux") {
        say(&format!("SKIPPED: {why}"));
        return;
    }
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("top-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("d.sock");
    let daemon = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["daemon", "--emulate", "--gpus", "1", "--policy", "fair", "--socket"])
        .arg(&socket)
        .arg("--ledger")
        .arg(dir.join("ledger"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let tmux = dir.join("tmux.sock");
    let mut cleanup = Cleanup { children: vec![daemon], tmux: tmux.clone() };
    let t = Instant::now();
    while Client::connect_control(&socket).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "the daemon did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (light, heavy) =
        (common::demo_client(&dir, &socket, 1, 3000), common::demo_client(&dir, &socket, 3, 3000));
    let (light_pid, heavy_pid) = (light.id(), heavy.id());
    cleanup.children.extend([light, heavy]);
    let exited = dir.join("exited");
    // written aside and renamed, so that the file never exists empty: the shell creates
    // a redirect's file before echo writes into it, and a poll in between read ""
    let command = format!(
        "{} top --socket {} --interval 0.5; echo $? > {e}.tmp && mv {e}.tmp {e}",
        env!("CARGO_BIN_EXE_tessera"),
        socket.display(),
        e = exited.display()
    );
    let tm = |args: &[&str]| {
        Command::new("tmux").arg("-S").arg(&tmux).args(args).output().expect("tmux runs")
    };
    let started = tm(&["new-session", "-d", "-s", "top", "-x", "160", "-y", "40", &command]);
    assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
    let screen =
        || String::from_utf8_lossy(&tm(&["capture-pane", "-p", "-t", "top"]).stdout).to_string();

    // the first screen: the GPU, both tenants, their admissions
    let t = Instant::now();
    let first = loop {
        let s = screen();
        if shown_share(&s, light_pid).is_some() && shown_share(&s, heavy_pid).is_some() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "top never showed both tenants:\n{s}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(first.contains("policy fair"), "{first}");
    assert!(first.contains("GPU 0"), "{first}");
    assert!(first.contains("admitted"), "the recent events:\n{first}");
    // refreshed in place: past the daemon's 10 s share window, the shares shown are
    // the weights' (a screen that never refreshed would still show the first ones)
    let t = Instant::now();
    let (l, h, last) = loop {
        std::thread::sleep(Duration::from_millis(500));
        let s = screen();
        let (l, h) = (shown_share(&s, light_pid), shown_share(&s, heavy_pid));
        if let (Some(l), Some(h)) = (l, h)
            && t.elapsed() > Duration::from_secs(12)
        {
            break (l, h, s);
        }
        assert!(t.elapsed() < Duration::from_secs(40), "no shares on screen:\n{s}");
    };
    say(&format!("on screen: weight 1 received {l}%, weight 3 received {h}%\n{last}"));
    assert!(last.lines().count() <= 40 && last.contains("entitled"), "{last}");
    assert!((l - 25.0).abs() <= SHARE_BOUND && (h - 75.0).abs() <= SHARE_BOUND, "{last}");
    // q quits, with status 0
    tm(&["send-keys", "-t", "top", "q"]);
    let t = Instant::now();
    while !exited.exists() {
        assert!(t.elapsed() < Duration::from_secs(5), "top did not quit on q:\n{}", screen());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(std::fs::read_to_string(&exited).unwrap().trim(), "0");
    drop(cleanup);
    assert!(!tmux.exists(), "the tmux server's socket outlived the test");
    let _ = std::fs::remove_dir_all(&dir);
}
