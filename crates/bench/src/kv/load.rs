//! The load generator `quarry bench kv` drives every system with: closed
//! loops over N connections, each sending one request and waiting for its
//! answer (YCSB's client model), memcached's text protocol or Redis's
//! RESP, keys of 20 bytes drawn uniformly or from YCSB's scrambled
//! zipfian, gets and sets in a given mix.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::{BufMut, Bytes, BytesMut};
use quarry_memcache::{parse_reply_bytes, Limits, ParsedReply, Reply};
use rand::rngs::StdRng as SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{process_ticks, ticks_per_sec};
use crate::stats::LatencyStats;

/// How a system is spoken to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Memcached,
    Redis,
}

/// Where a system listens and how to reach it.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) addr: String,
    pub(crate) protocol: Protocol,
    /// memcached ASCII authentication (`user`, `secret`).
    pub(crate) auth: Option<(String, String)>,
    /// The server's processes, whose CPU time a cell reports per op.
    pub(crate) pids: Vec<u32>,
}

/// What the connections ask for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mix {
    /// Fraction of gets; the rest are sets.
    pub(crate) get_fraction: f64,
    /// YCSB's scrambled zipfian (theta 0.99) over the keys, else uniform.
    pub(crate) zipfian: bool,
    pub(crate) value_bytes: usize,
    pub(crate) keys: u64,
}

/// What a run measured.
pub(crate) struct Outcome {
    pub(crate) ops: u64,
    pub(crate) secs: f64,
    pub(crate) latency: LatencyStats,
    pub(crate) misses: u64,
    pub(crate) server_errors: u64,
    /// CPU time the server's processes took during the cell (user and
    /// system, every thread).
    pub(crate) server_cpu_secs: f64,
}

impl Outcome {
    pub(crate) fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9)
    }

    /// The server's CPU time per op: what the system itself costs, apart
    /// from the load generator and the peer it shares the cores with.
    pub(crate) fn server_cpu_us_per_op(&self) -> f64 {
        self.server_cpu_secs * 1e6 / self.ops.max(1) as f64
    }
}

/// A value of `len` bytes unlike any other of the run: `stamp` in its
/// first bytes, so deduplication finds nothing to share (YCSB's values are
/// random) and every set pays for a new value.
pub(crate) fn value_of(len: usize, stamp: u64) -> Bytes {
    let mut v = BytesMut::with_capacity(len);
    v.put_slice(&stamp.to_le_bytes()[..len.min(8)]);
    v.resize(len, b'v');
    v.freeze()
}

/// The 20-byte key of item `i` (YCSB's `user` and digits).
pub(crate) fn key_of(i: u64) -> String {
    format!("user{i:016}")
}

/// YCSB's zipfian generator (Gray et al.), theta 0.99, over `0..n`,
/// scrambled by a hash so the popular items are not the first ones.
pub(crate) struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    pub(crate) fn new(n: u64) -> Self {
        let theta = 0.99;
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Self {
            n,
            theta,
            alpha,
            zetan,
            eta,
        }
    }

    pub(crate) fn sample(&self, rng: &mut SmallRng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        // FNV-1a of the rank, as YCSB's ScrambledZipfianGenerator.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in rank.min(self.n - 1).to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h % self.n
    }
}

/// One connection speaking a protocol, with its read buffer.
pub(crate) struct Conn {
    stream: TcpStream,
    protocol: Protocol,
    input: BytesMut,
    out: BytesMut,
    limits: Limits,
    /// `SERVER_ERROR` answers (a tenant over its rate limit), counted and
    /// not fatal.
    pub(crate) server_errors: u64,
}

fn resp_bulk(out: &mut BytesMut, bytes: &[u8]) {
    out.put_slice(format!("${}\r\n", bytes.len()).as_bytes());
    out.put_slice(bytes);
    out.put_slice(b"\r\n");
}

impl Conn {
    pub(crate) async fn open(target: &Target) -> Result<Conn> {
        let stream = TcpStream::connect(&target.addr)
            .await
            .with_context(|| format!("cannot connect to {}", target.addr))?;
        stream.set_nodelay(true)?;
        let mut conn = Conn {
            stream,
            protocol: target.protocol,
            input: BytesMut::with_capacity(1 << 16),
            out: BytesMut::with_capacity(1 << 16),
            limits: Limits {
                max_value_bytes: 2 << 20,
                ..Limits::default()
            },
            server_errors: 0,
        };
        if let Some((user, secret)) = &target.auth {
            let token = format!("{user} {secret}");
            conn.out
                .put_slice(format!("set auth 0 0 {}\r\n{token}\r\n", token.len()).as_bytes());
            conn.flush().await?;
            match conn.memcached_reply().await? {
                Reply::Stored => {}
                other => bail!("authentication as {user} answered {other:?}"),
            }
        }
        Ok(conn)
    }

    async fn flush(&mut self) -> Result<()> {
        self.stream.write_all(&self.out).await?;
        self.out.clear();
        Ok(())
    }

    async fn fill(&mut self) -> Result<()> {
        self.input.reserve(1 << 16);
        if self.stream.read_buf(&mut self.input).await? == 0 {
            bail!("the server closed the connection");
        }
        Ok(())
    }

    async fn memcached_reply(&mut self) -> Result<Reply> {
        loop {
            match parse_reply_bytes(&mut self.input, &self.limits) {
                ParsedReply::Complete { reply, .. } => return Ok(reply),
                ParsedReply::Incomplete => self.fill().await?,
                ParsedReply::Invalid(e) => bail!("bad answer: {e}"),
            }
        }
    }

    /// A RESP line's end, reading as needed.
    async fn resp_line(&mut self) -> Result<usize> {
        loop {
            if let Some(i) = memchr::memmem::find(&self.input, b"\r\n") {
                return Ok(i);
            }
            self.fill().await?;
        }
    }

    /// Queues a set of `key` to `value` (not sent until [`Self::send`]).
    pub(crate) fn queue_set(&mut self, key: &[u8], value: &[u8]) {
        match self.protocol {
            Protocol::Memcached => {
                self.out.put_slice(b"set ");
                self.out.put_slice(key);
                self.out
                    .put_slice(format!(" 0 0 {}\r\n", value.len()).as_bytes());
                self.out.put_slice(value);
                self.out.put_slice(b"\r\n");
            }
            Protocol::Redis => {
                self.out.put_slice(b"*3\r\n$3\r\nSET\r\n");
                resp_bulk(&mut self.out, key);
                resp_bulk(&mut self.out, value);
            }
        }
    }

    /// Queues bytes as they are (a multi-key get line).
    pub(crate) fn queue_raw(&mut self, bytes: &[u8]) {
        self.out.put_slice(bytes);
    }

    /// Reads one memcached retrieval's answer (any number of values, then
    /// `END`); how many values came.
    pub(crate) async fn values_until_end(&mut self) -> Result<usize> {
        let mut n = 0;
        loop {
            match self.memcached_reply().await? {
                Reply::Value { .. } => n += 1,
                Reply::End => return Ok(n),
                other => bail!("a get answered {other:?}"),
            }
        }
    }

    /// Queues a get of `key`.
    pub(crate) fn queue_get(&mut self, key: &[u8]) {
        match self.protocol {
            Protocol::Memcached => {
                self.out.put_slice(b"get ");
                self.out.put_slice(key);
                self.out.put_slice(b"\r\n");
            }
            Protocol::Redis => {
                self.out.put_slice(b"*2\r\n$3\r\nGET\r\n");
                resp_bulk(&mut self.out, key);
            }
        }
    }

    pub(crate) async fn send(&mut self) -> Result<()> {
        self.flush().await
    }

    /// Reads a set's answer.
    pub(crate) async fn set_answer(&mut self) -> Result<()> {
        match self.protocol {
            Protocol::Memcached => match self.memcached_reply().await? {
                Reply::Stored => Ok(()),
                Reply::ServerError(_) => {
                    self.server_errors += 1;
                    Ok(())
                }
                other => bail!("a set answered {other:?}"),
            },
            Protocol::Redis => {
                let end = self.resp_line().await?;
                let line = self.input.split_to(end + 2);
                if &line[..] != b"+OK\r\n" {
                    bail!("a SET answered {:?}", String::from_utf8_lossy(&line));
                }
                Ok(())
            }
        }
    }

    /// Reads a get's answer: the value, if any.
    pub(crate) async fn get_answer(&mut self) -> Result<Option<Bytes>> {
        match self.protocol {
            Protocol::Memcached => {
                let mut value = None;
                loop {
                    match self.memcached_reply().await? {
                        Reply::Value { data, .. } => value = Some(data),
                        Reply::End => return Ok(value),
                        Reply::ServerError(_) => {
                            self.server_errors += 1;
                            return Ok(None);
                        }
                        other => bail!("a get answered {other:?}"),
                    }
                }
            }
            Protocol::Redis => {
                let end = self.resp_line().await?;
                let line = self.input.split_to(end + 2);
                let n: i64 = std::str::from_utf8(line.get(1..end).unwrap_or_default())
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .with_context(|| {
                        format!("a GET answered {:?}", String::from_utf8_lossy(&line))
                    })?;
                if n < 0 {
                    return Ok(None);
                }
                let n = n as usize;
                while self.input.len() < n + 2 {
                    self.fill().await?;
                }
                let data = self.input.split_to(n).freeze();
                let _ = self.input.split_to(2);
                Ok(Some(data))
            }
        }
    }
}

/// Stores every key once, `depth` sets in flight per connection.
pub(crate) async fn preload(target: &Target, mix: Mix, conns: usize, depth: usize) -> Result<()> {
    let mut tasks = Vec::new();
    for c in 0..conns as u64 {
        let target = target.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(&target).await?;
            let mine: Vec<u64> = (c..mix.keys).step_by(conns).collect();
            for chunk in mine.chunks(depth.max(1)) {
                for &i in chunk {
                    conn.queue_set(key_of(i).as_bytes(), &value_of(mix.value_bytes, i));
                }
                conn.send().await?;
                for _ in chunk {
                    conn.set_answer().await?;
                }
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Runs `mix` over `conns` connections for `duration`.
pub(crate) async fn drive(
    target: &Target,
    mix: Mix,
    conns: usize,
    duration: Duration,
) -> Result<Outcome> {
    let zipf = std::sync::Arc::new(mix.zipfian.then(|| Zipfian::new(mix.keys)));
    let mut opened = Vec::new();
    for _ in 0..conns {
        opened.push(Conn::open(target).await?);
    }
    let server_ticks = || target.pids.iter().map(|&p| process_ticks(p)).sum::<u64>();
    let ticks_before = server_ticks();
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for (c, mut conn) in opened.into_iter().enumerate() {
        let zipf = std::sync::Arc::clone(&zipf);
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(c as u64 * 7919 + 1);
            let mut latency = LatencyStats::new();
            let (mut ops, mut misses) = (0u64, 0u64);
            while Instant::now() < deadline {
                let i = match zipf.as_ref() {
                    Some(z) => z.sample(&mut rng),
                    None => rng.gen_range(0..mix.keys),
                };
                let key = key_of(i);
                let get = rng.gen::<f64>() < mix.get_fraction;
                let value =
                    (!get).then(|| value_of(mix.value_bytes, (c as u64) << 40 | ops | 1 << 63));
                let t = Instant::now();
                match value {
                    None => {
                        conn.queue_get(key.as_bytes());
                        conn.send().await?;
                        misses += u64::from(conn.get_answer().await?.is_none());
                    }
                    Some(value) => {
                        conn.queue_set(key.as_bytes(), &value);
                        conn.send().await?;
                        conn.set_answer().await?;
                    }
                }
                latency.record(t.elapsed());
                ops += 1;
            }
            anyhow::Ok((ops, misses, latency, conn.server_errors))
        }));
    }
    let mut outcome = Outcome {
        ops: 0,
        secs: 0.0,
        latency: LatencyStats::new(),
        misses: 0,
        server_errors: 0,
        server_cpu_secs: 0.0,
    };
    for t in tasks {
        let (ops, misses, latency, errors) = t.await??;
        outcome.ops += ops;
        outcome.misses += misses;
        outcome.server_errors += errors;
        outcome.latency.merge(&latency);
    }
    outcome.secs = started.elapsed().as_secs_f64();
    outcome.server_cpu_secs = server_ticks().saturating_sub(ticks_before) as f64 / ticks_per_sec();
    Ok(outcome)
}
