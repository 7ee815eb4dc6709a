//! The `rlc` command line: one module per subcommand.

pub mod backtest;
pub mod run;
pub mod serve;
