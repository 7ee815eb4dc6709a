//! Planned events: `events.yaml` at the config repo's root ([`file`]). The scheduled limits
//! they give each bucket, merged with those its limits file already holds, are
//! [`crate::decide::scheduled_limits`].
//!
//! An event raises the limit of what it affects for its window only: the run writes the
//! raised limit as a scheduled limit beside the bucket's limit (`scheduled: [{ rps,
//! effective: { from, until }, reason: "events.yaml: NAME" }]`), and the controllers switch
//! to it at its start and back at its end by their own clock, with no run at those moments.

pub mod file;

use grl_config::{ConfigErrors, Snapshot};

pub use file::{Event, Targets};

/// The events of the checkout's `events.yaml` (none without one), checked against the
/// services of `snapshot`.
pub fn read(text: Option<&str>, snapshot: &Snapshot) -> Result<Vec<Event>, ConfigErrors> {
    let Some(text) = text else {
        return Ok(Vec::new());
    };
    let events = file::parse(file::PATH, text).map_err(ConfigErrors)?;
    file::check(file::PATH, text, &events, snapshot).map_err(ConfigErrors)?;
    Ok(events)
}
