//! Whether this tier leads: a controller's part in the election as its node sees it
//! ([`Leadership`], set by [`crate::tier::election`]; a tier without an election leads), and
//! how a follower refuses a child ([`not_leader`]: `UNAVAILABLE` with the leader's address,
//! read back by [`redirect_of`]).

/// This controller's part in the election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// Whether this controller leads.
    pub leading: bool,
    /// The leader's advertised address, when known.
    pub leader: Option<String>,
}

impl Leadership {
    /// The role of a tier without an election: it leads.
    pub fn sole() -> Self {
        Self {
            leading: true,
            leader: None,
        }
    }

    /// A follower of `leader` (unknown: `None`); true if that changed anything.
    pub fn set_following(&mut self, leader: Option<String>) -> bool {
        let new = Self {
            leading: false,
            leader,
        };
        std::mem::replace(self, new.clone()) != new
    }

    /// The leader, advertising `me`; true if that changed anything.
    pub fn set_leading(&mut self, me: &str) -> bool {
        let new = Self {
            leading: true,
            leader: Some(me.to_string()),
        };
        std::mem::replace(self, new.clone()) != new
    }
}

/// The metadata key on a follower's refusal that carries the leader's address.
pub const LEADER_HEADER: &str = "grl-leader";

/// A follower's answer to a child: `UNAVAILABLE`, with the leader's address in
/// [`LEADER_HEADER`] when it is known.
pub fn not_leader(leader: Option<&str>) -> tonic::Status {
    let mut st = tonic::Status::unavailable(match leader {
        Some(l) => format!("not the leader; the leader is {l}"),
        None => "not the leader; no leader is elected yet".to_string(),
    });
    if let Some(v) = leader.and_then(|l| l.parse().ok()) {
        st.metadata_mut().insert(LEADER_HEADER, v);
    }
    st
}

/// The leader a follower's refusal points at, if any.
pub fn redirect_of(status: &tonic::Status) -> Option<String> {
    status
        .metadata()
        .get(LEADER_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_changes_are_reported_once() {
        let mut r = Leadership {
            leading: false,
            leader: None,
        };
        assert!(r.set_following(Some("a:1".into())));
        assert!(!r.set_following(Some("a:1".into())));
        assert!(r.set_leading("b:1"));
        assert!(!r.set_leading("b:1"));
        assert!(r.set_following(None));
    }
}
