//! Where the configurator's logs go: stderr, in colour only on a terminal (logs written to
//! a file or a pipe stay plain text), every line through the
//! [`ScrubbingWriter`](crate::secrets::ScrubbingWriter).

use std::io::IsTerminal as _;

/// Installs the process's log subscriber on stderr with `filter`.
pub fn to_stderr(filter: tracing_subscriber::EnvFilter) {
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(crate::secrets::ScrubbingWriter::new(std::io::stderr))
        .init();
}
