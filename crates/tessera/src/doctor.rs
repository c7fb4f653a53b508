//! `tessera doctor`: checks this node and prints one line per check (see
//! `tesserad::doctor`), exiting non-zero when any fails.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use tesserad::config::DaemonConfig;
use tesserad::doctor::{ConfigSource, Node, Verdict};

/// The installed daemon's configuration.
const NODE_CONFIG: &str = "/etc/tessera/tesserad.toml";

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The daemon's configuration (default: /etc/tessera/tesserad.toml when it exists,
    /// else the built-in defaults).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The daemon's socket (default: $TESSERA_SOCKET, else the configuration's when
    /// one was read, else where `tessera run` looks).
    #[arg(long, env = "TESSERA_SOCKET")]
    socket: Option<PathBuf>,
    /// The interposer to try (default: the one `tessera run` preloads).
    #[arg(long)]
    preload: Option<PathBuf>,
    /// NVML to probe (default: $TESSERA_NVML, else libnvidia-ml.so.1).
    #[arg(long, env = "TESSERA_NVML")]
    nvml: Option<PathBuf>,
    /// Slurm's gres.conf, compared with the daemon's GPUs.
    #[arg(long, default_value = "/etc/slurm/gres.conf")]
    gres_conf: PathBuf,
}

/// An error (so exit status 1) when a check fails or the configuration is unusable.
pub fn run(a: DoctorArgs) -> Result<()> {
    let path = a.config.clone().or_else(|| {
        let node = PathBuf::from(NODE_CONFIG);
        node.is_file().then_some(node)
    });
    let (config, config_source) = match &path {
        Some(p) => match DaemonConfig::from_file(p).and_then(|c| c.validate().map(|()| c)) {
            Ok(c) => (c, ConfigSource::File(p.clone())),
            Err(e) => (DaemonConfig::default(), ConfigSource::Broken(e.to_string())),
        },
        None => (DaemonConfig::default(), ConfigSource::Defaults(NODE_CONFIG.into())),
    };
    let config_read = matches!(config_source, ConfigSource::File(_));
    let socket = a.socket.clone().unwrap_or_else(|| {
        if config_read { config.socket.clone() } else { crate::default_socket() }
    });
    // without its configuration file, the running daemon says which ledger it uses:
    // that one is checked, not the built-in default
    let mut config = config;
    if !config_read
        && let Some(ledger) = tessera_client::Client::connect_control(&socket)
            .and_then(|mut c| c.status())
            .ok()
            .and_then(|s| s.ledger)
    {
        config.ledger = PathBuf::from(ledger);
    }
    let node = Node {
        interposer: a
            .preload
            .clone()
            .or_else(crate::run::default_preload)
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p)),
        nvml: a.nvml.clone(),
        gres_conf: a.gres_conf.clone(),
        passwd: std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
        config,
        config_source,
        socket,
    };
    let findings = tesserad::doctor::examine(&node);
    for f in &findings {
        println!("{}", f.line());
    }
    let failed = findings.iter().filter(|f| f.verdict == Verdict::Fail).count();
    let warned = findings.iter().filter(|f| f.verdict == Verdict::Warn).count();
    println!("{} checks: {failed} failed, {warned} warnings", findings.len());
    if failed > 0 {
        anyhow::bail!(
            "{failed} of {} checks failed; each FAIL line says how to fix it",
            findings.len()
        );
    }
    Ok(())
}
