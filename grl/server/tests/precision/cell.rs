//! A cell of the precision matrix (issue 38): the traffic one bucket gets — how many
//! instances, which arrival shape, its limit, and either a steady load or a transition —
//! and what follows from it: the bucket's config, its rows of a `grl loadgen` profile, the
//! timeline every cell runs on, and the matrix the `PRECISION_*` environment selects.
//!
//! Every cell has a bucket of its own (matching caller = the cell's id), so the cells of
//! one batch share the tiers and the loadgen's clients without sharing a limit.
// Shared by the precision bench and the test suite; each uses a part of it.
#![allow(dead_code)]

use std::fmt;

/// Instances offering the traffic.
pub(crate) const CLIENTS: [usize; 4] = [1, 10, 100, 1000];
/// Steady offered loads, in multiples of the limit.
pub(crate) const LOADS: [f64; 6] = [0.5, 0.8, 0.95, 1.5, 3.0, 30.0];
/// Limits, requests per second.
pub(crate) const LIMITS: [f64; 3] = [5.0, 100.0, 2000.0];
/// The procedure every cell's traffic calls.
pub(crate) const PROCEDURE: &str = "Pay/Card";
/// What a new instance offers when it joins a dropping bucket: enough that its first 20
/// requests fall in its first second, before the tiers can have heard of it.
pub(crate) const JOINER_RPS: f64 = 20.0;
/// A new instance's dropped share is judged over this many first requests.
pub(crate) const JOINER_REQUESTS: f64 = 20.0;

/// How a cell's requests arrive (a `grl loadgen` shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Shape {
    /// Evenly spaced, every instance in step.
    Even,
    /// Evenly spaced, the instances' phases spread.
    Spread,
    /// Poisson arrivals.
    Poisson,
    /// Each instance sends a second's requests at once, every instance at the same instant.
    Burst,
}

impl Shape {
    pub(crate) const ALL: [Shape; 4] = [Shape::Even, Shape::Spread, Shape::Poisson, Shape::Burst];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Shape::Even => "even",
            Shape::Spread => "spread",
            Shape::Poisson => "poisson",
            Shape::Burst => "burst",
        }
    }

    /// The shape column of a profile row.
    pub(crate) fn profile(self) -> &'static str {
        match self {
            Shape::Burst => "burst:1000",
            s => s.name(),
        }
    }

    /// Shapes that offer whole requests per instance per period: below one request an
    /// instance a second, a second holds either nothing or every instance's wave.
    pub(crate) fn in_whole_requests(self) -> bool {
        matches!(self, Shape::Even | Shape::Burst)
    }
}

/// A change of the offered load at the step second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Transition {
    /// 0.5 L during the warm-up, nothing until the step, then 10 L.
    IdleUp,
    /// 0.5 L, then 30 L.
    StepUp,
    /// 30 L, then 0.5 L.
    StepDown,
    /// 3 L (the bucket drops two thirds), then a new instance (a new `grl loadgen`
    /// process) joins at [`JOINER_RPS`].
    Join,
    /// One instance at 0.1 L and the others at 0.1 L together; the one rises alone to 0.5 L
    /// (the bucket then runs at 0.6 L). Where the others would send less than a request an
    /// instance a second in whole requests (even, burst), they are spread instead.
    RiseAlone,
}

impl Transition {
    pub(crate) const ALL: [Transition; 5] = [
        Transition::IdleUp,
        Transition::StepUp,
        Transition::StepDown,
        Transition::Join,
        Transition::RiseAlone,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Transition::IdleUp => "idle-10x",
            Transition::StepUp => "0.5x-30x",
            Transition::StepDown => "30x-0.5x",
            Transition::Join => "join",
            Transition::RiseAlone => "rise-alone",
        }
    }

    /// The bucket's total offered load after the step, in multiples of the limit.
    pub(crate) fn after(self) -> f64 {
        match self {
            Transition::IdleUp => 10.0,
            Transition::StepUp => 30.0,
            Transition::StepDown => 0.5,
            Transition::Join => 3.0,
            Transition::RiseAlone => 0.6,
        }
    }
}

/// A steady load or a transition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Traffic {
    /// The same load (x the limit) all along.
    Steady(f64),
    /// A change at the step second.
    Step(Transition),
}

/// The seconds every cell runs on (whole seconds of the loadgen; its line `t` covers the
/// second before `t`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeline {
    /// Seconds before steady cells are measured.
    pub(crate) warm: u64,
    /// The second transitions happen at.
    pub(crate) step: u64,
    /// Seconds measured after the step (the run lasts `step + after`).
    pub(crate) after: u64,
}

impl Timeline {
    /// The bench's: 5 s warm-up, idle cells silent 10 s, 12 s after the step (steady cells
    /// measured over 22 s).
    pub(crate) const BENCH: Timeline = Timeline {
        warm: 5,
        step: 15,
        after: 12,
    };
    /// The test suite's: the idle cells silent 6 s, 8 s after the step.
    pub(crate) const TEST: Timeline = Timeline {
        warm: 5,
        step: 11,
        after: 8,
    };

    pub(crate) fn duration(&self) -> u64 {
        self.step + self.after
    }
}

/// One cell: a bucket of `limit` offered `traffic` by `clients` instances in `shape`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cell {
    pub(crate) clients: usize,
    pub(crate) shape: Shape,
    pub(crate) limit: f64,
    pub(crate) traffic: Traffic,
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n{}.{}.L{}.{}",
            self.clients,
            self.shape.name(),
            self.limit,
            self.traffic_name()
        )
    }
}

impl Cell {
    pub(crate) fn steady(clients: usize, shape: Shape, limit: f64, load: f64) -> Cell {
        Cell {
            clients,
            shape,
            limit,
            traffic: Traffic::Steady(load),
        }
    }

    pub(crate) fn step(clients: usize, shape: Shape, limit: f64, t: Transition) -> Cell {
        Cell {
            clients,
            shape,
            limit,
            traffic: Traffic::Step(t),
        }
    }

    /// `x0.8` for a steady load, the transition's name otherwise.
    pub(crate) fn traffic_name(&self) -> String {
        match self.traffic {
            Traffic::Steady(x) => format!("x{x}"),
            Traffic::Step(t) => t.name().to_string(),
        }
    }

    /// The bucket's name, and the caller whose requests it matches.
    pub(crate) fn id(&self) -> String {
        self.to_string()
    }

    /// The bucket's entry in `services/payments.yaml`.
    pub(crate) fn bucket_yaml(&self) -> String {
        format!(
            "  - name: {id}\n    match: {{ caller: {id} }}\n    scope: global\n    mode: deny\n    policy: {{ kind: fixed, rps: {} }}\n",
            self.limit,
            id = self.id()
        )
    }

    /// The load the judged seconds are offered, x the limit.
    pub(crate) fn measured_load(&self) -> f64 {
        match self.traffic {
            Traffic::Steady(x) => x,
            Traffic::Step(t) => t.after(),
        }
    }

    /// What this cell asks of its batch's loadgen at second `t`, requests per second.
    pub(crate) fn rps_at(&self, t: u64, tl: &Timeline) -> f64 {
        let before = t < tl.step;
        self.limit
            * match self.traffic {
                Traffic::Steady(x) => x,
                Traffic::Step(Transition::IdleUp) if t < tl.warm => 0.5,
                Traffic::Step(Transition::IdleUp) if before => 0.0,
                Traffic::Step(Transition::StepUp) if before => 0.5,
                Traffic::Step(Transition::StepDown) if before => 30.0,
                Traffic::Step(Transition::RiseAlone) if before => 0.2,
                Traffic::Step(step) => step.after(),
            }
    }

    /// The most this cell asks of its loadgen at any second.
    pub(crate) fn peak_rps(&self, tl: &Timeline) -> f64 {
        [0, tl.warm, tl.step]
            .iter()
            .map(|&t| self.rps_at(t, tl))
            .fold(0.0, f64::max)
    }

    /// The profile lanes the cell adds to its batch's loadgen (a lane per client subset).
    pub(crate) fn lanes(&self) -> usize {
        match self.traffic {
            Traffic::Step(Transition::RiseAlone) => 2,
            _ => 1,
        }
    }

    /// The cell's rows of its batch's loadgen profile
    /// (`second,caller,procedure,rps,shape[,clients]`).
    pub(crate) fn rows(&self, tl: &Timeline) -> String {
        let (id, shape, l) = (self.id(), self.shape.profile(), self.limit);
        let row = |second: u64, x: f64| format!("{second},{id},{PROCEDURE},{},{shape}\n", x * l);
        match self.traffic {
            Traffic::Steady(x) => row(0, x),
            Traffic::Step(Transition::IdleUp) => {
                [row(0, 0.5), row(tl.warm, 0.0), row(tl.step, 10.0)].concat()
            }
            Traffic::Step(Transition::StepUp) => [row(0, 0.5), row(tl.step, 30.0)].concat(),
            Traffic::Step(Transition::StepDown) => [row(0, 30.0), row(tl.step, 0.5)].concat(),
            Traffic::Step(Transition::Join) => row(0, 3.0),
            Traffic::Step(Transition::RiseAlone) => {
                let one = |second: u64, x: f64| {
                    format!("{second},{id},{PROCEDURE},{},{shape},0\n", x * l)
                };
                // Background for the one that rises: in whole requests below one an
                // instance a second the others would send rare waves, so they spread.
                let per_other = 0.1 * l / (self.clients - 1) as f64;
                let background = if self.shape.in_whole_requests() && per_other < 1.0 {
                    Shape::Spread.profile()
                } else {
                    shape
                };
                let others = format!(
                    "0,{id},{PROCEDURE},{},{background},1-{}\n",
                    0.1 * l,
                    self.clients - 1
                );
                [one(0, 0.1), others, one(tl.step, 0.5)].concat()
            }
        }
    }

    /// The joining instance's rows (its own loadgen of one client), for a join cell.
    pub(crate) fn joiner_rows(&self) -> Option<String> {
        (self.traffic == Traffic::Step(Transition::Join)).then(|| {
            format!(
                "0,{},{PROCEDURE},{JOINER_RPS},{}\n",
                self.id(),
                self.shape.profile()
            )
        })
    }

    /// The rate each instance offers at the judged load (the rising one, for rise-alone).
    pub(crate) fn per_instance_rps(&self) -> f64 {
        match self.traffic {
            Traffic::Step(Transition::RiseAlone) => 0.5 * self.limit,
            _ => self.measured_load() * self.limit / self.clients as f64,
        }
    }

    /// Why this cell cannot be measured as asked, whatever the machine.
    pub(crate) fn refusal(&self) -> Option<String> {
        if self.traffic == Traffic::Step(Transition::RiseAlone) && self.clients < 2 {
            return Some("one instance rising alone needs at least 2 instances".into());
        }
        // The rising instance offers its rate alone; the others are background.
        let per_instance = self.per_instance_rps();
        // Steady cells are judged on means over the window (a wave every 2 s or more
        // often is enough); transitions second by second.
        let least = match self.traffic {
            Traffic::Steady(_) => 0.5,
            Traffic::Step(_) => 1.0,
        };
        if self.shape.in_whole_requests() && per_instance < least {
            return Some(format!(
                "{} at {per_instance:.3} rps per instance sends one in-step wave every {:.1} s: \
                 its seconds hold nothing or every instance at once, not its load \
                 (measured from {least} rps per instance)",
                self.shape.name(),
                1.0 / per_instance
            ));
        }
        None
    }
}

/// A selection of the matrix: each axis from its `PRECISION_*` variable (comma-separated;
/// `none` selects nothing on that axis), the full axis when unset.
#[derive(Debug, Clone)]
pub(crate) struct Selection {
    pub(crate) clients: Vec<usize>,
    pub(crate) shapes: Vec<Shape>,
    pub(crate) loads: Vec<f64>,
    pub(crate) limits: Vec<f64>,
    pub(crate) transitions: Vec<Transition>,
    pub(crate) timeline: Timeline,
}

impl Selection {
    /// `PRECISION_CLIENTS`, `PRECISION_SHAPES`, `PRECISION_LOADS`, `PRECISION_LIMITS`,
    /// `PRECISION_TRANSITIONS` and `PRECISION_SECONDS` (seconds measured after the step).
    pub(crate) fn from_env() -> Result<Selection, String> {
        fn axis<T: Clone>(
            var: &str,
            all: &[T],
            parse: impl Fn(&str) -> Option<T>,
        ) -> Result<Vec<T>, String> {
            let Ok(v) = std::env::var(var) else {
                return Ok(all.to_vec());
            };
            if v.trim() == "none" {
                return Ok(Vec::new());
            }
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| parse(s).ok_or_else(|| format!("{var}: `{s}` is not a value of it")))
                .collect()
        }
        let positive = |s: &str| s.parse::<f64>().ok().filter(|x| *x > 0.0 && x.is_finite());
        let mut timeline = Timeline::BENCH;
        if let Ok(s) = std::env::var("PRECISION_SECONDS") {
            timeline.after = s.parse().ok().filter(|s| *s >= 4).ok_or_else(|| {
                format!("PRECISION_SECONDS: `{s}` is not a number of seconds ≥ 4")
            })?;
        }
        Ok(Selection {
            clients: axis("PRECISION_CLIENTS", &CLIENTS, |s| {
                s.parse().ok().filter(|n| (1..=10_000).contains(n))
            })?,
            shapes: axis("PRECISION_SHAPES", &Shape::ALL, |s| {
                Shape::ALL.into_iter().find(|x| x.name() == s)
            })?,
            loads: axis("PRECISION_LOADS", &LOADS, positive)?,
            limits: axis("PRECISION_LIMITS", &LIMITS, positive)?,
            transitions: axis("PRECISION_TRANSITIONS", &Transition::ALL, |s| {
                Transition::ALL.into_iter().find(|x| x.name() == s)
            })?,
            timeline,
        })
    }

    /// Every selected cell, batch by batch (clients, then shape).
    pub(crate) fn cells(&self) -> Vec<Cell> {
        let mut out = Vec::new();
        for &n in &self.clients {
            for &shape in &self.shapes {
                for &limit in &self.limits {
                    out.extend(self.loads.iter().map(|&x| Cell::steady(n, shape, limit, x)));
                    out.extend(
                        self.transitions
                            .iter()
                            .map(|&t| Cell::step(n, shape, limit, t)),
                    );
                }
            }
        }
        out
    }
}
