//! A durable tenant's records in the node's tables (docs/kv.md, "Records"):
//! an item under (tenant, key) in [`Table::KvItems`], a deduplicated value
//! under (tenant, fingerprint) in [`Table::KvValues`].

use bytes::Bytes;
use quarry_kv_api::{Expiry, ItemKind, TenantName};
use quarry_proto::{ByteReader, ByteWriter};
use quarry_store::{Batch, Table};

use crate::table::{Change, Entry, Fp, TableCopy};

const ITEM_FORMAT: u8 = 1;
/// Bytes of an item record before its value: format, flags, expiry, CAS,
/// kind, stored-at.
const ITEM_BYTES_FIXED: usize = 1 + 4 + 8 + 8 + 1 + 8;

/// The key prefix of `tenant`'s records: its name's length, then the name.
pub(crate) fn tenant_prefix(tenant: &TenantName) -> Vec<u8> {
    let name = tenant.as_str().as_bytes();
    let mut p = Vec::with_capacity(1 + name.len());
    p.push(name.len() as u8);
    p.extend_from_slice(name);
    p
}

fn record_key(prefix: &[u8], suffix: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + suffix.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(suffix);
    k
}

/// An item record: format, flags, expiry, CAS, kind, stored-at, then the
/// value inline (0, length, bytes) or its fingerprint (1, 32 bytes).
pub(crate) fn encode_item(entry: &Entry) -> Bytes {
    // One allocation: the fixed fields take 35 bytes, the inline value 5
    // more and its bytes (a fingerprint 33).
    let bytes = ITEM_BYTES_FIXED + entry.fp.map_or(5 + entry.value.len(), |_| 33);
    let mut w = ByteWriter(Vec::with_capacity(bytes));
    w.u8(ITEM_FORMAT)
        .u32(entry.flags)
        .u64(entry.expiry.to_wire())
        .u64(entry.cas)
        .u8(entry.kind as u8)
        .u64(entry.stored_at_secs);
    match &entry.fp {
        Some(fp) => {
            w.u8(1).raw(fp);
        }
        None => {
            w.u8(0).u32(entry.value.len() as u32).raw(&entry.value);
        }
    }
    debug_assert_eq!(w.0.len(), bytes, "an item record's size");
    Bytes::from(w.0)
}

/// The inverse of [`encode_item`]; an inline value is a slice of `record`.
pub(crate) fn decode_item(record: &Bytes) -> Result<Entry, String> {
    let mut r = ByteReader::new("key-value item record", record);
    let parse = |r: &mut ByteReader<'_>| -> Result<Entry, quarry_proto::CodecError> {
        let format = r.u8()?;
        if format != ITEM_FORMAT {
            return Err(r.malformed(format!("format {format}")));
        }
        let flags = r.u32()?;
        let expiry = Expiry::from_wire(r.u64()?);
        let cas = r.u64()?;
        let kind_byte = r.u8()?;
        let kind = ItemKind::from_u8(kind_byte)
            .ok_or_else(|| r.malformed(format!("item kind {kind_byte}")))?;
        let stored_at_secs = r.u64()?;
        let (value, fp) = match r.u8()? {
            0 => {
                let n = r.u32()? as usize;
                (r.slice_of(record, n)?, None)
            }
            1 => (Bytes::new(), Some(r.array::<32>()?)),
            other => return Err(r.malformed(format!("value form {other}"))),
        };
        r.end()?;
        Ok(Entry {
            flags,
            expiry,
            cas,
            kind,
            stored_at_secs,
            value,
            fp,
        })
    };
    parse(&mut r).map_err(|e| e.to_string())
}

/// Adds `changes` of the tenant with key prefix `prefix` to `batch`.
pub(crate) fn add_changes(batch: &mut Batch, prefix: &[u8], changes: Vec<Change>) {
    for c in changes {
        match c {
            Change::PutItem(key, entry) => {
                batch.put(
                    Table::KvItems,
                    record_key(prefix, &key),
                    encode_item(&entry),
                );
            }
            Change::DeleteItem(key) => batch.delete(Table::KvItems, record_key(prefix, &key)),
            Change::PutValue(fp, value) => {
                batch.put(Table::KvValues, record_key(prefix, &fp), value)
            }
            Change::DeleteValue(fp) => batch.delete(Table::KvValues, record_key(prefix, &fp)),
        }
    }
}

/// The records of a tenant's copy ([`crate::table::TenantTable::copy_records`])
/// under `prefix`, encoded one at a time as they are taken.
pub(crate) fn copied_records(
    prefix: Vec<u8>,
    TableCopy { items, values }: TableCopy,
) -> impl Iterator<Item = (Table, Vec<u8>, Bytes)> + Send {
    let p = prefix.clone();
    let items = items
        .into_iter()
        .map(move |(key, entry)| (Table::KvItems, record_key(&p, &key), encode_item(&entry)));
    let values = values
        .into_iter()
        .map(move |(fp, value)| (Table::KvValues, record_key(&prefix, &fp), value));
    items.chain(values)
}

/// The fingerprint a value record's key ends with.
pub(crate) fn value_fp(prefix: &[u8], key: &[u8]) -> Option<Fp> {
    let rest = key.strip_prefix(prefix)?;
    rest.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_round_trip_inline_and_deduplicated() {
        let inline = Entry {
            flags: 7,
            expiry: Expiry::At(1_900_000_000),
            cas: 42,
            kind: ItemKind::LargeHead,
            stored_at_secs: 1_800_000_000,
            value: Bytes::from_static(b"hello"),
            fp: None,
        };
        assert_eq!(decode_item(&encode_item(&inline)).unwrap(), inline);
        let shared = Entry {
            fp: Some([9; 32]),
            value: Bytes::new(),
            ..inline.clone()
        };
        assert_eq!(decode_item(&encode_item(&shared)).unwrap(), shared);
        let bytes = encode_item(&inline);
        for cut in 0..bytes.len() {
            assert!(decode_item(&bytes.slice(..cut)).is_err(), "cut at {cut}");
        }
    }
}
