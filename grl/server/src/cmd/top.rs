//! `grl top`: `grl status` refreshing in place every interval, sorted by dropped rate, a
//! line per bucket that is dropping or shadow-dropping; `q` (or Esc, Ctrl-C) quits. On a
//! pipe it prints one snapshot and exits.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, terminal};
use grl::view;

/// Flags of `grl top`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    target: super::status::Target,
    /// Only this service's buckets.
    #[arg(long)]
    service: Option<String>,
    /// How often to refresh, in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = super::validate::interval_ms)]
    interval_ms: u64,
    #[command(flatten)]
    conn: super::tls_args::AdminClientArgs,
}

/// Puts the terminal back however `top` ends.
struct Screen;

impl Screen {
    fn enter() -> std::io::Result<Self> {
        terminal::enable_raw_mode()?;
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(Self)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = execute!(
            std::io::stdout(),
            cursor::Show,
            terminal::LeaveAlternateScreen
        );
        let _ = terminal::disable_raw_mode();
    }
}

/// Whether `e` asks to quit.
fn quits(e: &Event) -> bool {
    match e {
        Event::Key(k) if k.kind != KeyEventKind::Release => {
            matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL))
        }
        _ => false,
    }
}

/// Shows the screen until `q`, or one snapshot on a pipe.
pub(crate) async fn run(a: Args) -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() {
        let (v, _) = super::status::ask(&a.target, a.service.as_deref(), &a.conn).await?;
        println!("{}", view::text::top(&v, usize::MAX));
        return Ok(());
    }
    let screen = Screen::enter()?;
    let every = Duration::from_millis(a.interval_ms);
    loop {
        let rows = terminal::size().map_or(24, |(_, r)| r as usize);
        let body = match super::status::ask(&a.target, a.service.as_deref(), &a.conn).await {
            Ok((v, _)) => view::text::top(&v, rows),
            Err(e) => format!("{e:#}\n\nretrying every {} ms. q: quit", a.interval_ms),
        };
        let mut out = std::io::stdout().lock();
        execute!(
            out,
            cursor::MoveTo(0, 0),
            terminal::Clear(terminal::ClearType::All)
        )?;
        // Raw mode: a line feed does not return the carriage.
        write!(out, "{}", body.replace('\n', "\r\n"))?;
        out.flush()?;
        drop(out);
        let quit = tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
            let until = std::time::Instant::now() + every;
            loop {
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() || !event::poll(left)? {
                    return Ok(false);
                }
                if quits(&event::read()?) {
                    return Ok(true);
                }
            }
        })
        .await??;
        if quit {
            break;
        }
    }
    drop(screen);
    Ok(())
}
