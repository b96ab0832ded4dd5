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
    /// Read on every call: a plain lock held for a clone, never across a
    /// wait.
    state: std::sync::Mutex<DirectState>,
    /// Held while dialling, so concurrent calls wait for one dial rather
    /// than each making a connection.
    dialling: tokio::sync::Mutex<()>,
}

#[derive(Clone)]
enum DirectState {
    NotDialled,
    Up(Client),
    /// The last dial failed at this instant; use the entry node until
    /// [`REDIAL_AFTER`] has passed.
    Unreachable(Instant),
}

impl DirectLink {
    fn state(&self) -> DirectState {
        // A poisoned lock only means a panic elsewhere mid-assignment of a
        // whole value; the value is still one of the states.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, state: DirectState) {
        *self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = state;
    }

    /// The member's own connection, dialled now if it has none and the
    /// last dial is not too recent; `None` means use the entry node.
    async fn client(&self, node: NodeId, limits: quarry_proto::SessionLimits) -> Option<Client> {
        let ready = |state: DirectState| match state {
            DirectState::Up(client) => Some(Some(client)),
            DirectState::Unreachable(at) if at.elapsed() < REDIAL_AFTER => Some(None),
            DirectState::Unreachable(_) | DirectState::NotDialled => None,
        };
        if let Some(known) = ready(self.state()) {
            return known;
        }
        let _dialling = self.dialling.lock().await;
        // Another call may have dialled while this one waited.
        if let Some(known) = ready(self.state()) {
            return known;
        }
        match Client::connect_with(&self.addr, limits).await {
            Ok(client) => {
                self.set(DirectState::Up(client.clone()));
                Some(client)
            }
            Err(e) => {
                tracing::debug!(node, addr = %self.addr, "direct dial failed, using the entry node: {e}");
                self.set(DirectState::Unreachable(Instant::now()));
                None
            }
        }
    }
}

impl StoreCalls {
    fn new(client: Client) -> StoreCalls {
        let members = client.configured_members().unwrap_or(&[]);
        let direct = client
            .member_addrs()
            .unwrap_or(&[])
            .iter()
            // The entry node serves its own calls over the entry connection.
            .filter(|(id, addr)| members.contains(id) && addr != client.entry_addr())
            .map(|(id, addr)| {
                let link = DirectLink {
                    addr: addr.clone(),
                    state: std::sync::Mutex::new(DirectState::NotDialled),
                    dialling: tokio::sync::Mutex::new(()),
                };
                (*id, link)
            })
            .collect();
        StoreCalls { client, direct }
    }

    /// `node`'s own connection when it can be had; `None`: the entry node's.
    async fn direct(&self, node: NodeId) -> Option<Client> {
        self.direct
            .get(&node)?
            .client(node, self.client.limits())
            .await
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
        let answer = match self.direct(node).await {
            None => self.client.call(request(body)).await,
            Some(via) => match via.call(request(body.clone())).await {
                // The direct connection broke (the member restarted, or a
                // timeout); the entry node may still reach the member over
                // the fabric. Only a call that may run twice is sent again.
                Err(ClientError::Proto(e)) => {
                    if let Some(link) = self.direct.get(&node) {
                        link.set(DirectState::NotDialled);
                    }
                    if idempotent {
                        self.client.call(request(body)).await
                    } else {
                        Err(ClientError::Proto(e))
                    }
                }
                answer => answer,
            },
        };
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
