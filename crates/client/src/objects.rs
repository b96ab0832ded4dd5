//! The object store through a client: store calls travel as the protocol's
//! service calls to the node placement names, through the entry node.

use bytes::Bytes;
use quarry_proto::{NodeId, Request, Response, Service, ServiceCall};
use quarry_store::{ObjectStore, RemoteNode, StoreError, StoreTransport};

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
    ) -> quarry_store::Result<Bytes> {
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
    /// The object store over every member the entry node knows (buckets,
    /// put, get with ranges, list, delete, df). The members must run managed
    /// storage; a raw node answers store calls with an error saying so.
    pub async fn objects(&self) -> Result<Objects, ClientError> {
        let members = self.cluster().await?;
        let transport = std::sync::Arc::new(StoreCalls {
            client: self.clone(),
        });
        let nodes = members
            .iter()
            .map(|m| std::sync::Arc::new(RemoteNode::new(m.id, transport.clone())));
        Ok(ObjectStore::new(nodes)?)
    }
}
