//! Telling the service manager how the start is going (systemd's `sd_notify` protocol): one
//! datagram to the socket named in `$NOTIFY_SOCKET`. Without that variable (the emulated home, a
//! shell) there is nobody to tell and nothing is sent.
//!
//! The router's unit is `Type=notify`, so systemd counts hwdb as started when it says `READY=1`:
//! once every listening socket is bound, the moment a query first gets an answer.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Send `state` (e.g. "READY=1") to the service manager, if there is one.
pub fn notify(state: &str) -> std::io::Result<()> {
    match std::env::var_os("NOTIFY_SOCKET") {
        Some(socket) => send(&socket.to_string_lossy(), state),
        None => Ok(()),
    }
}

/// Send `state` to the manager's socket `socket` (a path, or '@' and an abstract name: systemd's is).
fn send(socket: &str, state: &str) -> std::io::Result<()> {
    let addr = match socket.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(socket)?,
    };
    UnixDatagram::unbound()?.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_reaches_the_socket_the_manager_named() {
        let dir = std::env::temp_dir().join(format!("hwdb-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let manager = UnixDatagram::bind(&path).unwrap();
        send(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_abstract_name_is_reached_too() {
        let name = format!("hwdb-notify-test-{}", std::process::id());
        let manager = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        send(&format!("@{name}"), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
