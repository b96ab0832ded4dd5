//! The systems `quarry bench kv` compares: memcached 1.6 (Debian's),
//! Redis with an append-only file synced every second, and Quarry's cache
//! and durable tenants on a local cluster, each a process of its own on
//! this machine.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quarry_device::{BackendKind, EccMode};
use quarry_local::{LocalCluster, LocalClusterSpec, Topology};

use super::load::{Protocol, Target};

/// A peer server process, killed when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) target: Target,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(l.local_addr()?.port())
}

fn wait_listening(addr: &str, child: &mut Child, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited with {status} before listening on {addr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("{what} did not listen on {addr} within 10 s")
}

/// memcached with as many worker threads as the machine has cores and
/// room for every item.
pub(crate) fn memcached(threads: usize, memory_mib: u64) -> Result<Server> {
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new("memcached")
        .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"])
        .args([
            "-t",
            &threads.to_string(),
            "-m",
            &memory_mib.to_string(),
            "-c",
            "4096",
        ])
        .args(["-u", "root"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start memcached (scripts/setup.sh installs it)")?;
    wait_listening(&addr, &mut child, "memcached")?;
    let pids = vec![child.id()];
    Ok(Server {
        child,
        target: Target {
            addr,
            protocol: Protocol::Memcached,
            auth: None,
            pids,
        },
    })
}

/// Redis persisting every change to an append-only file, `fsync` `everysec`
/// (its documented default for durability) or `always`, no snapshots.
pub(crate) fn redis(dir: &Path, fsync: &str) -> Result<Server> {
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let data = dir.join(format!("redis-{fsync}"));
    std::fs::create_dir_all(&data)?;
    let mut child = Command::new("redis-server")
        .args(redis_args(port, fsync))
        .arg("--dir")
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start redis-server (scripts/setup.sh installs it)")?;
    wait_listening(&addr, &mut child, "redis-server")?;
    let pids = vec![child.id()];
    Ok(Server {
        child,
        target: Target {
            addr,
            protocol: Protocol::Redis,
            auth: None,
            pids,
        },
    })
}

/// redis-server's arguments but `--dir`: an append-only file synced as
/// `fsync` says (`everysec` or `always`), no snapshots. (Until this was a
/// function of its own, `always` was dropped and both peers ran
/// `everysec`; its test keeps it.)
fn redis_args(port: u16, fsync: &str) -> Vec<String> {
    [
        "--bind",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--appendonly",
        "yes",
        "--appendfsync",
        fsync,
        "--save",
        "",
        "--protected-mode",
        "no",
        "--daemonize",
        "no",
    ]
    .map(String::from)
    .to_vec()
}

/// The tenants of the benchmark's cluster: `cache` (memcached's mode),
/// `durable` (every acknowledged set in the log on the device first),
/// `nodedup` (a cache tenant that stores every value as it comes), and
/// `noisy` / `quiet` for the isolation figure (`noisy` limited to
/// `noisy_ops_per_sec` a node).
pub(crate) fn tenants_toml(memory_bytes: u64, noisy_ops_per_sec: u64) -> String {
    let tenant = |name: &str, mode: &str, dedup: bool, ops: u64| {
        format!(
            "\n[[kv.tenants]]\nname = \"{name}\"\nsecret = \"{name}-pw\"\nmode = \"{mode}\"\n\
             max_bytes = {memory_bytes}\ndedup = {dedup}\nops_per_sec = {ops}\n"
        )
    };
    let mut t = "[kv]\n".to_string();
    t += &tenant("cache", "cache", true, 0);
    t += &tenant("durable", "durable", true, 0);
    t += &tenant("nodedup", "cache", false, 0);
    t += &tenant("noisy", "cache", true, noisy_ops_per_sec);
    t += &tenant("quiet", "cache", true, 0);
    t
}

/// How a benchmark cluster's devices make writes durable.
#[derive(Clone, Copy)]
pub(crate) enum Flush {
    /// Every acknowledged page is on the disk first (O_DIRECT and a shared
    /// `fdatasync`): the default, Redis's `appendfsync always`.
    EveryWrite,
    /// Acknowledged once in the page cache (a killed process loses
    /// nothing), `fdatasync` every second: Redis's `appendfsync everysec`.
    EverySecond,
}

/// A local Quarry cluster of `nodes` file-backed nodes for the benchmark.
pub(crate) fn quarry(
    dir: &Path,
    exe: &Path,
    nodes: u16,
    kv_toml: String,
    flush: Flush,
) -> Result<LocalCluster> {
    let (name, direct_io, device_toml) = match flush {
        Flush::EveryWrite => ("quarry-synced", true, None),
        Flush::EverySecond => (
            "quarry-everysec",
            false,
            Some("sync_writes = false\nflush_interval_ms = 1000".to_string()),
        ),
    };
    let spec = LocalClusterSpec {
        nodes,
        dir: dir.join(name),
        backend: BackendKind::File,
        preset: None,
        geometry: None,
        capacity_bytes: Some(4 << 30),
        direct_io,
        topology: Topology::default(),
        stop_with_this_process: true,
        managed: true,
        ecc: EccMode::Crc,
        kv_toml: Some(kv_toml),
        device_toml,
    };
    LocalCluster::start(&spec, exe)
}

/// The memcached face of `node` as `tenant`.
pub(crate) fn quarry_target(cluster: &LocalCluster, node: usize, tenant: &str) -> Result<Target> {
    let addr = cluster.cluster.nodes[node]
        .memcached
        .clone()
        .context("the cluster's nodes have no memcached port")?;
    Ok(Target {
        addr,
        protocol: Protocol::Memcached,
        auth: Some((tenant.to_string(), format!("{tenant}-pw"))),
        pids: cluster.cluster.nodes.iter().filter_map(|n| n.pid).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_syncs_its_append_only_file_as_asked() {
        for fsync in ["everysec", "always"] {
            let args = redis_args(6379, fsync);
            let at = args.iter().position(|a| a == "--appendfsync").unwrap();
            assert_eq!(args[at + 1], fsync);
        }
    }
}
