//! The object store through a client: store calls travel as the protocol's
//! service calls to the node placement names, through the entry node.

use bytes::Bytes;
use quarry_proto::{NodeId, Request, Response, Service, ServiceCall};
use quarry_store_api::{ObjectStore, RemoteNode, StoreError, StoreTransport};

use crate::{Client, ClientError};

/// Carries encoded store calls over a [`Client`]'s connection.
pub struct StoreCalls {
    client: Client,
}

impl StoreTransport for StoreCalls {
    async fn call(
        &self,
        node: NodeId,
        idempotent: bool,
        body: Bytes,
    ) -> quarry_store_api::Result<Bytes> {
        let request = Request::Call(Box::new(ServiceCall {
            node,
            service: Service::Store,
            idempotent,
            body,
        }));
        match self.client.call(request).await {
            Ok(Response::Reply(answer)) => Ok(answer),
            Ok(other) => Err(StoreError::Transport {
                node,
                reason: format!("unexpected answer to a store call: {other:?}"),
            }),
            Err(e) => Err(StoreError::Transport {
                node,
                reason: e.to_string(),
            }),
        }
    }
}

/// The cluster's objects, reached through one client connection.
pub type Objects = ObjectStore<RemoteNode<StoreCalls>>;

impl Client {
    /// The object store over the cluster's members (buckets, put, get with
    /// ranges, list, delete, df). Placement is computed over the configured
    /// members when the client knows them (connected through a cluster
    /// file, or [`Client::with_members`]); otherwise over the members the
    /// entry node reaches now, so connect through a cluster file whenever a
    /// node may be down. The members must run managed storage; a raw node
    /// answers store calls with an error saying so.
    pub async fn objects(&self) -> Result<Objects, ClientError> {
        let ids: Vec<NodeId> = match self.configured_members() {
            Some(ids) => ids.to_vec(),
            None => self.cluster().await?.iter().map(|m| m.id).collect(),
        };
        let transport = std::sync::Arc::new(StoreCalls {
            client: self.clone(),
        });
        let nodes = ids
            .into_iter()
            .map(|id| std::sync::Arc::new(RemoteNode::new(id, transport.clone())));
        Ok(ObjectStore::new(nodes)?)
    }
}
