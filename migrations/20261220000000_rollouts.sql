-- Staged rollouts (issue #27): each commit of main rolled out wave by wave of regions, the
-- place of every region, and every wave's verdict. Kept here so that a configurator that
-- restarts resumes the rollout where it was. Portable between SQLite and PostgreSQL: TEXT
-- ids, BIGINT unix milliseconds, TEXT JSON. A commit is rolled out at most once.

CREATE TABLE rlc_rollouts (
    id                 TEXT PRIMARY KEY,
    commit_id          TEXT NOT NULL UNIQUE,
    run_id             TEXT,
    plan               TEXT NOT NULL,
    predictions        TEXT NOT NULL,
    state              TEXT NOT NULL,
    wave               BIGINT NOT NULL,
    bake_started_at_ms BIGINT,
    expedite_reason    TEXT,
    reason             TEXT,
    requested          TEXT,
    owner              TEXT,
    heartbeat_at_ms    BIGINT,
    started_at_ms      BIGINT NOT NULL,
    finished_at_ms     BIGINT
);

CREATE INDEX rlc_rollouts_started_at ON rlc_rollouts (started_at_ms);

CREATE TABLE rlc_rollout_regions (
    rollout_id  TEXT NOT NULL REFERENCES rlc_rollouts (id),
    region      TEXT NOT NULL,
    wave        BIGINT NOT NULL,
    from_commit TEXT,
    state       TEXT NOT NULL,
    moved_at_ms BIGINT,
    baseline    TEXT,
    PRIMARY KEY (rollout_id, region)
);

CREATE TABLE rlc_rollout_waves (
    rollout_id TEXT NOT NULL REFERENCES rlc_rollouts (id),
    wave       BIGINT NOT NULL,
    result     TEXT NOT NULL,
    at_ms      BIGINT NOT NULL,
    failures   TEXT NOT NULL,
    PRIMARY KEY (rollout_id, wave)
);
