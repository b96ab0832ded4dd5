//! The object store through a client: store calls travel as the protocol's
//! service calls to the node placement names, straight to it when its
//! address is known, else through the entry node.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_proto::{NodeId, Request, Response, Service, ServiceCall};
use quarry_store_api::{ObjectStore, RemoteNode, StoreError, StoreTransport};

use crate::{Client, ClientError};

/// After a member could not be dialled directly, calls to it go through
/// the entry node for this long before the next dial is tried: a member
/// that is down or out of this client's reach must not cost a connect
/// timeout per call.
const REDIAL_AFTER: Duration = Duration::from_secs(5);

/// Carries encoded store calls over a [`Client`]'s connection, or over a
/// direct connection to the member that serves the call when the member's
/// address is known.
pub struct StoreCalls {
    client: Client,
    direct: HashMap<NodeId, DirectLink>,
}

/// A client's own connection to one member.
struct DirectLink {
    addr: String,
    /// Held while dialling, so concurrent calls wait for one dial rather
    /// than each making a connection.
    state: tokio::sync::Mutex<DirectState>,
}

enum DirectState {
    NotDialled,
    Up(Client),
    /// The last dial failed at this instant; use the entry node until
    /// [`REDIAL_AFTER`] has passed.
    Unreachable(Instant),
}

impl StoreCalls {
    fn new(client: Client) -> StoreCalls {
        let members = client.configured_members().unwrap_or(&[]);
        let direct = client
            .member_addrs()
            .unwrap_or(&[])
            .iter()
            .filter(|(id, _)| members.contains(id))
            .map(|(id, addr)| {
                let link = DirectLink {
                    addr: addr.clone(),
                    state: tokio::sync::Mutex::new(DirectState::NotDialled),
                };
                (*id, link)
            })
            .collect();
        StoreCalls { client, direct }
    }

    /// The connection that reaches `node` best: its own when it can be had,
    /// else the entry node's.
    async fn route(&self, node: NodeId) -> Client {
        let Some(link) = self.direct.get(&node) else {
            return self.client.clone();
        };
        // The entry node serves its own calls over the entry connection.
        if link.addr == self.client.entry_addr() {
            return self.client.clone();
        }
        let mut state = link.state.lock().await;
        match &*state {
            DirectState::Up(client) => return client.clone(),
            DirectState::Unreachable(at) if at.elapsed() < REDIAL_AFTER => {
                return self.client.clone()
            }
            DirectState::Unreachable(_) | DirectState::NotDialled => {}
        }
        match Client::connect_with(&link.addr, self.client.limits()).await {
            Ok(client) => {
                *state = DirectState::Up(client.clone());
                client
            }
            Err(e) => {
                tracing::debug!(node, addr = %link.addr, "direct dial failed, using the entry node: {e}");
                *state = DirectState::Unreachable(Instant::now());
                self.client.clone()
            }
        }
    }

    /// Forgets a direct connection that failed, so the next call dials anew.
    async fn drop_direct(&self, node: NodeId) {
        if let Some(link) = self.direct.get(&node) {
            *link.state.lock().await = DirectState::NotDialled;
        }
    }
}

impl StoreTransport for StoreCalls {
    async fn call(
        &self,
        node: NodeId,
        idempotent: bool,
        body: Bytes,
    ) -> quarry_store_api::Result<Bytes> {
        let request = |body: Bytes| {
            Request::Call(Box::new(ServiceCall {
                node,
                service: Service::Store,
                idempotent,
                body,
            }))
        };
        let via = self.route(node).await;
        let direct = via.entry_addr() != self.client.entry_addr();
        let mut answer = via.call(request(body.clone())).await;
        if direct && matches!(answer, Err(ClientError::Proto(_))) {
            // The direct connection broke (the member restarted, or a
            // timeout); the entry node may still reach the member over the
            // fabric. Only a call that may run twice is sent again.
            self.drop_direct(node).await;
            if idempotent {
                answer = self.client.call(request(body)).await;
            }
        }
        match answer {
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
        let transport = std::sync::Arc::new(StoreCalls::new(self.clone()));
        let nodes = ids
            .into_iter()
            .map(|id| std::sync::Arc::new(RemoteNode::new(id, transport.clone())));
        Ok(ObjectStore::new(nodes)?)
    }
}
