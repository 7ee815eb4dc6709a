//! Rate Limit Configurator (RLC): reads request-rate history from a metrics store, feeds it
//! to limit policies, guards the result and commits it to the config repository.
//!
//! - [`source`]: where per-bucket rate history comes from (Prometheus, files).

pub mod source;
