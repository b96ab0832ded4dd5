//! Puts from a Python binary file-like object, streamed in bounded pieces:
//! the put runs on the runtime and reads from a channel that this thread
//! fills, one `read(PIECE_BYTES)` at a time with the GIL held, waiting for
//! room in the channel with it released. At most [`PIECES_AHEAD`] pieces
//! are ever buffered, whatever the object's size.

use std::sync::Arc;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};
use quarry_client::{BucketName, Condition, Manifest, ObjectKey, Objects};
use tokio::sync::mpsc;

use crate::errors::{Failure, Kind};
use crate::runtime;

/// Bytes asked of one `read()` of the Python object.
pub const PIECE_BYTES: usize = 1 << 20;
/// Pieces read but not yet taken by the put.
pub const PIECES_AHEAD: usize = 4;

type Piece = std::io::Result<Bytes>;

/// One piece of the file-like object: `Some(bytes)`, or `None` at its end.
fn read_piece(source: &Bound<'_, PyAny>) -> PyResult<Option<Bytes>> {
    let got = source.call_method1("read", (PIECE_BYTES,))?;
    let bytes = if let Ok(b) = got.cast::<PyBytes>() {
        Bytes::copy_from_slice(b.as_bytes())
    } else if let Ok(b) = got.cast::<PyByteArray>() {
        Bytes::from(b.to_vec())
    } else if got.is_none() {
        // A non-blocking stream with nothing yet; a put cannot wait for it.
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "read() returned None: put needs a blocking binary stream",
        ));
    } else {
        let type_name = got.get_type().name()?;
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "read() returned {type_name}, not bytes: open the file in binary mode ('rb')"
        )));
    };
    Ok((!bytes.is_empty()).then_some(bytes))
}

/// Stores everything `source.read()` yields as `bucket/key`.
pub fn put_file_like(
    py: Python<'_>,
    store: &Arc<Objects>,
    bucket: BucketName,
    key: ObjectKey,
    source: &Bound<'_, PyAny>,
    condition: Condition,
) -> PyResult<Manifest> {
    let rt = runtime::get()?;
    let (tx, rx) = mpsc::channel::<Piece>(PIECES_AHEAD);
    let chunks =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|p| (p, rx)) });
    let reader = tokio_util::io::StreamReader::new(Box::pin(chunks));
    let put_store = Arc::clone(store);
    let put = rt.spawn(async move { put_store.put(&bucket, &key, reader, condition).await });
    // Whatever the Python side raised, kept to raise once the put is over.
    let mut raised: Option<PyErr> = None;
    loop {
        let piece = match read_piece(source) {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => break,
            Err(e) => {
                raised = Some(e);
                Err(std::io::Error::other("the Python stream's read() raised"))
            }
        };
        let failed = piece.is_err();
        // A closed channel: the put ended early (it failed); its error
        // comes from the task below.
        if py.detach(|| tx.blocking_send(piece)).is_err() || failed {
            break;
        }
    }
    drop(tx);
    let finished = py.detach(|| rt.block_on(put));
    if let Some(e) = raised {
        return Err(e);
    }
    match finished {
        Ok(result) => Ok(result.map_err(Failure::from)?),
        Err(join) => Err(Failure::new(Kind::Other, format!("the put task failed: {join}")).into()),
    }
}
