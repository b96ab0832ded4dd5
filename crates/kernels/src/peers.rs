//! How an entry node reaches the other nodes: [`Peers`], and the store and
//! volume transports made from it.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use quarry_device::Geometry;
use quarry_proto::{NodeId, Service};
use quarry_store::{StoreError, StoreTransport};
use quarry_volume::{BlockVolumeError, VolumeTransport};

/// The cluster as the node where a command entered sees it.
pub trait Peers: Send + Sync + 'static {
    /// Sends a service call to node `node` (this node included) and returns
    /// the service's answer; `Err` says why it was not delivered.
    fn call(
        &self,
        node: NodeId,
        service: Service,
        idempotent: bool,
        body: Bytes,
    ) -> impl Future<Output = Result<Bytes, String>> + Send;

    /// The geometry of node `node`'s device.
    fn geometry(&self, node: NodeId) -> impl Future<Output = Result<Geometry, String>> + Send;

    /// The nodes this node reaches, itself included.
    fn members(&self) -> Vec<NodeId>;
}

/// The object store's transport over [`Peers`].
pub(crate) struct StoreVia<P>(pub Arc<P>);

impl<P: Peers> StoreTransport for StoreVia<P> {
    async fn call(
        &self,
        node: NodeId,
        idempotent: bool,
        body: Bytes,
    ) -> quarry_store::Result<Bytes> {
        self.0
            .call(node, Service::Store, idempotent, body)
            .await
            .map_err(|reason| StoreError::Transport { node, reason })
    }
}

/// The block volumes' transport over [`Peers`].
pub(crate) struct VolumesVia<P>(pub Arc<P>);

impl<P: Peers> VolumeTransport for VolumesVia<P> {
    async fn call(
        &self,
        node: NodeId,
        idempotent: bool,
        body: Bytes,
    ) -> Result<Bytes, BlockVolumeError> {
        self.0
            .call(node, Service::Volume, idempotent, body)
            .await
            .map_err(|reason| BlockVolumeError::Transport { node, reason })
    }
}
