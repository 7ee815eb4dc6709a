//! Free TCP ports on the loopback interface, for servers started by tests.
//!
//! A port found by binding `127.0.0.1:0` and releasing it is the kernel's to hand out again:
//! the next `:0` bind anywhere on the machine (a server the test itself starts with
//! `--metrics-listen 127.0.0.1:0`, an outgoing connection) can take it before the test
//! binds it. CI saw exactly that: an aggregator refused to start because the controller's
//! metrics listener had been given the port chosen for it. Ports here therefore come from
//! below the kernel's ephemeral range, which `:0` binds and outgoing connections never use,
//! so only another caller of this module could take one. Each process walks its own
//! sequence from a start drawn from its process id, and every port is checked bindable.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out: above the well-known ports of services a machine may run.
const LOWEST: u32 = 10_000;

/// How many ports have been handed out (or tried) by this process.
static HANDED_OUT: AtomicU32 = AtomicU32::new(0);

/// Returns a TCP port on 127.0.0.1 that is free and outside the kernel's ephemeral range
/// (see the module doc).
pub fn free_port() -> u16 {
    free_addr().port()
}

/// Returns `127.0.0.1:<port>` for a port as [`free_port`] finds it.
pub fn free_addr() -> SocketAddr {
    let highest = ephemeral_low().saturating_sub(1);
    if highest > LOWEST {
        let span = highest - LOWEST + 1;
        let start = std::process::id().wrapping_mul(7_919) % span;
        for _ in 0..span {
            let n = HANDED_OUT.fetch_add(1, Ordering::Relaxed);
            let port = LOWEST + (start + n) % span;
            if let Ok(l) = TcpListener::bind((Ipv4Addr::LOCALHOST, port as u16)) {
                return l
                    .local_addr()
                    .expect("a bound listener has a local address");
            }
        }
    }
    // No room below the ephemeral range (an unusual kernel setting): any free port.
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .expect("binding 127.0.0.1:0 must work on any test machine")
        .local_addr()
        .expect("a bound listener has a local address")
}

/// The first port of the kernel's ephemeral range (Linux: `ip_local_port_range`; 32768, its
/// default, where that cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
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

    #[test]
    fn ports_come_from_below_the_ephemeral_range_and_do_not_repeat() {
        let ports: Vec<u32> = (0..200).map(|_| u32::from(free_port())).collect();
        for p in &ports {
            assert!((LOWEST..ephemeral_low()).contains(p), "port {p}");
        }
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
    }
}
