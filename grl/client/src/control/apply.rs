//! Applying what the control plane says: an instruction's config (the service's bucket
//! rules: books, cells and the pair table rebuilt), its ratios and allowances per bucket
//! (by name, or by index: read in `indexed`),
//! and the thresholds the hot path reads, written into every pair that belongs to a
//! bucket. Runs under the control lock ([`Inner::lock`]), never on the hot path.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};

use grl_core::proto;

use crate::Inner;
use crate::control::budget::Budget;
use crate::control::indexed::first_index_of;
use crate::control::{Control, budget, indexed};
use crate::decide::buckets::{Classes, RuleSet, threshold};
use crate::decide::table::PairTable;

/// Applies one instruction received at `now`.
pub(crate) fn apply_instruction(inner: &Inner, ins: &proto::Instruction, now: Instant) {
    let mut c = inner.lock();
    let default_valid = if ins.valid_for_ms > 0 {
        Duration::from_millis(ins.valid_for_ms.into())
    } else {
        inner.cfg.interval * inner.cfg.expiry_intervals
    };
    if ins.has_config {
        apply_config(inner, &mut c, ins);
    }
    c.indexing.heard(ins);
    let until = |valid_for_ms: u32| match valid_for_ms {
        0 => now + default_valid,
        ms => now + Duration::from_millis(ms.into()),
    };
    // Each bucket's (ratio, allowance) and validity: by name, then by index.
    let mut told: Vec<(u32, (f64, Option<f64>), u32)> = Vec::new();
    for r in ins.ratios.iter().filter(|r| r.service == inner.cfg.service) {
        match c.registry.get(&r.bucket).filter(|id| c.active.contains(id)) {
            Some(id) => told.push((id, (r.ratio, r.allowed), r.valid_for_ms)),
            None => debug!(bucket = %r.bucket, "ratio for a bucket not in the config, ignored"),
        }
    }
    told.extend(
        indexed::indexed_ratios(&c, ins)
            .into_iter()
            .map(|(id, r)| (id, (r.ratio, r.allowed), r.valid_for_ms)),
    );
    for (id, said, valid_for_ms) in told {
        apply_ratio(inner, &mut c, id, said, until(valid_for_ms), now);
    }
    c.valid_until = Some(now + default_valid);
    inner.fail_open.store(false, Ordering::Relaxed);
    inner.sync_pairs(&c.registry);
}

/// Applies one bucket's `(ratio, allowance)`, valid until `expires`, to cell `id`.
fn apply_ratio(
    inner: &Inner,
    c: &mut Control,
    id: u32,
    (ratio, allowed): (f64, Option<f64>),
    expires: Instant,
    now: Instant,
) {
    let book = &mut c.books[id as usize];
    book.expires = Some(expires);
    book.over_limit = ratio > 0.0;
    let had = book.allowed.is_some();
    // A bucket's first allowance at this client, before the tiers can have heard an
    // interval of its traffic, was shared from its first window or two: under the
    // limit it waits, as during a start. A spell whose first window held a lone
    // request is no start (see `Shape`), and `rlc demo`, on a loaded machine, dropped
    // requests of callers at half their limit on such a first allowance.
    let unheard = !had
        && book.shape.offered_in_ring() > 0
        && book.shape.spell_secs() < inner.cfg.interval.as_secs_f64();
    let starting = book.started_until.is_some_and(|t| now < t) || unheard;
    let said = allowed;
    let allowed = allowed
        .filter(|a| a.is_finite() && *a >= 0.0)
        .filter(|_| !(starting && ratio <= 0.0));
    // The tiers give a bucket no allowance while this client reports no traffic in it
    // (it applies the ratio until it does). Under the limit it keeps the allowance and
    // budget it had: a sparse caller's report is often empty for a while, and starting
    // its budget again at each return would drop its next requests.
    book.allowed = match (allowed, book.allowed) {
        (None, Some(old)) if ratio <= 0.0 => Some(old),
        (a, _) => a,
    };
    if let (false, Some(a)) = (had, book.allowed) {
        let phase = budget::phase_of(&inner.cfg.id, id);
        let share = book.local_share(a);
        // Under the limit by a sum that holds every client's traffic: one interval for
        // each client's report of its spell to come, one more for the tiers' tick and
        // the trip back. Before that the tiers may have heard only some of the clients
        // that began together, and their "under the limit" is not to be saved up on:
        // the budget holds only what the allowance refilled since the client's last
        // admitted request, up to one request (no credit).
        let heard = book.shape.spell_secs() >= 2.0 * inner.cfg.interval.as_secs_f64();
        book.budget = if ratio <= 0.0 && share > 0.0 && heard {
            Budget::starting_under_limit(phase, book.shape.credit_rate() / share)
        } else {
            Budget::resuming(phase, share * book.shape.secs_since_admitted())
        };
        book.unsettled = true;
    }
    if let (Some(a), Some((until, held))) = (book.allowed, book.hold) {
        if now < until {
            book.allowed = Some(a.max(held));
        } else {
            book.hold = None;
        }
    }
    let told = ratio;
    let w = inner.window_secs();
    let (ratio, room) = match book.allowed {
        Some(a) => {
            let share = book.local_share(a);
            let interval = inner.cfg.interval.as_secs_f64();
            let room = book.room(share, w, interval);
            (book.budget_ratio(share, w, interval), Some(room))
        }
        None => (ratio, None),
    };
    tracing::trace!(client = %inner.cfg.id, cell = id, told, ?said, starting, allowed = ?book.allowed, applied = ratio, ?room, "ratio applied");
    let cell = &c.registry.cells[id as usize];
    cell.threshold.store(threshold(ratio), Ordering::Relaxed);
    cell.room.set(room);
}

fn apply_config(inner: &Inner, c: &mut Control, ins: &proto::Instruction) {
    let rules = match RuleSet::from_wire(&ins.config, &inner.cfg.service) {
        Ok(rules) => rules,
        Err(e) => {
            warn!(version = %ins.config_version, error = %e, "config refused, keeping the last one");
            return;
        }
    };
    // Fold counts under the old bucket mapping before pairs move.
    inner.collect(c);
    let ids: Vec<u32> = rules.names.iter().map(|n| c.id(n)).collect();
    for (id, cell) in c.registry.cells.iter().enumerate() {
        inner.cells.publish(id as u32, cell.clone());
    }
    for &old in &c.active {
        if !ids.contains(&old) {
            let cell = &c.registry.cells[old as usize];
            cell.threshold.store(0, Ordering::Relaxed);
            cell.room.set(None);
            c.books[old as usize].forget_allowance();
            c.books[old as usize].shape.clear();
        }
    }
    for (id, mode) in ids.iter().zip(&rules.modes) {
        let shadow = *mode == grl_core::config::Mode::Shadow;
        c.registry.cells[*id as usize]
            .shadow
            .store(shadow, Ordering::Relaxed);
    }
    let resolver = rules.resolver(&inner.cfg.service, ids.clone(), c.registry.cells.clone());
    c.active = ids;
    c.version = ins.config_version.clone();
    c.indexing.first_index = first_index_of(&ins.config, &inner.cfg.service);
    for e in inner.table.iter() {
        let id = resolver.resolve(e.caller(), e.procedure());
        e.cell.store(id, Ordering::Relaxed);
        e.set_classes(resolver.classes_of(id).map(Classes::iter));
    }
    for e in inner.also.get().into_iter().flat_map(PairTable::iter) {
        e.cell.store(
            resolver.resolve_in_addition(e.caller(), e.procedure()),
            Ordering::Relaxed,
        );
    }
    let also_on = resolver.has_in_addition();
    inner
        .classes_on
        .store(resolver.has_classes(), Ordering::Relaxed);
    inner.resolver.store(Arc::new(resolver));
    inner.also_on.store(also_on, Ordering::Relaxed);
    debug!(version = %c.version, buckets = c.active.len(), "config applied");
}
