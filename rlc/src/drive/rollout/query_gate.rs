//! The optional gates on named Prometheus queries (`gates.prometheus` in `rollout.yaml`):
//! each query, with `{{region}}` replaced by the region's name, is asked as an instant query
//! after the bake; the largest value of its answer must be at or below the gate's `max`. An
//! answer without a value (no series) fails the gate: a region that cannot be measured
//! does not pass (write `… or vector(0)` where no series means zero).

use std::time::Duration;

use serde_json::Value;
use tracing::info;

use super::gates::GateFailure;
use super::waves_file::QueryGate;
use crate::secrets::{excerpt, redact_url};

/// The most of a Prometheus answer read.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// Asks each gate's query for `region` at `base` (a Prometheus URL); the failures.
pub async fn judge_queries(base: &str, region: &str, gates: &[QueryGate]) -> Vec<GateFailure> {
    let mut out = Vec::new();
    for g in gates {
        let query = g.query.replace("{{region}}", region);
        let fail = |observed: Option<f64>, detail: String| GateFailure {
            region: region.to_string(),
            gate: format!("prometheus:{}", g.name),
            bucket: None,
            predicted: Some(g.max),
            observed,
            detail,
        };
        let answer = instant_query(base, &query).await;
        if let Ok(value) = &answer {
            info!(
                region,
                gate = %format!("prometheus:{}", g.name),
                value = %value.map_or("none".into(), |v| v.to_string()),
                max = %g.max,
                "query gate read"
            );
        }
        match answer {
            Ok(Some(v)) if v <= g.max => {}
            Ok(Some(v)) => out.push(fail(
                Some(v),
                format!("query value {v} is above its max {}", g.max),
            )),
            Ok(None) => out.push(fail(
                None,
                "the query returned no value (no series): the region cannot be measured".into(),
            )),
            Err(e) => out.push(fail(None, e)),
        }
    }
    out
}

/// The largest value of `query`'s answer now (`None`: an empty answer).
async fn instant_query(base: &str, query: &str) -> Result<Option<f64>, String> {
    let shown = redact_url(base);
    let url = format!("{}/api/v1/query", base.trim_end_matches('/'));
    let client = crate::https::client_builder()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("prometheus at {shown}: {e}"))?;
    let resp = client
        .get(&url)
        .query(&[("query", query)])
        .send()
        .await
        .map_err(|e| format!("prometheus at {shown}: {}", e.without_url()))?;
    let status = resp.status();
    let (body, _) = crate::https::read_capped(resp, MAX_ANSWER_BYTES)
        .await
        .map_err(|e| format!("prometheus at {shown}: {}", e.without_url()))?;
    let text = String::from_utf8_lossy(&body);
    if !status.is_success() {
        return Err(format!(
            "prometheus at {shown} answered {status}: {}",
            excerpt(&text, 300)
        ));
    }
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| format!("prometheus at {shown}: unreadable answer: {e}"))?;
    Ok(largest(&v["data"]))
}

/// The largest finite value of an instant query's `data` (vector or scalar).
fn largest(data: &Value) -> Option<f64> {
    let value = |pair: &Value| pair.get(1)?.as_str()?.parse::<f64>().ok();
    let values: Vec<f64> = match data["resultType"].as_str() {
        Some("scalar") => value(&data["result"]).into_iter().collect(),
        Some("vector") => data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| value(&s["value"]))
            .collect(),
        _ => Vec::new(),
    };
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_largest_value_of_a_vector_or_a_scalar() {
        let v = json!({"resultType": "vector", "result": [
            {"metric": {}, "value": [1, "0.5"]},
            {"metric": {}, "value": [1, "2"]},
            {"metric": {}, "value": [1, "NaN"]}
        ]});
        assert_eq!(largest(&v), Some(2.0));
        assert_eq!(
            largest(&json!({"resultType": "scalar", "result": [1, "3"]})),
            Some(3.0)
        );
        assert_eq!(
            largest(&json!({"resultType": "vector", "result": []})),
            None
        );
    }
}
