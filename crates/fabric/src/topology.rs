//! Which nodes are linked, what every node has advertised about its links, and
//! the shortest-path routes that follow from it.
//!
//! Routing is link-state (as OSPF, and as BlueDBM's nodes learn the network
//! from each other): every node floods an advertisement of its live links,
//! each with a sequence number; every node keeps the newest advertisement of
//! each origin in a [`LinkStateDb`] and computes its [`RoutingTable`] by
//! breadth-first search over it. A link counts only when both ends advertise
//! it, so a link that one side saw die stops carrying traffic at once.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use quarry_proto::NodeId;
use serde::{Deserialize, Serialize};

/// The shapes `quarry up --topology` and a node's configuration can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopologyKind {
    /// Every node linked to every other.
    Mesh,
    /// Nodes in id order, each linked to the next.
    Line,
    /// A line whose ends are linked too.
    Ring,
    /// The lowest id linked to every other node.
    Star,
    /// A binary tree in id order: the node at position `i` is linked to the
    /// one at `(i - 1) / 2`.
    Tree,
}

/// An undirected link between two nodes, lowest id first.
pub type Link = (NodeId, NodeId);

/// The links of a shape over `ids` (sorted and deduplicated first).
pub fn links_of(kind: TopologyKind, ids: &[NodeId]) -> BTreeSet<Link> {
    let ids: Vec<NodeId> = ids
        .iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut links = BTreeSet::new();
    let mut add = |a: NodeId, b: NodeId| {
        if a != b {
            links.insert((a.min(b), a.max(b)));
        }
    };
    match kind {
        TopologyKind::Mesh => {
            for (i, &a) in ids.iter().enumerate() {
                for &b in &ids[i + 1..] {
                    add(a, b);
                }
            }
        }
        TopologyKind::Line | TopologyKind::Ring => {
            for pair in ids.windows(2) {
                add(pair[0], pair[1]);
            }
            if kind == TopologyKind::Ring && ids.len() > 2 {
                add(ids[0], ids[ids.len() - 1]);
            }
        }
        TopologyKind::Star => {
            if let Some((&hub, rest)) = ids.split_first() {
                for &b in rest {
                    add(hub, b);
                }
            }
        }
        TopologyKind::Tree => {
            for i in 1..ids.len() {
                add(ids[(i - 1) / 2], ids[i]);
            }
        }
    }
    links
}

/// One node's advertisement of its live links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkAdvert {
    /// The node advertising.
    pub origin: NodeId,
    /// Where it accepts connections.
    pub addr: String,
    /// Grows with every new advertisement from `origin` (a restarted node
    /// starts from its start time, so it supersedes its old adverts).
    pub sequence: u64,
    /// Neighbours it has a live link to.
    pub neighbors: BTreeSet<NodeId>,
}

/// The newest advertisement of every node heard of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStateDb {
    adverts: BTreeMap<NodeId, LinkAdvert>,
}

impl LinkStateDb {
    /// An empty database.
    pub fn new() -> LinkStateDb {
        LinkStateDb::default()
    }

    /// Keeps `advert` if it is newer than what is known of its origin; returns
    /// whether it was (and so must be flooded on).
    pub fn apply(&mut self, advert: LinkAdvert) -> bool {
        match self.adverts.get(&advert.origin) {
            Some(known) if known.sequence >= advert.sequence => false,
            _ => {
                self.adverts.insert(advert.origin, advert);
                true
            }
        }
    }

    /// Forgets `origin` (a node declared gone).
    pub fn remove(&mut self, origin: NodeId) -> Option<LinkAdvert> {
        self.adverts.remove(&origin)
    }

    /// The newest advertisement of `origin`.
    pub fn get(&self, origin: NodeId) -> Option<&LinkAdvert> {
        self.adverts.get(&origin)
    }

    /// Origins known.
    pub fn len(&self) -> usize {
        self.adverts.len()
    }

    /// True when nothing has been heard.
    pub fn is_empty(&self) -> bool {
        self.adverts.is_empty()
    }

    /// Every advertisement, by origin.
    pub fn adverts(&self) -> impl Iterator<Item = &LinkAdvert> {
        self.adverts.values()
    }

    /// Neighbours of `id` over links both ends advertise.
    pub fn confirmed_neighbors(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.adverts
            .get(&id)
            .into_iter()
            .flat_map(|a| a.neighbors.iter().copied())
            .filter(move |&n| {
                self.adverts
                    .get(&n)
                    .is_some_and(|other| other.neighbors.contains(&id))
            })
    }
}

/// How to reach one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Where the request is going.
    pub dest: NodeId,
    /// The neighbour to hand it to.
    pub next_hop: NodeId,
    /// Links on the way (1 for a neighbour).
    pub hops: u8,
}

/// Shortest routes from one node to every node it can reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutingTable {
    routes: BTreeMap<NodeId, Route>,
}

impl RoutingTable {
    /// Breadth-first search from `local` over the confirmed links of `db`.
    /// Among equal-length paths the one through the lowest neighbour id wins,
    /// so every run over the same database gives the same table.
    pub fn compute(local: NodeId, db: &LinkStateDb) -> RoutingTable {
        let mut routes = BTreeMap::new();
        let mut queue = VecDeque::new();
        let mut first: Vec<NodeId> = db.confirmed_neighbors(local).collect();
        first.sort_unstable();
        for n in first {
            if n != local && !routes.contains_key(&n) {
                routes.insert(
                    n,
                    Route {
                        dest: n,
                        next_hop: n,
                        hops: 1,
                    },
                );
                queue.push_back(n);
            }
        }
        while let Some(at) = queue.pop_front() {
            let Some(via) = routes.get(&at).copied() else {
                continue;
            };
            let mut next: Vec<NodeId> = db.confirmed_neighbors(at).collect();
            next.sort_unstable();
            for n in next {
                if n == local || routes.contains_key(&n) {
                    continue;
                }
                routes.insert(
                    n,
                    Route {
                        dest: n,
                        next_hop: via.next_hop,
                        hops: via.hops.saturating_add(1),
                    },
                );
                queue.push_back(n);
            }
        }
        RoutingTable { routes }
    }

    /// The route to `dest`, if it is reachable.
    pub fn route(&self, dest: NodeId) -> Option<Route> {
        self.routes.get(&dest).copied()
    }

    /// Every route, by destination.
    pub fn routes(&self) -> impl Iterator<Item = Route> + '_ {
        self.routes.values().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db_of(links: &BTreeSet<Link>, ids: &[NodeId]) -> LinkStateDb {
        let mut db = LinkStateDb::new();
        for &id in ids {
            let neighbors = links
                .iter()
                .filter_map(|&(a, b)| match (a == id, b == id) {
                    (true, _) => Some(b),
                    (_, true) => Some(a),
                    _ => None,
                })
                .collect();
            db.apply(LinkAdvert {
                origin: id,
                addr: format!("10.0.0.{id}:7400"),
                sequence: 1,
                neighbors,
            });
        }
        db
    }

    #[test]
    fn shapes() {
        let ids = [0, 1, 2, 3];
        assert_eq!(links_of(TopologyKind::Mesh, &ids).len(), 6);
        assert_eq!(
            links_of(TopologyKind::Line, &ids),
            [(0, 1), (1, 2), (2, 3)].into()
        );
        assert_eq!(
            links_of(TopologyKind::Ring, &ids),
            [(0, 1), (1, 2), (2, 3), (0, 3)].into()
        );
        assert_eq!(
            links_of(TopologyKind::Star, &ids),
            [(0, 1), (0, 2), (0, 3)].into()
        );
        assert_eq!(
            links_of(TopologyKind::Tree, &ids),
            [(0, 1), (0, 2), (1, 3)].into()
        );
        assert!(links_of(TopologyKind::Ring, &[5]).is_empty());
    }

    #[test]
    fn line_routes_go_hop_by_hop() {
        let ids = [0, 1, 2, 3];
        let db = db_of(&links_of(TopologyKind::Line, &ids), &ids);
        let table = RoutingTable::compute(0, &db);
        assert_eq!(
            table.route(3),
            Some(Route {
                dest: 3,
                next_hop: 1,
                hops: 3
            })
        );
        assert_eq!(table.route(0), None, "no route to itself");
        let table = RoutingTable::compute(2, &db);
        assert_eq!(table.route(0).map(|r| (r.next_hop, r.hops)), Some((1, 2)));
        assert_eq!(table.route(3).map(|r| (r.next_hop, r.hops)), Some((3, 1)));
    }

    #[test]
    fn ring_reroutes_around_a_cut_link() {
        let ids = [0, 1, 2, 3];
        let mut db = db_of(&links_of(TopologyKind::Ring, &ids), &ids);
        assert_eq!(
            RoutingTable::compute(0, &db).route(1).map(|r| r.hops),
            Some(1)
        );
        // Node 1 sees its link to 0 die; one side's withdrawal is enough.
        let mut advert = db.get(1).cloned().expect("node 1 advertised");
        advert.neighbors.remove(&0);
        advert.sequence += 1;
        assert!(db.apply(advert.clone()));
        assert!(!db.apply(advert), "an advert is applied once");
        let table = RoutingTable::compute(0, &db);
        assert_eq!(table.route(1).map(|r| (r.next_hop, r.hops)), Some((3, 3)));
    }

    #[test]
    fn older_adverts_lose_and_unreachable_nodes_have_no_route() {
        let ids = [0, 1, 2];
        let mut db = db_of(&links_of(TopologyKind::Line, &ids), &ids);
        let stale = LinkAdvert {
            origin: 1,
            addr: "x".into(),
            sequence: 0,
            neighbors: BTreeSet::new(),
        };
        assert!(!db.apply(stale));
        db.remove(2);
        let table = RoutingTable::compute(0, &db);
        assert_eq!(table.route(2), None);
        assert_eq!(table.routes().count(), 1);
    }
}
