//! How long every stream between the layers (client → aggregator, aggregator → controller,
//! region → global) waits before it calls its peer dead: the HTTP/2 keepalive and the
//! connect timeout, derived from the reporting interval.
//!
//! The two bounds they must meet: a peer that died (or a link that was cut) is found within
//! two intervals of the last frame heard from it; and a live link with a 600 ms round trip
//! and 5 % loss each way is not called dead, so that it does not flap.

use std::time::Duration;

/// Below this a loaded host's scheduling stalls (hundreds of milliseconds measured on a
/// shared 2-core machine) would pass for a dead peer: the keepalive timeout never goes
/// under it, whatever the interval.
const MIN_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(1);

/// TCP sends its first SYN again after a fixed 1 s (RFC 6298's initial RTO): a connect
/// timeout under two of these gives up on a handshake whose first SYN or SYN-ACK was lost,
/// whatever the interval.
const MIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The keepalive and connect timeouts of one stream, see [`LinkTimeouts::for_interval`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkTimeouts {
    /// Send an HTTP/2 PING after this long without a frame from the peer.
    pub keepalive_interval: Duration,
    /// Call the peer dead when its PONG is this late.
    pub keepalive_timeout: Duration,
    /// Give up on a TCP (and TLS) handshake after this long.
    pub connect_timeout: Duration,
}

impl LinkTimeouts {
    /// The timeouts of a stream whose tiers report every `interval`.
    ///
    /// - A PING after half an interval of silence: a parent instructs every child at
    ///   least every 0.7 interval, so a quiet but live stream is pinged in its gaps only.
    /// - Its PONG may take an interval and a half (at least 1 s): at a 1 s interval that is
    ///   a 600 ms round trip plus one TCP retransmission of a lost PING or PONG (Linux
    ///   resends after about `srtt + 4·rttvar`, 0.7-0.9 s at that round trip); together
    ///   with the half interval before the PING, a dead peer is found two intervals after
    ///   its last frame.
    /// - A handshake may take two intervals (at least 2 s): one lost SYN or SYN-ACK is
    ///   resent after TCP's 1 s, and the round trip comes on top.
    pub fn for_interval(interval: Duration) -> Self {
        let keepalive_interval = interval / 2;
        Self {
            keepalive_interval,
            keepalive_timeout: (interval * 2 - keepalive_interval).max(MIN_KEEPALIVE_TIMEOUT),
            connect_timeout: (interval * 2).max(MIN_CONNECT_TIMEOUT),
        }
    }

    /// How long after the peer's last frame it is found dead (the PING's wait and its
    /// timeout).
    pub fn dead_after(&self) -> Duration {
        self.keepalive_interval + self.keepalive_timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_peer_is_found_within_two_intervals_and_a_slow_link_is_tolerated() {
        let t = LinkTimeouts::for_interval(Duration::from_secs(1));
        assert_eq!(t.dead_after(), Duration::from_secs(2));
        // A 600 ms round trip plus one retransmission after ~0.9 s.
        assert!(t.keepalive_timeout >= Duration::from_millis(1500));
        assert!(t.connect_timeout >= Duration::from_millis(1000 + 600));
        for ms in [1000, 2000, 5000] {
            let i = Duration::from_millis(ms);
            assert!(LinkTimeouts::for_interval(i).dead_after() <= i * 2, "{ms} ms");
        }
    }

    #[test]
    fn short_intervals_keep_the_floors() {
        let t = LinkTimeouts::for_interval(Duration::from_millis(200));
        assert_eq!(t.keepalive_interval, Duration::from_millis(100));
        assert_eq!(t.keepalive_timeout, MIN_KEEPALIVE_TIMEOUT);
        assert_eq!(t.connect_timeout, MIN_CONNECT_TIMEOUT);
    }
}
