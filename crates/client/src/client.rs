use std::future::Future;

use bytes::Bytes;
use quarry_proto::PageRead;
use quarry_proto::{
    GlobalBlockAddr, GlobalPageAddr, NodeEntry, NodeId, NodeInfo, Request, Response, RoutesInfo,
    Session, SessionLimits,
};

use crate::{ClientError, ClusterFile};

/// An async connection to a Quarry cluster through one entry node. Every page of
/// every node is reachable through it; the entry node forwards. Cloning is
/// cheap and clones share the connection, so many tasks can keep many requests
/// in flight at once.
#[derive(Clone)]
pub struct Client {
    session: Session,
    entry_addr: String,
    /// The cluster's members as configured (from a cluster file), when
    /// known: placement must be computed over every member, up or not.
    members: Option<std::sync::Arc<Vec<NodeId>>>,
    /// The members' client addresses, when known: object calls then go to
    /// the node that holds the data directly instead of through the entry
    /// node, which would otherwise carry every byte twice.
    member_addrs: Option<std::sync::Arc<Vec<(NodeId, String)>>>,
    /// The limits this connection was made with; direct connections to
    /// members take the same.
    limits: SessionLimits,
}

/// A submitted request whose answer has not been awaited yet.
pub type Completion = std::pin::Pin<Box<dyn Future<Output = Result<Response, ClientError>> + Send>>;

impl Client {
    /// Connects to the node at `addr` (`host:port`).
    pub async fn connect(addr: &str) -> Result<Client, ClientError> {
        Self::connect_with(addr, SessionLimits::default()).await
    }

    /// Connects with explicit session limits (in-flight bound, timeouts).
    pub async fn connect_with(addr: &str, limits: SessionLimits) -> Result<Client, ClientError> {
        let session = Session::connect(addr, limits).await?;
        Ok(Client {
            session,
            entry_addr: addr.to_string(),
            members: None,
            member_addrs: None,
            limits,
        })
    }

    /// Connects to the first member of `cluster` that answers, in file order;
    /// the error lists every address tried and why it failed.
    ///
    /// The members are the file's and every member the entry node names
    /// (`Request::Cluster`): a file that lists only some nodes (a seed
    /// address) must not compute placement over those alone, or every
    /// object it puts lands where no other client looks for it. A member
    /// the file lists stays one while it is down.
    pub async fn connect_cluster(cluster: &ClusterFile) -> Result<Client, ClientError> {
        let mut tried = Vec::new();
        for node in &cluster.nodes {
            match Client::connect(&node.addr).await {
                Ok(client) => {
                    let mut members: Vec<(NodeId, String)> = cluster
                        .nodes
                        .iter()
                        .map(|n| (n.id, n.addr.clone()))
                        .collect();
                    // An entry node that cannot say leaves the file's list.
                    if let Ok(named) = client.cluster().await {
                        for m in named {
                            if !members.iter().any(|(id, _)| *id == m.id) {
                                members.push((m.id, m.addr));
                            }
                        }
                    }
                    return Ok(client.with_member_addrs(members));
                }
                Err(e) => tried.push(format!("node {} at {}: {e}", node.id, node.addr)),
            }
        }
        Err(ClientError::NoEntryNode {
            tried: tried.join("; "),
        })
    }

    /// Whether the connection is known closed (the node went away or the
    /// connection failed); a closed connection never opens again.
    pub fn is_closed(&self) -> bool {
        self.session.is_closed()
    }

    /// The entry node's address.
    pub fn entry_addr(&self) -> &str {
        &self.entry_addr
    }

    /// Names the cluster's members as configured. Data placement (objects)
    /// is computed over them, whether each is reachable right now or not;
    /// without them it is computed over the nodes the entry node reaches
    /// when asked, which is wrong while a member is down or rejoining.
    pub fn with_members(mut self, ids: impl IntoIterator<Item = NodeId>) -> Client {
        let mut ids: Vec<NodeId> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        self.members = Some(std::sync::Arc::new(ids));
        self
    }

    /// Names the cluster's members and their client addresses (as a
    /// cluster file lists them): placement is computed over them, as with
    /// [`Client::with_members`], and object calls go straight to the member
    /// that holds the data over a connection of their own, dialled on first
    /// use. A member this client cannot reach directly (a firewall, another
    /// network) is reached through the entry node, as without addresses.
    pub fn with_member_addrs(
        mut self,
        members: impl IntoIterator<Item = (NodeId, String)>,
    ) -> Client {
        let mut members: Vec<(NodeId, String)> = members.into_iter().collect();
        members.sort_unstable_by_key(|(id, _)| *id);
        members.dedup_by_key(|(id, _)| *id);
        self = self.with_members(members.iter().map(|(id, _)| *id));
        self.member_addrs = Some(std::sync::Arc::new(members));
        self
    }

    /// The configured members' client addresses, when known
    /// ([`Client::with_member_addrs`]).
    pub fn member_addrs(&self) -> Option<&[(NodeId, String)]> {
        self.member_addrs.as_deref().map(Vec::as_slice)
    }

    /// The limits this connection was made with.
    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// The configured members, when known ([`Client::with_members`]).
    pub fn configured_members(&self) -> Option<&[NodeId]> {
        self.members.as_deref().map(Vec::as_slice)
    }

    /// Sends `request` now under a free tag and returns its completion; await
    /// it later. This is the tagged-submission API: keep many completions
    /// outstanding to keep every bus of every node busy.
    pub async fn submit(&self, request: Request) -> Result<Completion, ClientError> {
        let pending = self.session.submit(request).await?;
        Ok(Box::pin(async move { Ok(pending.await?) }))
    }

    /// Sends `request` and waits for its answer; an error answer becomes
    /// [`ClientError::Remote`].
    pub async fn call(&self, request: Request) -> Result<Response, ClientError> {
        into_result(self.session.call(request).await?)
    }

    /// Liveness check of the entry node.
    pub async fn ping(&self) -> Result<(), ClientError> {
        expect_done("ping", self.call(Request::Ping).await?, |r| {
            matches!(r, Response::Pong)
        })
    }

    /// Reads one page anywhere in the cluster.
    pub async fn read_page(&self, addr: GlobalPageAddr) -> Result<PageRead, ClientError> {
        page_of(self.call(Request::ReadPage(addr)).await?)
    }

    /// Programs one page anywhere in the cluster (`data` exactly one page, `oob`
    /// at most the device's OOB size).
    pub async fn program_page(
        &self,
        addr: GlobalPageAddr,
        data: Bytes,
        oob: Bytes,
    ) -> Result<(), ClientError> {
        let answer = self.call(Request::ProgramPage { addr, data, oob }).await?;
        expect_done("program", answer, |r| matches!(r, Response::Done))
    }

    /// Erases one block anywhere in the cluster.
    pub async fn erase_block(&self, addr: GlobalBlockAddr) -> Result<(), ClientError> {
        expect_done("erase", self.call(Request::EraseBlock(addr)).await?, |r| {
            matches!(r, Response::Done)
        })
    }

    /// Describes one node (its device, geometry, wear).
    pub async fn node_info(&self, node: NodeId) -> Result<NodeInfo, ClientError> {
        match self.call(Request::NodeInfo(node)).await? {
            Response::NodeInfo(info) => Ok(*info),
            other => Err(unexpected("node info", &other)),
        }
    }

    /// One node's fabric links and routing table.
    pub async fn routes(&self, node: NodeId) -> Result<RoutesInfo, ClientError> {
        match self.call(Request::Routes(node)).await? {
            Response::Routes(info) => Ok(*info),
            other => Err(unexpected("routes", &other)),
        }
    }

    /// The cluster's members as the entry node knows them.
    pub async fn cluster(&self) -> Result<Vec<NodeEntry>, ClientError> {
        match self.call(Request::Cluster).await? {
            Response::Cluster(nodes) => Ok(nodes),
            other => Err(unexpected("cluster", &other)),
        }
    }
}

/// Turns an error answer into [`ClientError::Remote`].
pub fn into_result(response: Response) -> Result<Response, ClientError> {
    match response {
        Response::Error { status, message } => Err(ClientError::Remote { status, message }),
        other => Ok(other),
    }
}

/// Extracts the page from a read answer.
pub fn page_of(response: Response) -> Result<PageRead, ClientError> {
    match into_result(response)? {
        Response::Page {
            data,
            oob,
            erased,
            corrected_bytes,
        } => Ok(PageRead {
            data,
            oob,
            erased,
            corrected_bytes,
        }),
        other => Err(unexpected("read page", &other)),
    }
}

pub(crate) fn expect_done(
    request: &'static str,
    response: Response,
    ok: impl Fn(&Response) -> bool,
) -> Result<(), ClientError> {
    let response = into_result(response)?;
    if ok(&response) {
        Ok(())
    } else {
        Err(unexpected(request, &response))
    }
}

fn unexpected(request: &'static str, response: &Response) -> ClientError {
    let mut answer = format!("{response:?}");
    answer.truncate(120);
    ClientError::UnexpectedAnswer { request, answer }
}
