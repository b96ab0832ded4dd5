//! The cluster's linear page address space (BlueDBM §3.1-3.2, address
//! permutation).
//!
//! A global address `node:bus:chip:block:page` says where a page lives; a
//! linear page number says only "the L-th page of the cluster". The mapping
//! between them is chosen so that *consecutive* linear pages land on
//! different nodes first, then different buses, then different chips, and
//! only after every chip of every node has had a turn does the stream move to
//! the next page of a block, and last to the next block. A sequential reader
//! or writer with enough requests in flight therefore keeps every node and
//! every bus busy at once, which is where the bandwidth of the cluster comes
//! from (a node's buses transfer in parallel, its chips overlap their array
//! time). Pages of one block stay in increasing order along the stream, so a
//! sequential writer also obeys NAND's "program the pages of a block in order"
//! rule.
//!
//! The mapping is pure arithmetic over the member list and one geometry; it
//! needs no table and no agreement beyond "the same members, sorted by id".
//! That is why every member must have the same geometry: a per-node geometry
//! would make the stride of the permutation differ between nodes and need a
//! table.

use std::fmt::Write as _;

use quarry_geometry::{Geometry, PageAddr};

use crate::{GlobalPageAddr, NodeId, MAX_CLUSTER_MEMBERS as MAX_MEMBERS};

/// Why a linear space could not be built, or why an address has no
/// counterpart in it. Every message names the node, page or address at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinearSpaceError {
    /// No members were given: there is no page to number.
    #[error("the cluster has no members, so it has no linear page space")]
    Empty,
    /// More members than the fabric supports.
    #[error("{count} members, more than the limit of {limit}")]
    TooManyMembers {
        /// Members given.
        count: usize,
        /// [`MAX_CLUSTER_MEMBERS`](crate::MAX_CLUSTER_MEMBERS).
        limit: usize,
    },
    /// The same node id was listed twice.
    #[error("node {node} is listed twice")]
    DuplicateNode {
        /// The repeated id.
        node: NodeId,
    },
    /// A member's geometry breaks the device's own bounds (a zero dimension
    /// would make the permutation divide by zero).
    #[error("node {node} has an invalid geometry: {reason}")]
    InvalidGeometry {
        /// The member.
        node: NodeId,
        /// What is wrong with it.
        reason: String,
    },
    /// A member's geometry differs from the first member's (by id).
    #[error("node {node}'s geometry differs from node {reference}'s: {differences}")]
    GeometryMismatch {
        /// The first member (by id) whose geometry differs.
        node: NodeId,
        /// The member whose geometry the space uses (the lowest id).
        reference: NodeId,
        /// Each differing field, with both values.
        differences: String,
    },
    /// A linear page at or past the end of the space.
    #[error("linear page {linear} is outside the space of {pages} pages (0..{pages})")]
    OutOfRange {
        /// The page asked for.
        linear: u64,
        /// The space's size in pages.
        pages: u64,
    },
    /// A global address on a node that is not a member.
    #[error("{addr}: node {} is not a member of the linear space; members are {members}", addr.node)]
    UnknownNode {
        /// The address asked for.
        addr: GlobalPageAddr,
        /// The members, comma separated.
        members: String,
    },
    /// A global address outside the members' geometry.
    #[error("{addr} is outside the geometry: {reason}")]
    OutsideGeometry {
        /// The address asked for.
        addr: GlobalPageAddr,
        /// Which field is out of range, and the valid range.
        reason: String,
    },
}

/// The linear page space over a set of members that share one geometry.
///
/// For `N` nodes, `B` buses, `C` chips per bus and `P` pages per block,
/// linear page `L` is: node `ids[L % N]` (ids sorted); then with `r = L / N`,
/// bus `r % B`; `r /= B`, chip `r % C`; `r /= C`, page `r % P`; block `r / P`.
///
/// ```
/// use quarry_proto::{Geometry, LinearSpace};
///
/// let geometry = Geometry { buses: 2, chips_per_bus: 2, ..Geometry::default() };
/// let space = LinearSpace::new(vec![(7, geometry), (3, geometry)]).unwrap();
/// assert_eq!(space.nodes(), &[3, 7]);
/// assert_eq!(space.to_global(0).unwrap().to_string(), "3:0:0:0:0");
/// assert_eq!(space.to_global(1).unwrap().to_string(), "7:0:0:0:0");
/// assert_eq!(space.to_global(2).unwrap().to_string(), "3:1:0:0:0");
/// let addr = space.to_global(12345).unwrap();
/// assert_eq!(space.to_linear(addr).unwrap(), 12345);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearSpace {
    /// Members sorted by id; index `i` owns linear pages `L % N == i`.
    ids: Vec<NodeId>,
    /// The geometry every member shares.
    geometry: Geometry,
    /// Total pages; cannot overflow: at most 2^16 nodes (the id's range) of at
    /// most 2^40 pages each (the geometry's bounds).
    pages: u64,
}

impl LinearSpace {
    /// Builds the space from the members and their geometries, in any order.
    /// Errors: no members, more than [`MAX_CLUSTER_MEMBERS`](crate::MAX_CLUSTER_MEMBERS), a repeated id, an
    /// invalid geometry, or a geometry that differs from the lowest id's (the
    /// error names the first such node by id and every differing field).
    pub fn new(
        members: impl IntoIterator<Item = (NodeId, Geometry)>,
    ) -> Result<LinearSpace, LinearSpaceError> {
        let mut members: Vec<(NodeId, Geometry)> = members.into_iter().collect();
        if members.len() > MAX_MEMBERS {
            return Err(LinearSpaceError::TooManyMembers {
                count: members.len(),
                limit: MAX_MEMBERS,
            });
        }
        // Sorted by id so that every client numbers the pages the same way
        // whatever order the entry node listed its members in.
        members.sort_by_key(|(id, _)| *id);
        let (reference, geometry) = *members.first().ok_or(LinearSpaceError::Empty)?;
        geometry
            .validate()
            .map_err(|e| LinearSpaceError::InvalidGeometry {
                node: reference,
                reason: e.to_string(),
            })?;
        for pair in members.windows(2) {
            if pair[0].0 == pair[1].0 {
                return Err(LinearSpaceError::DuplicateNode { node: pair[0].0 });
            }
        }
        for &(node, other) in &members[1..] {
            let differences = geometry_differences(&geometry, &other, reference);
            if !differences.is_empty() {
                return Err(LinearSpaceError::GeometryMismatch {
                    node,
                    reference,
                    differences,
                });
            }
        }
        let ids: Vec<NodeId> = members.into_iter().map(|(id, _)| id).collect();
        let pages = ids.len() as u64 * geometry.pages();
        Ok(LinearSpace {
            ids,
            geometry,
            pages,
        })
    }

    /// Pages in the whole space (members x pages per member).
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// The members, sorted by id.
    pub fn nodes(&self) -> &[NodeId] {
        &self.ids
    }

    /// The geometry every member shares.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Consecutive linear pages that go to distinct chips (nodes x buses x
    /// chips per bus): any window of this many consecutive pages touches each
    /// chip of the cluster exactly once, so no two of them share a block.
    pub fn stride(&self) -> u64 {
        self.ids.len() as u64 * self.geometry.chips()
    }

    /// The global address of linear page `linear`; an error names the page
    /// and the space's size when it is past the end.
    pub fn to_global(&self, linear: u64) -> Result<GlobalPageAddr, LinearSpaceError> {
        if linear >= self.pages {
            return Err(LinearSpaceError::OutOfRange {
                linear,
                pages: self.pages,
            });
        }
        let g = &self.geometry;
        let n = self.ids.len() as u64;
        let node = self.ids[(linear % n) as usize];
        let mut r = linear / n;
        // Every quotient below is bounded by the dimension it is taken modulo
        // of (or, for the block, by blocks_per_chip since linear < pages), so
        // the narrowing casts cannot truncate.
        let bus = (r % u64::from(g.buses)) as u32;
        r /= u64::from(g.buses);
        let chip = (r % u64::from(g.chips_per_bus)) as u32;
        r /= u64::from(g.chips_per_bus);
        let page = (r % u64::from(g.pages_per_block)) as u32;
        let block = (r / u64::from(g.pages_per_block)) as u32;
        Ok(GlobalPageAddr {
            node,
            page: PageAddr {
                bus,
                chip,
                block,
                page,
            },
        })
    }

    /// The linear page number of `addr` (the inverse of
    /// [`LinearSpace::to_global`]); an error for a node that is not a member
    /// or an address outside the geometry.
    pub fn to_linear(&self, addr: GlobalPageAddr) -> Result<u64, LinearSpaceError> {
        let index =
            self.ids
                .binary_search(&addr.node)
                .map_err(|_| LinearSpaceError::UnknownNode {
                    addr,
                    members: self.members_text(),
                })?;
        self.geometry
            .check_page(addr.page)
            .map_err(|e| LinearSpaceError::OutsideGeometry {
                addr,
                reason: e.to_string(),
            })?;
        let g = &self.geometry;
        let p = &addr.page;
        let r = u64::from(p.block) * u64::from(g.pages_per_block) + u64::from(p.page);
        let r = r * u64::from(g.chips_per_bus) + u64::from(p.chip);
        let r = r * u64::from(g.buses) + u64::from(p.bus);
        Ok(r * self.ids.len() as u64 + index as u64)
    }

    fn members_text(&self) -> String {
        let ids: Vec<String> = self.ids.iter().map(|id| id.to_string()).collect();
        ids.join(",")
    }
}

/// Each field of `other` that differs from `reference`, as
/// `field X (node R has Y)`, comma separated; empty when they are equal.
fn geometry_differences(reference: &Geometry, other: &Geometry, reference_node: NodeId) -> String {
    let fields = [
        ("buses", reference.buses, other.buses),
        (
            "chips_per_bus",
            reference.chips_per_bus,
            other.chips_per_bus,
        ),
        (
            "blocks_per_chip",
            reference.blocks_per_chip,
            other.blocks_per_chip,
        ),
        (
            "pages_per_block",
            reference.pages_per_block,
            other.pages_per_block,
        ),
        (
            "page_size_bytes",
            reference.page_size_bytes,
            other.page_size_bytes,
        ),
        (
            "oob_size_bytes",
            reference.oob_size_bytes,
            other.oob_size_bytes,
        ),
    ];
    let mut text = String::new();
    for (name, want, got) in fields {
        if want != got {
            if !text.is_empty() {
                text.push_str(", ");
            }
            // Writing to a String cannot fail.
            let _ = write!(text, "{name} {got} (node {reference_node} has {want})");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZERO: PageAddr = PageAddr {
        bus: 0,
        chip: 0,
        block: 0,
        page: 0,
    };

    fn small() -> Geometry {
        Geometry {
            buses: 2,
            chips_per_bus: 3,
            blocks_per_chip: 4,
            pages_per_block: 5,
            page_size_bytes: 512,
            oob_size_bytes: 0,
        }
    }

    fn space(ids: &[NodeId], geometry: Geometry) -> LinearSpace {
        LinearSpace::new(ids.iter().map(|&id| (id, geometry))).expect("valid space")
    }

    #[test]
    fn round_trip_over_every_page_of_small_spaces() {
        let shapes = [
            (vec![0], small()),
            (vec![5, 1, 9], small()),
            (
                vec![2, 3],
                Geometry {
                    buses: 1,
                    chips_per_bus: 1,
                    blocks_per_chip: 3,
                    pages_per_block: 1,
                    ..small()
                },
            ),
            (
                vec![0, 1, 2, 3],
                Geometry {
                    buses: 4,
                    chips_per_bus: 1,
                    blocks_per_chip: 2,
                    pages_per_block: 3,
                    ..small()
                },
            ),
        ];
        for (ids, geometry) in shapes {
            let space = space(&ids, geometry);
            assert_eq!(space.pages(), ids.len() as u64 * geometry.pages());
            let mut seen = std::collections::HashSet::new();
            for linear in 0..space.pages() {
                let addr = space.to_global(linear).expect("in range");
                geometry.check_page(addr.page).expect("inside the geometry");
                assert!(ids.contains(&addr.node));
                assert!(seen.insert(addr), "{addr} reached twice");
                assert_eq!(space.to_linear(addr), Ok(linear), "{addr}");
            }
            assert_eq!(seen.len() as u64, space.pages(), "a bijection");
        }
    }

    #[test]
    fn consecutive_pages_hit_all_nodes_then_all_buses_then_chips() {
        let geometry = small();
        let space = space(&[30, 10, 20], geometry);
        assert_eq!(space.nodes(), &[10, 20, 30]);
        assert_eq!(space.stride(), 3 * 2 * 3);
        let addrs: Vec<GlobalPageAddr> = (0..space.pages())
            .map(|l| space.to_global(l).expect("in range"))
            .collect();
        // The first N pages: every node once, all on bus 0, chip 0.
        let nodes: Vec<NodeId> = addrs[..3].iter().map(|a| a.node).collect();
        assert_eq!(nodes, [10, 20, 30]);
        assert!(addrs[..3].iter().all(|a| a.page == ZERO));
        // The first N*B pages: every (node, bus) once, still chip 0.
        let mut node_bus: Vec<(NodeId, u32)> =
            addrs[..6].iter().map(|a| (a.node, a.page.bus)).collect();
        node_bus.sort();
        assert_eq!(
            node_bus,
            [(10, 0), (10, 1), (20, 0), (20, 1), (30, 0), (30, 1)]
        );
        assert!(addrs[..6].iter().all(|a| a.page.chip == 0));
        // Any window of `stride` consecutive pages hits every chip of every
        // node exactly once (so a sequential stream never queues two
        // requests on one chip, and never two on one block).
        for window in addrs.windows(space.stride() as usize) {
            let chips: std::collections::HashSet<(NodeId, u32, u32)> = window
                .iter()
                .map(|a| (a.node, a.page.bus, a.page.chip))
                .collect();
            assert_eq!(chips.len() as u64, space.stride());
        }
        // Pages of a block come before the next block, in order.
        let per_block_page = space.stride();
        assert_eq!(addrs[per_block_page as usize].page.page, 1);
        assert_eq!(addrs[per_block_page as usize].page.block, 0);
        let next_block = (per_block_page * 5) as usize;
        assert_eq!(addrs[next_block].page.page, 0);
        assert_eq!(addrs[next_block].page.block, 1);
        assert_eq!(
            space.to_global(space.pages() - 1).expect("last page"),
            GlobalPageAddr {
                node: 30,
                page: PageAddr {
                    bus: 1,
                    chip: 2,
                    block: 3,
                    page: 4
                }
            }
        );
    }

    #[test]
    fn mismatched_geometry_names_the_node_and_the_fields() {
        let odd = Geometry {
            buses: 4,
            pages_per_block: 8,
            ..small()
        };
        let error = LinearSpace::new(vec![(2, small()), (0, small()), (7, odd), (5, odd)])
            .expect_err("geometries differ");
        assert_eq!(
            error.to_string(),
            "node 5's geometry differs from node 0's: buses 4 (node 0 has 2), \
             pages_per_block 8 (node 0 has 5)"
        );
        assert_eq!(
            error,
            LinearSpaceError::GeometryMismatch {
                node: 5,
                reference: 0,
                differences: "buses 4 (node 0 has 2), pages_per_block 8 (node 0 has 5)".into(),
            }
        );
    }

    #[test]
    fn out_of_range_names_the_page_and_the_size() {
        let space = space(&[0, 1], small());
        assert_eq!(space.pages(), 2 * 120);
        let error = space.to_global(240).expect_err("past the end");
        assert_eq!(
            error.to_string(),
            "linear page 240 is outside the space of 240 pages (0..240)"
        );
        assert!(space.to_global(u64::MAX).is_err());
        assert!(space.to_global(239).is_ok());
    }

    #[test]
    fn to_linear_rejects_unknown_nodes_and_addresses_outside_the_geometry() {
        let space = space(&[0, 1], small());
        let unknown = GlobalPageAddr {
            node: 4,
            page: ZERO,
        };
        let text = space
            .to_linear(unknown)
            .expect_err("not a member")
            .to_string();
        assert!(
            text.contains("node 4 is not a member") && text.contains("0,1"),
            "{text}"
        );
        let outside = GlobalPageAddr {
            node: 1,
            page: PageAddr {
                bus: 0,
                chip: 3,
                block: 0,
                page: 0,
            },
        };
        let text = space.to_linear(outside).expect_err("outside").to_string();
        assert!(
            text.starts_with("1:0:3:0:0 is outside the geometry"),
            "{text}"
        );
        assert!(text.contains("chip"), "{text}");
    }

    #[test]
    fn bad_memberships_are_typed_errors() {
        assert_eq!(LinearSpace::new(Vec::new()), Err(LinearSpaceError::Empty));
        assert_eq!(
            LinearSpace::new(vec![(3, small()), (3, small())]),
            Err(LinearSpaceError::DuplicateNode { node: 3 })
        );
        let zero = Geometry {
            chips_per_bus: 0,
            ..small()
        };
        match LinearSpace::new(vec![(1, zero)]) {
            Err(LinearSpaceError::InvalidGeometry { node: 1, reason }) => {
                assert!(reason.contains("chips_per_bus"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        let too_many = (0..=MAX_MEMBERS as u32).map(|id| (id as NodeId, small()));
        assert!(matches!(
            LinearSpace::new(too_many),
            Err(LinearSpaceError::TooManyMembers { .. })
        ));
    }
}
