//! The caller's side of volumes: [`BlockVolumes`] (create, list, look up,
//! delete by name) and [`BlockVolume`] (read and write an open volume's
//! pages and bytes) over any [`VolumeTransport`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{self, StreamExt};
use serde::{Deserialize, Serialize};

use super::def::{
    runs, stripe, validate_members, validate_name, NodeSpace, Run, VolumeDef, MAX_VOLUME_ID,
    MAX_VOLUME_PAGES,
};
use super::wire::{
    max_pages_per_call, Op, Reader, VolumeFields, Writer, MAX_ADDS_PER_CALL, MIN_DEF_BYTES,
    PAGE_DATA, PAGE_UNWRITTEN,
};
use super::{BlockVolumeError, NodeId};

type Result<T> = std::result::Result<T, BlockVolumeError>;

/// Calls a volume view has in flight at once unless told otherwise.
pub const DEFAULT_MAX_IN_FLIGHT_CALLS: usize = 16;
/// The most calls a volume view may have in flight.
pub const MAX_IN_FLIGHT_CALLS: usize = 256;
/// Most bytes one read or write of an open volume moves (the caller holds
/// them all in memory): split larger transfers.
pub const MAX_RANGE_BYTES: u64 = 256 << 20;

/// Carries encoded volume calls to a node and brings back its answer bytes
/// (the client implements it over the protocol's service calls; tests and
/// in-process users can call `quarry_volume::serve_volume_call`
/// directly).
pub trait VolumeTransport: Send + Sync + 'static {
    /// Sends `body` to node `node`'s volume service; `idempotent` calls may
    /// be sent again on another path if a link dies. A node that will not
    /// take volume calls is [`BlockVolumeError::Refused`]; failures to
    /// deliver are [`BlockVolumeError::Transport`].
    fn call(
        &self,
        node: NodeId,
        idempotent: bool,
        body: Bytes,
    ) -> impl Future<Output = Result<Bytes>> + Send;
}

/// One volume in a [`VolumeListing`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeSummary {
    /// Its definition.
    pub def: VolumeDef,
    /// Pages holding data, summed over the members that answered.
    pub used_pages: u64,
    /// Members that answered and do not hold the definition (a create or
    /// delete that did not finish).
    pub missing_on: Vec<NodeId>,
}

/// What [`BlockVolumes::list`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct VolumeListing {
    /// The volumes, by name.
    pub volumes: Vec<VolumeSummary>,
    /// Each node that answered, with its space figures.
    pub nodes: Vec<NodeSpace>,
    /// Nodes that refused volume calls (raw storage): they hold no volumes.
    pub not_serving: Vec<NodeId>,
    /// Nodes that did not answer, and why: their volumes may be missing.
    pub unanswered: Vec<(NodeId, String)>,
}

/// One member in a [`VolumeStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    /// The node.
    pub node: NodeId,
    /// Pages of the volume holding data there; `None` if it did not answer
    /// or does not hold the definition (see `problem`).
    pub used_pages: Option<u64>,
    /// Its space figures, when it answered.
    pub space: Option<NodeSpace>,
    /// What is wrong with this member, if anything.
    pub problem: Option<String>,
}

/// What [`BlockVolumes::status`] found about one volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeStatus {
    /// Its definition.
    pub def: VolumeDef,
    /// Each member, in stripe order.
    pub members: Vec<MemberStatus>,
}

impl VolumeStatus {
    /// Pages holding data over the members that answered.
    pub fn used_pages(&self) -> u64 {
        self.members.iter().filter_map(|m| m.used_pages).sum()
    }
}

/// The volumes of a cluster, reached through a [`VolumeTransport`].
///
/// Where definitions live: every member of a volume stores its definition
/// in its registry, and nothing else does. A lookup by name asks every
/// node of the cluster (`cluster`, at most
/// [`max_in_flight`](Self::with_max_in_flight) at once), so any client
/// finds any volume from its name alone, and a node that joins later needs
/// no copy of anything.
pub struct BlockVolumes<X> {
    transport: Arc<X>,
    cluster: Vec<NodeId>,
    max_in_flight: usize,
}

impl<X> Clone for BlockVolumes<X> {
    fn clone(&self) -> Self {
        BlockVolumes {
            transport: self.transport.clone(),
            cluster: self.cluster.clone(),
            max_in_flight: self.max_in_flight,
        }
    }
}

/// What one node said to a lookup by name.
struct InfoAnswer {
    space: NodeSpace,
    found: Option<(VolumeDef, u64)>,
}

/// What one node said to a listing.
struct ListAnswer {
    space: NodeSpace,
    volumes: Vec<(VolumeDef, u64)>,
}

fn check_in_flight(calls: usize) -> Result<usize> {
    if calls == 0 || calls > MAX_IN_FLIGHT_CALLS {
        return Err(BlockVolumeError::Config {
            reason: format!("{calls} calls in flight, must be in 1..={MAX_IN_FLIGHT_CALLS}"),
        });
    }
    Ok(calls)
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A number no other volume of this name has had: the standard library's
/// randomly keyed hasher over the name and the time.
fn new_instance(name: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(name.as_bytes());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(nanos);
    h.finish().max(1)
}

impl<X: VolumeTransport> BlockVolumes<X> {
    /// The volumes of the cluster whose members are `cluster`.
    pub fn new(transport: Arc<X>, cluster: Vec<NodeId>) -> Self {
        BlockVolumes {
            transport,
            cluster,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT_CALLS,
        }
    }

    /// Sets the most calls this view (and the volumes it opens) has in
    /// flight at once, over all nodes: 1..=[`MAX_IN_FLIGHT_CALLS`].
    pub fn with_max_in_flight(mut self, calls: usize) -> Result<Self> {
        self.max_in_flight = check_in_flight(calls)?;
        Ok(self)
    }

    /// The cluster's nodes this view asks.
    pub fn cluster(&self) -> &[NodeId] {
        &self.cluster
    }

    /// Creates volume `name` of `size_bytes` (a whole number of the
    /// members' page size) striped over `nodes` in that order (default:
    /// every node of the cluster). Every member must run managed storage
    /// and have the same page size. The size is thin-provisioned: nothing
    /// is reserved, a write past a member's capacity fails with
    /// [`BlockVolumeError::NoSpace`].
    ///
    /// The name is checked against every node that answers; then each
    /// member stores the definition. If one refuses, the members that took
    /// it drop it again and the error is returned.
    pub async fn create(
        &self,
        name: &str,
        size_bytes: u64,
        nodes: Option<Vec<NodeId>>,
    ) -> Result<VolumeDef> {
        validate_name(name)?;
        let members = nodes.unwrap_or_else(|| self.cluster.clone());
        validate_members(&members)?;
        if let Some(m) = members.iter().find(|m| !self.cluster.contains(m)) {
            return Err(BlockVolumeError::InvalidMembers {
                reason: format!(
                    "node {m} is not a member of the cluster (its nodes are {:?})",
                    self.cluster
                ),
            });
        }
        if size_bytes == 0 {
            return Err(BlockVolumeError::InvalidSize {
                reason: "0 bytes; a volume has at least one page".into(),
            });
        }
        let mut answers: BTreeMap<NodeId, Result<ListAnswer>> =
            self.list_all().await.into_iter().collect();
        let mut page_size: Option<u32> = None;
        let mut max_id = 0u32;
        let mut check = |node: NodeId, answer: &ListAnswer| -> Result<()> {
            for (def, _) in &answer.volumes {
                if def.name == name {
                    return Err(BlockVolumeError::Exists {
                        name: name.to_string(),
                        node,
                    });
                }
                max_id = max_id.max(def.id);
            }
            Ok(())
        };
        for m in &members {
            let answer = match answers.remove(m) {
                Some(Ok(a)) => a,
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(BlockVolumeError::Transport {
                        node: *m,
                        reason: "no answer".into(),
                    })
                }
            };
            let node_ps = answer.space.page_size_bytes;
            match page_size {
                None => page_size = Some(node_ps),
                Some(ps) if ps != node_ps => {
                    return Err(BlockVolumeError::PageSizeMismatch {
                        node: *m,
                        node_page_size_bytes: node_ps,
                        volume_page_size_bytes: ps,
                    })
                }
                Some(_) => {}
            }
            check(*m, &answer)?;
        }
        // Nodes outside the member list that do not answer are passed over:
        // a volume of this name there is reported as ambiguous by later
        // lookups (docs/volume.md, "Limits").
        for (node, answer) in &answers {
            if let Ok(answer) = answer {
                check(*node, answer)?;
            }
        }
        let page_size = page_size.unwrap_or(1);
        let size_pages = size_pages_of(size_bytes, page_size)?;
        if max_id >= MAX_VOLUME_ID {
            return Err(BlockVolumeError::TooMany {
                node: members[0],
                what: "volume ids".into(),
                limit: u64::from(MAX_VOLUME_ID),
            });
        }
        let def = VolumeDef {
            name: name.to_string(),
            // One past every id any node uses: a fresh space on every member.
            id: max_id + 1,
            instance: new_instance(name),
            size_pages,
            page_size_bytes: page_size,
            members: members.clone(),
            created_unix_ms: now_unix_ms(),
        };
        let mut w = Writer::starting(Op::Define as u8);
        w.def(&def);
        let body = Bytes::from(w.0);
        let results = self
            .each(&members, |node| {
                let body = body.clone();
                async move {
                    let answer = self.transport.call(node, false, body).await?;
                    let mut r = Reader::new("volume answer", &answer);
                    r.answer_status(node)?;
                    let created = r.flag()?;
                    r.end()?;
                    Ok(created)
                }
            })
            .await;
        self.undo_unless_all(def, results).await
    }

    /// `def` when every member defined it; else the first error, after
    /// deleting it again on the members that took it, so the name is free.
    async fn undo_unless_all<T>(
        &self,
        def: VolumeDef,
        results: Vec<(NodeId, Result<T>)>,
    ) -> Result<VolumeDef> {
        let mut error = None;
        let mut took = Vec::new();
        for (node, result) in results {
            match result {
                Ok(_) => took.push(node),
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        let Some(error) = error else {
            return Ok(def);
        };
        let failed: Vec<String> = self
            .delete_on(&took, &def)
            .await
            .into_iter()
            .filter_map(|(n, r)| r.err().map(|e| format!("node {n}: {e}")))
            .collect();
        if failed.is_empty() {
            return Err(error);
        }
        Err(BlockVolumeError::Incomplete {
            op: "create",
            name: def.name.clone(),
            reason: format!(
                "{error}; undoing it failed ({}); delete the volume to remove what is left",
                failed.join("; ")
            ),
        })
    }

    /// Every volume of the cluster, with what each node holds. Nodes that
    /// do not answer are listed, not an error.
    pub async fn list(&self) -> Result<VolumeListing> {
        let mut listing = VolumeListing::default();
        let mut found: BTreeMap<(String, u64), VolumeSummary> = BTreeMap::new();
        let mut holders: BTreeMap<(String, u64), Vec<NodeId>> = BTreeMap::new();
        for (node, answer) in self.list_all().await {
            match answer {
                Ok(a) => {
                    listing.nodes.push(a.space);
                    for (def, used) in a.volumes {
                        let key = (def.name.clone(), def.instance);
                        holders.entry(key.clone()).or_default().push(node);
                        found
                            .entry(key)
                            .or_insert_with(|| VolumeSummary {
                                def,
                                used_pages: 0,
                                missing_on: Vec::new(),
                            })
                            .used_pages += used;
                    }
                }
                Err(BlockVolumeError::Refused { .. }) => listing.not_serving.push(node),
                Err(e) => listing.unanswered.push((node, e.to_string())),
            }
        }
        let answered: Vec<NodeId> = listing.nodes.iter().map(|s| s.node).collect();
        for (key, mut summary) in found {
            let have = holders.get(&key).cloned().unwrap_or_default();
            summary.missing_on = summary
                .def
                .members
                .iter()
                .filter(|m| answered.contains(m) && !have.contains(m))
                .copied()
                .collect();
            listing.volumes.push(summary);
        }
        listing.nodes.sort_by_key(|s| s.node);
        listing.not_serving.sort_unstable();
        listing.unanswered.sort_by_key(|(n, _)| *n);
        Ok(listing)
    }

    /// Asks every node about `name`: their answers, and the distinct
    /// definitions found (one, unless creates raced). Not found anywhere is
    /// `NotFound`, or `LookupIncomplete` when some nodes did not answer.
    async fn find(
        &self,
        name: &str,
    ) -> Result<(Vec<(NodeId, Result<InfoAnswer>)>, Vec<(NodeId, VolumeDef)>)> {
        validate_name(name)?;
        let mut w = Writer::starting(Op::Info as u8);
        w.name(name);
        let body = Bytes::from(w.0);
        let answers = self
            .each(&self.cluster, |node| {
                let body = body.clone();
                async move {
                    let answer = self.transport.call(node, true, body).await?;
                    let mut r = Reader::new("volume answer", &answer);
                    r.answer_status(node)?;
                    let space = r.node_space()?;
                    let found = if r.flag()? {
                        let def = r.def()?;
                        Some((def, r.u64()?))
                    } else {
                        None
                    };
                    r.end()?;
                    Ok(InfoAnswer { space, found })
                }
            })
            .await;
        let mut defs: Vec<(NodeId, VolumeDef)> = Vec::new();
        let mut failures = Vec::new();
        for (node, answer) in &answers {
            match answer {
                Ok(InfoAnswer {
                    found: Some((def, _)),
                    ..
                }) => {
                    if !defs.iter().any(|(_, d)| d == def) {
                        defs.push((*node, def.clone()));
                    }
                }
                Ok(_) | Err(BlockVolumeError::Refused { .. }) => {}
                Err(e) => failures.push(format!("node {node}: {e}")),
            }
        }
        if defs.is_empty() {
            if failures.is_empty() {
                return Err(BlockVolumeError::NotFound {
                    name: name.to_string(),
                });
            }
            return Err(BlockVolumeError::LookupIncomplete {
                name: name.to_string(),
                failures: failures.join("; "),
            });
        }
        Ok((answers, defs))
    }

    /// Looks volume `name` up on every node and reports each member.
    pub async fn status(&self, name: &str) -> Result<VolumeStatus> {
        let (answers, defs) = self.find(name).await?;
        let (first_node, def) = &defs[0];
        if let Some((other_node, other)) = defs.get(1) {
            return Err(BlockVolumeError::Ambiguous {
                name: name.to_string(),
                detail: format!(
                    "node {first_node} holds id {} over nodes {:?}, node {other_node} holds id {} \
                     over nodes {:?}; `delete` removes both",
                    def.id, def.members, other.id, other.members
                ),
            });
        }
        let def = def.clone();
        let members = def
            .members
            .iter()
            .map(|m| {
                let answer = answers.iter().find(|(n, _)| n == m).map(|(_, a)| a);
                match answer {
                    Some(Ok(a)) => match &a.found {
                        Some((_, used)) => MemberStatus {
                            node: *m,
                            used_pages: Some(*used),
                            space: Some(a.space),
                            problem: None,
                        },
                        None => MemberStatus {
                            node: *m,
                            used_pages: None,
                            space: Some(a.space),
                            problem: Some(
                                "does not hold the definition (a create or delete did not \
                                 finish)"
                                    .into(),
                            ),
                        },
                    },
                    Some(Err(e)) => MemberStatus {
                        node: *m,
                        used_pages: None,
                        space: None,
                        problem: Some(e.to_string()),
                    },
                    None => MemberStatus {
                        node: *m,
                        used_pages: None,
                        space: None,
                        problem: Some("not a node of the cluster this client knows".into()),
                    },
                }
            })
            .collect();
        Ok(VolumeStatus { def, members })
    }

    /// Opens volume `name` for reads and writes (one lookup; the handle
    /// then calls the members directly).
    pub async fn open(&self, name: &str) -> Result<BlockVolume<X>> {
        let status = self.status(name).await?;
        Ok(BlockVolume {
            def: status.def,
            transport: self.transport.clone(),
            max_in_flight: self.max_in_flight,
        })
    }

    /// Deletes volume `name`: every member trims the volume's pages and
    /// drops its definition. Returns the pages trimmed. A member that does
    /// not answer makes it [`BlockVolumeError::Incomplete`]; running the
    /// delete again finishes it. If racing creates left two volumes of
    /// this name (lookups say [`BlockVolumeError::Ambiguous`]), both go.
    pub async fn delete(&self, name: &str) -> Result<u64> {
        let (_, defs) = self.find(name).await?;
        let mut trimmed = 0;
        let mut failed = Vec::new();
        for (_, def) in &defs {
            for (node, r) in self.delete_on(&def.members, def).await {
                match r {
                    Ok(n) => trimmed += n,
                    Err(e) => failed.push(format!("node {node}: {e}")),
                }
            }
        }
        if failed.is_empty() {
            return Ok(trimmed);
        }
        Err(BlockVolumeError::Incomplete {
            op: "delete",
            name: name.to_string(),
            reason: format!(
                "{}; the other members dropped it; delete it again once they answer",
                failed.join("; ")
            ),
        })
    }

    async fn delete_on(&self, nodes: &[NodeId], def: &VolumeDef) -> Vec<(NodeId, Result<u64>)> {
        let mut w = Writer::starting(Op::Delete as u8);
        w.name(&def.name).u64(def.instance);
        let body = Bytes::from(w.0);
        self.each(nodes, |node| {
            let body = body.clone();
            async move {
                let answer = self.transport.call(node, false, body).await?;
                let mut r = Reader::new("volume answer", &answer);
                r.answer_status(node)?;
                let _held = r.flag()?;
                let trimmed = r.u64()?;
                r.end()?;
                Ok(trimmed)
            }
        })
        .await
    }

    async fn list_all(&self) -> Vec<(NodeId, Result<ListAnswer>)> {
        let body = Bytes::from(Writer::starting(Op::List as u8).0);
        self.each(&self.cluster, |node| {
            let body = body.clone();
            async move {
                let answer = self.transport.call(node, true, body).await?;
                let mut r = Reader::new("volume answer", &answer);
                r.answer_status(node)?;
                let space = r.node_space()?;
                let n = r.count(MIN_DEF_BYTES + 8)?;
                let mut volumes = Vec::with_capacity(n);
                for _ in 0..n {
                    let def = r.def()?;
                    volumes.push((def, r.u64()?));
                }
                r.end()?;
                Ok(ListAnswer { space, volumes })
            }
        })
        .await
    }

    /// Runs `f` for each node, at most `max_in_flight` at once; answers in
    /// `nodes` order.
    async fn each<'a, T, F, Fut>(&'a self, nodes: &[NodeId], f: F) -> Vec<(NodeId, Result<T>)>
    where
        F: Fn(NodeId) -> Fut + 'a,
        Fut: Future<Output = Result<T>> + 'a,
    {
        stream::iter(nodes.iter().copied())
            .map(|node| {
                let call = f(node);
                async move { (node, call.await) }
            })
            .buffered(self.max_in_flight)
            .collect()
            .await
    }
}

/// An open volume: reads and writes of its logical pages and bytes, each
/// split into calls to the members that hold them, at most
/// `max_in_flight` calls at once over all members. Cheap to clone.
pub struct BlockVolume<X> {
    def: VolumeDef,
    transport: Arc<X>,
    max_in_flight: usize,
}

impl<X> Clone for BlockVolume<X> {
    fn clone(&self) -> Self {
        BlockVolume {
            def: self.def.clone(),
            transport: self.transport.clone(),
            max_in_flight: self.max_in_flight,
        }
    }
}

impl<X: VolumeTransport> BlockVolume<X> {
    /// The volume's definition.
    pub fn def(&self) -> &VolumeDef {
        &self.def
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.def.page_size_bytes as usize
    }

    /// Logical pages.
    pub fn pages(&self) -> u64 {
        self.def.size_pages
    }

    /// Logical size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.def.size_bytes()
    }

    /// Sets the most calls in flight at once: 1..=[`MAX_IN_FLIGHT_CALLS`].
    pub fn with_max_in_flight(mut self, calls: usize) -> Result<Self> {
        self.max_in_flight = check_in_flight(calls)?;
        Ok(self)
    }

    /// The node that holds logical page `page`, and the page's index in the
    /// volume's space there.
    pub fn locate(&self, page: u64) -> Result<(NodeId, u64)> {
        self.check_pages(page, 1)?;
        self.def
            .locate(page)
            .map(|(_, node, local)| (node, local))
            .ok_or_else(|| self.out_of_range(page, 1))
    }

    fn out_of_range(&self, first: u64, count: u64) -> BlockVolumeError {
        BlockVolumeError::OutOfRange {
            name: self.def.name.clone(),
            first,
            count,
            pages: self.def.size_pages,
        }
    }

    fn check_pages(&self, first: u64, count: u64) -> Result<()> {
        match first.checked_add(count) {
            Some(end) if count > 0 && end <= self.def.size_pages => Ok(()),
            _ => Err(self.out_of_range(first, count)),
        }
    }

    fn check_transfer(bytes: u64) -> Result<()> {
        if bytes > MAX_RANGE_BYTES {
            return Err(BlockVolumeError::RangeTooLarge {
                bytes,
                limit_bytes: MAX_RANGE_BYTES,
            });
        }
        Ok(())
    }

    /// Reads one page. A page never written (or trimmed) reads as zeros,
    /// like a fresh disk.
    pub async fn read_page(&self, page: u64) -> Result<Bytes> {
        self.read_pages(page, 1).await
    }

    /// Writes one page: exactly [`page_size`](Self::page_size) bytes.
    pub async fn write_page(&self, page: u64, data: &[u8]) -> Result<()> {
        if data.len() != self.page_size() {
            return Err(BlockVolumeError::PageData {
                page_size_bytes: self.def.page_size_bytes,
                got_bytes: data.len() as u64,
            });
        }
        self.write_pages(page, data).await
    }

    /// Reads pages `first..first + count` (at most [`MAX_RANGE_BYTES`]),
    /// concatenated; pages never written read as zeros.
    pub async fn read_pages(&self, first: u64, count: u64) -> Result<Bytes> {
        self.check_pages(first, count)?;
        Self::check_transfer(count.saturating_mul(self.page_size() as u64))?;
        self.read_checked(first, count).await
    }

    /// [`read_pages`](Self::read_pages) of a range already checked.
    async fn read_checked(&self, first: u64, count: u64) -> Result<Bytes> {
        let page_size = self.page_size();
        let n = self.def.members.len();
        let mut out = vec![0u8; count as usize * page_size];
        let plan = runs(
            first,
            count,
            n,
            max_pages_per_call(self.def.page_size_bytes),
        );
        let mut answers = stream::iter(plan)
            .map(|run| async move { (run, self.read_run(run).await) })
            .buffer_unordered(self.max_in_flight);
        while let Some((run, answer)) = answers.next().await {
            let (node, answer) = answer?;
            let mut r = Reader::new("volume answer", &answer);
            r.answer_status(node)?;
            let got = u64::from(r.u32()?);
            if got != run.count {
                return Err(r.malformed(format!(
                    "{got} pages in the answer, {} asked for",
                    run.count
                )));
            }
            for i in 0..run.count {
                let flag = r.u8()?;
                let at = (run.logical(i, n) - first) as usize * page_size;
                match flag {
                    PAGE_UNWRITTEN => {}
                    // Pages of the members interleave in the caller's
                    // buffer: this copy puts them in place.
                    PAGE_DATA => out[at..at + page_size].copy_from_slice(r.take(page_size)?),
                    other => return Err(r.malformed(format!("page flag {other}"))),
                }
            }
            r.end()?;
        }
        Ok(Bytes::from(out))
    }

    async fn read_run(&self, run: Run) -> Result<(NodeId, Bytes)> {
        let node = self.def.members[run.member];
        let mut w = Writer::starting(Op::Read as u8);
        w.name(&self.def.name)
            .u64(self.def.instance)
            .u64(run.first_local)
            .u32(run.count as u32);
        let answer = self.transport.call(node, true, Bytes::from(w.0)).await?;
        Ok((node, answer))
    }

    /// Writes whole pages from `first` on (`data` a non-zero multiple of the
    /// page size, at most [`MAX_RANGE_BYTES`]). Each page is written whole
    /// or not at all; if the write fails, some of its pages may hold the
    /// new data and the rest the old (as on a disk), and the first error
    /// is returned.
    pub async fn write_pages(&self, first: u64, data: &[u8]) -> Result<()> {
        let page_size = self.page_size();
        if data.is_empty() || !data.len().is_multiple_of(page_size) {
            return Err(BlockVolumeError::PageData {
                page_size_bytes: self.def.page_size_bytes,
                got_bytes: data.len() as u64,
            });
        }
        let count = (data.len() / page_size) as u64;
        self.check_pages(first, count)?;
        Self::check_transfer(data.len() as u64)?;
        self.write_checked(first, data).await
    }

    /// [`write_pages`](Self::write_pages) of whole pages in a range already
    /// checked.
    async fn write_checked(&self, first: u64, data: &[u8]) -> Result<()> {
        let page_size = self.page_size();
        let count = (data.len() / page_size) as u64;
        let n = self.def.members.len();
        let plan = runs(
            first,
            count,
            n,
            max_pages_per_call(self.def.page_size_bytes),
        );
        let results: Vec<Result<()>> = stream::iter(plan)
            .map(|run| async move {
                let node = self.def.members[run.member];
                let mut w = Writer::starting(Op::Write as u8);
                w.name(&self.def.name)
                    .u64(self.def.instance)
                    .u64(run.first_local)
                    .u32(run.count as u32);
                w.0.reserve(run.count as usize * page_size);
                for i in 0..run.count {
                    // A member's pages are every n-th page of the input:
                    // gathered into one contiguous body (the one copy).
                    let at = (run.logical(i, n) - first) as usize * page_size;
                    w.raw(&data[at..at + page_size]);
                }
                let answer = self.transport.call(node, false, Bytes::from(w.0)).await?;
                let mut r = Reader::new("volume answer", &answer);
                r.answer_status(node)?;
                Ok(r.end()?)
            })
            .buffer_unordered(self.max_in_flight)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Trims pages `first..first + count`: their data is dropped and the
    /// space freed on the members; they read as zeros. Returns the pages
    /// that held data.
    pub async fn trim_pages(&self, first: u64, count: u64) -> Result<u64> {
        self.check_pages(first, count)?;
        let n = self.def.members.len();
        // One run per member: a trim carries no data, so any length fits.
        let plan = runs(first, count, n, count.div_ceil(n as u64).max(1));
        let results: Vec<Result<u64>> = stream::iter(plan)
            .map(|run| async move {
                let node = self.def.members[run.member];
                let mut w = Writer::starting(Op::Trim as u8);
                w.name(&self.def.name)
                    .u64(self.def.instance)
                    .u64(run.first_local)
                    .u64(run.count);
                let answer = self.transport.call(node, false, Bytes::from(w.0)).await?;
                let mut r = Reader::new("volume answer", &answer);
                r.answer_status(node)?;
                let trimmed = r.u64()?;
                r.end()?;
                Ok(trimmed)
            })
            .buffer_unordered(self.max_in_flight)
            .collect()
            .await;
        results.into_iter().sum()
    }

    fn check_bytes(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size_bytes() => {}
            _ => {
                return Err(BlockVolumeError::OutOfRangeBytes {
                    name: self.def.name.clone(),
                    offset,
                    len_bytes: len,
                    size_bytes: self.size_bytes(),
                })
            }
        }
        Self::check_transfer(len)
    }

    /// Reads `len` bytes from byte `offset` (at most [`MAX_RANGE_BYTES`]).
    pub async fn read_range(&self, offset: u64, len: u64) -> Result<Bytes> {
        self.check_bytes(offset, len)?;
        if len == 0 {
            return Ok(Bytes::new());
        }
        let ps = self.page_size() as u64;
        let first = offset / ps;
        let last = (offset + len - 1) / ps;
        // Up to two pages more than asked for: within the limit's spirit.
        let pages = self.read_checked(first, last - first + 1).await?;
        let skip = (offset - first * ps) as usize;
        Ok(pages.slice(skip..skip + len as usize))
    }

    /// Adds each `(offset, delta)` of `adds` to the little-endian `u64` at
    /// byte `offset` of the volume (wrapping; a page never written counts
    /// as zeros) and returns each one's new value, in the order given.
    ///
    /// Each add is atomic on the node that holds its page: it takes the
    /// page's lock from its read to its write, as writes and trims of the
    /// page do, so no add is lost to another add, a page write or a trim.
    /// (A [`write_range`](Self::write_range) of part of a page is a read and
    /// a write of the whole page from this side, and can still overwrite an
    /// add that lands between the two.) Adds to one counter apply in the
    /// order given: a node's adds go in calls of at most
    /// [`MAX_ADDS_PER_CALL`](super::MAX_ADDS_PER_CALL) one after another,
    /// calls to different nodes in parallel (at most `max_in_flight`).
    ///
    /// An add whose 8 bytes cross a page's end or the volume's end fails
    /// the whole batch with [`BlockVolumeError::BadAdd`] naming its index
    /// and offset, before anything is sent. Adds are not idempotent: a call
    /// is never resent, and if one fails the adds of the calls that
    /// succeeded stay applied (each node applies a page's adds all or
    /// none); the first error is returned.
    pub async fn add_u64s(&self, adds: &[(u64, u64)]) -> Result<Vec<u64>> {
        let ps = self.page_size() as u64;
        let size_bytes = self.size_bytes();
        let n = self.def.members.len();
        // Per member, its adds in the caller's order: (caller's index,
        // local page, offset in the page, delta).
        let mut by_member: BTreeMap<usize, Vec<(usize, u64, u32, u64)>> = BTreeMap::new();
        for (index, &(offset, delta)) in adds.iter().enumerate() {
            let bad = |reason: String| BlockVolumeError::BadAdd {
                name: self.def.name.clone(),
                index: index as u64,
                offset,
                reason,
            };
            match offset.checked_add(8) {
                Some(end) if end <= size_bytes => {}
                _ => {
                    return Err(bad(format!(
                        "bytes {offset}..{} are beyond the volume's {size_bytes} bytes",
                        offset.saturating_add(8)
                    )))
                }
            }
            let page = offset / ps;
            let in_page = offset % ps;
            if in_page + 8 > ps {
                return Err(bad(format!(
                    "its 8 bytes cross the end of page {page} (pages of {ps} bytes)"
                )));
            }
            let (member, local) = stripe(page, n);
            debug_assert!(local < self.def.member_pages(member));
            by_member
                .entry(member)
                .or_default()
                .push((index, local, in_page as u32, delta));
        }
        // Every call runs to its end even if another fails: a dropped call
        // would leave its adds applied or not, unknown.
        let results: Vec<Result<Vec<(usize, u64)>>> = stream::iter(by_member)
            .map(|(member, ops)| async move {
                let node = self.def.members[member];
                let mut values = Vec::with_capacity(ops.len());
                // One call after another: adds to one counter, all on this
                // node, apply in the caller's order.
                for chunk in ops.chunks(MAX_ADDS_PER_CALL) {
                    let mut w = Writer::starting(Op::AddU64 as u8);
                    w.name(&self.def.name)
                        .u64(self.def.instance)
                        .u32(chunk.len() as u32);
                    for &(_, local, in_page, delta) in chunk {
                        w.u64(local).u32(in_page).u64(delta);
                    }
                    let answer = self.transport.call(node, false, Bytes::from(w.0)).await?;
                    let mut r = Reader::new("volume answer", &answer);
                    r.answer_status(node)?;
                    let got = r.count(8)?;
                    if got != chunk.len() {
                        return Err(r.malformed(format!(
                            "{got} values in the answer, {} adds sent",
                            chunk.len()
                        )));
                    }
                    for &(index, ..) in chunk {
                        values.push((index, r.u64()?));
                    }
                    r.end()?;
                }
                Ok(values)
            })
            .buffer_unordered(self.max_in_flight)
            .collect()
            .await;
        let mut out = vec![0u64; adds.len()];
        for result in results {
            for (index, value) in result? {
                out[index] = value;
            }
        }
        Ok(out)
    }

    /// Writes `data` at byte `offset` (at most [`MAX_RANGE_BYTES`]). Pages
    /// the range covers only in part are read, patched and written back
    /// (read-modify-write): not atomic against another writer of the same
    /// page at the same time.
    pub async fn write_range(&self, offset: u64, data: &[u8]) -> Result<()> {
        let len = data.len() as u64;
        self.check_bytes(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let ps = self.page_size() as u64;
        let first = offset / ps;
        let last = (offset + len - 1) / ps;
        let head = (offset - first * ps) as usize;
        let end_in_last = ((offset + len) - last * ps) as usize;
        if head == 0 && end_in_last == ps as usize {
            return self.write_checked(first, data).await;
        }
        // The pages become one buffer: the partial first and last pages are
        // read into it, the data copied over them.
        let mut buf = vec![0u8; ((last - first + 1) * ps) as usize];
        if head != 0 {
            buf[..ps as usize].copy_from_slice(&self.read_page(first).await?);
        }
        if end_in_last != ps as usize && (last != first || head == 0) {
            let at = ((last - first) * ps) as usize;
            buf[at..].copy_from_slice(&self.read_page(last).await?);
        }
        buf[head..head + data.len()].copy_from_slice(data);
        self.write_checked(first, &buf).await
    }
}

/// A volume's size in whole pages of `page_size` bytes, within the limit.
fn size_pages_of(size_bytes: u64, page_size: u32) -> Result<u64> {
    let ps = u64::from(page_size);
    if !size_bytes.is_multiple_of(ps) {
        let down = size_bytes / ps * ps;
        return Err(BlockVolumeError::InvalidSize {
            reason: format!(
                "{size_bytes} bytes is not a whole number of the members' {page_size}-byte \
                 pages (try {} or {} bytes)",
                down.max(ps),
                down + ps
            ),
        });
    }
    let size_pages = size_bytes / ps;
    if size_pages > MAX_VOLUME_PAGES {
        return Err(BlockVolumeError::InvalidSize {
            reason: format!(
                "{size_pages} pages of {page_size} bytes, a volume has at most \
                 {MAX_VOLUME_PAGES}"
            ),
        });
    }
    Ok(size_pages)
}
