//! Block volumes through a client: volume calls travel as the protocol's
//! service calls to the member nodes, through the entry node.

use bytes::Bytes;
use quarry_proto::{NodeId, Request, Response, Service, ServiceCall, Status, MAX_BODY_BYTES};
use quarry_volume_api::{
    BlockVolume, BlockVolumeError, BlockVolumes, VolumeTransport, MAX_CALL_DATA_BYTES,
};

use crate::{Client, ClientError};

// A write call is its head (under 100 bytes) and at most MAX_CALL_DATA_BYTES
// of pages; a read answer the same pages and a flag byte per page (at most
// MAX_PAGES_PER_CALL). Both must fit one protocol body with the call's head.
const _: () = assert!(
    MAX_CALL_DATA_BYTES as u64 + quarry_volume_api::MAX_PAGES_PER_CALL + 256
        <= MAX_BODY_BYTES as u64
);

/// Carries encoded volume calls over a [`Client`]'s connection.
pub struct VolumeCalls {
    client: Client,
}

impl VolumeTransport for VolumeCalls {
    async fn call(
        &self,
        node: NodeId,
        idempotent: bool,
        body: Bytes,
    ) -> Result<Bytes, BlockVolumeError> {
        let request = Request::Call(Box::new(ServiceCall {
            node,
            service: Service::Volume,
            idempotent,
            body,
        }));
        match self.client.call(request).await {
            Ok(Response::Reply(answer)) => Ok(answer),
            Ok(other) => Err(BlockVolumeError::Transport {
                node,
                reason: format!("unexpected answer to a volume call: {other:?}"),
            }),
            // The node itself turned the call down (raw storage, or no
            // volume service): not a delivery failure.
            Err(ClientError::Remote {
                status: Status::BadRequest,
                message,
            }) => Err(BlockVolumeError::Refused { node, message }),
            Err(e) => Err(BlockVolumeError::Transport {
                node,
                reason: e.to_string(),
            }),
        }
    }
}

/// The cluster's block volumes, reached through one client connection.
pub type Volumes = BlockVolumes<VolumeCalls>;
/// An open block volume, reached through one client connection.
pub type Volume = BlockVolume<VolumeCalls>;

impl Client {
    /// The block volumes over every member the entry node knows (create,
    /// list, status, open, delete). Volume members must run managed
    /// storage; a raw node refuses volume calls by name.
    pub async fn volumes(&self) -> Result<Volumes, ClientError> {
        let members = self.cluster().await?;
        let transport = std::sync::Arc::new(VolumeCalls {
            client: self.clone(),
        });
        Ok(BlockVolumes::new(
            transport,
            members.iter().map(|m| m.id).collect(),
        ))
    }
}
