//! rlc's process tests: the built `rlc` binary, run as an operator runs it.

mod schedule;
