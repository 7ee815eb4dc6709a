//! How long every stream between the layers (client → aggregator, aggregator → controller,
//! region → global) waits before it calls its peer dead: the HTTP/2 keepalive and the
//! connect timeout, derived from the reporting interval.
//!
//! What they must meet: a live link with a 600 ms round trip and 5 % loss each way (a
//! cross-region link on a bad day) is not called dead, so that it does not flap; and a
//! peer that died, froze or was cut off is found soon after its last frame: 4.5 s at a
//! 1 s interval, two intervals from a 3.5 s interval on (the repair of a lost segment whose
//! first resend is lost too, below, does not fit in two 1 s intervals).

use std::time::Duration;

/// How late a PONG may be on the worst link the tiers must ride out (600 ms round trip, 5 %
/// loss each way). A frame stuck behind a lost segment waits for its repair: TCP hears of
/// the hole from the SACK of the next segment (the parent's next instruction, up to 0.875
/// interval later) or its tail-loss probe two round trips on, and resends a round trip
/// away: about 2.2 s late. Losses on that link come about five times a minute, and one in
/// twenty of their resends is lost too; that resend waits a retransmission timeout (at
/// least 1 s with its backoff at that round trip's variance), about 3.2 s late in all. A
/// timeout of 2.5 s covered one loss and not a lost resend: 0 to 3 false "dead peer"s a
/// minute on one link (the bound is 2; 1.5 s: 1 to 4; 2 s: 0 to 2). Covering a lost
/// resend leaves three losses in a row, about one in 8,000.
const MIN_KEEPALIVE_TIMEOUT: Duration = Duration::from_millis(3500);

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
    /// - A PING only after a whole interval without a frame: a parent instructs every
    ///   child at least every 0.7-0.875 interval, so a live link is pinged only when a
    ///   frame is late (a loss being repaired, or a dead peer). A PING after half an
    ///   interval went out after nearly every instruction, each one a fresh chance of a
    ///   lost PING or PONG: 4 to 8 false "dead peer"s a minute on the lossy link.
    /// - Its PONG may take an interval, and at least [`MIN_KEEPALIVE_TIMEOUT`] (the
    ///   repair of a lost segment and of its lost resend on the worst link).
    /// - A handshake may take two intervals (at least 2 s): one lost SYN or SYN-ACK is
    ///   resent after TCP's 1 s, and the round trip comes on top.
    pub fn for_interval(interval: Duration) -> Self {
        Self {
            keepalive_interval: interval,
            keepalive_timeout: interval.max(MIN_KEEPALIVE_TIMEOUT),
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
    fn a_dead_peer_is_found_soon_and_a_slow_lossy_link_is_tolerated() {
        let t = LinkTimeouts::for_interval(Duration::from_secs(1));
        assert_eq!(t.dead_after(), Duration::from_millis(4500));
        // Pinged only when a frame is late: the parent instructs every 0.875 interval at most.
        assert!(t.keepalive_interval > Duration::from_millis(875));
        // A PONG lost at a 600 ms round trip, noticed after the next instruction (~2.2 s),
        // and its resend lost too (a retransmission timeout more).
        assert!(t.keepalive_timeout >= Duration::from_millis(2200 + 1000));
        // A lost SYN is sent again after 1 s, answered a 600 ms round trip later.
        assert!(t.connect_timeout >= Duration::from_millis(1000 + 600));
        for ms in [3500, 5000] {
            let i = Duration::from_millis(ms);
            assert!(
                LinkTimeouts::for_interval(i).dead_after() <= i * 2,
                "{ms} ms"
            );
        }
    }

    #[test]
    fn short_intervals_keep_the_floors() {
        let t = LinkTimeouts::for_interval(Duration::from_millis(200));
        assert_eq!(t.keepalive_interval, Duration::from_millis(200));
        assert_eq!(t.keepalive_timeout, MIN_KEEPALIVE_TIMEOUT);
        assert_eq!(t.connect_timeout, MIN_CONNECT_TIMEOUT);
    }
}
