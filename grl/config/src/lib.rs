//! Loading a config repo: YAML files in, a validated [`Snapshot`] (the model of `grl-core`) out.
//!
//! A config repo holds `services/<service>.yaml` (intent, written by people) and
//! `limits/<service>.yaml` (numbers, written by the configurator). [`load_dir`] and
//! [`from_files`] validate both into one immutable, versioned [`Snapshot`]; any refusal
//! names file, line and field, and the caller keeps its previous snapshot.
//!
//! ```
//! let files = vec![(
//!     "services/payments.yaml".to_string(),
//!     "service: payments\nbuckets:\n  - name: gateway-pay\n    match: { caller: gateway, procedure: \"Pay/*\" }\n    scope: global\n    mode: deny\n    policy: { kind: fixed, rps: 500 }\n".to_string(),
//! )];
//! let snapshot = grl_config::from_files("v1", files).unwrap();
//! let bucket = snapshot.service("payments").unwrap().find("gateway", "Pay/Card").unwrap();
//! assert_eq!(bucket.limit, Some(500.0));
//! ```

pub mod bounds;
mod dir;
mod error;
mod load;
pub mod raw;
pub mod yaml;

pub use dir::read_config_files;
pub use error::{ConfigError, ConfigErrors};
pub use grl_core::config::{
    Bucket, LimitChange, LimitSource, MatchRule, Matcher, Mode, PolicyConfig, PriorityClass,
    ProcedurePattern, ScheduledLimit, Scope, ServiceConfig, Snapshot,
};
pub use load::{content_version, from_files, load_dir};
/// The project's one duration notation (`30s`, `5m`, `2h`, `1d`, `1h30m`), as policy specs
/// write it; re-exported so that the tiers parse their flags with it without linking the
/// policies themselves.
pub use policies::duration;

#[cfg(test)]
mod tests;
