//! A run's progress: the phase it is in and its buckets done / total, shown as a bar on a
//! terminal or logged every few seconds on a pipe, and the time each phase took
//! (`rlc_run_phase_seconds{phase}` and the run's history row).

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::info;

use crate::drive::serve_metrics::RlcMetrics;

/// How a run shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar on stderr, redrawn a few times a second (stderr must be a terminal).
    Bar,
    /// One log line (`progress`, with phase, done and total) every this often, and one at
    /// each phase's start.
    Log(Duration),
    /// Nothing besides the phase timings.
    Off,
}

impl ProgressMode {
    /// A bar when stderr is a terminal, else a log line every `every`.
    pub fn auto(every: Duration) -> ProgressMode {
        use std::io::IsTerminal;
        if std::io::stderr().is_terminal() {
            ProgressMode::Bar
        } else {
            ProgressMode::Log(every)
        }
    }
}

struct State {
    phase: &'static str,
    total: usize,
    phase_started: Instant,
    timings: Vec<(&'static str, f64)>,
}

struct Inner {
    run_id: String,
    state: Mutex<State>,
    done: AtomicUsize,
    stopped: AtomicBool,
    metrics: Option<Arc<RlcMetrics>>,
    mode: ProgressMode,
}

/// A run's progress; phases follow one another (see [`Progress::phase`]).
pub struct Progress {
    inner: Arc<Inner>,
    reporter: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("run", &self.inner.run_id)
            .field("mode", &self.inner.mode)
            .finish_non_exhaustive()
    }
}

impl Progress {
    /// Starts showing progress for `run_id`; each finished phase is observed in `metrics`.
    pub fn start(run_id: &str, mode: ProgressMode, metrics: Option<Arc<RlcMetrics>>) -> Self {
        let inner = Arc::new(Inner {
            run_id: run_id.to_string(),
            state: Mutex::new(State {
                phase: "start",
                total: 0,
                phase_started: Instant::now(),
                timings: Vec::new(),
            }),
            done: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
            metrics,
            mode,
        });
        let every = match mode {
            ProgressMode::Bar => Some(Duration::from_millis(200)),
            ProgressMode::Log(every) => Some(every.max(Duration::from_millis(100))),
            ProgressMode::Off => None,
        };
        let reporter = every.map(|every| {
            let inner = inner.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    if inner.stopped.load(Ordering::Relaxed) {
                        break;
                    }
                    inner.show(false);
                }
            })
        });
        Progress { inner, reporter }
    }

    /// Ends the current phase (recording its time) and starts `phase` over `total` buckets
    /// (0 for a phase not counted in buckets).
    pub fn phase(&self, phase: &'static str, total: usize) {
        self.inner.close_phase();
        {
            let mut s = self.inner.state.lock().expect("progress lock");
            s.phase = phase;
            s.total = total;
            s.phase_started = Instant::now();
        }
        self.inner.done.store(0, Ordering::Relaxed);
        self.inner.show(true);
    }

    /// `n` more buckets of the current phase are done.
    pub fn add(&self, n: usize) {
        self.inner.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Ends the current phase and the display; returns each phase's seconds, summed by
    /// name, in the order the phases first ran.
    pub fn finish(&mut self) -> Vec<(&'static str, f64)> {
        self.inner.close_phase();
        self.stop();
        self.timings()
    }

    /// Each finished phase's seconds so far, summed by name.
    pub fn timings(&self) -> Vec<(&'static str, f64)> {
        let s = self.inner.state.lock().expect("progress lock");
        let mut out: Vec<(&'static str, f64)> = Vec::new();
        for &(name, secs) in &s.timings {
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some(e) => e.1 += secs,
                None => out.push((name, secs)),
            }
        }
        out
    }

    fn stop(&mut self) {
        self.inner.stopped.store(true, Ordering::Relaxed);
        if let Some(r) = self.reporter.take() {
            r.abort();
        }
        if self.inner.mode == ProgressMode::Bar {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.inner.close_phase();
        self.stop();
    }
}

impl Inner {
    fn close_phase(&self) {
        let mut s = self.state.lock().expect("progress lock");
        if s.phase == "start" || s.phase == "done" {
            return;
        }
        let secs = s.phase_started.elapsed().as_secs_f64();
        let phase = s.phase;
        s.timings.push((phase, secs));
        s.phase = "done";
        if let Some(m) = &self.metrics {
            m.observe_phase(phase, secs);
        }
    }

    /// Shows the state: `starting` is the line that opens a phase.
    fn show(&self, starting: bool) {
        let (phase, total, elapsed) = {
            let s = self.state.lock().expect("progress lock");
            (s.phase, s.total, s.phase_started.elapsed().as_secs_f64())
        };
        if phase == "done" || phase == "start" {
            return;
        }
        let done = self.done.load(Ordering::Relaxed).min(total);
        match self.mode {
            ProgressMode::Log(_) => {
                if starting {
                    info!(run = %self.run_id, phase, done, total, "phase started");
                } else {
                    info!(run = %self.run_id, phase, done, total, seconds = elapsed, "progress");
                }
            }
            ProgressMode::Bar => {
                let width = 30;
                let filled = (done * width).checked_div(total).unwrap_or(0);
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\r\x1b[2K{phase:>8} [{}{}] {done}/{total} buckets  {elapsed:.0}s",
                    "#".repeat(filled),
                    " ".repeat(width - filled)
                );
                let _ = err.flush();
            }
            ProgressMode::Off => {}
        }
    }
}
