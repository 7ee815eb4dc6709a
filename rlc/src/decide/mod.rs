//! From inputs to limits, without I/O: each bucket's plan ([`plan`]: its policy over its
//! history), the [`guards`] between a proposal and the limit written, the service-wide
//! [`capacity_guard`], the shadow → deny [`lifecycle`], the events' scheduled
//! limits ([`scheduled_limits`]) and planned capacity met by the [`calendar`], forecast
//! demand above capacity ([`shortfall`]), how a bucket's priority classes would fare at its
//! limit ([`class_fate`]), and why a limit is what it is ([`explain`]).

pub mod calendar;
pub mod capacity_guard;
pub mod class_fate;
pub mod explain;
pub mod guards;
pub mod lifecycle;
pub mod plan;
pub mod scheduled_limits;
pub mod shortfall;
