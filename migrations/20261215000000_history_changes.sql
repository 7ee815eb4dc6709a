-- Fleet-size run history: a run records only the buckets whose decision changed since the
-- bucket's last record (rlc_bucket_state holds that last decision), and a summary of all of
-- them; --history-retention deletes old runs with their recommendations.
ALTER TABLE rlc_runs ADD COLUMN summary TEXT;

CREATE TABLE rlc_bucket_state (
    service TEXT NOT NULL,
    bucket  TEXT NOT NULL,
    digest  TEXT NOT NULL,
    run_id  TEXT NOT NULL,
    PRIMARY KEY (service, bucket)
);
