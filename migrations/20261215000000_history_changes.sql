-- Fleet-size run history: a run records only the buckets whose decision changed since the
-- bucket's last record (rlc_service_state holds, per service, each bucket's last recorded
-- decision), and a summary of all of them; --history-retention deletes old runs with their
-- recommendations.
ALTER TABLE rlc_runs ADD COLUMN summary TEXT;

CREATE TABLE rlc_service_state (
    service TEXT PRIMARY KEY,
    digests TEXT NOT NULL,
    run_id  TEXT NOT NULL
);
