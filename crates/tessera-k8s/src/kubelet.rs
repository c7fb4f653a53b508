//! The plugin as the kubelet's client: registering its resource, and reading the pod
//! resources list, over the kubelet's Unix sockets.

use crate::allocations::{Listed, PodRef};
use crate::proto::deviceplugin::registration_client::RegistrationClient;
use crate::proto::deviceplugin::{DevicePluginOptions, RegisterRequest};
use crate::proto::podresources::ListPodResourcesRequest;
use crate::proto::podresources::pod_resources_lister_client::PodResourcesListerClient;
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// The device plugin API version the plugin speaks.
pub const API_VERSION: &str = "v1beta1";

/// A call to the kubelet failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// Its socket cannot be reached.
    #[error("cannot reach the kubelet at {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: tonic::transport::Error,
    },
    /// It answered with an error.
    #[error("the kubelet refused {what}: {status}")]
    Refused {
        /// The call.
        what: &'static str,
        /// Its answer.
        status: Box<tonic::Status>,
    },
}

/// A gRPC channel over the Unix socket `path` (the URI is a placeholder gRPC needs).
pub async fn channel(path: &Path) -> Result<Channel, KubeletError> {
    let p = path.to_path_buf();
    Endpoint::from_static("http://kubelet.invalid")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_| {
            let p = p.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(p).await?))
            }
        }))
        .await
        .map_err(|source| KubeletError::Connect { path: path.into(), source })
}

/// Register `resource`, served on `endpoint` (a socket's name in the device-plugin
/// directory), with the kubelet at `kubelet_sock`.
pub async fn register(
    kubelet_sock: &Path,
    endpoint: &str,
    resource: &str,
) -> Result<(), KubeletError> {
    let mut client = RegistrationClient::new(channel(kubelet_sock).await?);
    client
        .register(RegisterRequest {
            version: API_VERSION.into(),
            endpoint: endpoint.into(),
            resource_name: resource.into(),
            options: Some(DevicePluginOptions {
                pre_start_required: false,
                get_preferred_allocation_available: true,
            }),
        })
        .await
        .map_err(|s| KubeletError::Refused { what: "the registration", status: Box::new(s) })?;
    Ok(())
}

/// The containers holding units of `resource`, from the pod resources list at `sock`.
pub async fn listed(sock: &Path, resource: &str) -> Result<Vec<Listed>, KubeletError> {
    let mut client = PodResourcesListerClient::new(channel(sock).await?);
    let list = client
        .list(ListPodResourcesRequest {})
        .await
        .map_err(|s| KubeletError::Refused { what: "the pod resources list", status: Box::new(s) })?
        .into_inner();
    let mut out = Vec::new();
    for pod in list.pod_resources {
        for c in pod.containers {
            let units: Vec<String> = c
                .devices
                .into_iter()
                .filter(|d| d.resource_name == resource)
                .flat_map(|d| d.device_ids)
                .collect();
            if !units.is_empty() {
                out.push(Listed {
                    pod: PodRef {
                        namespace: pod.namespace.clone(),
                        pod: pod.name.clone(),
                        container: c.name,
                    },
                    units,
                });
            }
        }
    }
    Ok(out)
}
