//! Issue 54, item 4: the manifests in deploy/kubernetes/ against Kubernetes' published
//! OpenAPI schemas, strictly (PyPI's kubernetes-validate, through
//! scripts/check-k8s-manifests.sh, installed by the test; SKIPPED where PyPI cannot be
//! reached), and against tessera itself: the ConfigMap's two configurations load as
//! the daemon and the plugin load them, the DaemonSet's command lines parse, and the
//! pod docs/kubernetes.md shows is the example file.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The checker's output and success, or `None` (SKIPPED) when it cannot be installed.
fn check(files: &[PathBuf]) -> Option<(bool, String)> {
    let out = Command::new("bash")
        .arg(repo().join("scripts/check-k8s-manifests.sh"))
        .arg("1.34.0")
        .args(files)
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success()
        && text.contains("installing kubernetes-validate")
        && !text.contains("did not validate")
    {
        eprintln!("SKIPPED: kubernetes-validate could not be installed from PyPI: {text}");
        return None;
    }
    Some((out.status.success(), text))
}

fn manifests() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["deploy/kubernetes", "deploy/kubernetes/examples", "deploy/kubernetes/dra"] {
        for e in std::fs::read_dir(repo().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn the_manifests_are_valid_kubernetes_objects_and_a_typo_is_caught() {
    let files = manifests();
    assert!(files.len() >= 4, "{files:?}");
    let Some((ok, out)) = check(&files) else { return };
    assert!(ok, "{out}");
    // every file's every object (claim-8gib.yaml has two)
    let objects: usize =
        files.iter().map(|f| std::fs::read_to_string(f).unwrap().matches("\nkind: ").count()).sum();
    assert_eq!(out.matches(" passed for resource ").count(), objects, "{out}");
    assert!(objects > files.len(), "{objects} objects in {files:?}");
    // the check bites: a field the schema does not have
    let bad = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("k8s-typo-{}.yaml", std::process::id()));
    let daemonset =
        std::fs::read_to_string(repo().join("deploy/kubernetes/daemonset.yaml")).unwrap();
    std::fs::write(&bad, daemonset.replace("hostPID:", "hostPid:")).unwrap();
    let (ok, out) = check(std::slice::from_ref(&bad)).unwrap();
    std::fs::remove_file(&bad).unwrap();
    assert!(!ok && out.contains("'hostPid' was unexpected"), "{out}");
}

/// The text of a block `|` in YAML: the lines after `key: |`, less their indentation.
fn literal_block(yaml: &str, key: &str) -> String {
    let mut lines = yaml.lines().skip_while(|l| l.trim() != format!("{key}: |"));
    let head = lines.next().expect(key);
    let outer = head.len() - head.trim_start().len();
    let mut out = String::new();
    for l in lines {
        let indent = l.len() - l.trim_start().len();
        if !l.trim().is_empty() && indent <= outer {
            break;
        }
        out += l.get(outer + 2..).unwrap_or("");
        out.push('\n');
    }
    out
}

#[test]
fn the_configmap_configures_the_daemon_and_the_plugin_and_the_commands_parse() {
    let cm = std::fs::read_to_string(repo().join("deploy/kubernetes/configmap.yaml")).unwrap();
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("k8s-cm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (daemon, plugin) = (dir.join("tesserad.toml"), dir.join("k8s.toml"));
    std::fs::write(&daemon, literal_block(&cm, "tesserad.toml")).unwrap();
    std::fs::write(&plugin, literal_block(&cm, "k8s.toml")).unwrap();
    let d = tesserad::config::DaemonConfig::from_file(&daemon).unwrap();
    assert!(d.kubernetes.require_token_in_containers);
    let p = tessera_k8s::config::PluginConfig::load(&plugin).unwrap();
    assert_eq!(p.daemon_socket, d.socket, "the plugin finds the daemon's socket");
    assert_eq!(p.weights.of("inference"), 4);
    std::fs::remove_dir_all(&dir).unwrap();
    // every tessera command line of the DaemonSet parses as the binary reads it now
    let ds = std::fs::read_to_string(repo().join("deploy/kubernetes/daemonset.yaml")).unwrap();
    let commands: Vec<Vec<String>> = ds
        .lines()
        .filter_map(|l| l.trim().strip_prefix("command: [\"tessera\", "))
        .map(|rest| {
            rest.trim_end_matches(']')
                .split(", ")
                .map(|w| w.trim_matches('"').to_string())
                .collect()
        })
        .collect();
    assert!(commands.len() >= 2, "{commands:?}");
    for c in &commands {
        let st = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(c)
            .env("TESSERA_ONLY_PARSE_ARGS", "1")
            .status()
            .unwrap();
        assert!(st.success(), "tessera {c:?} does not parse");
    }
}

#[test]
fn the_docs_pod_is_the_example_file() {
    let doc = std::fs::read_to_string(repo().join("docs/kubernetes.md")).unwrap();
    let example =
        std::fs::read_to_string(repo().join("deploy/kubernetes/examples/pod-8gib.yaml")).unwrap();
    let block =
        doc.split("```yaml\n").nth(1).and_then(|b| b.split("```").next()).unwrap_or_default();
    assert_eq!(
        block, example,
        "docs/kubernetes.md's first yaml block is deploy/kubernetes/examples/pod-8gib.yaml"
    );
}
