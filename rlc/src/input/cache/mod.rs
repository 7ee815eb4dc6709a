//! The history cache: each bucket's fetched series, kept on disk between runs, so that a run
//! fetches from the metrics source only what is new since the last one.
//!
//! One append-only log per service (`<dir>/<service>-<hash>.log`) holds, per bucket and
//! measure, the series on the source's step grid (see the `record` module for the format).
//! A run reads the service's log, fetches from the source only the steps after the cached
//! ones (re-fetching the last two, for samples that arrived late), appends one record per
//! bucket and measure, and fsyncs. A record whose fingerprint (the source's identity — URL,
//! query template, steps — and the bucket's match rule) differs from the bucket's current
//! one is not used: that bucket is fetched in full.
//!
//! **Crash safety.** Records are framed with their length and CRC-32; reading stops at the
//! first record that is short or does not check, and the next write cuts the file there. A
//! write torn by a crash (or a truncated file) so loses the records after the tear — the
//! last step appended — and nothing else; a bucket whose entry is lost is fetched in full.
//! Compaction writes a new file, fsyncs it and renames it over the old one.
//!
//! **Bound.** A log is compacted once its oldest slot lies more than a day (less a
//! per-service offset of up to half a day, so services do not all compact in the same run)
//! before the service's longest window: it then keeps that window only, and only the
//! buckets of the current config. Logs of services no longer in the config are deleted.
//! The cache therefore holds at most the longest window any policy needs plus a day.

mod record;

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::input::source::{Measure, RangeSeries};
use record::{Kind, MAGIC, Record, fnv64};

/// Seconds in a day.
pub const DAY: i64 = 86_400;

/// Cached steps fetched again at each run (samples may reach the source late).
pub const REFETCH_STEPS: i64 = 2;

/// The cache could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("history cache {path}: {source}")]
pub struct CacheError {
    /// The file or directory.
    pub path: String,
    /// Cause.
    #[source]
    pub source: std::io::Error,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CacheError + '_ {
    move |source| CacheError {
        path: path.display().to_string(),
        source,
    }
}

/// The cache directory.
#[derive(Debug, Clone)]
pub struct HistoryCache {
    dir: PathBuf,
}

/// Identifies what a cached series was fetched with: the source's identity and the bucket's
/// match rule (a change of either makes the entry unusable).
pub fn fingerprint(source_identity: &str, caller: Option<&str>, procedure: Option<&str>) -> u64 {
    fnv64(&[
        source_identity,
        caller.unwrap_or("\u{0}none"),
        procedure.unwrap_or("\u{0}none"),
    ])
}

/// The first step-grid time at or after `t`.
pub fn grid_ceil(t: i64, step: i64) -> i64 {
    t.div_euclid(step) * step + if t.rem_euclid(step) == 0 { 0 } else { step }
}

impl HistoryCache {
    /// Opens (creating it if needed) the cache in `dir`.
    pub fn open(dir: &Path) -> Result<Self, CacheError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        Ok(HistoryCache {
            dir: dir.to_path_buf(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The log file of `service`.
    pub fn path(&self, service: &str) -> PathBuf {
        let safe: String = service
            .chars()
            .take(48)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir
            .join(format!("{safe}-{:016x}.log", fnv64(&[service])))
    }

    /// Reads `service`'s log (an absent or foreign file is an empty log).
    pub fn load(&self, service: &str) -> Result<ServiceLog, CacheError> {
        let path = self.path(service);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let mut log = ServiceLog {
            service: service.to_string(),
            path,
            entries: HashMap::new(),
            good_len: 0,
            file_len: bytes.len() as u64,
            pending: Vec::new(),
        };
        if !bytes.starts_with(MAGIC) {
            return Ok(log);
        }
        let (records, len) = Record::decode_all(&bytes[MAGIC.len()..]);
        log.good_len = (MAGIC.len() + len) as u64;
        if log.good_len < log.file_len {
            tracing::warn!(
                path = %log.path.display(),
                kept_bytes = log.good_len,
                torn_bytes = log.file_len - log.good_len,
                "history cache log ends in a torn or corrupt record; it is cut there"
            );
        }
        for r in records {
            log.apply(r);
        }
        Ok(log)
    }

    /// Deletes the logs of services not in `services`; returns how many.
    pub fn retain_services<'a>(
        &self,
        services: impl IntoIterator<Item = &'a str>,
    ) -> Result<usize, CacheError> {
        let keep: BTreeSet<PathBuf> = services.into_iter().map(|s| self.path(s)).collect();
        let mut removed = 0;
        for entry in std::fs::read_dir(&self.dir).map_err(io_err(&self.dir))? {
            let path = entry.map_err(io_err(&self.dir))?.path();
            let ours = path.extension().is_some_and(|x| x == "log" || x == "tmp");
            if ours && !keep.contains(&path) {
                std::fs::remove_file(&path).map_err(io_err(&path))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Bytes the cache takes on disk.
    pub fn disk_bytes(&self) -> u64 {
        std::fs::read_dir(&self.dir).map_or(0, |d| {
            d.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
    }
}

/// One bucket's cached series for one measure: slots `from, from + step, …` (NaN: no point).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// What the series was fetched with (see [`fingerprint`]).
    pub fingerprint: u64,
    /// Seconds between slots.
    pub step: i64,
    /// Grid time of the first slot.
    pub from: i64,
    /// One value per slot.
    pub values: Vec<f64>,
}

impl Entry {
    /// Grid time of the last slot (`from - step` when empty).
    pub fn to(&self) -> i64 {
        self.from + (self.values.len() as i64 - 1) * self.step
    }
}

/// One service's log, read into memory, with the records a run adds to it.
#[derive(Debug)]
pub struct ServiceLog {
    service: String,
    path: PathBuf,
    entries: HashMap<(String, Measure), Entry>,
    /// Bytes of whole records at the file's start (a torn tail beyond is cut).
    good_len: u64,
    file_len: u64,
    pending: Vec<u8>,
}

impl ServiceLog {
    /// The entry of `bucket` and `measure`, if cached.
    pub fn entry(&self, bucket: &str, measure: Measure) -> Option<&Entry> {
        self.entries.get(&(bucket.to_string(), measure))
    }

    /// The cached points of `bucket`/`measure` in `[start, end]`, if the entry was fetched
    /// with `fingerprint` and covers every step of that range.
    pub fn series(
        &self,
        bucket: &str,
        measure: Measure,
        fingerprint: u64,
        start: i64,
        end: i64,
    ) -> Option<RangeSeries> {
        let e = self.entry(bucket, measure)?;
        let first = grid_ceil(start, e.step);
        let last = end.div_euclid(e.step) * e.step;
        if e.fingerprint != fingerprint || e.from > first || e.to() < last {
            return None;
        }
        let points = e
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| (e.from + i as i64 * e.step, *v))
            .filter(|&(t, v)| t >= first && t <= last && !v.is_nan())
            .collect();
        Some(RangeSeries {
            step_secs: e.step,
            points,
            invalid: 0,
        })
    }

    /// Stores a series fetched over `[start, end]`. With `tail` the entry keeps its slots
    /// before the first step of the range (refused — `false` — unless the entry has the
    /// same fingerprint and step and reaches that step); otherwise it is replaced.
    pub fn store(
        &mut self,
        bucket: &str,
        measure: Measure,
        fingerprint: u64,
        series: &RangeSeries,
        (start, end): (i64, i64),
        tail: bool,
    ) -> bool {
        let step = series.step_secs.max(1);
        let first = grid_ceil(start, step);
        let last = end.div_euclid(step) * step;
        if first > last {
            return !tail;
        }
        if tail {
            let ok = self.entry(bucket, measure).is_some_and(|e| {
                e.fingerprint == fingerprint
                    && e.step == step
                    && e.from <= first
                    && first <= e.to() + step
            });
            if !ok {
                return false;
            }
        }
        let mut values = vec![f64::NAN; ((last - first) / step + 1) as usize];
        for &(t, v) in &series.points {
            let slot = grid_ceil(t, step);
            if (first..=last).contains(&slot) {
                values[((slot - first) / step) as usize] = v;
            }
        }
        let r = Record {
            kind: if tail { Kind::Tail } else { Kind::Full },
            bucket: bucket.to_string(),
            measure,
            fingerprint,
            step,
            from: first,
            values,
        };
        r.encode(&mut self.pending);
        self.apply(r);
        true
    }

    /// Forgets a bucket's entry (a series that cannot be cached, such as one holding
    /// values that are no rate): it is fetched in full next time.
    pub fn forget(&mut self, bucket: &str, measure: Measure) {
        if self
            .entries
            .remove(&(bucket.to_string(), measure))
            .is_some()
        {
            Record {
                kind: Kind::Full,
                bucket: bucket.to_string(),
                measure,
                fingerprint: 0,
                step: 1,
                from: 0,
                values: Vec::new(),
            }
            .encode(&mut self.pending);
        }
    }

    fn apply(&mut self, r: Record) {
        let key = (r.bucket, r.measure);
        match r.kind {
            Kind::Full if r.values.is_empty() => {
                self.entries.remove(&key);
            }
            Kind::Full => {
                self.entries.insert(
                    key,
                    Entry {
                        fingerprint: r.fingerprint,
                        step: r.step,
                        from: r.from,
                        values: r.values,
                    },
                );
            }
            Kind::Tail => {
                if let Some(e) = self.entries.get_mut(&key)
                    && e.fingerprint == r.fingerprint
                    && e.step == r.step
                    && e.from <= r.from
                    && r.from <= e.to() + e.step
                {
                    e.values.truncate(((r.from - e.from) / e.step) as usize);
                    e.values.extend(r.values);
                }
            }
        }
    }

    /// Writes what was stored since the log was read: appended and fsynced, or — when the
    /// log holds more than `keep_secs` (the service's longest window) plus a day before
    /// `now`, or has grown to several times its content — compacted into a new file that
    /// keeps `keep_secs` of the buckets in `live` only. Returns whether it compacted.
    pub fn save(
        &mut self,
        now: i64,
        keep_secs: i64,
        live: &BTreeSet<String>,
    ) -> Result<bool, CacheError> {
        let oldest = self.entries.values().map(|e| e.from).min();
        // Half a day to a day, fixed per service: services compact in different runs.
        let offset = DAY / 2 + (fnv64(&[&self.service]) % (DAY as u64 / 2)) as i64;
        let aged = oldest.is_some_and(|o| o < now - keep_secs - offset);
        let content: usize = self.entries.values().map(|e| 64 + e.values.len() * 9).sum();
        let bloated = self.good_len as usize > 4 * content + (1 << 20);
        if aged || bloated {
            self.compact(now - keep_secs, live)?;
            return Ok(true);
        }
        if self.pending.is_empty() {
            return Ok(false);
        }
        let path = &self.path;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(io_err(path))?;
        if self.good_len == 0 {
            f.set_len(0).map_err(io_err(path))?;
            f.write_all(MAGIC).map_err(io_err(path))?;
            self.good_len = MAGIC.len() as u64;
        } else if self.file_len > self.good_len {
            f.set_len(self.good_len).map_err(io_err(path))?;
        }
        use std::io::Seek;
        f.seek(std::io::SeekFrom::Start(self.good_len))
            .map_err(io_err(path))?;
        f.write_all(&self.pending).map_err(io_err(path))?;
        f.sync_data().map_err(io_err(path))?;
        self.good_len += self.pending.len() as u64;
        self.file_len = self.good_len;
        self.pending.clear();
        Ok(false)
    }

    /// Rewrites the log with one full record per live entry, cut to start at `keep_from`.
    fn compact(&mut self, keep_from: i64, live: &BTreeSet<String>) -> Result<(), CacheError> {
        self.entries.retain(|(bucket, _), _| live.contains(bucket));
        let mut bytes = MAGIC.to_vec();
        let mut keys: Vec<_> = self.entries.keys().cloned().collect();
        keys.sort_by(|a, b| (&a.0, a.1.as_str()).cmp(&(&b.0, b.1.as_str())));
        for key in keys {
            let e = self.entries.get_mut(&key).expect("key listed");
            let first = grid_ceil(keep_from, e.step).max(e.from);
            let skip = ((first - e.from) / e.step) as usize;
            e.values.drain(..skip.min(e.values.len()));
            e.from = first;
            if e.values.is_empty() {
                continue;
            }
            Record {
                kind: Kind::Full,
                bucket: key.0.clone(),
                measure: key.1,
                fingerprint: e.fingerprint,
                step: e.step,
                from: e.from,
                values: e.values.clone(),
            }
            .encode(&mut bytes);
        }
        let tmp = self.path.with_extension("tmp");
        {
            let mut f = std::fs::File::create(&tmp).map_err(io_err(&tmp))?;
            f.write_all(&bytes).map_err(io_err(&tmp))?;
            f.sync_all().map_err(io_err(&tmp))?;
        }
        self.entries.retain(|_, e| !e.values.is_empty());
        std::fs::rename(&tmp, &self.path).map_err(io_err(&self.path))?;
        if let Some(dir) = self.path.parent()
            && let Ok(d) = std::fs::File::open(dir)
        {
            let _ = d.sync_all();
        }
        self.good_len = bytes.len() as u64;
        self.file_len = self.good_len;
        self.pending.clear();
        tracing::debug!(service = %self.service, bytes = bytes.len(), "history cache log compacted");
        Ok(())
    }
}

#[cfg(test)]
mod tests;
