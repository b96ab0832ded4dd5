//! A file as an async source of bytes, for puts (`quarry put`, and the
//! benchmarks that measure the same path).

use tokio::io::AsyncRead;

/// Bytes of one read of [`file_source`], and reads it keeps ahead.
const FILE_READ_BYTES: usize = 1 << 20;
const FILE_READS_AHEAD: usize = 4;

/// A file as an `AsyncRead`, read on a blocking thread in 1 MiB reads kept
/// up to four ahead. (`tokio::fs` sends every read to the blocking pool and
/// back, which costs a put a quarter of its throughput.)
pub fn file_source(file: std::fs::File) -> impl AsyncRead + Unpin {
    use std::io::Read;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(FILE_READS_AHEAD);
    tokio::task::spawn_blocking(move || {
        let mut file = file;
        loop {
            // Read into fresh capacity: `read_to_end` fills it without
            // zeroing it first (a zeroed 1 MiB buffer cost a put 4% of its
            // CPU), and stops at the limit without growing the buffer.
            let mut buf = Vec::with_capacity(FILE_READ_BYTES);
            let result = loop {
                match (&mut file)
                    .take((FILE_READ_BYTES - buf.len()) as u64)
                    .read_to_end(&mut buf)
                {
                    Ok(_) => break Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            let filled = buf.len();
            let done = filled < FILE_READ_BYTES;
            let item = match result {
                Ok(()) => Ok(bytes::Bytes::from(buf)),
                Err(e) => Err(e),
            };
            let failed = item.is_err();
            if (filled > 0 || failed) && tx.blocking_send(item).is_err() {
                return; // the reader is gone
            }
            if done || failed {
                return;
            }
        }
    });
    let chunks = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    tokio_util::io::StreamReader::new(Box::pin(chunks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_source_yields_the_file_whole() {
        use tokio::io::AsyncReadExt;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        for len in [0, 5, FILE_READ_BYTES, 3 * FILE_READ_BYTES + 5] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let path = dir.path().join(format!("f{len}"));
            std::fs::write(&path, &data).unwrap();
            let mut got = Vec::new();
            rt.block_on(async {
                file_source(std::fs::File::open(&path).unwrap())
                    .read_to_end(&mut got)
                    .await
            })
            .unwrap();
            assert_eq!(got, data, "file of {len} bytes");
        }
    }
}
