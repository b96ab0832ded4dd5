use std::collections::BTreeMap;

use quarry_proto::{NodeEntry, NodeId};

use crate::FabricError;

/// Who is in the cluster, as this node knows it: itself plus a static peer
/// list from configuration. (Flooding discovery will later grow this at run
/// time; the router only ever asks it for addresses and ids.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    local: NodeEntry,
    peers: BTreeMap<NodeId, String>,
}

/// Most members a cluster may have; matches the Cluster answer's limit.
pub const MAX_MEMBERS: usize = quarry_proto::MAX_CLUSTER_MEMBERS;

impl Membership {
    /// This node (`local`) and its peers. Fails on a duplicate id, on this
    /// node's own id among the peers, or on more than [`MAX_MEMBERS`] members.
    pub fn new(
        local: NodeEntry,
        peers: impl IntoIterator<Item = NodeEntry>,
    ) -> Result<Membership, FabricError> {
        let mut map = BTreeMap::new();
        for peer in peers {
            if peer.id == local.id {
                return Err(FabricError::SelfAmongPeers {
                    id: peer.id,
                    addr: peer.addr,
                });
            }
            if let Some(first) = map.insert(peer.id, peer.addr.clone()) {
                return Err(FabricError::DuplicatePeer {
                    id: peer.id,
                    first,
                    second: peer.addr,
                });
            }
            if map.len() + 1 > MAX_MEMBERS {
                return Err(FabricError::TooManyMembers { limit: MAX_MEMBERS });
            }
        }
        Ok(Membership { local, peers: map })
    }

    /// This node's id.
    pub fn local_id(&self) -> NodeId {
        self.local.id
    }

    /// This node's entry.
    pub fn local(&self) -> &NodeEntry {
        &self.local
    }

    /// The address of peer `id`, if it is a peer (not this node).
    pub fn peer_addr(&self, id: NodeId) -> Option<&str> {
        self.peers.get(&id).map(String::as_str)
    }

    /// True when `id` is this node or one of its peers.
    pub fn is_member(&self, id: NodeId) -> bool {
        id == self.local.id || self.peers.contains_key(&id)
    }

    /// Every member including this node, ordered by id.
    pub fn members(&self) -> Vec<NodeEntry> {
        let mut all: Vec<NodeEntry> = self
            .peers
            .iter()
            .map(|(id, addr)| NodeEntry {
                id: *id,
                addr: addr.clone(),
            })
            .collect();
        let at = all.partition_point(|e| e.id < self.local.id);
        all.insert(at, self.local.clone());
        all
    }

    /// The peers (every member but this node), ordered by id.
    pub fn peers(&self) -> impl Iterator<Item = NodeEntry> + '_ {
        self.peers.iter().map(|(id, addr)| NodeEntry {
            id: *id,
            addr: addr.clone(),
        })
    }

    /// Member ids as `0,1,2,3`, for error messages.
    pub fn ids_text(&self) -> String {
        self.members()
            .iter()
            .map(|e| e.id.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}
