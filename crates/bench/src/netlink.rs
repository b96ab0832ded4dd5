//! A client on a limited link, for the near-data benchmarks: a network
//! namespace joined to this one by a veth pair, `tc` rate limits on both
//! ends, TCP relays from the veth to the nodes' loopback addresses, and a
//! thread that runs client code inside the namespace.
//!
//! The nodes stay on loopback; only what crosses to the client pays the
//! limit, as with a client machine on a 1 or 10 Gb/s link to the cluster.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// A namespace for the client and its link.
pub(crate) struct ClientNet {
    ns: String,
    root_if: String,
    ns_if: String,
    root_ip: Ipv4Addr,
    relays: Vec<tokio::runtime::Runtime>,
}

fn ip(args: &[&str]) -> Result<()> {
    run("ip", args)
}

fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {program} (install iproute2; needs root)"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl ClientNet {
    /// Creates the namespace and its veth pair (10.213.N.1 here, .2 there).
    pub(crate) fn create() -> Result<ClientNet> {
        let id = std::process::id() % 200 + 20;
        let ns = format!("quarry-client-{id}");
        let root_if = format!("qc{id}a");
        let ns_if = format!("qc{id}b");
        let root_ip = Ipv4Addr::new(10, 213, id as u8, 1);
        let ns_ip = Ipv4Addr::new(10, 213, id as u8, 2);
        // Left over from a run that was killed.
        let _ = ip(&["netns", "del", &ns]);
        let _ = ip(&["link", "del", &root_if]);
        ip(&["netns", "add", &ns])?;
        let net = ClientNet {
            ns: ns.clone(),
            root_if: root_if.clone(),
            ns_if: ns_if.clone(),
            root_ip,
            relays: Vec::new(),
        };
        ip(&[
            "link", "add", &root_if, "type", "veth", "peer", "name", &ns_if,
        ])?;
        ip(&["link", "set", &ns_if, "netns", &ns])?;
        ip(&["addr", "add", &format!("{root_ip}/30"), "dev", &root_if])?;
        ip(&["link", "set", &root_if, "up"])?;
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{ns_ip}/30"),
            "dev",
            &ns_if,
        ])?;
        ip(&["-n", &ns, "link", "set", &ns_if, "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        Ok(net)
    }

    /// The address of this side of the link (where relays listen).
    pub(crate) fn root_ip(&self) -> Ipv4Addr {
        self.root_ip
    }

    /// Limits both directions of the link to `rate` (tc's syntax, e.g.
    /// `1gbit`), or lifts the limit.
    pub(crate) fn limit(&self, rate: Option<&str>) -> Result<()> {
        for (ns, dev) in [(None, &self.root_if), (Some(&self.ns), &self.ns_if)] {
            let mut args: Vec<&str> = Vec::new();
            if let Some(ns) = ns {
                args.extend(["-n", ns]);
            }
            args.extend(["qdisc", "del", "dev", dev, "root"]);
            let _ = run("tc", &args);
            if let Some(rate) = rate {
                let mut args: Vec<&str> = Vec::new();
                if let Some(ns) = ns {
                    args.extend(["-n", ns]);
                }
                // A token bucket: the burst must hold a few milliseconds at
                // the rate or the kernel's timer granularity caps the rate.
                let burst = if rate.starts_with("10g") {
                    "8mb"
                } else {
                    "1mb"
                };
                args.extend([
                    "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", burst,
                    "latency", "50ms",
                ]);
                run("tc", &args)?;
            }
        }
        Ok(())
    }

    /// A relay from this side of the link to `target` (a node on
    /// loopback); returns where the client connects.
    pub(crate) fn relay(&mut self, target: SocketAddr) -> Result<SocketAddr> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind((self.root_ip, 0)))?;
        let addr = listener.local_addr()?;
        rt.spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let _ = inbound.set_nodelay(true);
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = outbound.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        self.relays.push(rt);
        Ok(addr)
    }

    /// Runs `f` on a thread inside the namespace: every socket it (and any
    /// thread it starts) opens is on the client's side of the link.
    pub(crate) fn run_in<T: Send>(&self, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        let path = format!("/var/run/netns/{}", self.ns);
        std::thread::scope(|s| {
            s.spawn(|| {
                let file =
                    std::fs::File::open(&path).with_context(|| format!("cannot open {path}"))?;
                // SAFETY: setns is given an open descriptor of a network
                // namespace and CLONE_NEWNET, so it changes only this
                // thread's network namespace; `file` outlives the call.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                if rc != 0 {
                    bail!("setns({path}): {}", std::io::Error::last_os_error());
                }
                f()
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the client thread panicked"))?
        })
    }
}

impl Drop for ClientNet {
    fn drop(&mut self) {
        for rt in self.relays.drain(..) {
            rt.shutdown_background();
        }
        let _ = ip(&["netns", "del", &self.ns]);
        let _ = ip(&["link", "del", &self.root_if]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The namespace, the relay and `run_in` work together: a thread in the
    /// namespace reaches a loopback server here only through the relay.
    /// Without root or iproute2 it fails, saying which is missing.
    #[test]
    fn a_thread_in_the_namespace_reaches_loopback_through_the_relay() {
        let Some(mut net) = quarry_testkit::need(
            "a network namespace with a veth pair and tc (root and iproute2)",
            "scripts/setup.sh installs iproute2; the test command runs as root, as CI does",
            ClientNet::create().map_err(|e| format!("{e:#}")),
        ) else {
            return;
        };
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let target = server.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = server.accept() {
                use std::io::Write;
                let _ = s.write_all(b"hello from loopback");
            }
        });
        let relay = net.relay(target).unwrap();
        net.limit(Some("100mbit")).unwrap();
        let got = net
            .run_in(|| {
                use std::io::Read;
                // Loopback inside the namespace is another loopback.
                assert!(std::net::TcpStream::connect(target).is_err());
                let mut s = std::net::TcpStream::connect(relay)?;
                let mut buf = String::new();
                s.read_to_string(&mut buf)?;
                Ok(buf)
            })
            .unwrap();
        assert_eq!(got, "hello from loopback");
    }
}
