//! The `rlc` command line: one module per subcommand.

pub mod backtest;
pub mod demo;
pub mod promote;
pub mod run;
pub mod serve;
