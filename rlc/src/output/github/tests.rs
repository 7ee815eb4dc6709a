//! The GitHub client against a local HTTP server speaking the REST API's answers: paging,
//! the create race, bounded answers, and error messages that never carry a token.

use super::*;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method as AxMethod, StatusCode as AxStatus, Uri};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use tokio::sync::Mutex;

/// One request as the stub saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path_and_query: String,
    headers: HeaderMap,
    body: serde_json::Value,
}

/// Stub state: recorded requests, open pull requests by head, and an optional forced error.
#[derive(Default)]
struct Stub {
    seen: Vec<Seen>,
    open: Vec<(String, u64)>,
    fail: Option<(u16, serde_json::Value)>,
}

type Shared = Arc<Mutex<Stub>>;

async fn handle(
    State(stub): State<Shared>,
    method: AxMethod,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut s = stub.lock().await;
    let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    let pq = uri
        .path_and_query()
        .map(std::string::ToString::to_string)
        .unwrap_or_default();
    s.seen.push(Seen {
        method: method.to_string(),
        path_and_query: pq,
        headers,
        body: body.clone(),
    });
    if let Some((code, err)) = s.fail.clone() {
        return (AxStatus::from_u16(code).unwrap(), axum::Json(err)).into_response();
    }
    let pr = |n: u64| json!({ "number": n, "html_url": format!("https://github.example/acme/config/pull/{n}") });
    match (method.as_str(), uri.path()) {
        ("GET", "/repos/acme/config/pulls") => {
            let want = uri.query().unwrap_or_default().to_string();
            let list: Vec<_> = s
                .open
                .iter()
                .filter(|(head, _)| {
                    want.contains(&format!("head=acme%3A{}", head.replace('/', "%2F")))
                })
                .map(|(_, n)| pr(*n))
                .collect();
            axum::Json(serde_json::Value::Array(list)).into_response()
        }
        ("POST", "/repos/acme/config/pulls") => {
            let n = 42 + s.open.len() as u64;
            let head = body["head"].as_str().unwrap_or_default().to_string();
            s.open.push((head, n));
            (AxStatus::CREATED, axum::Json(pr(n))).into_response()
        }
        ("PATCH", path) if path.starts_with("/repos/acme/config/pulls/") => {
            let n: u64 = path.rsplit('/').next().unwrap().parse().unwrap();
            axum::Json(pr(n)).into_response()
        }
        _ => AxStatus::NOT_FOUND.into_response(),
    }
}

/// Starts the stub on a free local port; returns its base URL and state.
async fn start_stub() -> (String, Shared) {
    let stub: Shared = Arc::default();
    let app = Router::new().fallback(handle).with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/"), stub)
}

#[tokio::test]
async fn creates_then_updates_pull_request() {
    let (base, stub) = start_stub().await;
    let gh = GitHubClient::new(&base, "s3cret", "acme/config").unwrap();

    let first = gh
        .upsert_pull_request("rlc/limits", "main", "RLC limits", "body 1")
        .await
        .unwrap();
    assert_eq!(
        first,
        PullRequest {
            number: 42,
            url: "https://github.example/acme/config/pull/42".into(),
            created: true
        }
    );
    let second = gh
        .upsert_pull_request("rlc/limits", "main", "RLC limits v2", "body 2")
        .await
        .unwrap();
    assert_eq!((second.number, second.created), (42, false));

    let s = stub.lock().await;
    let calls: Vec<(&str, &str)> = s
        .seen
        .iter()
        .map(|r| (r.method.as_str(), r.path_and_query.as_str()))
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "GET",
                "/repos/acme/config/pulls?head=acme%3Arlc%2Flimits&state=open&per_page=100"
            ),
            ("POST", "/repos/acme/config/pulls"),
            (
                "GET",
                "/repos/acme/config/pulls?head=acme%3Arlc%2Flimits&state=open&per_page=100"
            ),
            ("PATCH", "/repos/acme/config/pulls/42"),
        ]
    );
    for r in &s.seen {
        assert_eq!(r.headers["authorization"], "Bearer s3cret");
        assert_eq!(r.headers["accept"], "application/vnd.github+json");
        assert_eq!(r.headers["user-agent"], "grl-rlc");
        assert_eq!(r.headers["x-github-api-version"], "2022-11-28");
    }
    assert_eq!(
        s.seen[1].body,
        json!({ "title": "RLC limits", "head": "rlc/limits", "base": "main", "body": "body 1" })
    );
    assert_eq!(
        s.seen[3].body,
        json!({ "title": "RLC limits v2", "body": "body 2" })
    );
}

#[tokio::test]
async fn unauthorized_is_a_clear_error() {
    let (base, stub) = start_stub().await;
    stub.lock().await.fail = Some((401, json!({ "message": "Bad credentials" })));
    let gh = GitHubClient::new(&base, "wrong", "acme/config").unwrap();
    let err = gh
        .upsert_pull_request("rlc/limits", "main", "t", "b")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            GitHubError::Api {
                status: StatusCode::UNAUTHORIZED,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("401") && msg.contains("Bad credentials"),
        "{msg}"
    );
    assert!(
        msg.contains("GET") && msg.contains("/repos/acme/config/pulls"),
        "{msg}"
    );
}

#[tokio::test]
async fn validation_failure_names_status_and_details() {
    let (base, stub) = start_stub().await;
    stub.lock().await.fail = Some((
        422,
        json!({ "message": "Validation Failed", "errors": [{ "message": "No commits between main and rlc/limits" }] }),
    ));
    let gh = GitHubClient::new(&base, "t", "acme/config").unwrap();
    let msg = gh
        .upsert_pull_request("rlc/limits", "main", "t", "b")
        .await
        .unwrap_err()
        .to_string();
    assert!(msg.contains("422"), "{msg}");
    assert!(
        msg.contains("Validation Failed (No commits between main and rlc/limits)"),
        "{msg}"
    );
}

#[test]
fn next_link_is_read_from_any_position() {
    let h = r#"<https://api.github.com/repositories/1/pulls?page=1>; rel="prev", <https://api.github.com/repositories/1/pulls?page=3>; rel="next", <https://api.github.com/repositories/1/pulls?page=9>; rel="last""#;
    assert_eq!(
        next_link(h),
        Some("https://api.github.com/repositories/1/pulls?page=3")
    );
    assert_eq!(next_link(r#"<https://x/a?page=1>; rel="first""#), None);
    assert_eq!(next_link(""), None);
}

#[test]
fn a_missing_or_empty_ca_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.pem");
    let err = GitHubClient::with_extra_ca("https://h/", "t", "a/b", Some(&missing)).unwrap_err();
    assert!(
        matches!(err, GitHubError::Ca { .. }) && err.to_string().contains("nope.pem"),
        "{err}"
    );
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let err = GitHubClient::with_extra_ca("https://h/", "t", "a/b", Some(&empty)).unwrap_err();
    assert!(err.to_string().contains("no PEM certificate"), "{err}");
}

#[test]
fn rejects_malformed_repo() {
    for bad in ["acme", "/config", "acme/", "a/b/c"] {
        let err = GitHubClient::new("https://api.github.com", "t", bad).unwrap_err();
        assert!(matches!(err, GitHubError::InvalidRepo(_)), "{bad}: {err:?}");
    }
}
