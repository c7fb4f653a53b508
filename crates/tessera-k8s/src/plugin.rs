//! The device plugin's gRPC service (`v1beta1.DevicePlugin`), served to the kubelet on
//! the plugin's socket: its answers come from [`Node`].

use crate::node::{AllocateError, Node};
use crate::proto::deviceplugin::device_plugin_server::DevicePlugin;
use crate::proto::deviceplugin::{
    AllocateRequest, AllocateResponse, ContainerPreferredAllocationResponse, Device,
    DevicePluginOptions, Empty, ListAndWatchResponse, PreStartContainerRequest,
    PreStartContainerResponse, PreferredAllocationRequest, PreferredAllocationResponse,
};
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

/// The service: the node's state, and the units advertised now (the watch loop
/// publishes each change; every `ListAndWatch` stream follows it).
#[derive(Debug)]
pub struct Plugin {
    node: Arc<Node>,
    devices: watch::Receiver<Vec<Device>>,
}

impl Plugin {
    /// A service answering from `node`, advertising what `devices` holds.
    pub fn new(node: Arc<Node>, devices: watch::Receiver<Vec<Device>>) -> Plugin {
        Plugin { node, devices }
    }
}

fn status_of(e: &AllocateError) -> Status {
    match e {
        AllocateError::Units(_) | AllocateError::Unknown(_) => {
            Status::invalid_argument(e.to_string())
        }
        AllocateError::Daemon(_) => Status::unavailable(e.to_string()),
        AllocateError::Keep(_) => Status::internal(e.to_string()),
    }
}

#[tonic::async_trait]
impl DevicePlugin for Plugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    type ListAndWatchStream =
        Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send + 'static>>;

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        // the list now, then each change; the stream ends when the plugin does
        let stream = tokio_stream::wrappers::WatchStream::new(self.devices.clone())
            .map(|devices| Ok(ListAndWatchResponse { devices }));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let container_responses = request
            .into_inner()
            .container_requests
            .iter()
            .map(|r| ContainerPreferredAllocationResponse {
                device_i_ds: crate::units::preferred(
                    &r.available_device_i_ds,
                    &r.must_include_device_i_ds,
                    usize::try_from(r.allocation_size).unwrap_or(0),
                ),
            })
            .collect();
        Ok(Response::new(PreferredAllocationResponse { container_responses }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let node = self.node.clone();
        let requests = request.into_inner().container_requests;
        // the daemon's client blocks: off the runtime's thread
        let answers = tokio::task::spawn_blocking(move || {
            let containers: Vec<Vec<String>> =
                requests.into_iter().map(|r| r.devices_ids).collect();
            node.allocate_all(&containers)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        match answers {
            Ok(container_responses) => Ok(Response::new(AllocateResponse { container_responses })),
            Err(e) => {
                tracing::warn!(error = %e, "Allocate refused");
                Err(status_of(&e))
            }
        }
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
