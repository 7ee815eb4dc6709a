//! Which database a run-history URL names: normalising SQLite paths, and a display name that
//! never contains a password.

use super::RunLogError;
use std::path::PathBuf;

/// A parsed run-history database location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// An SQLite file (created with its parent directories if missing) or in-memory database.
    Sqlite {
        /// File path; `None` for an in-memory database.
        path: Option<PathBuf>,
        /// URL handed to sqlx (always opens with `mode=rwc` for files).
        url: String,
    },
    /// A PostgreSQL server.
    Postgres {
        /// URL handed to sqlx.
        url: String,
        /// `postgres://user@host:port/db` without the password.
        display: String,
    },
}

impl DatabaseUrl {
    /// Parses `sqlite://<path>`, `sqlite:<path>`, a bare file path, `sqlite::memory:`, or
    /// `postgres://` / `postgresql://` URLs.
    pub fn parse(raw: &str) -> Result<DatabaseUrl, RunLogError> {
        let raw = raw.trim();
        if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
            return Ok(DatabaseUrl::Postgres {
                url: raw.to_string(),
                display: redact(raw),
            });
        }
        if raw == "sqlite::memory:" || raw == "sqlite://:memory:" {
            return Ok(DatabaseUrl::Sqlite {
                path: None,
                url: "sqlite::memory:".into(),
            });
        }
        let rest = if let Some(rest) = raw.strip_prefix("sqlite://") {
            rest
        } else if let Some(rest) = raw.strip_prefix("sqlite:") {
            rest
        } else if raw.contains("://") || raw.is_empty() {
            return Err(RunLogError::UnsupportedUrl { url: redact(raw) });
        } else {
            raw
        };
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        if path.is_empty() {
            return Err(RunLogError::UnsupportedUrl {
                url: raw.to_string(),
            });
        }
        let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
        if !params.iter().any(|p| p.starts_with("mode=")) {
            params.push("mode=rwc");
        }
        Ok(DatabaseUrl::Sqlite {
            path: Some(PathBuf::from(path)),
            url: format!("sqlite://{path}?{}", params.join("&")),
        })
    }

    /// Whether this is an SQLite database.
    pub fn is_sqlite(&self) -> bool {
        matches!(self, DatabaseUrl::Sqlite { .. })
    }

    /// The URL to connect with.
    pub fn connect_url(&self) -> &str {
        match self {
            DatabaseUrl::Sqlite { url, .. } | DatabaseUrl::Postgres { url, .. } => url,
        }
    }

    /// A name for logs and errors: the SQLite path or the PostgreSQL URL without password.
    pub fn display_name(&self) -> String {
        match self {
            DatabaseUrl::Sqlite { path: Some(p), .. } => format!("sqlite://{}", p.display()),
            DatabaseUrl::Sqlite { path: None, .. } => "sqlite::memory:".into(),
            DatabaseUrl::Postgres { display, .. } => display.clone(),
        }
    }

    /// Creates the parent directories of an SQLite file.
    pub(super) fn prepare(&self) -> Result<(), RunLogError> {
        let DatabaseUrl::Sqlite {
            path: Some(path), ..
        } = self
        else {
            return Ok(());
        };
        match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => {
                std::fs::create_dir_all(dir).map_err(|source| RunLogError::CreateDir {
                    db: self.display_name(),
                    dir: dir.display().to_string(),
                    source,
                })
            }
            _ => Ok(()),
        }
    }
}

/// Removes the password (and query string) from a URL: `postgres://u:p@h/db` → `postgres://u@h/db`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{user}@{host}")
        }
        None => authority.to_string(),
    };
    if path.is_empty() {
        format!("{scheme}://{authority}")
    } else {
        format!("{scheme}://{authority}/{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_display_has_no_password() {
        let u = DatabaseUrl::parse("postgres://grl:s3cret@db.example:5432/rlc?sslmode=disable")
            .unwrap();
        assert_eq!(u.display_name(), "postgres://grl@db.example:5432/rlc");
        assert!(!u.is_sqlite());
        assert_eq!(
            u.connect_url(),
            "postgres://grl:s3cret@db.example:5432/rlc?sslmode=disable"
        );
    }

    #[test]
    fn sqlite_forms_open_read_write_create() {
        for raw in [
            "sqlite:///var/lib/rlc/h.db",
            "sqlite:/var/lib/rlc/h.db",
            "/var/lib/rlc/h.db",
        ] {
            let u = DatabaseUrl::parse(raw).unwrap();
            assert_eq!(
                u.connect_url(),
                "sqlite:///var/lib/rlc/h.db?mode=rwc",
                "{raw}"
            );
            assert_eq!(u.display_name(), "sqlite:///var/lib/rlc/h.db");
        }
        let u = DatabaseUrl::parse("sqlite://data/h.db?mode=ro").unwrap();
        assert_eq!(u.connect_url(), "sqlite://data/h.db?mode=ro");
    }

    #[test]
    fn other_schemes_are_refused_without_leaking_password() {
        let err = DatabaseUrl::parse("mysql://u:pw@h/db")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("mysql://u@h/db") && !err.contains("pw"),
            "{err}"
        );
    }
}
