//! What the project's binaries (`grl`, `rlc`) share in reading their flags.

/// Parses the process's flags into `T`. A value may be a negative number (`--rps -1` is
/// then refused by the flag's own check, not read as an unknown flag `-1`); a usage error
/// prints clap's message and exits 2.
pub fn parse<T: clap::Parser>() -> T {
    fn negatives(c: clap::Command) -> clap::Command {
        c.mut_args(|a| {
            if a.get_action().takes_values() {
                a.allow_negative_numbers(true)
            } else {
                a
            }
        })
        .mut_subcommands(negatives)
    }
    let mut cmd = negatives(T::command());
    T::from_arg_matches_mut(&mut cmd.get_matches_mut())
        .unwrap_or_else(|e| e.format(&mut cmd).exit())
}
