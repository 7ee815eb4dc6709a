//! Scheduled limits against real processes: a limit in force only for a window starts and
//! ends on the controller's own clock, and `grl status`, its JSON and the metrics announce
//! the next change before it happens.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::operator::{Tiers, bucket, f, held};

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn rfc3339(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .unwrap()
        .to_rfc3339()
}

#[test]
fn a_scheduled_limit_starts_and_ends_on_the_controllers_clock_and_status_shows_it() {
    let t = Tiers::start(None);
    t.status_until("the checkout bucket held at its limit", held);
    let from = unix_now().ceil() as i64 + 5;
    let until = from + 5;
    std::fs::create_dir_all(t.dir.path().join("limits")).unwrap();
    std::fs::write(
        t.dir.path().join("limits/orders.yaml"),
        format!(
            "service: orders\nlimits:\n  checkout:\n    rps: 200\n    scheduled:\n      - rps: 900\n        \
             effective: {{ from: \"{}\", until: \"{}\" }}\n        reason: launch\n",
            rfc3339(from),
            rfc3339(until)
        ),
    )
    .unwrap();
    let v = t.status_until("the next change announced", |v| {
        bucket(v, "checkout")["next_change_unix"] == from
    });
    assert_eq!(f(bucket(&v, "checkout"), "next_limit_rps"), 900.0);
    assert!(unix_now() < from as f64, "announced before it starts");
    let metrics = Command::new("curl")
        .args(["-s", &format!("http://{}/metrics", t.page)])
        .output()
        .unwrap();
    let metrics = String::from_utf8(metrics.stdout).unwrap();
    assert!(
        metrics.contains(&format!(
            "grl_tier_limit_next_change_timestamp_seconds{{service=\"orders\",bucket=\"checkout\"}} {from}"
        )),
        "{metrics}"
    );
    let table = String::from_utf8(t.grl(&["status", "--controller", &t.ctl]).stdout).unwrap();
    assert!(
        table.contains(&format!(
            "900 from {}",
            rfc3339(from).replace("+00:00", "Z")
        )),
        "{table}"
    );

    // The switch: seen within a second of the start (status is polled every ~0.1 s).
    let (seen, _) = switch_to(&t, 900.0);
    assert!(
        seen >= from as f64 && seen < from as f64 + 1.0,
        "switched at {seen}, due {from}"
    );
    let v = t.status_until("admitted at the event's limit", |v| {
        (f(bucket(v, "checkout"), "admitted_rps") - 900.0).abs() < 150.0
    });
    assert!(unix_now() < until as f64, "{v}");
    assert_eq!(bucket(&v, "checkout")["next_change_unix"], until);
    assert_eq!(f(bucket(&v, "checkout"), "next_limit_rps"), 200.0);

    let (seen, v) = switch_to(&t, 200.0);
    assert!(
        seen >= until as f64 && seen < until as f64 + 1.0,
        "switched back at {seen}, due {until}"
    );
    assert!(
        bucket(&v, "checkout")["next_change_unix"].is_null(),
        "nothing scheduled after: {v}"
    );
}

/// Polls the controller's status until checkout's limit in force is `limit`: when that
/// was first seen (Unix seconds), and the answer.
fn switch_to(t: &Tiers, limit: f64) -> (f64, Value) {
    let start = Instant::now();
    loop {
        let v = t.status_json();
        if f(bucket(&v, "checkout"), "limit_rps") == limit {
            return (unix_now(), v);
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the limit never became {limit}: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
