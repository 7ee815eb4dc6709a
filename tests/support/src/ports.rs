//! Free TCP ports on the loopback interface, for servers started by tests.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};

/// Returns a TCP port on 127.0.0.1 that was free a moment ago.
///
/// The port is found by binding `127.0.0.1:0` and releasing it again, so another process
/// could in principle take it before the caller binds it; in practice the kernel hands out
/// ports round-robin and this is reliable enough for tests.
pub fn free_port() -> u16 {
    free_addr().port()
}

/// Returns `127.0.0.1:<port>` for a port that was free a moment ago (see [`free_port`]).
pub fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .expect("binding 127.0.0.1:0 must work on any test machine");
    listener
        .local_addr()
        .expect("a bound listener has a local address")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_addr_is_loopback_and_bindable() {
        let addr = free_addr();
        assert!(addr.ip().is_loopback());
        assert_ne!(addr.port(), 0);
        TcpListener::bind(addr).expect("the port handed out is free");
    }
}
