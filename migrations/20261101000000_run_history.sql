-- Run history of the Rate Limit Configurator (RLC).
-- Portable between SQLite and PostgreSQL: TEXT ids, BIGINT unix milliseconds, TEXT JSON.

CREATE TABLE rlc_runs (
    id             TEXT PRIMARY KEY,
    trigger_source TEXT NOT NULL,
    mode           TEXT NOT NULL,
    started_at_ms  BIGINT NOT NULL,
    finished_at_ms BIGINT,
    status         TEXT NOT NULL,
    commit_id      TEXT,
    error          TEXT
);

CREATE INDEX rlc_runs_started_at ON rlc_runs (started_at_ms);

CREATE TABLE rlc_recommendations (
    run_id         TEXT NOT NULL REFERENCES rlc_runs (id),
    service        TEXT NOT NULL,
    bucket         TEXT NOT NULL,
    policy         TEXT NOT NULL,
    previous_limit DOUBLE PRECISION,
    proposed_limit DOUBLE PRECISION,
    applied_limit  DOUBLE PRECISION,
    outcome        TEXT NOT NULL,
    evidence       TEXT NOT NULL,
    PRIMARY KEY (run_id, service, bucket)
);
