//! The `rlc` command line: one module per subcommand.

pub mod backtest;
#[cfg(feature = "demo")]
pub mod demo;
pub mod promote;
pub mod run;
pub mod serve;
