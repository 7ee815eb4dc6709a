-- Who runs a run, and when it last showed it was alive: a run killed mid-way (its row left
-- `running`) is recognised by the next run and marked `aborted`.
ALTER TABLE rlc_runs ADD COLUMN owner TEXT;
ALTER TABLE rlc_runs ADD COLUMN heartbeat_at_ms BIGINT;
