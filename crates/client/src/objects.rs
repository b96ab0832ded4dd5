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
    /// The member the entry connection leads to, when the member addresses
    /// name it.
    entry_node: Option<NodeId>,
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

    /// The member's own connection, dialled now if it has none (or the one
    /// it has is known closed: the member restarted) and the last dial is
    /// not too recent; `None` means use the entry node. `no_other_way`: the
    /// entry node cannot carry the call (it is this member, or its
    /// connection is closed), so waiting out [`REDIAL_AFTER`] would only
    /// turn calls into errors.
    async fn client(
        &self,
        node: NodeId,
        limits: quarry_proto::SessionLimits,
        no_other_way: bool,
    ) -> Option<Client> {
        let ready = |state: DirectState| match state {
            DirectState::Up(client) if !client.is_closed() => Some(Some(client)),
            DirectState::Unreachable(at) if at.elapsed() < REDIAL_AFTER && !no_other_way => {
                Some(None)
            }
            DirectState::Up(_) | DirectState::Unreachable(_) | DirectState::NotDialled => None,
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
        let mut entry_node = None;
        let direct = client
            .member_addrs()
            .unwrap_or(&[])
            .iter()
            .filter(|(id, _)| members.contains(id))
            .map(|(id, addr)| {
                // The entry node's link starts as the entry connection, so
                // its calls take no second connection; it is dialled anew
                // if the entry node restarts, which the entry connection
                // itself cannot survive.
                let state = if addr == client.entry_addr() {
                    entry_node = Some(*id);
                    DirectState::Up(client.clone())
                } else {
                    DirectState::NotDialled
                };
                let link = DirectLink {
                    addr: addr.clone(),
                    state: std::sync::Mutex::new(state),
                    dialling: tokio::sync::Mutex::new(()),
                };
                (*id, link)
            })
            .collect();
        StoreCalls {
            client,
            entry_node,
            direct,
        }
    }

    /// `node`'s own connection when it can be had; `None`: the entry node's.
    async fn direct(&self, node: NodeId) -> Option<Client> {
        let no_other_way = self.entry_node == Some(node) || self.client.is_closed();
        self.direct
            .get(&node)?
            .client(node, self.client.limits(), no_other_way)
            .await
    }
}

impl StoreCalls {
    /// Sends `body` to `node`'s `service`: over the member's own connection
    /// when it has one, else through the entry node.
    pub(crate) async fn call_service(
        &self,
        node: NodeId,
        service: Service,
        idempotent: bool,
        body: Bytes,
    ) -> Result<Bytes, String> {
        let request = |body: Bytes| {
            Request::Call(Box::new(ServiceCall {
                node,
                service,
                idempotent,
                body,
            }))
        };
        let answer = match self.direct(node).await {
            None => self.client.call(request(body)).await,
            Some(via) => match via.call(request(body.clone())).await {
                // The direct connection broke (the member restarted, or a
                // timeout); the entry node may still reach the member over
                // the fabric, unless the broken connection was the entry
                // node's own. Only a call that may run twice is sent again.
                Err(ClientError::Proto(e)) => {
                    if let Some(link) = self.direct.get(&node) {
                        link.set(DirectState::NotDialled);
                    }
                    let entry_can_carry = self.entry_node != Some(node) && !self.client.is_closed();
                    if idempotent && entry_can_carry {
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
            Ok(Response::Error { status, message }) => Err(format!("{status:?}: {message}")),
            Ok(other) => Err(format!(
                "unexpected answer to a {service:?} call: {other:?}"
            )),
            Err(e) => Err(e.to_string()),
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
        self.call_service(node, Service::Store, idempotent, body)
            .await
            .map_err(|reason| StoreError::Transport { node, reason })
    }
}

impl quarry_kv_api::KvTransport for StoreCalls {
    async fn call(
        &self,
        node: NodeId,
        call: quarry_kv_api::KvCall,
    ) -> quarry_kv_api::Result<quarry_kv_api::KvReply> {
        // A batch of reads may run twice; anything that changes may not.
        let idempotent = match &call.request {
            quarry_kv_api::KvRequest::Ops(ops) => ops
                .iter()
                .all(|op| matches!(op, quarry_kv_api::KvOp::Get { touch: None, .. })),
            quarry_kv_api::KvRequest::Stats => true,
            quarry_kv_api::KvRequest::FlushAll { .. } => false,
        };
        let body = self
            .call_service(node, Service::Kv, idempotent, call.encode())
            .await
            .map_err(|message| quarry_kv_api::KvError::Transport { node, message })?;
        quarry_kv_api::KvReply::decode(&body)
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

/// A tenant's key-value tables over the cluster, reached through one
/// client connection (direct connections to members when it knows them).
pub type KvTables = quarry_kv_api::KvCluster<StoreCalls>;

impl Client {
    /// `tenant`'s key-value tables (`secret` empty for a cluster with no
    /// tenants configured, whose one tenant is `default`), placed over the
    /// configured members as [`Client::objects`] places objects.
    pub async fn kv(&self, tenant: &str, secret: &str) -> Result<KvTables, ClientError> {
        let ids: Vec<NodeId> = match self.configured_members() {
            Some(ids) => ids.to_vec(),
            None => self.cluster().await?.iter().map(|m| m.id).collect(),
        };
        let tenant = quarry_kv_api::TenantName::new(tenant)?;
        let transport = std::sync::Arc::new(StoreCalls::new(self.clone()));
        Ok(quarry_kv_api::KvCluster::new(
            ids,
            transport,
            tenant,
            Bytes::copy_from_slice(secret.as_bytes()),
        )?)
    }
}
