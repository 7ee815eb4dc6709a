//! What a refusal can say: the bucket that refused a request ([`RefusingBucket`], given by
//! [`Client::decide_explained`](crate::Client::decide_explained)) and the response headers
//! that name it, made once per config version so that a refusal only clones them.
//!
//! * `grl-bucket: <service>/<bucket>`: the bucket whose draw refused the request. When a
//!   bucket applies in addition and both refuse, the request's own bucket is named.
//! * `RateLimit-Policy: "<service>/<bucket>";q=<limit>;w=1` (IETF
//!   draft-ietf-httpapi-ratelimit-headers-11, quota policy item): the bucket's limit in force
//!   over one-second windows, rounded down (a limit under 1 rps is stated over the shortest
//!   window holding one request, `0.25` as `q=1;w=4`). It is the quota of everyone the
//!   bucket takes together (of the region or zone, for buckets of those scopes), which is
//!   what the draft calls the quota of a partition. Absent when the bucket has no limit
//!   (the tiers sent only a ratio) or its name cannot be a structured-field string.
//!
//! The draft's `RateLimit` field (`r`, the quota still available, and `t`, when it comes
//! back) is not stated: what remains of a global limit is known to no single process, and
//! GRL refuses a share of the requests at random rather than all of them once a count runs
//! out, so a refused request's next try may well be admitted. `r=0` would be false while
//! the limit is shared with admitted requests, and any other `r` a guess; `Retry-After`
//! already says when the ratio can next change.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::{HeaderName, HeaderValue};

use crate::Decision;
use crate::decide::buckets::Resolver;

/// The header naming the bucket that refused a request.
pub const GRL_BUCKET: HeaderName = HeaderName::from_static("grl-bucket");

/// The IETF draft's quota policy header.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// The largest integer a structured field may carry.
const SF_INTEGER_MAX: f64 = 999_999_999_999_999.0;

/// A decision and, when it refuses, the bucket that refused
/// ([`Client::decide_explained`](crate::Client::decide_explained)).
#[derive(Debug, Clone)]
pub struct Explained {
    /// What to do with the request.
    pub decision: Decision,
    /// The bucket that refused it, when `decision` is [`Decision::Drop`]; `None` otherwise,
    /// and in the rare case the bucket cannot be told (a config applied in that instant
    /// removed it, or its name cannot be a header value).
    pub refused_by: Option<Arc<RefusingBucket>>,
}

/// A bucket that refuses requests, with the header values naming it.
#[derive(Debug, Clone)]
pub struct RefusingBucket {
    bucket: Box<str>,
    grl_bucket: HeaderValue,
    policy: Option<HeaderValue>,
}

impl RefusingBucket {
    /// Bucket `bucket` of `service` with limit `limit_rps`; `None` when the names cannot be
    /// a header value.
    pub(crate) fn new(service: &str, bucket: &str, limit_rps: Option<f64>) -> Option<Self> {
        let qualified = format!("{service}/{bucket}");
        let grl_bucket = HeaderValue::from_str(&qualified).ok()?;
        let policy = limit_rps
            .and_then(quota)
            .and_then(|(q, w)| policy_value(&qualified, q, w));
        Some(Self {
            bucket: bucket.into(),
            grl_bucket,
            policy,
        })
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The value of [`GRL_BUCKET`]: `<service>/<bucket>`.
    pub fn grl_bucket(&self) -> &HeaderValue {
        &self.grl_bucket
    }

    /// The value of [`RATELIMIT_POLICY`], when the bucket's limit can be stated.
    pub fn ratelimit_policy(&self) -> Option<&HeaderValue> {
        self.policy.as_ref()
    }

    /// Both headers, as (name, value) pairs.
    pub fn headers(&self) -> impl Iterator<Item = (HeaderName, &HeaderValue)> {
        std::iter::once((GRL_BUCKET, &self.grl_bucket))
            .chain(self.policy.iter().map(|p| (RATELIMIT_POLICY, p)))
    }
}

/// A limit of `rps` as a quota over a window: (`q`, `w` seconds), `q` rounded down so that
/// it never states more than the limit; `None` when `rps` is not a limit.
pub(crate) fn quota(rps: f64) -> Option<(u64, u64)> {
    if !rps.is_finite() || rps < 0.0 {
        return None;
    }
    let w = if rps > 0.0 && rps < 1.0 {
        (1.0 / rps).ceil().min(SF_INTEGER_MAX)
    } else {
        1.0
    };
    Some(((rps * w).floor().min(SF_INTEGER_MAX) as u64, w as u64))
}

/// `"name";q=Q;w=W`, with `name` as a structured-field string; `None` when it cannot be one.
fn policy_value(name: &str, q: u64, w: u64) -> Option<HeaderValue> {
    let mut s = String::with_capacity(name.len() + 32);
    s.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                s.push('\\');
                s.push(c);
            }
            ' '..='~' => s.push(c),
            _ => return None,
        }
    }
    let _ = write!(s, "\";q={q};w={w}");
    HeaderValue::from_str(&s).ok()
}

impl crate::Client {
    /// [`decide`](Self::decide), telling which bucket refused a dropped request: for a data
    /// plane that names it in its answer (`grl sidecar`). An allowed request costs what it
    /// costs in `decide`; a refusal adds one lookup of the pair and a reference count.
    #[inline]
    pub fn decide_explained(&self, caller: &str, procedure: &str) -> Explained {
        let own = self.decide_own(caller, procedure);
        let also = if self.inner.also_on.load(Ordering::Relaxed) {
            self.decide_also(caller, procedure)
        } else {
            Decision::Allow
        };
        self.explain(caller, procedure, own, also)
    }

    /// [`decide_explained`](Self::decide_explained) for a request of priority class
    /// `class` (see [`decide_in_class`](Self::decide_in_class)); `""` is no class.
    pub fn decide_explained_in_class(
        &self,
        caller: &str,
        procedure: &str,
        class: &str,
    ) -> Explained {
        if class.is_empty() || !self.inner.classes_on.load(Ordering::Relaxed) {
            return self.decide_explained(caller, procedure);
        }
        let (own, cell) = self.decide_own_in_class(caller, procedure, class);
        let also = if self.inner.also_on.load(Ordering::Relaxed) {
            self.decide_also(caller, procedure)
        } else {
            Decision::Allow
        };
        match cell {
            Some(id) if own == Decision::Drop => Explained {
                decision: Decision::Drop,
                refused_by: self.inner.resolver.load().refusal(id).cloned(),
            },
            _ => self.explain(caller, procedure, own, also),
        }
    }

    /// The decision of a request its own bucket decided `own` and the bucket in addition
    /// `also`, with the bucket that refused it.
    #[inline]
    fn explain(&self, caller: &str, procedure: &str, own: Decision, also: Decision) -> Explained {
        let decision = own.and(also);
        let refused_by = if decision == Decision::Drop {
            self.refused_by(caller, procedure, own == Decision::Drop)
        } else {
            None
        };
        Explained {
            decision,
            refused_by,
        }
    }

    /// The bucket that refused a request: its own (`own`) or the one in addition. The cell
    /// its pair points to, else (a full table, or a config applied in between) the one the
    /// current config's matcher gives.
    #[cold]
    #[inline(never)]
    fn refused_by(&self, caller: &str, procedure: &str, own: bool) -> Option<Arc<RefusingBucket>> {
        let (table, resolve): (_, fn(&Resolver, &str, &str) -> u32) = if own {
            (Some(&self.inner.table), Resolver::resolve)
        } else {
            (self.inner.also.get(), Resolver::resolve_in_addition)
        };
        let resolver = self.inner.resolver.load();
        table
            .and_then(|t| t.get(&t.key(caller, procedure), caller, procedure))
            .and_then(|e| resolver.refusal(e.cell.load(Ordering::Relaxed)))
            .or_else(|| resolver.refusal(resolve(&resolver, caller, procedure)))
            .cloned()
    }

    /// [`decide_n_explained`](Self::decide_n_explained) for requests of priority class
    /// `class` (see [`decide_in_class`](Self::decide_in_class)); `""` is no class.
    pub fn decide_n_explained_in_class(
        &self,
        caller: &str,
        procedure: &str,
        class: &str,
        n: u64,
    ) -> Explained {
        if class.is_empty() || !self.inner.classes_on.load(Ordering::Relaxed) {
            return self.decide_n_explained(caller, procedure, n);
        }
        if n == 1 {
            return self.decide_explained_in_class(caller, procedure, class);
        }
        if n == 0 {
            return self.decide_n_explained(caller, procedure, 0);
        }
        let Some((cell, pair)) = self.class_cell_of(caller, procedure, class) else {
            return self.decide_n_explained(caller, procedure, n);
        };
        let own = self.decide_batch_direct((cell, pair), n);
        let also = if self.inner.also_on.load(Ordering::Relaxed) {
            self.decide_batch(self.also_pair(caller, procedure), n)
        } else {
            Decision::Allow
        };
        match own {
            Decision::Drop => Explained {
                decision: Decision::Drop,
                refused_by: self.inner.resolver.load().refusal(cell).cloned(),
            },
            _ => self.explain(caller, procedure, own, also),
        }
    }

    /// [`decide_n`](Self::decide_n), telling which bucket refused a dropped batch (see
    /// [`decide_explained`](Self::decide_explained)).
    pub fn decide_n_explained(&self, caller: &str, procedure: &str, n: u64) -> Explained {
        match n {
            0 => Explained {
                decision: Decision::Allow,
                refused_by: None,
            },
            1 => self.decide_explained(caller, procedure),
            _ => {
                let own = self.decide_batch(self.pair(caller, procedure).map(Some), n);
                let also = if self.inner.also_on.load(Ordering::Relaxed) {
                    self.decide_batch(self.also_pair(caller, procedure), n)
                } else {
                    Decision::Allow
                };
                self.explain(caller, procedure, own, also)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_quotas_rounded_down_over_the_shortest_window() {
        assert_eq!(quota(20.0), Some((20, 1)));
        assert_eq!(quota(20.9), Some((20, 1)));
        assert_eq!(quota(0.0), Some((0, 1)));
        assert_eq!(quota(0.25), Some((1, 4)));
        assert_eq!(quota(0.3), Some((1, 4)));
        assert_eq!(quota(0.1), Some((1, 10)));
        assert_eq!(quota(1e30), Some((999_999_999_999_999, 1)));
        assert_eq!(quota(-1.0), None);
        assert_eq!(quota(f64::NAN), None);
        assert_eq!(quota(f64::INFINITY), None);
    }

    #[test]
    fn headers_name_the_service_and_bucket() {
        let r = RefusingBucket::new("payments", "gw", Some(20.0)).unwrap();
        assert_eq!(r.bucket(), "gw");
        assert_eq!(r.grl_bucket(), "payments/gw");
        assert_eq!(r.ratelimit_policy().unwrap(), "\"payments/gw\";q=20;w=1");
        let names: Vec<_> = r.headers().map(|(n, _)| n).collect();
        assert_eq!(names, [GRL_BUCKET, RATELIMIT_POLICY]);
        let r = RefusingBucket::new("payments", "gw", None).unwrap();
        assert!(r.ratelimit_policy().is_none());
        assert_eq!(r.headers().count(), 1);
    }

    #[test]
    fn names_that_cannot_be_stated_are_left_out() {
        let r = RefusingBucket::new("p", "a\"b", Some(1.0)).unwrap();
        assert_eq!(r.ratelimit_policy().unwrap(), "\"p/a\\\"b\";q=1;w=1");
        let r = RefusingBucket::new("p", "é", Some(1.0)).unwrap();
        assert!(r.ratelimit_policy().is_none());
        assert!(RefusingBucket::new("p", "a\nb", Some(1.0)).is_none());
    }
}
