//! The exit codes of `rlc run --once`, shared by every command that maps the same
//! failures (`rlc explain`, `rlc rollout`).

/// Committed, or nothing to change.
pub const OK: i32 = 0;
/// Anything else (e.g. the local work directory or the history cache cannot be used,
/// or a task of the run panicked).
pub const OTHER: i32 = 1;
/// Bad usage.
pub const USAGE: i32 = 2;
/// The metrics source failed.
pub const SOURCE: i32 = 3;
/// The config repo failed.
pub const GIT: i32 = 4;
/// The run history database failed.
pub const DATABASE: i32 = 5;
/// The config is invalid.
pub const CONFIG: i32 = 6;
/// Committed, but the controller (or the pull request) could not be updated; also when
/// nothing was committed but the controller runs another version than `main` and could
/// not be brought up to date.
pub const DELIVERY: i32 = 7;
/// The metrics source answered with no usable data for any bucket (every series empty,
/// NaN or infinite): a dead metrics pipeline, not a quiet week. Nothing was changed.
pub const NO_DATA: i32 = 8;
