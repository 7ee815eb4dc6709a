//! What a run reads: per-bucket request-rate history from a metrics source ([`source`]),
//! kept between runs in the history cache ([`cache`]), and the config repo's planned
//! capacity ([`capacity`]) and planned events ([`events`]).

pub mod cache;
pub mod capacity;
pub mod events;
pub mod source;

/// Whether the configurator computes this bucket's limit (fixed buckets need no history).
pub fn is_computed(bucket: &grl_config::Bucket) -> bool {
    bucket.policy.kind != "fixed"
}
