//! A staged rollout's rows in the run log (the types are [`super::state`]'s): methods of
//! [`RunLog`] written by the process that drives a rollout, changed by operators (`rlc
//! rollout pause`, …) through compare-and-set updates, so that neither undoes the other.

use chrono::Utc;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::run_log::{Owner, RunLog, RunLogError, is_unique_violation};

use super::state::{RegionRecord, RegionState, RolloutRecord, RolloutState, WaveRecord};

/// `SELECT` of all `rlc_rollouts` columns, followed by `$rest`.
macro_rules! select_rollouts {
    ($rest:literal) => {
        concat!(
            "SELECT id, commit_id, run_id, plan, predictions, state, wave, bake_started_at_ms, \
             expedite_reason, reason, requested, owner, heartbeat_at_ms, started_at_ms, \
             finished_at_ms FROM rlc_rollouts ",
            $rest
        )
    };
}

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

impl RunLog {
    /// Records a new rollout with its regions; `false` when a rollout of the same commit
    /// exists already (another configurator started it).
    pub async fn insert_rollout(&self, r: &RolloutRecord) -> Result<bool, RunLogError> {
        let err = |e| self.query_err("record rollout", e);
        let mut tx = self.pool.begin().await.map_err(err)?;
        let inserted = sqlx::query(
            "INSERT INTO rlc_rollouts (id, commit_id, run_id, plan, predictions, state, wave, \
             expedite_reason, owner, heartbeat_at_ms, started_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(&r.id)
        .bind(&r.commit)
        .bind(r.run_id.as_deref())
        .bind(json(&r.plan))
        .bind(json(&r.predictions))
        .bind(r.state.as_str())
        .bind(r.wave as i64)
        .bind(r.expedite_reason.as_deref())
        .bind(r.owner.as_deref())
        .bind(r.heartbeat_at_ms)
        .bind(r.started_at_ms)
        .persistent(false)
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Ok(false),
            Err(e) => return Err(err(e)),
        }
        for region in &r.regions {
            sqlx::query(
                "INSERT INTO rlc_rollout_regions (rollout_id, region, wave, from_commit, state) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&r.id)
            .bind(&region.region)
            .bind(region.wave as i64)
            .bind(region.from_commit.as_deref())
            .bind(region.state.as_str())
            .persistent(false)
            .execute(&mut *tx)
            .await
            .map_err(err)?;
        }
        tx.commit().await.map_err(err)?;
        Ok(true)
    }

    /// One rollout by id, with its regions and waves.
    pub async fn rollout(&self, id: &str) -> Result<Option<RolloutRecord>, RunLogError> {
        let row = sqlx::query(select_rollouts!("WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.query_err("read rollout", e))?;
        self.full_rollout_of(row).await
    }

    /// The most recent rollout (the running or paused one first, if any).
    pub async fn latest_rollout(&self) -> Result<Option<RolloutRecord>, RunLogError> {
        if let Some(active) = self.active_rollout().await? {
            return Ok(Some(active));
        }
        let row = sqlx::query(select_rollouts!(
            "ORDER BY started_at_ms DESC, id DESC LIMIT 1"
        ))
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.query_err("read rollouts", e))?;
        self.full_rollout_of(row).await
    }

    /// The rollout still to be driven (running or paused), the oldest if several.
    pub async fn active_rollout(&self) -> Result<Option<RolloutRecord>, RunLogError> {
        let row = sqlx::query(select_rollouts!(
            "WHERE state IN ($1, $2) ORDER BY started_at_ms, id LIMIT 1"
        ))
        .bind(RolloutState::Running.as_str())
        .bind(RolloutState::Paused.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.query_err("read active rollout", e))?;
        self.full_rollout_of(row).await
    }

    /// The rollout of `commit`, if there was one.
    pub async fn rollout_of_commit(
        &self,
        commit: &str,
    ) -> Result<Option<RolloutRecord>, RunLogError> {
        let row = sqlx::query(select_rollouts!("WHERE commit_id = $1"))
            .bind(commit)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.query_err("read rollout", e))?;
        self.full_rollout_of(row).await
    }

    /// Makes `owner` the driver of rollout `id` unless a live process drives it: its owner
    /// is none, `owner` itself, a process of this host that is gone, or silent since
    /// `stale_before_ms`. Returns whether `owner` drives it now.
    pub async fn claim_rollout(
        &self,
        id: &str,
        owner: &str,
        stale_before_ms: i64,
    ) -> Result<bool, RunLogError> {
        let row = sqlx::query("SELECT owner, heartbeat_at_ms FROM rlc_rollouts WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.query_err("read rollout owner", e))?;
        let Some(row) = row else {
            return Ok(false);
        };
        let get = |e| self.query_err("read rollout owner", e);
        let current: Option<String> = row.try_get("owner").map_err(get)?;
        let beat: Option<i64> = row.try_get("heartbeat_at_ms").map_err(get)?;
        let free = match current.as_deref() {
            None => true,
            Some(o) if o == owner => true,
            Some(o) => {
                Owner::parse(o).is_some_and(|o| o.is_dead_local_process())
                    || beat.unwrap_or(0) < stale_before_ms
            }
        };
        if !free {
            return Ok(false);
        }
        let done = sqlx::query(
            "UPDATE rlc_rollouts SET owner = $1, heartbeat_at_ms = $2 \
             WHERE id = $3 AND COALESCE(owner, '') = $4",
        )
        .bind(owner)
        .bind(now_ms())
        .bind(id)
        .bind(current.as_deref().unwrap_or(""))
        .execute(&self.pool)
        .await
        .map_err(|e| self.query_err("claim rollout", e))?;
        Ok(done.rows_affected() == 1)
    }

    /// Shows that `owner` still drives rollout `id`; `false` when it no longer does.
    pub async fn rollout_heartbeat(&self, id: &str, owner: &str) -> Result<bool, RunLogError> {
        let done = sqlx::query(
            "UPDATE rlc_rollouts SET heartbeat_at_ms = $1 WHERE id = $2 AND owner = $3",
        )
        .bind(now_ms())
        .bind(id)
        .bind(owner)
        .execute(&self.pool)
        .await
        .map_err(|e| self.query_err("rollout heartbeat", e))?;
        Ok(done.rows_affected() == 1)
    }

    /// Leaves rollout `id` undriven (its driver stops), so the next one takes it at once.
    pub async fn release_rollout(&self, id: &str, owner: &str) -> Result<(), RunLogError> {
        sqlx::query("UPDATE rlc_rollouts SET owner = NULL WHERE id = $1 AND owner = $2")
            .bind(id)
            .bind(owner)
            .execute(&self.pool)
            .await
            .map_err(|e| self.query_err("release rollout", e))?;
        Ok(())
    }

    /// Records the wave in progress and when its bake started.
    pub async fn set_rollout_wave(
        &self,
        id: &str,
        wave: usize,
        bake_started_at_ms: Option<i64>,
    ) -> Result<(), RunLogError> {
        sqlx::query("UPDATE rlc_rollouts SET wave = $1, bake_started_at_ms = $2 WHERE id = $3")
            .bind(wave as i64)
            .bind(bake_started_at_ms)
            .bind(id)
            .persistent(false)
            .execute(&self.pool)
            .await
            .map_err(|e| self.query_err("record rollout wave", e))?;
        Ok(())
    }

    /// Moves rollout `id` to state `to` if it is in one of `from`, with `reason` (kept
    /// when `None`); a state that is not active also ends it and clears any request.
    /// Returns whether it moved.
    pub async fn set_rollout_state(
        &self,
        id: &str,
        from: &[RolloutState],
        to: RolloutState,
        reason: Option<&str>,
    ) -> Result<bool, RunLogError> {
        let states: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
        let placeholders: Vec<String> = (0..states.len()).map(|i| format!("${}", i + 5)).collect();
        let sql = format!(
            "UPDATE rlc_rollouts SET state = $1, reason = COALESCE($2, reason), \
             finished_at_ms = $3, requested = CASE WHEN $3 IS NULL THEN requested ELSE NULL END \
             WHERE id = $4 AND state IN ({})",
            placeholders.join(", ")
        );
        let finished = (!to.is_active()).then(now_ms);
        // Only numbered placeholders are formatted in; every value is bound.
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(to.as_str())
            .bind(reason.map(|r| crate::secrets::scrub(r).into_owned()))
            .bind(finished)
            .bind(id);
        for s in states {
            q = q.bind(s);
        }
        let done = q
            .persistent(false)
            .execute(&self.pool)
            .await
            .map_err(|e| self.query_err("change rollout state", e))?;
        Ok(done.rows_affected() == 1)
    }

    /// Asks the driver of rollout `id` to carry out `request` (`rollback`) if the rollout is
    /// in one of `states`; `None` clears the request. Returns whether it was recorded.
    pub async fn set_rollout_request(
        &self,
        id: &str,
        request: Option<&str>,
        states: &[RolloutState],
    ) -> Result<bool, RunLogError> {
        let placeholders: Vec<String> = (0..states.len()).map(|i| format!("${}", i + 3)).collect();
        let sql = format!(
            "UPDATE rlc_rollouts SET requested = $1 WHERE id = $2 AND state IN ({})",
            placeholders.join(", ")
        );
        // Only numbered placeholders are formatted in; every value is bound.
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(request).bind(id);
        for s in states {
            q = q.bind(s.as_str());
        }
        let done = q
            .persistent(false)
            .execute(&self.pool)
            .await
            .map_err(|e| self.query_err("record rollout request", e))?;
        Ok(done.rows_affected() == 1)
    }

    /// Records `reason` as why rollout `id` skips its bakes from now on (`rlc rollout
    /// expedite`), if it is running or paused; its driver reads it at its next poll and cuts
    /// the bake in progress short. Returns whether it was recorded.
    pub async fn set_rollout_expedite(&self, id: &str, reason: &str) -> Result<bool, RunLogError> {
        let done = sqlx::query(
            "UPDATE rlc_rollouts SET expedite_reason = $1 WHERE id = $2 AND state IN ($3, $4)",
        )
        .bind(crate::secrets::scrub(reason).into_owned())
        .bind(id)
        .bind(RolloutState::Running.as_str())
        .bind(RolloutState::Paused.as_str())
        .persistent(false)
        .execute(&self.pool)
        .await
        .map_err(|e| self.query_err("record rollout expedite", e))?;
        Ok(done.rows_affected() == 1)
    }

    /// Records where a region of rollout `id` is.
    pub async fn update_rollout_region(
        &self,
        id: &str,
        r: &RegionRecord,
    ) -> Result<(), RunLogError> {
        sqlx::query(
            "UPDATE rlc_rollout_regions SET from_commit = $1, state = $2, moved_at_ms = $3, \
             baseline = $4 WHERE rollout_id = $5 AND region = $6",
        )
        .bind(r.from_commit.as_deref())
        .bind(r.state.as_str())
        .bind(r.moved_at_ms)
        .bind(r.baseline.as_ref().map(json))
        .bind(id)
        .bind(&r.region)
        .persistent(false)
        .execute(&self.pool)
        .await
        .map_err(|e| self.query_err("record rollout region", e))?;
        Ok(())
    }

    /// Records a wave's verdict (replacing an earlier one of the same wave).
    pub async fn record_rollout_wave(&self, id: &str, w: &WaveRecord) -> Result<(), RunLogError> {
        sqlx::query(
            "INSERT INTO rlc_rollout_waves (rollout_id, wave, result, at_ms, failures) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (rollout_id, wave) DO UPDATE SET \
             result = excluded.result, at_ms = excluded.at_ms, failures = excluded.failures",
        )
        .bind(id)
        .bind(w.wave as i64)
        .bind(&w.result)
        .bind(w.at_ms)
        .bind(crate::secrets::scrub(&json(&w.failures)).into_owned())
        .execute(&self.pool)
        .await
        .map_err(|e| self.query_err("record rollout wave", e))?;
        Ok(())
    }

    /// [`Self::full_rollout`] of `row`, if there is one.
    async fn full_rollout_of(
        &self,
        row: Option<AnyRow>,
    ) -> Result<Option<RolloutRecord>, RunLogError> {
        match row {
            Some(row) => Ok(Some(self.full_rollout(&row).await?)),
            None => Ok(None),
        }
    }

    async fn full_rollout(&self, row: &AnyRow) -> Result<RolloutRecord, RunLogError> {
        let get = |e| self.query_err("read rollout", e);
        let id: String = row.try_get("id").map_err(get)?;
        let state: String = row.try_get("state").map_err(get)?;
        let plan: String = row.try_get("plan").map_err(get)?;
        let predictions: String = row.try_get("predictions").map_err(get)?;
        let wave: i64 = row.try_get("wave").map_err(get)?;
        let mut r = RolloutRecord {
            commit: row.try_get("commit_id").map_err(get)?,
            run_id: row.try_get("run_id").map_err(get)?,
            plan: self.parse_json(&id, &plan)?,
            predictions: self.parse_json(&id, &predictions)?,
            state: RolloutState::parse(&state)
                .ok_or_else(|| self.corrupt(format!("rollout {id} has state {state:?}")))?,
            wave: wave.max(0) as usize,
            bake_started_at_ms: row.try_get("bake_started_at_ms").map_err(get)?,
            expedite_reason: row.try_get("expedite_reason").map_err(get)?,
            reason: row.try_get("reason").map_err(get)?,
            requested: row.try_get("requested").map_err(get)?,
            owner: row.try_get("owner").map_err(get)?,
            heartbeat_at_ms: row.try_get("heartbeat_at_ms").map_err(get)?,
            started_at_ms: row.try_get("started_at_ms").map_err(get)?,
            finished_at_ms: row.try_get("finished_at_ms").map_err(get)?,
            regions: Vec::new(),
            waves: Vec::new(),
            id,
        };
        let regions = sqlx::query(
            "SELECT region, wave, from_commit, state, moved_at_ms, baseline \
             FROM rlc_rollout_regions WHERE rollout_id = $1 ORDER BY wave, region",
        )
        .bind(&r.id)
        .fetch_all(&self.pool)
        .await
        .map_err(get)?;
        for row in regions {
            let state: String = row.try_get("state").map_err(get)?;
            let wave: i64 = row.try_get("wave").map_err(get)?;
            let baseline: Option<String> = row.try_get("baseline").map_err(get)?;
            r.regions.push(RegionRecord {
                region: row.try_get("region").map_err(get)?,
                wave: wave.max(0) as usize,
                from_commit: row.try_get("from_commit").map_err(get)?,
                state: RegionState::parse(&state).ok_or_else(|| {
                    self.corrupt(format!("rollout {} has region state {state:?}", r.id))
                })?,
                moved_at_ms: row.try_get("moved_at_ms").map_err(get)?,
                baseline: baseline.map(|b| self.parse_json(&r.id, &b)).transpose()?,
            });
        }
        let waves = sqlx::query(
            "SELECT wave, result, at_ms, failures FROM rlc_rollout_waves \
             WHERE rollout_id = $1 ORDER BY wave",
        )
        .bind(&r.id)
        .fetch_all(&self.pool)
        .await
        .map_err(get)?;
        for row in waves {
            let wave: i64 = row.try_get("wave").map_err(get)?;
            let failures: String = row.try_get("failures").map_err(get)?;
            r.waves.push(WaveRecord {
                wave: wave.max(0) as usize,
                result: row.try_get("result").map_err(get)?,
                at_ms: row.try_get("at_ms").map_err(get)?,
                failures: self.parse_json(&r.id, &failures)?,
            });
        }
        Ok(r)
    }

    fn parse_json<T: serde::de::DeserializeOwned>(
        &self,
        id: &str,
        text: &str,
    ) -> Result<T, RunLogError> {
        serde_json::from_str(text)
            .map_err(|e| self.corrupt(format!("rollout {id} holds unreadable JSON: {e}")))
    }
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}
