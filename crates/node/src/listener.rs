//! A listening socket handed over by the process that started the node.
//!
//! `quarry up` binds every node's port itself and passes each node its
//! socket, open, across exec. Choosing a free port, closing it and letting the
//! node bind it later leaves a gap in which another process (another cluster
//! starting on the same host) can take the port; the node then fails to start
//! while the other process answers at its address.

use std::net::TcpListener;
use std::os::fd::{FromRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::NodeError;

/// The environment variable that names the file descriptor of a listening
/// socket this process inherited (set by `quarry up`).
pub const LISTEN_FD_ENV: &str = "QUARRY_LISTEN_FD";

/// The environment variable that names the file descriptor of the
/// memcached face's listening socket, inherited the same way.
pub const MEMCACHED_FD_ENV: &str = "QUARRY_MEMCACHED_FD";

/// Set once each inherited socket has been taken, so that no two owners
/// ever wrap the same descriptor.
static TAKEN: AtomicBool = AtomicBool::new(false);
static MEMCACHED_TAKEN: AtomicBool = AtomicBool::new(false);

/// The listening socket named by `QUARRY_LISTEN_FD`, if the variable is set;
/// an error says what is wrong with it. `listen` is the configured address:
/// a socket on another port is refused, since peers and clients use the
/// configured one. Only the first call takes the socket; later ones get None.
pub fn inherited_listener(listen: &str) -> Result<Option<TcpListener>, NodeError> {
    inherited(LISTEN_FD_ENV, &TAKEN, listen)
}

/// The memcached face's socket named by `QUARRY_MEMCACHED_FD`, as
/// [`inherited_listener`].
pub fn inherited_memcached_listener(listen: &str) -> Result<Option<TcpListener>, NodeError> {
    inherited(MEMCACHED_FD_ENV, &MEMCACHED_TAKEN, listen)
}

fn inherited(
    variable: &str,
    taken: &AtomicBool,
    listen: &str,
) -> Result<Option<TcpListener>, NodeError> {
    let Some(text) = std::env::var_os(variable) else {
        return Ok(None);
    };
    if taken.swap(true, Ordering::AcqRel) {
        return Ok(None);
    }
    let text = text.to_string_lossy().into_owned();
    let fd = check_listening_fd(&text).map_err(|reason| NodeError::InheritedListener {
        fd: text.clone(),
        reason,
    })?;
    // SAFETY: `check_listening_fd` showed the descriptor is open and is a
    // listening TCP socket; the starting process opened it for this process
    // alone, nothing else here refers to it by number, and TAKEN makes this
    // the only place that wraps it, so the listener is its sole owner.
    let listener = unsafe { TcpListener::from_raw_fd(fd) };
    adopt(listener, listen)
        .map(Some)
        .map_err(|reason| NodeError::InheritedListener { fd: text, reason })
}

/// Checks that `text` names an open, listening, TCP socket descriptor.
fn check_listening_fd(text: &str) -> Result<RawFd, String> {
    let fd: RawFd = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a file descriptor number"))?;
    if fd <= 2 {
        return Err(format!(
            "descriptor {fd} is standard input, output or error, not a socket"
        ));
    }
    // SAFETY: fstat(2) writes only into the zeroed stat buffer it is given;
    // a closed or bad descriptor yields an error, which is checked.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut stat) } != 0 {
        return Err(format!(
            "descriptor {fd} is not open: {}",
            std::io::Error::last_os_error()
        ));
    }
    if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(format!("descriptor {fd} is not a socket"));
    }
    let option = |name: libc::c_int| -> Result<libc::c_int, String> {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt(2) writes at most `len` bytes into `value`,
        // which is a c_int of exactly that size.
        let status = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if status != 0 {
            return Err(format!(
                "descriptor {fd}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(value)
    };
    if option(libc::SO_TYPE)? != libc::SOCK_STREAM {
        return Err(format!("descriptor {fd} is not a stream socket"));
    }
    let domain = option(libc::SO_DOMAIN)?;
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(format!("descriptor {fd} is not a TCP/IP socket"));
    }
    if option(libc::SO_ACCEPTCONN)? != 1 {
        return Err(format!("descriptor {fd} is a socket that is not listening"));
    }
    Ok(fd)
}

/// Makes `listener` ready for tokio and checks it listens on the port of the
/// configured address `listen`.
fn adopt(listener: TcpListener, listen: &str) -> Result<TcpListener, String> {
    let bound = listener
        .local_addr()
        .map_err(|e| format!("its address is unknown: {e}"))?;
    let configured_port = listen
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse::<u16>().ok());
    if let Some(port) = configured_port.filter(|&port| port != 0) {
        if bound.port() != port {
            return Err(format!(
                "it listens on {bound}, but the configuration says {listen}"
            ));
        }
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot make it non-blocking: {e}"))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::{AsRawFd, IntoRawFd};

    #[test]
    fn a_listening_socket_is_adopted_and_serves() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let fd = listener.into_raw_fd();
        assert_eq!(check_listening_fd(&fd.to_string()), Ok(fd));
        // SAFETY: the descriptor came from into_raw_fd just above and has no
        // other owner.
        let adopted = adopt(unsafe { TcpListener::from_raw_fd(fd) }, &addr.to_string()).unwrap();
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client.write_all(b"hi").unwrap();
        adopted.set_nonblocking(false).unwrap();
        let (mut served, _) = adopted.accept().unwrap();
        let mut got = [0u8; 2];
        served.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
    }

    #[test]
    fn anything_but_a_listening_tcp_socket_is_refused_with_the_reason() {
        let refused = |text: &str| check_listening_fd(text).unwrap_err();
        assert!(refused("seven").contains("not a file descriptor number"));
        assert!(refused("1").contains("standard input, output or error"));
        assert!(refused("987654").contains("not open"));
        let file = tempfile::tempfile().unwrap();
        assert!(refused(&file.as_raw_fd().to_string()).contains("not a socket"));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(refused(&stream.as_raw_fd().to_string()).contains("not listening"));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(refused(&udp.as_raw_fd().to_string()).contains("not a stream socket"));
        // Nothing was taken: every descriptor is still open and usable.
        assert!(listener.local_addr().is_ok() && stream.peer_addr().is_ok());
    }

    #[test]
    fn a_socket_on_another_port_than_configured_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let other = if port == 65535 { 1 } else { port + 1 };
        let error = adopt(listener, &format!("127.0.0.1:{other}")).unwrap_err();
        assert!(error.contains("but the configuration says"), "{error}");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(adopt(listener, "127.0.0.1:0").is_ok(), "port 0 takes any");
    }
}
