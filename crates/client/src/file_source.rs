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
            let mut buf = vec![0u8; FILE_READ_BYTES];
            let mut filled = 0;
            // Fill the buffer (a read may return less) or reach the end.
            let result = loop {
                match file.read(&mut buf[filled..]) {
                    Ok(0) => break Ok(()),
                    Ok(n) => {
                        filled += n;
                        if filled == buf.len() {
                            break Ok(());
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            let done = filled < buf.len();
            buf.truncate(filled);
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
