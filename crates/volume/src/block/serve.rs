//! The node's side of volume calls: [`serve_volume_call`].

use bytes::Bytes;
use futures::stream::{self, StreamExt};

use quarry_volume_api::{
    encode_error, max_pages_per_call, NodeSpace, VolumeDef, VolumeFields, VolumeOp as Op,
    VolumeReader as Reader, VolumeWriter as Writer, ADD_OP_BYTES, ANSWER_OK, MAX_ADDS_PER_CALL,
    PAGE_DATA, PAGE_UNWRITTEN,
};

use super::registry::{storage_error, trim_pages, Entry, VolumeRegistry, TRIM_BATCH_PAGES};
use super::BlockVolumeError;
use crate::{LogicalPage, SpaceManager};

/// Page reads or writes of one call a node has in flight on its space
/// manager: enough to keep every chip of a large device busy, while a call
/// of thousands of small pages does not queue them all at once.
const NODE_PAGES_IN_FLIGHT: usize = 64;

/// Runs one encoded volume call against this node's registry and space
/// manager and encodes its answer (errors included: the answer is always
/// bytes to send back). Malformed calls get an error answer naming what
/// was wrong; nothing stored is touched by them.
pub async fn serve_volume_call(
    registry: &VolumeRegistry,
    space: &SpaceManager,
    call: Bytes,
) -> Bytes {
    match serve(registry, space, &call).await {
        Ok(answer) => Bytes::from(answer),
        Err(e) => encode_error(&e),
    }
}

fn node_space(registry: &VolumeRegistry, space: &SpaceManager) -> NodeSpace {
    let stats = space.stats();
    NodeSpace {
        node: registry.node(),
        page_size_bytes: stats.page_size,
        capacity_pages: stats.capacity_pages,
        live_pages: stats.live_pages,
    }
}

async fn serve(
    registry: &VolumeRegistry,
    space: &SpaceManager,
    call: &Bytes,
) -> Result<Vec<u8>, BlockVolumeError> {
    let mut r = Reader::new("volume call", call);
    let op_byte = r.u8()?;
    let op =
        Op::from_u8(op_byte).ok_or_else(|| r.malformed(format!("unknown volume op {op_byte}")))?;
    let mut w = Writer::starting(ANSWER_OK);
    match op {
        Op::Define => {
            let def = r.def()?;
            r.end()?;
            let created = registry.define(def, space).await?;
            w.u8(u8::from(created));
        }
        Op::Delete => {
            let name = r.name()?;
            let instance = r.u64()?;
            r.end()?;
            match registry.delete(&name, instance, space).await? {
                None => w.u8(0).u64(0),
                Some(trimmed) => w.u8(1).u64(trimmed),
            };
        }
        Op::List => {
            r.end()?;
            w.node_space(&node_space(registry, space));
            let defs = registry.volumes();
            w.u32(defs.len() as u32);
            for def in &defs {
                w.def(def).u64(space.pages_in(def.space()).len() as u64);
            }
        }
        Op::Info => {
            let name = r.name()?;
            r.end()?;
            w.node_space(&node_space(registry, space));
            match registry.get(&name) {
                None => w.u8(0),
                Some(def) => w
                    .u8(1)
                    .def(&def)
                    .u64(space.pages_in(def.space()).len() as u64),
            };
        }
        Op::Read => {
            let (entry, first, count) = data_call(registry, &mut r).await?;
            r.end()?;
            read(registry, space, &entry, first, count, &mut w).await?;
        }
        Op::Write => {
            let (entry, first, count) = data_call(registry, &mut r).await?;
            let page_size = entry.def.page_size_bytes as usize;
            let expect = count as usize * page_size;
            if r.left() != expect {
                return Err(BlockVolumeError::PageData {
                    page_size_bytes: entry.def.page_size_bytes,
                    got_bytes: r.left() as u64,
                });
            }
            let data = r.bytes(expect)?;
            write(registry, space, &entry, first, data).await?;
        }
        Op::Trim => trim_call(registry, space, &mut r, &mut w).await?,
        Op::AddU64 => add_call(registry, space, &mut r, &mut w).await?,
    }
    Ok(w.0)
}

/// A trim call: zeros over the volume's pages in a range, in batches.
async fn trim_call(
    registry: &VolumeRegistry,
    space: &SpaceManager,
    r: &mut Reader<'_>,
    w: &mut Writer,
) -> Result<(), BlockVolumeError> {
    let name = r.name()?;
    let instance = r.u64()?;
    let first = r.u64()?;
    let count = r.u64()?;
    r.end()?;
    let entry = open_entry(registry, &name, instance)?;
    check_local_range(registry, &entry, first, count)?;
    let _gate = entry.open_gate().await?;
    let end = first.saturating_add(count);
    let pages: Vec<u64> = space
        .pages_in(entry.def.space())
        .into_iter()
        .filter(|i| (first..end).contains(i))
        .collect();
    let trimmed = pages.len() as u64;
    for batch in pages.chunks(TRIM_BATCH_PAGES) {
        // A trim is a write of zeros: an add must not read a page
        // before it and write the old data back after it.
        let _locks = registry.lock_pages(entry.def.space(), batch).await;
        trim_pages(registry.node(), space, entry.def.space(), batch.to_vec()).await?;
    }
    w.u64(trimmed);
    Ok(())
}

/// A batch of 64-bit adds, answered with the new values.
async fn add_call(
    registry: &VolumeRegistry,
    space: &SpaceManager,
    r: &mut Reader<'_>,
    w: &mut Writer,
) -> Result<(), BlockVolumeError> {
    let name = r.name()?;
    let instance = r.u64()?;
    let count = r.count(ADD_OP_BYTES)?;
    if count > MAX_ADDS_PER_CALL {
        return Err(BlockVolumeError::TooMany {
            node: registry.node(),
            what: format!("{count} adds in one call"),
            limit: MAX_ADDS_PER_CALL as u64,
        });
    }
    let mut adds = Vec::with_capacity(count);
    for _ in 0..count {
        adds.push(Add {
            page: r.u64()?,
            offset_in_page: r.u32()?,
            delta: r.u64()?,
        });
    }
    r.end()?;
    let entry = open_entry(registry, &name, instance)?;
    let values = add_u64s(registry, space, &entry, &adds).await?;
    debug_assert_eq!(values.len(), adds.len());
    w.0.reserve(4 + 8 * values.len());
    w.u32(values.len() as u32);
    for v in values {
        w.u64(v);
    }
    Ok(())
}

fn open_entry(
    registry: &VolumeRegistry,
    name: &str,
    instance: u64,
) -> Result<std::sync::Arc<Entry>, BlockVolumeError> {
    let entry = registry
        .entry(name)
        .ok_or_else(|| BlockVolumeError::NotFound {
            name: name.to_string(),
        })?;
    if entry.def.instance != instance {
        return Err(BlockVolumeError::Stale {
            name: name.to_string(),
            node: registry.node(),
        });
    }
    Ok(entry)
}

/// The head of a read or write call: the volume, its instance and the run
/// of this node's local pages, checked.
async fn data_call(
    registry: &VolumeRegistry,
    r: &mut Reader<'_>,
) -> Result<(std::sync::Arc<Entry>, u64, u64), BlockVolumeError> {
    let name = r.name()?;
    let instance = r.u64()?;
    let first = r.u64()?;
    let count = u64::from(r.u32()?);
    let entry = open_entry(registry, &name, instance)?;
    let limit = max_pages_per_call(entry.def.page_size_bytes);
    if count == 0 || count > limit {
        return Err(BlockVolumeError::TooMany {
            node: registry.node(),
            what: format!("{count} pages in one call (at least 1)"),
            limit,
        });
    }
    check_local_range(registry, &entry, first, count)?;
    Ok((entry, first, count))
}

fn check_local_range(
    registry: &VolumeRegistry,
    entry: &Entry,
    first: u64,
    count: u64,
) -> Result<(), BlockVolumeError> {
    let pages = entry.def.member_pages(entry.member);
    match first.checked_add(count) {
        Some(end) if end <= pages => Ok(()),
        _ => Err(BlockVolumeError::OutOfRange {
            name: format!(
                "{} (its local pages on node {})",
                entry.def.name,
                registry.node()
            ),
            first,
            count,
            pages,
        }),
    }
}

fn page_of(def: &VolumeDef, index: u64) -> LogicalPage {
    LogicalPage::new(def.space(), index)
}

async fn read(
    registry: &VolumeRegistry,
    space: &SpaceManager,
    entry: &Entry,
    first: u64,
    count: u64,
    w: &mut Writer,
) -> Result<(), BlockVolumeError> {
    let _gate = entry.open_gate().await?;
    let page_size = entry.def.page_size_bytes as usize;
    w.0.reserve(4 + count as usize * (1 + page_size));
    w.u32(count as u32);
    let mut pages = stream::iter(first..first + count)
        .map(|i| space.read(page_of(&entry.def, i)))
        .buffered(NODE_PAGES_IN_FLIGHT);
    while let Some(page) = pages.next().await {
        match page.map_err(|e| storage_error(registry.node(), e))? {
            // Never written or trimmed: the client fills in zeros.
            None => w.u8(PAGE_UNWRITTEN),
            Some(data) if data.len() == page_size => w.u8(PAGE_DATA).raw(&data),
            Some(data) => {
                return Err(BlockVolumeError::Storage {
                    node: registry.node(),
                    message: format!(
                        "the space manager returned {} bytes for a page of {page_size}",
                        data.len()
                    ),
                })
            }
        };
    }
    Ok(())
}

async fn write(
    registry: &VolumeRegistry,
    space: &SpaceManager,
    entry: &Entry,
    first: u64,
    data: Bytes,
) -> Result<(), BlockVolumeError> {
    let gate = entry.open_gate().await?;
    let page_size = entry.def.page_size_bytes as usize;
    let count = (data.len() / page_size) as u64;
    // Every page is tried, so a failure leaves each page whole (old or
    // new), and the first failure is reported.
    let results: Vec<_> = stream::iter(0..count)
        .map(|i| {
            let start = i as usize * page_size;
            let page = data.slice(start..start + page_size);
            async move {
                // One page lock at a time, so a write never waits for a
                // lock while holding one.
                let _lock = registry.lock_page(entry.def.space(), first + i).await;
                space.write(page_of(&entry.def, first + i), page).await
            }
        })
        .buffer_unordered(NODE_PAGES_IN_FLIGHT)
        .collect()
        .await;
    drop(gate);
    match results.into_iter().find_map(Result::err) {
        None => Ok(()),
        Some(e) => Err(storage_error(registry.node(), e)),
    }
}

/// One add of an `AddU64` call.
#[derive(Clone, Copy, Debug)]
struct Add {
    page: u64,
    offset_in_page: u32,
    delta: u64,
}

/// Applies `adds` to this node's pages of `entry`: checks every add first
/// (the whole batch is refused if one is out of range), then takes each
/// page once (its lock, one read, its adds in call order, one write), at
/// most [`NODE_PAGES_IN_FLIGHT`] pages at a time. Returns each add's new
/// value in call order. If a page fails, the other pages are still tried
/// (each page gets all its adds or none) and the first failure is returned.
async fn add_u64s(
    registry: &VolumeRegistry,
    space: &SpaceManager,
    entry: &Entry,
    adds: &[Add],
) -> Result<Vec<u64>, BlockVolumeError> {
    let page_size = entry.def.page_size_bytes as usize;
    let local_pages = entry.def.member_pages(entry.member);
    let bad = |index: usize, add: &Add, reason: String| BlockVolumeError::BadAdd {
        name: format!(
            "{} (its local pages on node {})",
            entry.def.name,
            registry.node()
        ),
        index: index as u64,
        offset: u64::from(add.offset_in_page),
        reason,
    };
    // Call order within each page: a page's adds apply in the order given.
    let mut by_page: std::collections::BTreeMap<u64, Vec<usize>> = Default::default();
    for (index, add) in adds.iter().enumerate() {
        if add.page >= local_pages {
            return Err(bad(
                index,
                add,
                format!(
                    "local page {} is outside this node's {local_pages} pages of the volume",
                    add.page
                ),
            ));
        }
        let end = add.offset_in_page as usize + 8;
        if end > page_size {
            return Err(bad(
                index,
                add,
                format!(
                    "bytes {}..{end} of local page {} cross the end of its {page_size}-byte page",
                    add.offset_in_page, add.page
                ),
            ));
        }
        by_page.entry(add.page).or_default().push(index);
    }
    let gate = entry.open_gate().await?;
    let results: Vec<Result<Vec<(usize, u64)>, BlockVolumeError>> = stream::iter(by_page)
        .map(|(page, indexes)| async move {
            let at = page_of(&entry.def, page);
            // Held from the read to the write: the read-modify-write of
            // this page is one step for every other add, write and trim.
            let _lock = registry.lock_page(entry.def.space(), page).await;
            let mut data = match space.read(at).await {
                Err(e) => return Err(storage_error(registry.node(), e)),
                // Never written or trimmed: zeros.
                Ok(None) => vec![0u8; page_size],
                Ok(Some(data)) if data.len() == page_size => data.to_vec(),
                Ok(Some(data)) => {
                    return Err(BlockVolumeError::Storage {
                        node: registry.node(),
                        message: format!(
                            "the space manager returned {} bytes for a page of {page_size}",
                            data.len()
                        ),
                    })
                }
            };
            let mut values = Vec::with_capacity(indexes.len());
            for index in indexes {
                let add = adds[index];
                let start = add.offset_in_page as usize;
                debug_assert!(start + 8 <= page_size, "checked above");
                let slot = &mut data[start..start + 8];
                let mut word = [0u8; 8];
                word.copy_from_slice(slot);
                let value = u64::from_le_bytes(word).wrapping_add(add.delta);
                slot.copy_from_slice(&value.to_le_bytes());
                values.push((index, value));
            }
            space
                .write(at, Bytes::from(data))
                .await
                .map_err(|e| storage_error(registry.node(), e))?;
            Ok(values)
        })
        .buffer_unordered(NODE_PAGES_IN_FLIGHT)
        .collect()
        .await;
    drop(gate);
    let mut out = vec![0u64; adds.len()];
    let mut first_error = None;
    for result in results {
        match result {
            Ok(values) => {
                for (index, value) in values {
                    out[index] = value;
                }
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        None => Ok(out),
        Some(e) => Err(e),
    }
}
