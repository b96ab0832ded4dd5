//! Running a writer process to a point and killing it with SIGKILL: the
//! shared half of the crash tests, which then check what it acknowledged.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a writer may take to reach its kill point.
const WRITER_DEADLINE: Duration = Duration::from_secs(60);

/// Starts `command` (a writer that prints `READY` once it is serving, then
/// one line per operation, acknowledgements starting with `A `), waits
/// until it printed `READY` (unless `wait_ready` is false: a kill during
/// recovery) and `acks` acknowledgements, sleeps `then`, kills it with
/// SIGKILL and returns every complete line it printed. A line cut by the
/// kill has no newline and is dropped. Panics (naming `what`) if the
/// writer exits by itself or is not there within a minute.
pub fn run_then_kill(
    command: &mut Command,
    wait_ready: bool,
    acks: u64,
    then: Duration,
    what: &str,
) -> Vec<String> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: spawn the writer: {e}"));
    let Some(stdout) = child.stdout.take() else {
        panic!("{what}: the writer has no stdout pipe");
    };
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(_) if line.ends_with('\n') => {
                    if tx.send(line.trim_end().to_string()).is_err() {
                        return;
                    }
                }
                _ => return,
            }
        }
    });
    let deadline = Instant::now() + WRITER_DEADLINE;
    let mut lines = Vec::new();
    let (mut ready, mut seen) = (!wait_ready, 0);
    while (!ready || seen < acks) && Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(line) => {
                ready |= line == "READY";
                seen += u64::from(line.starts_with("A "));
                lines.push(line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("{what}: the writer exited early: {:?}", child.wait())
            }
        }
    }
    assert!(
        ready && seen >= acks,
        "{what}: the writer was too slow ({seen} of {acks} acknowledgements)"
    );
    std::thread::sleep(then);
    child
        .kill()
        .unwrap_or_else(|e| panic!("{what}: SIGKILL: {e}"));
    let _ = child.wait();
    let _ = reader.join();
    lines.extend(rx.try_iter());
    lines
}
