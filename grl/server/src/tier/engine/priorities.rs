//! Priority classes within a bucket: how a bucket's limit is parted among its classes
//! (highest first) from what each class offers, so that a bucket that must shed sheds its
//! lowest classes first.
//!
//! A bucket with classes goes on the wire as one bucket per class (`bucket#class`, see
//! `BucketRule.class_of`), each reported, summed, shared and enforced like any bucket; only
//! its limit differs: each class gets what the classes above it leave, as
//! [`class_limit`] parts it (the configurator parts proposed limits the same way).
//!
//! Under the limit a class may rise into the room the classes below it use, and the room
//! left unused, before the tiers hear of it (its limit counts that room): a higher class
//! displaces lower ones at once, and the lower ones are cut at the next tick. The price is
//! a bounded overshoot when classes rise together: until the tick, each class may admit
//! up to the room left below it, so at most the limit times the number of classes, once.

pub use grl_core::config::class_limit;
pub use grl_core::wire::{ClassSpan, class_spans as spans};
