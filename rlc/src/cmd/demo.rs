//! `rlc demo`: runs the `rlc-demo` binary installed beside `rlc`, with the same arguments.
//! The demo embeds a controller, aggregators and clients; keeping it in a binary of its own
//! means `rlc` itself does not link GRL's tiers.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Args;

/// `rlc demo [ARGS]…`: everything after `demo` goes to `rlc-demo`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DemoCmd {
    /// The arguments of `rlc-demo` (`--seconds`, `--rollout`, `--dir`, `--json`, `-v`,
    /// `--help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// The `rlc-demo` binary beside `rlc` (the directory of the running executable).
fn demo_binary(rlc: &Path) -> PathBuf {
    rlc.with_file_name(format!("rlc-demo{}", std::env::consts::EXE_SUFFIX))
}

/// Runs `rlc-demo` in place of this process; the exit code when it cannot: 2, with what to
/// build, when it is not installed beside `rlc`.
pub(crate) fn execute(cmd: DemoCmd) -> i32 {
    let demo = match std::env::current_exe() {
        Ok(rlc) => demo_binary(&rlc),
        Err(e) => {
            eprintln!("rlc demo: cannot locate the rlc executable: {e}");
            return 1;
        }
    };
    if !demo.is_file() {
        eprintln!(
            "rlc demo: {} not found; the demo is a binary of its own: build it with \
             `cargo build --release -p rlc-demo` (or run `cargo run --release -p rlc-demo`)",
            demo.display()
        );
        return 2;
    }
    let mut child = std::process::Command::new(&demo);
    child.args(&cmd.args);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        let e = child.exec();
        eprintln!("rlc demo: cannot run {}: {e}", demo.display());
        1
    }
    #[cfg(not(unix))]
    match child.status() {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => {
            eprintln!("rlc demo: cannot run {}: {e}", demo.display());
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_is_looked_for_beside_rlc() {
        let rlc = Path::new("/opt/grl/bin/rlc");
        let expected = format!("/opt/grl/bin/rlc-demo{}", std::env::consts::EXE_SUFFIX);
        assert_eq!(demo_binary(rlc), PathBuf::from(expected));
    }
}
