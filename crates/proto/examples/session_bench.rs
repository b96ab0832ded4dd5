//! Loopback cost of the protocol alone (no device): QD1 Ping round trip and
//! throughput of 8 KiB page answers at several queue depths, client and server
//! in one process.
//!
//! `cargo run --release -p quarry-proto --example session_bench [requests]`

use std::time::Instant;

use bytes::Bytes;
use quarry_proto::PageAddr;
use quarry_proto::{serve_connection, GlobalPageAddr, Request, Response, Session, SessionLimits};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let requests: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let page = Bytes::from(vec![0x5A; 8192]);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let page = page.clone();
                tokio::spawn(serve_connection(
                    stream,
                    move |request| {
                        let page = page.clone();
                        async move {
                            match request {
                                Request::Ping => Response::Pong,
                                _ => Response::Page {
                                    data: page,
                                    oob: Bytes::new(),
                                    erased: false,
                                    corrected_bytes: 0,
                                },
                            }
                        }
                    },
                    SessionLimits::default(),
                ));
            }
        });
        let session = Session::connect(&addr, SessionLimits::default()).await?;
        for _ in 0..1000 {
            session.call(Request::Ping).await?;
        }
        let mut latencies_ns: Vec<u64> = Vec::with_capacity(requests);
        for _ in 0..requests {
            let started = Instant::now();
            session.call(Request::Ping).await?;
            latencies_ns.push(started.elapsed().as_nanos() as u64);
        }
        latencies_ns.sort_unstable();
        let pct =
            |p: f64| latencies_ns[((latencies_ns.len() - 1) as f64 * p) as usize] as f64 / 1000.0;
        println!(
            "QD1 Ping round trip: p50 {:.1} us, p99 {:.1} us, mean {:.1} us",
            pct(0.5),
            pct(0.99),
            latencies_ns.iter().sum::<u64>() as f64 / latencies_ns.len() as f64 / 1000.0
        );
        let read = Request::ReadPage(GlobalPageAddr {
            node: 0,
            page: PageAddr {
                bus: 0,
                chip: 0,
                block: 0,
                page: 0,
            },
        });
        for depth in [1usize, 32, 256] {
            let started = Instant::now();
            let mut window = std::collections::VecDeque::with_capacity(depth);
            for _ in 0..requests {
                if window.len() == depth {
                    if let Some(done) = window.pop_front() {
                        let _: Response = done.await?;
                    }
                }
                window.push_back(session.submit(read.clone()).await?);
            }
            for done in window {
                done.await?;
            }
            let secs = started.elapsed().as_secs_f64();
            println!(
                "QD{depth} 8 KiB page answers: {:.0} req/s, {:.0} MiB/s",
                requests as f64 / secs,
                requests as f64 * 8192.0 / secs / (1024.0 * 1024.0)
            );
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
