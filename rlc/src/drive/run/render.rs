//! What a planned checkout asks of the config repo: the new `limits/` files (validated with
//! the rest of the checkout) and the review text, with the explanation of each new or
//! changed limit.

use std::collections::BTreeMap;

use grl_config as config;

use super::RunError;
use super::checkout::Planned;
use crate::decide::explain::Explanation;
use crate::decide::guards::Outcome;
use crate::decide::plan::{self, BucketPlan};
use crate::output::git_store::{FileChange, Proposal};
use crate::output::limits_file;
use crate::output::pr_description;

/// The proposal for `planned` (`None`: no file to change) and its review text (Markdown).
/// Fails when the checkout with the new files would not be a valid config.
pub(super) fn proposal(
    planned: &Planned,
    run_id: &str,
) -> Result<(Option<Proposal>, String), RunError> {
    let mut new_files: BTreeMap<String, String> = BTreeMap::new();
    for svc in planned.snapshot.services.values() {
        let path = limits_file::path(&svc.name);
        let (_, stale) = plan::previous_limits(svc, planned.limits_text(&svc.name));
        let svc_plans: Vec<&BucketPlan> = planned.service_plans(&svc.name).iter().collect();
        let unplanned = planned.unplanned_lines(&svc.name);
        if let Some(text) = plan::limits_file_for(&svc.name, &svc_plans, &unplanned, stale) {
            new_files.insert(path, text);
        }
    }
    let plans: Vec<&BucketPlan> = planned.plans().collect();
    let rows: Vec<_> = plans.iter().map(|p| p.pr_row()).collect();
    let shortfalls: Vec<_> = planned.shortfalls().cloned().collect();
    let sections: Vec<_> = [
        crate::decide::shortfall::section(&shortfalls),
        capacity_section(&plans),
        scheduled_section(&plans),
        lifecycle_section(&plans),
    ]
    .into_iter()
    .flatten()
    .collect();
    let explanations = explanations(planned, &plans);
    let description = pr_description::render(run_id, &rows, &sections, &explanations);
    if new_files.is_empty() {
        return Ok((None, description));
    }
    let mut candidate = planned.files.clone();
    candidate.extend(new_files.clone());
    config::from_files(&planned.commit, candidate)?;
    let changed = plans
        .iter()
        .filter(|p| {
            matches!(p.guarded.outcome, Outcome::New | Outcome::Changed) || p.schedule.changed
        })
        .count();
    let proposal = Proposal {
        files: new_files
            .into_iter()
            .map(|(path, content)| FileChange { path, content })
            .collect(),
        message: format!(
            "rlc: update {changed} limit{}\n\nRlc-Run: {run_id}\n",
            if changed == 1 { "" } else { "s" }
        ),
        description: description.clone(),
    };
    Ok((Some(proposal), description))
}

/// The explanation of every bucket whose limit is new or changes.
fn explanations(planned: &Planned, plans: &[&BucketPlan]) -> Vec<Explanation> {
    plans
        .iter()
        .filter(|p| matches!(p.guarded.outcome, Outcome::New | Outcome::Changed))
        .filter_map(|p| {
            let bucket = planned.snapshot.service(&p.service)?.bucket(&p.bucket)?;
            Some(Explanation::of(p, bucket, &planned.commit, planned.now))
        })
        .collect()
}

/// The review section of the capacity guard: every bucket it lowered, and why.
fn capacity_section(plans: &[&BucketPlan]) -> Option<(String, String)> {
    let mut rows = String::from(
        "Limits lowered so that the deny limits that can be in force at once fit the planned \
         capacity × utilisation (capacity/<service>.yaml): every computed limit of the scope \
         × one factor, none below its floor.\n\n| bucket | before | after | why |\n|---|---:|---:|---|\n",
    );
    let mut any = false;
    for p in plans {
        for n in p.guarded.notes.iter().filter(|n| n.guard == "capacity") {
            any = true;
            rows.push_str(&format!(
                "| {}/{} | {} | {} | {} |\n",
                p.service,
                p.bucket,
                n.before.map_or("—".into(), crate::decide::guards::fmt_rps),
                n.after.map_or("—".into(), crate::decide::guards::fmt_rps),
                n.detail.replace('|', "\\|")
            ));
        }
    }
    any.then(|| ("Capacity".to_string(), rows))
}

/// The review section of scheduled limits: each bucket's limits for its events' windows
/// (and those the limits file keeps), and what was removed or could not be written.
fn scheduled_section(plans: &[&BucketPlan]) -> Option<(String, String)> {
    let mut rows = String::from(
        "| bucket | from | until | limit | outside | why |\n|---|---|---|---:|---:|---|\n",
    );
    let mut notes = String::new();
    let mut any = false;
    for p in plans {
        for e in &p.schedule.entries {
            any = true;
            let why = match (&e.event, &e.raise) {
                (Some(name), Some(raise)) => match e.wanted {
                    Some(w) => format!(
                        "event {name} ({raise}); capacity lowered it from {}",
                        crate::decide::guards::fmt_rps(w)
                    ),
                    None => format!("event {name} ({raise})"),
                },
                _ => format!("kept from the limits file ({})", e.reason),
            };
            rows.push_str(&format!(
                "| {}/{} | {} | {} | {} | {} | {} |\n",
                p.service,
                p.bucket,
                crate::input::capacity::utc(e.from),
                crate::input::capacity::utc(e.until),
                crate::decide::guards::fmt_rps(e.rps),
                p.guarded
                    .limit
                    .map_or("—".into(), crate::decide::guards::fmt_rps),
                why.replace('|', "\\|")
            ));
        }
        for n in &p.schedule.notes {
            any = true;
            notes.push_str(&format!("- {}/{}: {}\n", p.service, p.bucket, n));
        }
    }
    if !notes.is_empty() {
        rows.push('\n');
        rows.push_str(&notes);
    }
    any.then(|| ("Scheduled limits".to_string(), rows))
}

/// The review section of the shadow → deny lifecycle.
fn lifecycle_section(plans: &[&BucketPlan]) -> Option<(String, String)> {
    let mut rows = String::from(
        "| bucket | mode | verdict | drops (7 d) | days in shadow | why |\n|---|---|---|---:|---:|---|\n",
    );
    let mut any = false;
    for p in plans {
        let Some(v) = &p.lifecycle else { continue };
        if v.status == "ok" {
            continue;
        }
        any = true;
        rows.push_str(&format!(
            "| {}/{} | {} | {} | {:.3}% | {} | {} |\n",
            p.service,
            p.bucket,
            p.mode,
            v.status,
            v.drop_fraction * 100.0,
            v.days_in_shadow.map_or("—".into(), |d| format!("{d:.1}")),
            v.reason.replace('|', "\\|")
        ));
    }
    any.then(|| ("Shadow → deny".to_string(), rows))
}
