//! The matrix as an SVG heat map: a row per (instances, shape), a column per (limit,
//! traffic); green where a cell met its targets, red by how far it missed them (the
//! largest log10 of error over allowed), amber where it could not be judged, grey where it
//! was refused. Each square carries the cell's key figure: the dropped share under the
//! limit, admitted / L over it, the first second after a step (x L up, admitted share
//! down), the new instance's dropped share against the bucket's ratio, and the dropped
//! share after one instance rose alone.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::cell::{Cell, Shape, Traffic, Transition};
use crate::judge::{Fig, Outcome};

const LABEL_W: i32 = 130;
const HEAD_H: i32 = 64;
const CELL_W: i32 = 64;
const CELL_H: i32 = 26;
const LEGEND_H: i32 = 40;

/// The figure a square shows.
fn key(o: &Outcome) -> String {
    if o.invalid.is_some() {
        return "invalid".into();
    }
    let share = |s: f64| format!("{:.1}%", s * 100.0);
    match o.cell.traffic {
        Traffic::Steady(x) if x < 1.0 => share(o.dropped),
        Traffic::Steady(_) => format!("{:.2}x", o.admitted),
        Traffic::Step(Transition::Join) => match (o.first, o.second) {
            (Some(Fig::Share(a)), Some(Fig::Share(b))) => {
                format!("{:.0}/{:.0}%", a * 100.0, b * 100.0)
            }
            _ => "-".into(),
        },
        Traffic::Step(Transition::RiseAlone) => share(o.dropped),
        Traffic::Step(_) => o.first.map_or_else(|| "-".into(), |f| f.to_string()),
    }
}

fn colour(o: &Outcome) -> RGBColor {
    if o.invalid.is_some() {
        return RGBColor(240, 200, 90);
    }
    if o.misses.is_empty() {
        return RGBColor(120, 195, 120);
    }
    // From light red (just missed) to dark red (missed by 100x or more).
    let s = (o.severity() / 2.0).clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * s).round() as u8;
    RGBColor(lerp(245.0, 150.0), lerp(150.0, 10.0), lerp(140.0, 10.0))
}

/// Writes the heat map of `outcomes` and `refused` to `path`.
pub(crate) fn write(
    path: &Path,
    outcomes: &[Outcome],
    refused: &[(Cell, String)],
) -> Result<(), String> {
    let all: Vec<Cell> = outcomes
        .iter()
        .map(|o| o.cell)
        .chain(refused.iter().map(|(c, _)| *c))
        .collect();
    // Rows by instances then shape, columns by limit then steady loads (ascending) then
    // transitions (in their order), whatever order the batches ran in.
    let traffic_rank = |c: &Cell| match c.traffic {
        Traffic::Steady(x) => x,
        Traffic::Step(t) => 1e6 + Transition::ALL.iter().position(|a| *a == t).unwrap_or(0) as f64,
    };
    let mut rows: Vec<(usize, Shape)> = all.iter().map(|c| (c.clients, c.shape)).collect();
    rows.sort();
    rows.dedup();
    let mut by_col: Vec<&Cell> = all.iter().collect();
    by_col.sort_by(|a, b| {
        a.limit
            .total_cmp(&b.limit)
            .then(traffic_rank(a).total_cmp(&traffic_rank(b)))
    });
    let mut cols: Vec<(String, String)> = Vec::new();
    for c in by_col {
        let k = (format!("L {}", c.limit), c.traffic_name());
        if !cols.contains(&k) {
            cols.push(k);
        }
    }
    let width = (LABEL_W + CELL_W * cols.len() as i32 + 10) as u32;
    let height = (HEAD_H + CELL_H * rows.len() as i32 + LEGEND_H) as u32;
    let root = SVGBackend::new(path, (width.max(1150), height)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| format!("{}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let text = |size: f64, h: HPos| {
        TextStyle::from(("sans-serif", size).into_font()).pos(Pos::new(h, VPos::Center))
    };
    let title = "grl precision matrix (issue 38): green met its targets, red missed (darker: further), amber invalid, grey refused";
    root.draw_text(title, &text(15.0, HPos::Left), (6, 12))
        .map_err(err)?;
    for (i, (limit, traffic)) in cols.iter().enumerate() {
        let x = LABEL_W + CELL_W * i as i32 + CELL_W / 2;
        if i == 0 || cols[i - 1].0 != *limit {
            root.draw_text(limit, &text(15.0, HPos::Left), (x - CELL_W / 2 + 2, 32))
                .map_err(err)?;
        }
        root.draw_text(traffic, &text(13.0, HPos::Center), (x, HEAD_H - 12))
            .map_err(err)?;
    }
    for (j, (n, shape)) in rows.iter().enumerate() {
        let y = HEAD_H + CELL_H * j as i32;
        root.draw_text(
            &format!("{n} inst., {}", shape.name()),
            &text(14.0, HPos::Left),
            (6, y + CELL_H / 2),
        )
        .map_err(err)?;
        for (i, (limit, traffic)) in cols.iter().enumerate() {
            let x = LABEL_W + CELL_W * i as i32;
            let here = |c: &Cell| {
                (c.clients, c.shape) == (*n, *shape)
                    && format!("L {}", c.limit) == *limit
                    && c.traffic_name() == *traffic
            };
            let (fill, label, ink) = if let Some(o) = outcomes.iter().find(|o| here(&o.cell)) {
                let ink = if o.invalid.is_none() && o.severity() > 1.0 {
                    WHITE
                } else {
                    BLACK
                };
                (colour(o), key(o), ink)
            } else if refused.iter().any(|(c, _)| here(c)) {
                (RGBColor(215, 215, 215), "refused".into(), BLACK)
            } else {
                (WHITE, String::new(), BLACK)
            };
            root.draw(&Rectangle::new(
                [(x + 1, y + 1), (x + CELL_W - 1, y + CELL_H - 1)],
                fill.filled(),
            ))
            .map_err(err)?;
            root.draw_text(
                &label,
                &text(13.0, HPos::Center).color(&ink),
                (x + CELL_W / 2, y + CELL_H / 2),
            )
            .map_err(err)?;
        }
    }
    let legend = "squares: dropped % (under L, rise-alone), admitted/L (over L), 1st second after the step (x L up, admitted % down), new instance's dropped % / bucket's ratio (join)";
    root.draw_text(
        legend,
        &text(13.0, HPos::Left),
        (6, HEAD_H + CELL_H * rows.len() as i32 + LEGEND_H / 2),
    )
    .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
