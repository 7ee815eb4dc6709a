//! The demo's live per-second table: redrawn in place on a terminal (one block of rows, the
//! latest second), printed line after line when stdout is piped or redirected.

use std::io::{IsTerminal as _, Write};

/// Prints one block of rows per second to `out`.
#[derive(Debug)]
pub(super) struct LiveTable<W> {
    out: W,
    in_place: bool,
    drawn: usize,
}

impl LiveTable<std::io::Stdout> {
    /// A table on stdout that redraws in place when stdout is a terminal.
    pub(super) fn stdout() -> Self {
        let in_place = std::io::stdout().is_terminal();
        Self::new(std::io::stdout(), in_place)
    }
}

impl<W: Write> LiveTable<W> {
    /// A table on `out`, redrawn in place (ANSI cursor-up and clear-line) if `in_place`.
    pub(super) fn new(out: W, in_place: bool) -> Self {
        Self {
            out,
            in_place,
            drawn: 0,
        }
    }

    /// Prints this second's rows, replacing the previous second's when in place.
    pub(super) fn second(&mut self, rows: &[String]) {
        if self.in_place && self.drawn > 0 {
            let _ = write!(self.out, "\x1b[{}A", self.drawn);
        }
        for row in rows {
            if self.in_place {
                let _ = write!(self.out, "\x1b[2K");
            }
            let _ = writeln!(self.out, "{row}");
        }
        let _ = self.out.flush();
        self.drawn = rows.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(second: u32) -> Vec<String> {
        vec![format!("{second} a"), format!("{second} b")]
    }

    #[test]
    fn piped_output_is_plain_lines() {
        let mut t = LiveTable::new(Vec::new(), false);
        t.second(&rows(0));
        t.second(&rows(1));
        assert_eq!(String::from_utf8(t.out).unwrap(), "0 a\n0 b\n1 a\n1 b\n");
    }

    #[test]
    fn a_terminal_gets_the_block_redrawn_in_place() {
        let mut t = LiveTable::new(Vec::new(), true);
        t.second(&rows(0));
        t.second(&rows(1));
        assert_eq!(
            String::from_utf8(t.out).unwrap(),
            "\x1b[2K0 a\n\x1b[2K0 b\n\x1b[2A\x1b[2K1 a\n\x1b[2K1 b\n"
        );
    }
}
