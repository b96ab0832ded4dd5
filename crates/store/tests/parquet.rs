//! Parquet stored page by page: the `parquet` and `auto` chunking modes cut
//! a Parquet file (written here by the `parquet` crate) at its page
//! boundaries, checked against the file's own footer and offset index; the
//! manifest names each chunk's row group and column; the object reads back
//! byte for byte; a changed column adds only its pages and the metadata;
//! damaged files are stored as bytes with a warning.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use quarry_store::{AsyncChunker, BucketName, Chunking, Condition, Fingerprint, ObjectKey};
use quarry_store_api::{ChunkRole, CutOutcome};

const ROWS_PER_GROUP: usize = 3000;
const ROW_GROUPS: usize = 3;
/// The column the dedup test changes (leaf index 3, `score`).
const CHANGED_COLUMN: u16 = 3;

fn b(name: &str) -> BucketName {
    BucketName::new(name).unwrap()
}

fn k(key: &str) -> ObjectKey {
    ObjectKey::new(key).unwrap()
}

/// A Parquet file of several row groups and columns: an int64 id, a
/// low-cardinality string (dictionary pages) with nulls, a nested group's
/// string, a double with nulls (`score`, scaled by `score_scale` so a
/// variant changes only its pages), and an int32. Small pages: many of them.
fn parquet_file(score_scale: f64) -> Vec<u8> {
    parquet_file_with(score_scale, true, ROW_GROUPS)
}

/// [`parquet_file`], with or without page indexes, of `row_groups` row
/// groups (the first ones the same whatever the count).
fn parquet_file_with(score_scale: f64, page_index: bool, row_groups: usize) -> Vec<u8> {
    let schema = parse_message_type(
        "message flights {
            required int64 id;
            optional binary carrier (UTF8);
            required group route { required binary origin (UTF8); }
            optional double score;
            required int32 month;
        }",
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_data_page_row_count_limit(400)
        .set_write_batch_size(100)
        .set_data_page_size_limit(2048)
        .set_statistics_enabled(if page_index {
            EnabledStatistics::Page
        } else {
            EnabledStatistics::Chunk
        })
        .set_offset_index_disabled(!page_index)
        .build();
    let mut out = Vec::new();
    let mut w = SerializedFileWriter::new(&mut out, Arc::new(schema), Arc::new(props)).unwrap();
    for rg in 0..row_groups {
        let rows: Vec<usize> = (rg * ROWS_PER_GROUP..(rg + 1) * ROWS_PER_GROUP).collect();
        let mut g = w.next_row_group().unwrap();
        let mut col = g.next_column().unwrap().unwrap();
        let ids: Vec<i64> = rows.iter().map(|&r| r as i64 * 7).collect();
        col.typed::<Int64Type>()
            .write_batch(&ids, None, None)
            .unwrap();
        col.close().unwrap();
        let mut col = g.next_column().unwrap().unwrap();
        let def: Vec<i16> = rows.iter().map(|&r| i16::from(r % 11 != 0)).collect();
        let carriers: Vec<ByteArray> = rows
            .iter()
            .filter(|&&r| r % 11 != 0)
            .map(|&r| ByteArray::from(["UA", "DL", "AA", "B6", "WN"][r % 5]))
            .collect();
        col.typed::<ByteArrayType>()
            .write_batch(&carriers, Some(&def), None)
            .unwrap();
        col.close().unwrap();
        let mut col = g.next_column().unwrap().unwrap();
        let origins: Vec<ByteArray> = rows
            .iter()
            .map(|&r| ByteArray::from(format!("airport-{:05}", (r * 31) % 9973).as_str()))
            .collect();
        col.typed::<ByteArrayType>()
            .write_batch(&origins, None, None)
            .unwrap();
        col.close().unwrap();
        let mut col = g.next_column().unwrap().unwrap();
        let def: Vec<i16> = rows.iter().map(|&r| i16::from(r % 7 != 0)).collect();
        let scores: Vec<f64> = rows
            .iter()
            .filter(|&&r| r % 7 != 0)
            .map(|&r| (r as f64).sqrt() * score_scale)
            .collect();
        col.typed::<DoubleType>()
            .write_batch(&scores, Some(&def), None)
            .unwrap();
        col.close().unwrap();
        let mut col = g.next_column().unwrap().unwrap();
        let months: Vec<i32> = rows.iter().map(|&r| (r % 12) as i32 + 1).collect();
        col.typed::<Int32Type>()
            .write_batch(&months, None, None)
            .unwrap();
        col.close().unwrap();
        g.close().unwrap();
    }
    w.close().unwrap();
    out
}

/// The file's metadata with its offset index, read by the `parquet` crate.
fn metadata(file: &[u8]) -> ParquetMetaData {
    ParquetMetaDataReader::new()
        .with_page_index_policy(PageIndexPolicy::Required)
        .parse_and_finish(&Bytes::copy_from_slice(file))
        .unwrap()
}

type ColumnChunk = (u32, u16, u64, u64, Vec<u64>, bool);

/// Every column chunk as (row group, column, start, end, page starts, has
/// a dictionary page), from the footer and the offset index (not from the
/// cutter).
fn column_chunks(file: &[u8]) -> Vec<ColumnChunk> {
    let md = metadata(file);
    let mut out = Vec::new();
    for (rg, group) in md.row_groups().iter().enumerate() {
        let index = md.page_index_for_row_group(rg);
        for (col, chunk) in group.columns().iter().enumerate() {
            let (start, len) = chunk.byte_range();
            let mut pages: Vec<u64> = index
                .offset_index(col)
                .expect("the writer writes an offset index")
                .page_locations()
                .iter()
                .map(|p| p.offset as u64)
                .collect();
            let dict = chunk.dictionary_page_offset();
            if let Some(dict) = dict {
                pages.insert(0, dict as u64);
            }
            assert_eq!(pages[0], start, "rg {rg} col {col} starts with a page");
            out.push((
                rg as u32,
                col as u16,
                start,
                start + len,
                pages,
                dict.is_some(),
            ));
        }
    }
    out
}

fn footer_start(file: &[u8]) -> u64 {
    let n = file.len();
    let len = u32::from_le_bytes(file[n - 8..n - 4].try_into().unwrap()) as usize;
    (n - 8 - len) as u64
}

fn split(chunking: Chunking, file: &[u8]) -> (Vec<(usize, usize)>, CutOutcome) {
    chunking.split_with_outcome(file)
}

#[test]
fn chunks_end_at_page_boundaries_and_name_their_column() {
    let file = parquet_file(1.0);
    let (cuts, outcome) = split(Chunking::DEFAULT_PARQUET, &file);
    assert_eq!(outcome.note, None);
    assert_eq!(outcome.chunking, Chunking::DEFAULT_PARQUET);
    let layout = outcome.layout.expect("a Parquet file gets a layout");
    assert_eq!(
        layout.columns,
        ["id", "carrier", "route.origin", "score", "month"]
    );
    assert_eq!(layout.roles.len(), cuts.len());
    let total: usize = cuts.iter().map(|c| c.1).sum();
    assert_eq!(total, file.len());
    let ccs = column_chunks(&file);
    assert!(
        ccs.iter().all(|c| c.4.len() >= 4),
        "many pages per column chunk"
    );
    let cut_starts: BTreeSet<u64> = cuts.iter().map(|&(o, _)| o as u64).collect();
    let mut pages_total = 0;
    for (i, (&(at, len), role)) in cuts.iter().zip(&layout.roles).enumerate() {
        let (at, end) = (at as u64, (at + len) as u64);
        let owner = ccs.iter().find(|c| c.2 <= at && at < c.3);
        match (owner, role) {
            (Some(cc), ChunkRole::Page { row_group, column }) => {
                assert_eq!((cc.0, cc.1), (*row_group, *column), "chunk {i}");
                assert!(end <= cc.3, "chunk {i} ends inside its column chunk");
                // It starts on a page and ends on a page boundary.
                assert!(cc.4.contains(&at), "chunk {i} starts at a page");
                assert!(
                    end == cc.3 || cc.4.contains(&end),
                    "chunk {i} ends at a page"
                );
                // A chunk holds one page, or a dictionary page and the
                // first data page, both small.
                let inside = cc.4.iter().filter(|&&p| at < p && p < end).count();
                if inside > 0 {
                    assert_eq!(inside, 1, "chunk {i}");
                    assert!(cc.5 && at == cc.2 && len <= quarry_store_api::PAGE_GROUP_MAX_BYTES);
                }
                pages_total += 1;
            }
            (None, ChunkRole::Footer) => {
                assert_eq!((at, end), (footer_start(&file), file.len() as u64));
            }
            (None, ChunkRole::Other) => {
                assert!(at == 0 && len == 4 || at >= ccs.iter().map(|c| c.3).max().unwrap());
            }
            other => panic!("chunk {i} at {at}..{end}: {other:?}"),
        }
    }
    // Every page boundary of every column chunk is a cut, but a small
    // dictionary page's end.
    for cc in &ccs {
        for (n, p) in cc.4.iter().enumerate() {
            assert!(
                cut_starts.contains(p) || (n == 1 && cc.5),
                "page at {p} of {cc:?}"
            );
        }
        assert!(cut_starts.contains(&cc.3) || cc.3 == footer_start(&file));
    }
    assert!(pages_total >= ccs.len());
    assert_eq!(
        layout
            .roles
            .iter()
            .filter(|r| **r == ChunkRole::Footer)
            .count(),
        1
    );
}

#[tokio::test]
async fn a_stream_cuts_as_a_slice_does_in_any_read_sizes() {
    let file = parquet_file(1.0);
    for chunking in [Chunking::DEFAULT_PARQUET, Chunking::DEFAULT_AUTO] {
        let want = split(chunking, &file);
        for piece in [1usize, 7, 4096, 1 << 20] {
            let (mut tx, rx) = tokio::io::duplex(piece);
            let feed = file.clone();
            let writer = tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                tx.write_all(&feed).await.unwrap();
            });
            let mut chunker = AsyncChunker::new(rx, chunking).unwrap();
            let mut got = Vec::new();
            while let Some(c) = chunker.next_chunk().await.unwrap() {
                assert_eq!(&c.data[..], &file[c.offset as usize..][..c.data.len()]);
                got.push((c.offset as usize, c.data.len()));
            }
            writer.await.unwrap();
            assert_eq!(got, want.0, "{piece}-byte reads");
            assert_eq!(chunker.outcome(), want.1);
        }
    }
}

async fn store_with(chunking: Chunking) -> quarry_store::MemObjectStore {
    let s = quarry_store::mem_object_store([1, 2, 3]).await.unwrap();
    s.create_bucket(&b("pq"), chunking).await.unwrap();
    s
}

#[tokio::test]
async fn stored_page_by_page_reads_back_and_records_columns() {
    for chunking in [Chunking::DEFAULT_PARQUET, Chunking::DEFAULT_AUTO] {
        let s = store_with(chunking).await;
        let file = parquet_file(1.0);
        let m = s
            .put_bytes(&b("pq"), &k("f.parquet"), &file, Condition::Always)
            .await
            .unwrap();
        let (got, bytes) = s.get(&b("pq"), &k("f.parquet")).await.unwrap();
        assert_eq!(&bytes[..], &file[..]);
        assert_eq!(got.chunking(), chunking);
        assert_eq!(got.note(), None);
        let (cuts, outcome) = split(chunking, &file);
        assert_eq!(got.parquet_layout(), outcome.layout.as_ref());
        assert_eq!(got.chunks().len(), cuts.len());
        assert_eq!(m.parquet_layout(), got.parquet_layout());
        // A reader finds a column's pages without reading the file.
        let layout = got.parquet_layout().unwrap();
        let score: Vec<_> = got
            .chunks()
            .iter()
            .zip(&layout.roles)
            .filter(|(_, r)| matches!(r, ChunkRole::Page { column: 3, .. }))
            .collect();
        assert!(score.len() >= ROW_GROUPS * 4);
    }
}

#[tokio::test]
async fn auto_uses_fastcdc_for_other_bytes_without_a_warning() {
    let s = store_with(Chunking::DEFAULT_AUTO).await;
    let text: Vec<u8> = (0..200_000u32)
        .flat_map(|i| format!("line {i} of a text file\n").into_bytes())
        .collect();
    s.put_bytes(&b("pq"), &k("t.txt"), &text, Condition::Always)
        .await
        .unwrap();
    let (m, bytes) = s.get(&b("pq"), &k("t.txt")).await.unwrap();
    assert_eq!(&bytes[..], &text[..]);
    assert_eq!(m.chunking(), Chunking::DEFAULT_FASTCDC);
    assert_eq!((m.parquet_layout(), m.note()), (None, None));
    let cdc = Chunking::DEFAULT_FASTCDC.split(&text);
    let lens: Vec<u32> = cdc.iter().map(|c| c.1 as u32).collect();
    assert_eq!(m.chunks().iter().map(|c| c.len).collect::<Vec<_>>(), lens);
}

/// The fingerprints of `file`'s chunks with their roles.
fn chunk_roles(chunking: Chunking, file: &[u8]) -> Vec<(Fingerprint, usize, ChunkRole)> {
    let (cuts, outcome) = split(chunking, file);
    let roles = outcome.layout.map(|l| l.roles).unwrap_or_default();
    cuts.iter()
        .enumerate()
        .map(|(i, &(o, l))| {
            let role = roles.get(i).copied().unwrap_or(ChunkRole::Other);
            (Fingerprint::of(&file[o..o + l]), l, role)
        })
        .collect()
}

#[tokio::test]
async fn a_changed_column_adds_only_its_pages_and_the_metadata() {
    let a = parquet_file(1.0);
    let b_file = parquet_file(1.5);
    let s = store_with(Chunking::DEFAULT_PARQUET).await;
    s.put_bytes(&b("pq"), &k("a.parquet"), &a, Condition::Always)
        .await
        .unwrap();
    let before = s.usage().await.unwrap();
    let m = s
        .put_bytes(&b("pq"), &k("b.parquet"), &b_file, Condition::Always)
        .await
        .unwrap();
    let after = s.usage().await.unwrap();
    let old: HashSet<Fingerprint> = chunk_roles(Chunking::DEFAULT_PARQUET, &a)
        .into_iter()
        .map(|c| c.0)
        .collect();
    let new = chunk_roles(Chunking::DEFAULT_PARQUET, &b_file);
    let mut added_bytes = 0u64;
    let mut added = HashSet::new();
    let mut score_pages = 0;
    for (fp, len, role) in &new {
        if old.contains(fp) || !added.insert(*fp) {
            continue;
        }
        added_bytes += *len as u64;
        match role {
            ChunkRole::Page { column, .. } => {
                assert_eq!(*column, CHANGED_COLUMN, "only the changed column's pages");
                score_pages += 1;
            }
            // The footer, and the page indexes before it (they hold offsets
            // and statistics).
            ChunkRole::Footer | ChunkRole::Other => {}
        }
    }
    // The column is dictionary-encoded and every value changed: each row
    // group's dictionary page is new (its data pages hold indexes into the
    // dictionary, which did not change, so they may well deduplicate).
    let all_score = new
        .iter()
        .filter(|c| matches!(c.2, ChunkRole::Page { column, .. } if column == CHANGED_COLUMN))
        .count();
    assert!(
        (ROW_GROUPS..=all_score).contains(&score_pages),
        "{score_pages} of {all_score} pages new"
    );
    assert!(m.parquet_layout().is_some());
    assert_eq!(after.stored_bytes - before.stored_bytes, added_bytes);
    assert_eq!(after.chunks - before.chunks, added.len() as u64);
    // The changed column is about a fifth of the file; the rest deduplicated.
    assert!(
        added_bytes * 2 < b_file.len() as u64,
        "{added_bytes} of {}",
        b_file.len()
    );
    // FastCDC with its default sizes finds far less in common.
    let cdc_old: HashSet<Fingerprint> = chunk_roles(Chunking::DEFAULT_FASTCDC, &a)
        .into_iter()
        .map(|c| c.0)
        .collect();
    let cdc_added: u64 = chunk_roles(Chunking::DEFAULT_FASTCDC, &b_file)
        .iter()
        .filter(|c| !cdc_old.contains(&c.0))
        .map(|c| c.1 as u64)
        .sum();
    assert!(
        cdc_added > added_bytes,
        "FastCDC {cdc_added}, pages {added_bytes}"
    );
}

/// A damaged or false Parquet file: stored whole, read back byte for byte,
/// with a warning naming the fault and no column metadata.
async fn stored_as_bytes_with_a_warning(file: &[u8], want_in_note: &str) {
    let s = store_with(Chunking::DEFAULT_PARQUET).await;
    let m = s
        .put_bytes(&b("pq"), &k("bad.parquet"), file, Condition::Always)
        .await
        .unwrap();
    let note = m
        .note()
        .unwrap_or_else(|| panic!("no warning for {want_in_note}"));
    assert!(note.contains(want_in_note), "{note}");
    let (got, bytes) = s.get(&b("pq"), &k("bad.parquet")).await.unwrap();
    assert_eq!(&bytes[..], file);
    assert_eq!(got.note(), Some(note), "stat shows the warning");
    assert_eq!(got.parquet_layout(), None);
    // Nothing half-stored: the usage is the object's chunks.
    let u = s.usage().await.unwrap();
    assert_eq!(u.objects, 1);
    assert_eq!(u.logical_bytes, file.len() as u64);
}

#[tokio::test]
async fn truncated_files_are_stored_as_bytes_with_a_warning() {
    let file = parquet_file(1.0);
    let ccs = column_chunks(&file);
    let page = ccs[2].4[2] as usize;
    // Inside a page, at a page boundary, inside the footer, 3 bytes short.
    for (cut, why) in [
        (page + 5, "truncated"),
        (page, "truncated"),
        (footer_start(&file) as usize + 10, "PAR1"),
        (file.len() - 3, "PAR1"),
    ] {
        stored_as_bytes_with_a_warning(&file[..cut], why).await;
    }
}

/// Where the `compressed_page_size` varint of the page header at `at`
/// starts: fields 1 to 3 come first, each a one-byte field header (0x15,
/// an i32 one id on) and a varint.
fn compressed_size_field(file: &[u8], at: usize) -> usize {
    let mut i = at;
    for _ in 0..2 {
        assert_eq!(file[i], 0x15, "a page header's field at {i}");
        i += 1;
        while file[i] & 0x80 != 0 {
            i += 1;
        }
        i += 1;
    }
    assert_eq!(file[i], 0x15);
    i + 1
}

#[tokio::test]
async fn flipped_bytes_in_a_page_header_or_the_footer_give_a_warning() {
    let file = parquet_file(1.0);
    let ccs = column_chunks(&file);
    // The first byte of a page header (its first field's header): the walk
    // can no longer read it as a page header.
    let mut bad = file.clone();
    bad[ccs[4].4[1] as usize] = 0xff;
    stored_as_bytes_with_a_warning(&bad, "damaged").await;
    // The page size field of a header (its third field): the walk goes
    // astray and the footer shows it.
    let mut bad = file.clone();
    let at = compressed_size_field(&file, ccs[1].4[2] as usize);
    bad[at] ^= 0x08;
    stored_as_bytes_with_a_warning(&bad, "damaged").await;
    // The footer's first byte.
    let mut bad = file.clone();
    bad[footer_start(&file) as usize] = 0xff;
    stored_as_bytes_with_a_warning(&bad, "footer does not parse").await;
}

#[tokio::test]
async fn a_text_file_named_parquet_is_fastcdc_with_a_warning() {
    let text: Vec<u8> = (0..50_000u32)
        .flat_map(|i| format!("{i},not,parquet\n").into_bytes())
        .collect();
    stored_as_bytes_with_a_warning(&text, "not a Parquet file").await;
    let s = store_with(Chunking::DEFAULT_PARQUET).await;
    let m = s
        .put_bytes(&b("pq"), &k("t.parquet"), &text, Condition::Always)
        .await
        .unwrap();
    assert_eq!(m.chunking(), Chunking::DEFAULT_FASTCDC);
}

#[test]
fn the_largest_manifest_fits_a_table_value() {
    // The key record is a tag byte and the manifest.
    let (manifest, value) = (
        quarry_store_api::MAX_MANIFEST_BYTES,
        quarry_store::MAX_TABLE_VALUE_BYTES,
    );
    assert!(manifest < value, "{manifest} vs {value}");
}

/// A file with one page of over 4 MiB (one long string, no dictionary).
fn big_page_file() -> Vec<u8> {
    let schema = parse_message_type("message m { required binary blob; }").unwrap();
    let props = WriterProperties::builder()
        .set_dictionary_enabled(false)
        .build();
    let mut out = Vec::new();
    let mut w = SerializedFileWriter::new(&mut out, Arc::new(schema), Arc::new(props)).unwrap();
    let mut g = w.next_row_group().unwrap();
    let mut col = g.next_column().unwrap().unwrap();
    let blob: Vec<u8> = (0..(9u32 << 20) / 2).map(|i| (i % 251) as u8).collect();
    let values = [ByteArray::from(blob.clone()), ByteArray::from(blob)];
    col.typed::<ByteArrayType>()
        .write_batch(&values, None, None)
        .unwrap();
    col.close().unwrap();
    g.close().unwrap();
    w.close().unwrap();
    out
}

#[test]
fn a_page_over_4_mib_is_cut_in_4_mib_pieces_of_its_column() {
    let file = big_page_file();
    let (cuts, outcome) = split(Chunking::DEFAULT_PARQUET, &file);
    assert_eq!(outcome.note, None);
    let roles = outcome.layout.unwrap().roles;
    let pages: Vec<usize> = cuts
        .iter()
        .zip(&roles)
        .filter(|(_, r)| matches!(r, ChunkRole::Page { column: 0, .. }))
        .map(|(c, _)| c.1)
        .collect();
    let ccs = column_chunks(&file);
    let page_bytes = (ccs[0].3 - ccs[0].2) as usize;
    assert!(page_bytes > 8 << 20, "{page_bytes}");
    assert_eq!(pages.iter().sum::<usize>(), page_bytes);
    assert!(pages
        .iter()
        .all(|&n| n <= quarry_store::MAX_CHUNK_SIZE as usize));
    assert!(pages.len() >= 3, "{pages:?}");
}

#[test]
fn over_4_mib_after_the_last_page_is_fastcdc_with_a_warning() {
    // 5 MiB of junk (not zeros, which are padding) where the page indexes
    // would be: no page header parses there, and the held tail would pass
    // its bound.
    let file = parquet_file(1.0);
    let last_page_end = column_chunks(&file).iter().map(|c| c.3).max().unwrap() as usize;
    let mut padded = file[..last_page_end].to_vec();
    padded.extend(std::iter::repeat_n(0xffu8, 5 << 20));
    padded.extend_from_slice(&file[last_page_end..]);
    let (cuts, outcome) = split(Chunking::DEFAULT_PARQUET, &padded);
    let note = outcome.note.unwrap();
    assert!(note.contains("over 4194304 bytes follow"), "{note}");
    assert_eq!(outcome.layout, None);
    assert_eq!(cuts.iter().map(|c| c.1).sum::<usize>(), padded.len());
    // From the last page on, FastCDC's bound holds.
    assert!(cuts
        .iter()
        .filter(|c| c.0 >= last_page_end)
        .all(|c| c.1 <= 256 << 10));
}

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What storing `b` after `a` adds: (bytes, new page chunks, page chunks of `b`).
fn added_by(a: &[u8], b: &[u8]) -> (u64, usize, usize) {
    let old: HashSet<Fingerprint> = chunk_roles(Chunking::DEFAULT_PARQUET, a)
        .into_iter()
        .map(|c| c.0)
        .collect();
    let new = chunk_roles(Chunking::DEFAULT_PARQUET, b);
    let pages = new
        .iter()
        .filter(|c| matches!(c.2, ChunkRole::Page { .. }))
        .count();
    let fresh: Vec<_> = new.iter().filter(|c| !old.contains(&c.0)).collect();
    let bytes = fresh.iter().map(|c| c.1 as u64).sum();
    let fresh_pages = fresh
        .iter()
        .filter(|c| matches!(c.2, ChunkRole::Page { .. }))
        .count();
    (bytes, fresh_pages, pages)
}

/// Files written by pyarrow with `use_content_defined_chunking`
/// (tests/data/make_cdc_parquet.py): a row inserted in the middle moves
/// every later row, but the page boundaries follow the content, so only
/// the pages around the insertion are new.
#[test]
fn content_defined_pages_keep_their_dedup_across_an_inserted_row() {
    let (a, b) = (fixture("cdc_a.parquet"), fixture("cdc_b.parquet"));
    let (fa, fb) = (fixture("fixed_a.parquet"), fixture("fixed_b.parquet"));
    // pyarrow's files are cut by page and attributed like the parquet crate's.
    for file in [&a, &b, &fa, &fb] {
        let (_, outcome) = split(Chunking::DEFAULT_PARQUET, file);
        assert_eq!(outcome.note, None);
        let layout = outcome.layout.expect("a layout");
        assert_eq!(layout.columns, ["id", "name", "value"]);
    }
    let (cdc_bytes, cdc_pages, pages) = added_by(&a, &b);
    // One or two pages of each of the 3 columns around the insertion,
    // and the footer.
    assert!(
        (3..=6).contains(&cdc_pages) && pages >= 30,
        "{cdc_pages} of {pages} pages new"
    );
    assert!(cdc_bytes * 4 < b.len() as u64, "{cdc_bytes} of {}", b.len());
    // Ordinary pages all shift after the insertion: most are new.
    let (fixed_bytes, fixed_pages, fixed_all) = added_by(&fa, &fb);
    assert!(fixed_pages * 2 > fixed_all, "{fixed_pages} of {fixed_all}");
    assert!(
        fixed_bytes > 3 * cdc_bytes,
        "fixed pages {fixed_bytes}, content-defined {cdc_bytes}"
    );
}

mod damage {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Any bytes changed anywhere (often in the footer), or a file cut
        /// anywhere: the cutter never panics, covers every byte exactly
        /// once, keeps every chunk within the bound, and a layout it gives
        /// names one role per chunk.
        #[test]
        fn damaged_files_are_cut_whole(
            edits in proptest::collection::vec((any::<u32>(), any::<u8>(), any::<bool>()), 1..6),
            cut in proptest::option::of(any::<u32>()),
        ) {
            let file = small_file();
            let mut bad = file.to_vec();
            let footer = footer_start(file) as usize;
            for (at, v, in_footer) in edits {
                let i = if in_footer {
                    footer + at as usize % (file.len() - footer)
                } else {
                    at as usize % file.len()
                };
                bad[i] = v;
            }
            if let Some(c) = cut {
                bad.truncate(c as usize % (bad.len() + 1));
            }
            for chunking in [Chunking::DEFAULT_PARQUET, Chunking::DEFAULT_AUTO] {
                let (cuts, outcome) = split(chunking, &bad);
                let mut at = 0;
                for &(o, l) in &cuts {
                    prop_assert_eq!(o, at);
                    prop_assert!(l > 0 && l <= quarry_store::MAX_CHUNK_SIZE as usize);
                    at += l;
                }
                prop_assert_eq!(at, bad.len());
                if let Some(layout) = outcome.layout {
                    prop_assert_eq!(layout.roles.len(), cuts.len());
                    prop_assert!(outcome.note.is_none());
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// A footer with bytes changed or cut anywhere: planning a column
        /// read returns a plan or an error, never panics; a plan's ranges
        /// lie inside the file's data, and assembling from bytes of those
        /// lengths gives a file or an error.
        #[test]
        fn damaged_footers_plan_or_fail_cleanly(
            edits in proptest::collection::vec((any::<u32>(), any::<u8>()), 1..6),
            cut in proptest::option::of(any::<u32>()),
            columns in proptest::sample::subsequence(vec!["id", "carrier", "route", "score", "month"], 1..4),
        ) {
            let file = small_file();
            let start = footer_start(file) as usize;
            let mut footer = file[start..].to_vec();
            for (at, v) in edits {
                let i = at as usize % footer.len();
                footer[i] = v;
            }
            if let Some(c) = cut {
                footer.drain(..c as usize % footer.len());
            }
            let names: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
            if let Ok(plan) = quarry_store_api::ColumnPlan::new(&footer, file.len() as u64, &names) {
                let data_end = (file.len() - footer.len()) as u64;
                let mut fetched = Vec::new();
                for r in plan.ranges() {
                    prop_assert!(r.start >= 4 && r.start <= r.end && r.end <= data_end);
                    fetched.push(Bytes::copy_from_slice(&file[r.start as usize..r.end as usize]));
                }
                let _ = plan.assemble(&fetched);
            }
        }
    }

    fn small_file() -> &'static [u8] {
        static FILE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        FILE.get_or_init(|| parquet_file(1.0))
    }
}

/// `file` (written without page indexes) with `pad` zero bytes before row
/// group 1, as writers that align row groups leave them, and its footer
/// rewritten by the `parquet` crate with the moved offsets.
fn padded(file: &[u8], pad: usize) -> Vec<u8> {
    let footer = footer_start(file) as usize;
    let md = ParquetMetaDataReader::decode_metadata(&file[footer..file.len() - 8]).unwrap();
    let at = md.row_group(1).columns()[0].byte_range().0 as usize;
    let mut out = file[..at].to_vec();
    out.extend(std::iter::repeat_n(0u8, pad));
    out.extend_from_slice(&file[at..footer]);
    let shift = |v: i64| if v as usize >= at { v + pad as i64 } else { v };
    let row_groups = md
        .row_groups()
        .iter()
        .map(|rg| {
            let columns = rg
                .columns()
                .iter()
                .map(|c| {
                    c.clone()
                        .into_builder()
                        .set_data_page_offset(shift(c.data_page_offset()))
                        .set_dictionary_page_offset(c.dictionary_page_offset().map(shift))
                        .build()
                        .unwrap()
                })
                .collect();
            let b = rg.clone().into_builder().set_column_metadata(columns);
            match rg.file_offset() {
                Some(o) => b.set_file_offset(shift(o)),
                None => b,
            }
            .build()
            .unwrap()
        })
        .collect();
    let md = md.into_builder().set_row_groups(row_groups).build();
    parquet::file::metadata::ParquetMetaDataWriter::new(&mut out, &md)
        .finish()
        .unwrap();
    out
}

/// Every row of a file, as the `parquet` crate's record reader reads them.
fn rows(file: &[u8]) -> Vec<parquet::record::Row> {
    use parquet::file::reader::FileReader;
    let reader =
        parquet::file::serialized_reader::SerializedFileReader::new(Bytes::copy_from_slice(file))
            .unwrap();
    reader
        .get_row_iter(None)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn padding_between_row_groups_is_a_chunk_of_its_own() {
    let file = parquet_file_with(1.0, false, ROW_GROUPS);
    let pad = 3000;
    let padded = padded(&file, pad);
    assert!(padded.ends_with(b"PAR1"));
    // A valid file: the parquet crate reads the same rows from both.
    assert_eq!(rows(&padded), rows(&file));
    let (cuts, outcome) = split(Chunking::DEFAULT_PARQUET, &padded);
    assert_eq!(outcome.note, None);
    let roles = outcome.layout.expect("a layout").roles;
    let md = ParquetMetaDataReader::decode_metadata(
        &padded[footer_start(&padded) as usize..padded.len() - 8],
    )
    .unwrap();
    let rg1 = md.row_group(1).columns()[0].byte_range().0 as usize;
    let i = cuts
        .iter()
        .position(|c| c.0 + c.1 == rg1)
        .expect("a cut where row group 1 starts");
    assert_eq!(cuts[i], (rg1 - pad, pad));
    assert_eq!(roles[i], ChunkRole::Other);
    assert_eq!(
        roles[i + 1],
        ChunkRole::Page {
            row_group: 1,
            column: 0
        }
    );
    // The pages of both files are the same chunks.
    let fps = |f: &[u8]| -> HashSet<Fingerprint> {
        chunk_roles(Chunking::DEFAULT_PARQUET, f)
            .into_iter()
            .filter(|c| matches!(c.2, ChunkRole::Page { .. }))
            .map(|c| c.0)
            .collect()
    };
    assert_eq!(fps(&padded), fps(&file));
}

/// Chosen columns come back as a valid Parquet file of only them, whose
/// rows are the original rows cut to those columns, read from the footer
/// and those columns' pages only; a nested group is one top-level column.
/// Bad names, a file not stored page by page and a damaged footer are
/// clear errors.
#[tokio::test]
async fn chosen_columns_read_only_their_pages_and_make_a_valid_file() {
    let s = store_with(Chunking::DEFAULT_PARQUET).await;
    let file = parquet_file(1.0);
    s.put_bytes(&b("pq"), &k("f.parquet"), &file, Condition::Always)
        .await
        .unwrap();
    let asked = vec!["score".to_string(), "route".to_string()];
    let read = s
        .get_columns(&b("pq"), &k("f.parquet"), &asked, &[])
        .await
        .unwrap();
    assert_eq!(read.object_bytes, file.len() as u64);
    assert_eq!(read.row_groups, ROW_GROUPS);
    // Exactly the footer and the chosen column chunks, as the file's own
    // metadata sizes them.
    let md = ParquetMetaDataReader::new()
        .parse_and_finish(&Bytes::copy_from_slice(&file))
        .unwrap();
    let footer_len = 8 + u64::from(u32::from_le_bytes(
        file[file.len() - 8..file.len() - 4].try_into().unwrap(),
    ));
    let chosen: u64 = md
        .row_groups()
        .iter()
        .flat_map(|rg| rg.columns())
        .filter(|c| ["route", "score"].contains(&c.column_path().parts()[0].as_str()))
        .map(|c| c.compressed_size() as u64)
        .sum();
    assert_eq!(read.bytes_read, footer_len + chosen);
    assert!(read.bytes_read < file.len() as u64);
    // The rows, cut to the chosen columns (in the file's order).
    let want: Vec<Vec<(String, parquet::record::Field)>> = rows(&file)
        .into_iter()
        .map(|r| {
            r.get_column_iter()
                .filter(|(name, _)| name.as_str() == "route" || name.as_str() == "score")
                .map(|(n, f)| (n.clone(), f.clone()))
                .collect()
        })
        .collect();
    let got: Vec<Vec<(String, parquet::record::Field)>> = rows(&read.file)
        .into_iter()
        .map(|r| {
            r.get_column_iter()
                .map(|(n, f)| (n.clone(), f.clone()))
                .collect()
        })
        .collect();
    assert_eq!(got.len(), ROW_GROUPS * ROWS_PER_GROUP);
    assert_eq!(got, want);

    // ids are 7 x the row number: the last row group alone holds ids from
    // 7 x 2 x ROWS_PER_GROUP on, so a filter reads it alone.
    let last = quarry_store_api::ColumnFilter {
        column: "id".into(),
        op: quarry_store_api::CompareOp::Ge,
        value: quarry_store_api::FilterValue::Int((7 * 2 * ROWS_PER_GROUP) as i64),
    };
    let one = s
        .get_columns(&b("pq"), &k("f.parquet"), &asked, &[last])
        .await
        .unwrap();
    assert_eq!((one.row_groups, one.row_groups_read), (ROW_GROUPS, 1));
    assert!(one.bytes_read < read.bytes_read);
    let last_rows: Vec<Vec<(String, parquet::record::Field)>> = rows(&one.file)
        .into_iter()
        .map(|r| {
            r.get_column_iter()
                .map(|(n, f)| (n.clone(), f.clone()))
                .collect()
        })
        .collect();
    assert_eq!(last_rows[..], got[2 * ROWS_PER_GROUP..]);
    let e = s
        .get_columns(&b("pq"), &k("f.parquet"), &["nope".to_string()], &[])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no column \"nope\"") && e.contains("id, carrier, route"),
        "{e}"
    );
    let e = s
        .get_columns(&b("pq"), &k("f.parquet"), &[], &[])
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("name at least one column"), "{e}");

    let fixed = store_with(Chunking::DEFAULT_FIXED).await;
    fixed
        .put_bytes(&b("pq"), &k("f.parquet"), &file, Condition::Always)
        .await
        .unwrap();
    let e = fixed
        .get_columns(&b("pq"), &k("f.parquet"), &asked, &[])
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("pq/f.parquet: not stored page by page"), "{e}");
}

/// Multes++ Fig. 7 as a property: a Parquet file stored, then variants of
/// it whose other pages are not re-encoded (half of its row groups
/// removed, one column removed, a row group appended). In a bucket with
/// `parquet` chunking each variant adds no more than its new pages plus
/// its metadata (the bytes outside column chunks: magic, page indexes,
/// footer). What FastCDC and fixed chunks add is printed beside it
/// (docs/benchmarks.md records the table).
#[tokio::test]
async fn parquet_variants_add_only_their_new_pages_and_metadata() {
    let base = parquet_file_with(1.0, true, ROW_GROUPS + 1);
    let footer = &base[footer_start(&base) as usize..];
    let all: Vec<String> = ["id", "carrier", "route", "score", "month"]
        .iter()
        .map(|c| c.to_string())
        .collect();
    let from_base = |plan| assembled(&base, plan);
    // Half of the row groups: the first two of four (ids below 2 x 7 x ROWS).
    let half = from_base(
        quarry_store_api::ColumnPlan::filtered(
            footer,
            base.len() as u64,
            &all,
            &[quarry_store_api::ColumnFilter {
                column: "id".into(),
                op: quarry_store_api::CompareOp::Lt,
                value: quarry_store_api::FilterValue::Int((2 * 7 * ROWS_PER_GROUP) as i64),
            }],
        )
        .unwrap(),
    );
    let no_score = from_base(
        quarry_store_api::ColumnPlan::new(
            footer,
            base.len() as u64,
            &all.iter()
                .filter(|c| *c != "score")
                .cloned()
                .collect::<Vec<_>>(),
        )
        .unwrap(),
    );
    let appended = parquet_file_with(1.0, true, ROW_GROUPS + 2);
    // New pages of each variant: only the appended row group's chunks.
    let variants: [(&str, &[u8], u64); 3] = [
        ("half of the row groups removed", &half, 0),
        ("one column removed", &no_score, 0),
        (
            "a row group appended",
            &appended,
            column_chunk_bytes(&appended, Some(ROW_GROUPS + 1..ROW_GROUPS + 2)),
        ),
    ];
    let mut table = String::from(
        "variant | new pages + metadata | parquet | FastCDC 16K/64K/256K | fixed 64 KiB\n",
    );
    let mut added = std::collections::BTreeMap::new();
    for chunking in [
        Chunking::DEFAULT_PARQUET,
        Chunking::DEFAULT_FASTCDC,
        Chunking::fixed(64 << 10).unwrap(),
    ] {
        for (name, file, _) in &variants {
            let s = store_with(chunking).await;
            s.put_bytes(&b("pq"), &k("base"), &base, Condition::Always)
                .await
                .unwrap();
            let before = s.usage().await.unwrap().stored_bytes;
            s.put_bytes(&b("pq"), &k("variant"), file, Condition::Always)
                .await
                .unwrap();
            let after = s.usage().await.unwrap().stored_bytes;
            added.insert((name.to_string(), format!("{chunking:?}")), after - before);
        }
    }
    for (name, file, new_pages) in &variants {
        let metadata = file.len() as u64 - column_chunk_bytes(file, None);
        let bound = new_pages + metadata;
        let get = |c: Chunking| added[&(name.to_string(), format!("{c:?}"))];
        let parquet = get(Chunking::DEFAULT_PARQUET);
        table.push_str(&format!(
            "{name} | {bound} | {parquet} | {} | {}\n",
            get(Chunking::DEFAULT_FASTCDC),
            get(Chunking::fixed(64 << 10).unwrap())
        ));
        assert!(
            parquet <= bound,
            "{name}: parquet chunking added {parquet} bytes, more than its new pages and \
             metadata ({bound})"
        );
    }
    eprintln!(
        "extra bytes stored per variant (file of {} bytes):\n{table}",
        base.len()
    );
}

/// Bytes of the column chunks of `file` in row groups `groups` (all
/// without), as its footer sizes them.
fn column_chunk_bytes(file: &[u8], groups: Option<std::ops::Range<usize>>) -> u64 {
    let md =
        ParquetMetaDataReader::decode_metadata(&file[footer_start(file) as usize..file.len() - 8])
            .unwrap();
    groups
        .unwrap_or(0..md.num_row_groups())
        .flat_map(|g| md.row_group(g).columns().to_vec())
        .map(|c| c.compressed_size() as u64)
        .sum()
}

/// The file `plan` makes from the bytes of `file` it names.
fn assembled(file: &[u8], plan: quarry_store_api::ColumnPlan) -> Vec<u8> {
    let fetched: Vec<Bytes> = plan
        .ranges()
        .iter()
        .map(|r| Bytes::copy_from_slice(&file[r.start as usize..r.end as usize]))
        .collect();
    plan.assemble(&fetched).unwrap()
}
