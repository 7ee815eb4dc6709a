//! Fresh PostgreSQL databases for tests, one per test, dropped when the guard is dropped.
//!
//! The server comes from `GRL_TEST_PG_URL` (for example
//! `postgres://grl:grl@127.0.0.1:5432/grl`), a role allowed to create databases;
//! `bash tests/run.sh` starts PostgreSQL and sets it. Databases are created and dropped with
//! `psql`, so the guard can clean up in a synchronous `Drop`.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, ensure};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A database created for one test; dropped (`DROP DATABASE ... WITH (FORCE)`) on drop.
#[derive(Debug)]
pub struct TestDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl TestDatabase {
    /// The URL of this database, for example `postgres://grl:grl@127.0.0.1:5432/grl_test_...`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        if let Err(e) = psql(&self.admin_url, &sql) {
            eprintln!("warning: could not drop test database {}: {e:#}", self.name);
        }
    }
}

/// The admin URL from `GRL_TEST_PG_URL`, or an error saying how to get one.
pub fn admin_url() -> Result<String> {
    std::env::var("GRL_TEST_PG_URL").context(
        "GRL_TEST_PG_URL is not set: run tests via `bash tests/run.sh`, which starts \
         PostgreSQL and sets it",
    )
}

/// Creates a uniquely named, empty database on the server of `GRL_TEST_PG_URL`.
pub fn fresh_database() -> Result<TestDatabase> {
    let admin_url = admin_url()?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .subsec_nanos();
    let name = format!(
        "grl_test_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    psql(&admin_url, &format!("CREATE DATABASE \"{name}\""))?;
    let url = with_database(&admin_url, &name)?;
    Ok(TestDatabase {
        admin_url,
        name,
        url,
    })
}

/// `url` with its database (the path) replaced by `name`; query parameters are kept.
fn with_database(url: &str, name: &str) -> Result<String> {
    let scheme_end = url.find("://").context("a postgres URL has a scheme")? + 3;
    let (base, query) = match url.find('?') {
        Some(q) => (&url[..q], &url[q..]),
        None => (url, ""),
    };
    let host_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    Ok(format!("{}/{name}{query}", &base[..host_end]))
}

/// Runs one SQL statement with `psql`, failing on any error.
fn psql(url: &str, sql: &str) -> Result<()> {
    let out = Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
        .output()
        .context("running psql (installed with PostgreSQL by `bash tests/run.sh`)")?;
    ensure!(
        out.status.success(),
        "psql `{sql}` failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_database_in_a_url() {
        let url = "postgres://grl:grl@127.0.0.1:5432/grl";
        assert_eq!(
            with_database(url, "x").unwrap(),
            "postgres://grl:grl@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://h:1/db?sslmode=disable", "x").unwrap(),
            "postgres://h:1/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h", "x").unwrap(),
            "postgres://h/x"
        );
    }
}
