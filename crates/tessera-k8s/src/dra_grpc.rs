//! The DRA driver's gRPC services: `pluginregistration.Registration` on a socket in
//! the kubelet's plugins_registry directory (how the kubelet finds the driver) and
//! `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin` on the driver's own socket.

use crate::dra::Dra;
use crate::proto::dra::dra_plugin_server::DraPlugin;
use crate::proto::dra::{
    NodePrepareResourceResponse, NodePrepareResourcesRequest, NodePrepareResourcesResponse,
    NodeUnprepareResourceResponse, NodeUnprepareResourcesRequest, NodeUnprepareResourcesResponse,
};
use crate::proto::pluginregistration::registration_server::Registration;
use crate::proto::pluginregistration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use std::path::PathBuf;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The version of the DRA service the driver serves, as registration names it.
pub const DRA_SERVICE: &str = "v1.DRAPlugin";

/// What the kubelet's plugin watcher asks of the driver.
#[derive(Debug)]
pub struct Registrar {
    /// The driver's name.
    pub driver: String,
    /// Its DRA socket.
    pub endpoint: PathBuf,
}

#[tonic::async_trait]
impl Registration for Registrar {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        Ok(Response::new(PluginInfo {
            r#type: "DRAPlugin".into(),
            name: self.driver.clone(),
            endpoint: self.endpoint.display().to_string(),
            supported_versions: vec![DRA_SERVICE.into()],
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let s = request.into_inner();
        if s.plugin_registered {
            tracing::info!(driver = %self.driver, "the kubelet registered the DRA driver");
        } else {
            tracing::error!(driver = %self.driver, error = %s.error, "the kubelet refused the DRA driver");
        }
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}

/// The `DRAPlugin` service over [`Dra`].
#[derive(Debug)]
pub struct DraService(pub Arc<Dra>);

#[tonic::async_trait]
impl DraPlugin for DraService {
    async fn node_prepare_resources(
        &self,
        request: Request<NodePrepareResourcesRequest>,
    ) -> Result<Response<NodePrepareResourcesResponse>, Status> {
        let dra = self.0.clone();
        let claims = request.into_inner().claims;
        // each claim answers for itself: one that cannot be prepared does not fail the
        // others (the kubelet calls again for those with an error)
        let answers = tokio::task::spawn_blocking(move || {
            claims
                .into_iter()
                .map(|c| {
                    let answer = match dra.prepare(&c.namespace, &c.name, &c.uid) {
                        Ok(devices) => NodePrepareResourceResponse { devices, error: String::new() },
                        Err(e) => {
                            tracing::warn!(claim = %format!("{}/{}", c.namespace, c.name), error = %e, "claim not prepared");
                            NodePrepareResourceResponse { devices: vec![], error: e.to_string() }
                        }
                    };
                    (c.uid, answer)
                })
                .collect()
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(NodePrepareResourcesResponse { claims: answers }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<NodeUnprepareResourcesRequest>,
    ) -> Result<Response<NodeUnprepareResourcesResponse>, Status> {
        let dra = self.0.clone();
        let claims = request.into_inner().claims;
        let answers = tokio::task::spawn_blocking(move || {
            claims
                .into_iter()
                .map(|c| {
                    let error =
                        dra.unprepare(&c.uid).err().map(|e| e.to_string()).unwrap_or_default();
                    (c.uid, NodeUnprepareResourceResponse { error })
                })
                .collect()
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(NodeUnprepareResourcesResponse { claims: answers }))
    }
}
