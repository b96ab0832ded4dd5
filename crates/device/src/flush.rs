//! Group commit of the backing file: a program is acknowledged only once
//! an `fdatasync` that started after its write completed has returned, and
//! one `fdatasync` serves every program that completed before it started.
//!
//! Why: a write the kernel (or the disk's cache) has accepted is lost at a
//! power loss until it is flushed, O_DIRECT or not. One flush per program
//! would cost a disk cache flush for each; sharing them, the programs that
//! complete while one flush runs all ride on the next, so under load there
//! are at most two flushes in the air per batch of programs.

use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

#[derive(Default)]
struct State {
    /// Flushes started so far; the one running (if any) is number `started`.
    started: u64,
    /// Number of the last flush that returned.
    finished: u64,
    running: bool,
    /// The first flush that failed: after a failed `fdatasync` the kernel
    /// may have dropped the dirty pages, so a later success would not mean
    /// they are on the disk (the "fsyncgate" lesson). The device stays
    /// failed until it is reopened.
    failed: Option<(u64, io::ErrorKind, String)>,
    flushes: u64,
}

/// The flusher of one backing file.
pub(crate) struct Flusher {
    file: Arc<File>,
    state: Mutex<State>,
    done: Notify,
}

impl Flusher {
    pub(crate) fn new(file: Arc<File>) -> Flusher {
        Flusher {
            file,
            state: Mutex::new(State::default()),
            done: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `fdatasync` calls made so far.
    pub(crate) fn flushes(&self) -> u64 {
        self.lock().flushes
    }

    /// Returns once every write that completed before this call is on the
    /// medium, or the error of the flush that should have put it there.
    pub(crate) async fn flush(&self) -> io::Result<()> {
        // The first flush to start from now on covers our writes.
        let needed = self.lock().started + 1;
        loop {
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let run = {
                let mut s = self.lock();
                if let Some((n, kind, msg)) = &s.failed {
                    return Err(io::Error::new(
                        *kind,
                        format!("flush {n} of the backing file failed: {msg}"),
                    ));
                }
                if s.finished >= needed {
                    return Ok(());
                }
                if s.running {
                    None
                } else {
                    s.running = true;
                    s.started += 1;
                    Some(s.started)
                }
            };
            let Some(number) = run else {
                notified.await;
                continue;
            };
            let file = Arc::clone(&self.file);
            let result = tokio::task::spawn_blocking(move || file.sync_data())
                .await
                .unwrap_or_else(|e| Err(io::Error::other(e.to_string())));
            let mut s = self.lock();
            debug_assert!(s.running && s.started == number);
            s.running = false;
            s.finished = number;
            s.flushes += 1;
            if let Err(e) = result {
                s.failed = Some((number, e.kind(), e.to_string()));
            }
            drop(s);
            self.done.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_flushes_share_fdatasyncs() {
        let f = tempfile::tempfile().unwrap();
        let flusher = Arc::new(Flusher::new(Arc::new(f)));
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let fl = Arc::clone(&flusher);
            tasks.push(tokio::spawn(async move { fl.flush().await }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let n = flusher.flushes();
        assert!((1..=64).contains(&n), "{n} flushes");
        // A flush asked after all those returned needs one of its own.
        flusher.flush().await.unwrap();
        assert_eq!(flusher.flushes(), n + 1);
    }

    #[tokio::test]
    async fn a_failed_flush_fails_every_later_one() {
        // A read-only descriptor of a pipe: fdatasync fails with EINVAL.
        let (r, _w) = std::io::pipe().unwrap();
        let file = File::from(std::os::fd::OwnedFd::from(r));
        let flusher = Flusher::new(Arc::new(file));
        let first = flusher.flush().await.unwrap_err();
        assert!(first.to_string().contains("flush 1"), "{first}");
        let second = flusher.flush().await.unwrap_err();
        assert!(second.to_string().contains("flush 1"), "{second}");
        assert_eq!(flusher.flushes(), 1);
    }
}
