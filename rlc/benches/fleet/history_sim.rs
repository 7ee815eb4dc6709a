//! The OpenMetrics export of the fleet's series, and (from the tests, `fleet_history.rs`)
//! 30 simulated days of run history at a five-minute cadence at fleet size.

use std::path::Path;

#[path = "../../tests/fleet_history.rs"]
#[allow(dead_code)]
mod fleet_history;
pub(crate) use fleet_history::simulate;

use super::synthetic;

/// Writes the fleet's series (`callers` × 4 a service) as `grl_requests_total` counters
/// (1-minute samples from `start` to `end`) for promtool.
pub(crate) fn write_openmetrics(
    path: &Path,
    (services, callers): (usize, usize),
    start: i64,
    end: i64,
    origin: i64,
) {
    let mut specs = Vec::new();
    for s in 0..services {
        for p in 0..callers * synthetic::PROCEDURES {
            let (caller, procedure) = synthetic::pair(s, p);
            specs.push(test_support::traffic::CounterSpec {
                labels: format!(
                    r#"service="{}",caller="{caller}",procedure="{procedure}",bucket="",decision="allowed""#,
                    synthetic::service(s)
                ),
                rate: Box::new(move |t| synthetic::rate(s, p, t, origin)),
            });
        }
    }
    test_support::traffic::write_counters_file(path, &specs, start, end, 60).unwrap();
    eprintln!("wrote {} series to {}", specs.len(), path.display());
}
