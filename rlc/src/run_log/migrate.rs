//! The run history's schema: the embedded migrations, and applying them when a
//! configurator connects, also while another process applies them to the same fresh file.

/// Schema of the run-history database, embedded from the workspace's `migrations/` folder.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Applies the migrations. PostgreSQL serialises concurrent migrators with an advisory
/// lock; SQLite has none, so two processes opening a fresh file at once both try the
/// same migration and one fails (its transaction rolls back): it tries again, and finds
/// the migrations applied by the other.
pub(super) async fn run(
    pool: &sqlx::AnyPool,
    sqlite: bool,
) -> Result<(), sqlx::migrate::MigrateError> {
    let attempts = if sqlite { 10 } else { 1 };
    let mut attempt = 1;
    loop {
        match MIGRATOR.run(pool).await {
            Err(e) if attempt < attempts => {
                tracing::debug!(error = %e, attempt, "migration raced another process; again");
                tokio::time::sleep(std::time::Duration::from_millis(20 * attempt)).await;
                attempt += 1;
            }
            done => return done,
        }
    }
}
