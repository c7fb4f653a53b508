//! The plugin's life: serve its socket, register with the kubelet and again whenever
//! the kubelet restarts (its socket is made anew) or the plugin's socket is removed;
//! follow the daemon's GPUs (health) and the kubelet's pod resources list (pods gone).

use crate::config::PluginConfig;
use crate::dra::Dra;
use crate::dra_grpc::{DraService, Registrar};
use crate::node::Node;
use crate::plugin::Plugin;
use crate::proto::deviceplugin::device_plugin_server::DevicePluginServer;
use crate::proto::dra::dra_plugin_server::DraPluginServer;
use crate::proto::pluginregistration::registration_server::RegistrationServer;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// The plugin cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Its book cannot be read.
    #[error(transparent)]
    Book(#[from] crate::allocations::BookError),
    /// The DRA driver's book cannot be read.
    #[error(transparent)]
    Dra(#[from] crate::dra::DraError),
    /// The runtime cannot be made.
    #[error("cannot start the plugin's runtime: {0}")]
    Runtime(std::io::Error),
}

/// A file's identity (a socket made anew is another).
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The plugin's socket, served until its `stop` is sent.
struct Serving {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    socket: PathBuf,
    identity: Option<(u64, u64)>,
}

impl Serving {
    async fn end(self) {
        // a graceful stop would wait for the kubelet's ListAndWatch streams, which
        // never end: give it a moment, then drop them (the kubelet dials again after
        // the registration that follows)
        let _ = self.stop.send(());
        let abort = self.task.abort_handle();
        if tokio::time::timeout(Duration::from_millis(200), self.task).await.is_err() {
            abort.abort();
        }
        if identity(&self.socket) == self.identity {
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

/// Serve `router` on a new socket `socket` (any file there removed first), readable by
/// root only: whoever reaches it can take units or prepare claims (the kubelet, root).
fn serve(socket: &Path, router: tonic::transport::server::Router) -> std::io::Result<Serving> {
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // made 0600 from the start (a connection accepted before a chmod would be
    // served): the process's umask is the only way to bind so; other threads' files
    // made meanwhile only come out more private
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let bound = tokio::net::UnixListener::bind(socket);
    rustix::process::umask(old);
    let listener = bound?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    let (stop, stopped) = oneshot::channel::<()>();
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let task = tokio::spawn(async move {
        let r = router
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "a gRPC server of the plugin stopped");
        }
    });
    Ok(Serving { stop, task, socket: socket.into(), identity: identity(socket) })
}

fn device_plugin(
    node: &Arc<Node>,
    devices: &watch::Receiver<Vec<crate::proto::deviceplugin::Device>>,
) -> tonic::transport::server::Router {
    tonic::transport::Server::builder()
        .add_service(DevicePluginServer::new(Plugin::new(node.clone(), devices.clone())))
}

/// The DRA driver's two sockets: its registration (in the kubelet's plugins_registry)
/// and its DRA service.
fn serve_dra(dra: &Arc<Dra>, cfg: &PluginConfig) -> std::io::Result<(Serving, Serving)> {
    let endpoint = cfg.dra.plugin_dir.join("dra.sock");
    let service = tonic::transport::Server::builder()
        .add_service(DraPluginServer::new(DraService(dra.clone())));
    let dra_sock = serve(&endpoint, service)?;
    let registrar = Registrar { driver: cfg.dra.driver.clone(), endpoint };
    let registration =
        tonic::transport::Server::builder().add_service(RegistrationServer::new(registrar));
    let reg = serve(
        &cfg.dra.plugins_registry.join(format!("{}-reg.sock", cfg.dra.driver)),
        registration,
    )?;
    Ok((reg, dra_sock))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// Run the plugin with `cfg` until `stop` completes (the binary's SIGTERM or SIGINT).
pub async fn run(
    cfg: PluginConfig,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let node = Arc::new(Node::open(cfg)?);
    let cfg = node.cfg.clone();
    let kubelet_sock = cfg.device_plugin_dir.join("kubelet.sock");
    let own_sock = cfg.device_plugin_dir.join(&cfg.endpoint);
    let (devices_tx, devices) = watch::channel(Vec::new());
    tracing::info!(
        resource = %cfg.resource,
        unit_bytes = cfg.unit_bytes,
        allocations = node.allocations().len(),
        "tessera device plugin starting"
    );
    let dra = if cfg.dra.enabled { Some(Arc::new(Dra::open(node.clone())?)) } else { None };
    let mut dra_serving: Option<(Serving, Serving)> = None;
    let mut serving: Option<Serving> = None;
    let mut registered_with = None;
    let mut said_no_list = false;
    let mut tick = tokio::time::interval(Duration::from_millis(cfg.poll_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = tick.tick() => {}
        }
        // the daemon: its GPUs and health; its restart (or the plugin's first sight of
        // it, this one's restart included) gets every allocation of the book again
        let n = node.clone();
        if blocking(move || n.check_daemon()).await == Some(true) {
            let n = node.clone();
            blocking(move || n.regrant_all()).await;
            if let Some(d) = &dra {
                let d = d.clone();
                blocking(move || d.regrant_all()).await;
            }
        }
        // the DRA driver: its sockets made again when one is gone (the kubelet's
        // plugin watcher finds the registration socket by itself)
        if let Some(d) = &dra {
            let gone = dra_serving.as_ref().is_none_or(|(r, s)| {
                identity(&r.socket) != r.identity || identity(&s.socket) != s.identity
            });
            if gone {
                if let Some((r, s)) = dra_serving.take() {
                    r.end().await;
                    s.end().await;
                }
                match serve_dra(d, &cfg) {
                    Ok(pair) => {
                        tracing::info!(driver = %cfg.dra.driver, "DRA driver serving");
                        dra_serving = Some(pair);
                    }
                    Err(e) => tracing::error!(error = %e, "cannot serve the DRA driver's sockets"),
                }
            }
        }
        let n = node.clone();
        blocking(move || n.retry_ends()).await;
        let now = node.devices();
        devices_tx.send_if_modified(|d| {
            let changed = *d != now;
            if changed {
                *d = now;
            }
            changed
        });
        // the kubelet: registered again when its socket is made anew (it restarted)
        // or the plugin's own was removed (the kubelet removes plugins' sockets when
        // it starts)
        let kubelet = identity(&kubelet_sock);
        let own_gone = serving.as_ref().is_none_or(|s| identity(&own_sock) != s.identity);
        // a node gives its GPUs' memory to one of the two: the device plugin's units,
        // or the DRA driver's claims (each would promise the same memory)
        if !cfg.dra.enabled && kubelet.is_some() && (kubelet != registered_with || own_gone) {
            if let Some(s) = serving.take() {
                s.end().await;
            }
            match serve(&own_sock, device_plugin(&node, &devices)) {
                Ok(s) => serving = Some(s),
                Err(e) => {
                    tracing::error!(socket = %own_sock.display(), error = %e, "cannot serve the plugin's socket");
                    continue;
                }
            }
            match crate::kubelet::register(&kubelet_sock, &cfg.endpoint, &cfg.resource).await {
                Ok(()) => {
                    registered_with = kubelet;
                    tracing::info!(kubelet = %kubelet_sock.display(), "registered with the kubelet");
                }
                Err(e) => {
                    registered_with = None;
                    tracing::warn!(error = %e, "registration failed: tried again");
                }
            }
        }
        // the pod resources list: the pods of the allocations, and those gone
        let listed_ms = crate::node::now_ms();
        match crate::kubelet::listed(&cfg.pod_resources_socket, &cfg.resource).await {
            Ok(listed) => {
                said_no_list = false;
                let n = node.clone();
                blocking(move || n.reconcile(&listed, listed_ms)).await;
            }
            Err(e) => {
                // nothing is ended on a list that cannot be read
                if !said_no_list {
                    tracing::warn!(error = %e, "cannot read the pod resources list: allocations kept");
                    said_no_list = true;
                }
            }
        }
    }
    if let Some(s) = serving.take() {
        s.end().await;
    }
    if let Some((r, s)) = dra_serving.take() {
        r.end().await;
        s.end().await;
    }
    tracing::info!("tessera device plugin stopped (allocations kept for its next start)");
    Ok(())
}

/// Run the plugin on a runtime of its own until SIGTERM or SIGINT.
pub fn run_until_signalled(cfg: PluginConfig) -> Result<(), ServeError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    rt.block_on(async {
        let stop = async {
            use tokio::signal::unix::{SignalKind, signal};
            match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => std::future::pending::<()>().await,
            }
        };
        run(cfg, stop).await
    })
}
