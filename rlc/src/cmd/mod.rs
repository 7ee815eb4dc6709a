//! The `rlc` command line: one module per subcommand, and the flags several share
//! ([`args`]).

pub(crate) mod args;
pub(crate) mod backtest;
pub(crate) mod demo;
pub(crate) mod explain;
pub(crate) mod promote;
pub(crate) mod rollout;
pub(crate) mod run;
pub(crate) mod serve;
