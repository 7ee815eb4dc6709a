//! A small client for GitHub's REST API: opens or updates the pull request that carries the
//! configurator's proposed limits.
//!
//! Only what the RLC needs is here: [`GitHubClient::upsert_pull_request`] finds the open pull
//! request for a head branch and updates its title and body, or creates one. The lookup pages
//! through every open pull request of the head (following `Link: rel="next"`), and a `422`
//! "already exists" on create (an open one the lookup missed) is resolved by looking again and
//! updating it. A closed or merged pull request is never reused: the next proposal opens a new
//! one. GitHub Enterprise works by passing its API base (`https://ghe.example.com/api/v3`);
//! a private CA by [`GitHubClient::with_extra_ca`].
//!
//! Answers are read incrementally and no further than used: at most [`MAX_ANSWER_BYTES`] of a
//! success ([`GitHubError::TooLarge`] past it), at most [`MAX_ERROR_BYTES`] of an error, whose
//! message is shown cut short.
//!
//! Another code host (GitLab, Gitea/Forgejo) goes in a module beside this one with the same
//! open-or-update call; the run needs nothing else from it.

use std::path::{Path, PathBuf};

use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use serde_json::json;

/// `User-Agent` sent with every request (GitHub rejects requests without one).
pub const USER_AGENT: &str = "grl-rlc";
/// REST API version pinned in the `X-GitHub-Api-Version` header.
pub const API_VERSION: &str = "2022-11-28";

/// The most of a success answer read, in bytes (16 MiB). The largest the RLC asks for is a
/// page of 100 pull requests, about 3 MB (some 25 KB each, their repositories included).
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// The most of an error answer read, in bytes: its message and details, cut to
/// 300 characters, are all that is shown.
pub const MAX_ERROR_BYTES: usize = 8 << 10;

/// Errors talking to the code host.
#[derive(Debug, thiserror::Error)]
pub enum GitHubError {
    /// The repository is not of the form `owner/name`.
    #[error("GitHub repository {0:?} is not of the form owner/name")]
    InvalidRepo(String),
    /// The API base is not a valid URL.
    #[error("GitHub API base {url:?} is not a valid URL: {reason}")]
    InvalidApiBase {
        /// The API base as given.
        url: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The request could not be sent or its answer not read.
    #[error("GitHub API {method} {url} failed: {source}")]
    Http {
        /// HTTP method.
        method: Method,
        /// Full URL of the request.
        url: String,
        /// Transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The API answered with an error status.
    #[error("GitHub API {method} {url} returned {status}: {message}")]
    Api {
        /// HTTP method.
        method: Method,
        /// Full URL of the request.
        url: String,
        /// Status returned.
        status: StatusCode,
        /// The API's `message` (and detailed `errors`), or the raw body.
        message: String,
    },
    /// The extra CA file could not be read or holds no PEM certificate.
    #[error("GitHub CA file {path}: {reason}")]
    Ca {
        /// The file as given.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// A `Link: rel="next"` pointed away from the API base (the token is never sent there).
    #[error("GitHub API {url} paged to {next}, outside the API base")]
    ForeignLink {
        /// The request whose answer held the link.
        url: String,
        /// Where the link pointed.
        next: String,
    },
    /// Create said an open pull request exists, yet no lookup found it.
    #[error(
        "GitHub says an open pull request from {head} into {base} exists, but the lookup does not list it"
    )]
    ExistsButNotListed {
        /// Head branch.
        head: String,
        /// Base branch.
        base: String,
    },
    /// The API answered with a success status and a body longer than [`MAX_ANSWER_BYTES`]
    /// (the rest was not read).
    #[error("GitHub API {method} {url} answered more than {limit} bytes; the rest was not read")]
    TooLarge {
        /// HTTP method.
        method: Method,
        /// Full URL of the request.
        url: String,
        /// The most read.
        limit: usize,
    },
    /// The API answered with a success status but a body we could not understand.
    #[error("GitHub API {method} {url} returned an unexpected body: {reason}")]
    Decode {
        /// HTTP method.
        method: Method,
        /// Full URL of the request.
        url: String,
        /// What was wrong with it.
        reason: String,
    },
}

/// A pull request as the RLC cares about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    /// Pull request number.
    pub number: u64,
    /// Web address of the pull request (`html_url`).
    pub url: String,
    /// `true` when this call created it, `false` when it updated an open one.
    pub created: bool,
}

/// The part of GitHub's pull-request object that is read.
#[derive(Debug, Deserialize)]
struct PullJson {
    number: u64,
    #[serde(default)]
    html_url: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    base: Option<RefJson>,
    #[serde(default)]
    merged_at: Option<String>,
}

/// `head` / `base` of a pull request: only the branch name is read.
#[derive(Debug, Deserialize)]
struct RefJson {
    #[serde(rename = "ref")]
    name: String,
}

/// Page size of the pull-request lookup (GitHub's maximum).
const PER_PAGE: &str = "100";
/// Upper bound on pages followed, so a server that links in a circle cannot hold a run.
const MAX_PAGES: usize = 100;

/// Client for one repository on a GitHub (or GitHub Enterprise) instance.
#[derive(Debug, Clone)]
pub struct GitHubClient {
    http: reqwest::Client,
    api_base: Url,
    token: String,
    repo: String,
    owner: String,
}

impl GitHubClient {
    /// Creates a client for `repo` (`owner/name`) at `api_base` (e.g. `https://api.github.com`),
    /// authenticating with `token`.
    pub fn new(api_base: &str, token: &str, repo: &str) -> Result<GitHubClient, GitHubError> {
        Self::with_extra_ca(api_base, token, repo, None)
    }

    /// Like [`GitHubClient::new`], also trusting the PEM certificates in `extra_ca` (a GitHub
    /// Enterprise behind a private CA) beside the system's roots.
    pub fn with_extra_ca(
        api_base: &str,
        token: &str,
        repo: &str,
        extra_ca: Option<&Path>,
    ) -> Result<GitHubClient, GitHubError> {
        let (owner, name) = repo
            .split_once('/')
            .filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
            .ok_or_else(|| GitHubError::InvalidRepo(repo.to_string()))?;
        let base = format!("{}/", api_base.trim_end_matches('/'));
        let api_base = Url::parse(&base).map_err(|e| GitHubError::InvalidApiBase {
            url: api_base.to_string(),
            reason: e.to_string(),
        })?;
        let mut builder = crate::https::client_builder().user_agent(USER_AGENT);
        if let Some(path) = extra_ca {
            builder = builder.tls_certs_merge(read_ca(path)?);
        }
        let http = builder.build().map_err(|source| GitHubError::Http {
            method: Method::GET,
            url: api_base.to_string(),
            source,
        })?;
        Ok(GitHubClient {
            http,
            api_base,
            token: token.to_string(),
            repo: format!("{owner}/{name}"),
            owner: owner.to_string(),
        })
    }

    /// Makes sure an open pull request from `head` into `base` carries `title` and `body`:
    /// updates the open one if there is one, otherwise creates it.
    pub async fn upsert_pull_request(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<PullRequest, GitHubError> {
        if let Some(number) = self.find_open(head, base).await? {
            return self.update(number, head, title, body).await;
        }
        let url = self.url(&format!("repos/{}/pulls", self.repo))?;
        let create = json!({ "title": title, "head": head, "base": base, "body": body });
        match self.send::<PullJson>(Method::POST, url, Some(create)).await {
            Ok((pr, _)) => {
                tracing::info!(number = pr.number, head, base, "pull request created");
                Ok(to_pull_request(pr, true))
            }
            Err(e) if is_already_exists(&e) => {
                tracing::info!(
                    head,
                    base,
                    "pull request exists though not listed; looking again"
                );
                match self.find_open(head, base).await? {
                    Some(number) => self.update(number, head, title, body).await,
                    None => Err(GitHubError::ExistsButNotListed {
                        head: head.to_string(),
                        base: base.to_string(),
                    }),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The pull request from `head` into `base` merged last (the first page of closed ones,
    /// newest first), if any.
    pub async fn last_merged(&self, head: &str, base: &str) -> Result<Option<u64>, GitHubError> {
        let mut url = self.url(&format!("repos/{}/pulls", self.repo))?;
        url.query_pairs_mut()
            .append_pair("head", &format!("{}:{head}", self.owner))
            .append_pair("base", base)
            .append_pair("state", "closed")
            .append_pair("per_page", PER_PAGE);
        let (closed, _) = self.send::<Vec<PullJson>>(Method::GET, url, None).await?;
        Ok(closed
            .into_iter()
            .filter(|pr| pr.merged_at.is_some())
            .max_by(|a, b| a.merged_at.cmp(&b.merged_at))
            .map(|pr| pr.number))
    }

    /// Adds a comment with `body` to pull request `number`.
    pub async fn comment(&self, number: u64, body: &str) -> Result<(), GitHubError> {
        let url = self.url(&format!("repos/{}/issues/{number}/comments", self.repo))?;
        self.send::<serde_json::Value>(Method::POST, url, Some(json!({ "body": body })))
            .await?;
        tracing::info!(number, "pull request commented");
        Ok(())
    }

    /// The number of the open pull request from `head` into `base`, paging through every
    /// open pull request of `head` (a head may be open against several bases).
    async fn find_open(&self, head: &str, base: &str) -> Result<Option<u64>, GitHubError> {
        let mut first = self.url(&format!("repos/{}/pulls", self.repo))?;
        first
            .query_pairs_mut()
            .append_pair("head", &format!("{}:{head}", self.owner))
            .append_pair("state", "open")
            .append_pair("per_page", PER_PAGE);
        let mut next = Some(first);
        let mut pages = 0;
        while let Some(url) = next.take() {
            pages += 1;
            let shown = url.to_string();
            let (open, link) = self.send::<Vec<PullJson>>(Method::GET, url, None).await?;
            if let Some(pr) = open
                .iter()
                .find(|pr| pr.base.as_ref().is_none_or(|b| b.name == base))
            {
                return Ok(Some(pr.number));
            }
            if let Some(n) = link.as_deref().and_then(next_link) {
                if !n.starts_with(self.api_base.as_str()) {
                    return Err(GitHubError::ForeignLink {
                        url: shown,
                        next: n.to_string(),
                    });
                }
                if pages < MAX_PAGES {
                    next = Some(self.url(n)?);
                }
            }
        }
        Ok(None)
    }

    async fn update(
        &self,
        number: u64,
        head: &str,
        title: &str,
        body: &str,
    ) -> Result<PullRequest, GitHubError> {
        let url = self.url(&format!("repos/{}/pulls/{number}", self.repo))?;
        let patch = json!({ "title": title, "body": body });
        let (pr, _) = self
            .send::<PullJson>(Method::PATCH, url, Some(patch))
            .await?;
        tracing::info!(number = pr.number, head, "pull request updated");
        Ok(to_pull_request(pr, false))
    }

    fn url(&self, path: &str) -> Result<Url, GitHubError> {
        self.api_base
            .join(path)
            .map_err(|e| GitHubError::InvalidApiBase {
                url: self.api_base.to_string(),
                reason: e.to_string(),
            })
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<serde_json::Value>,
    ) -> Result<(T, Option<String>), GitHubError> {
        let shown = url.to_string();
        let mut req = self
            .http
            .request(method.clone(), url)
            .bearer_auth(&self.token)
            .header(reqwest::header::ACCEPT, "application/vnd.github+json")
            .header("X-GitHub-Api-Version", API_VERSION);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let http_err = |source| GitHubError::Http {
            method: method.clone(),
            url: shown.clone(),
            source,
        };
        let resp = req.send().await.map_err(http_err)?;
        let status = resp.status();
        let link = resp
            .headers()
            .get(reqwest::header::LINK)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if !status.is_success() {
            let (body, _) = crate::https::read_capped(resp, MAX_ERROR_BYTES)
                .await
                .map_err(http_err)?;
            return Err(GitHubError::Api {
                method,
                url: shown,
                status,
                message: api_message(&String::from_utf8_lossy(&body)),
            });
        }
        let too_large = |method| GitHubError::TooLarge {
            method,
            url: shown.clone(),
            limit: MAX_ANSWER_BYTES,
        };
        if resp
            .content_length()
            .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
        {
            return Err(too_large(method));
        }
        let (body, cut) = crate::https::read_capped(resp, MAX_ANSWER_BYTES)
            .await
            .map_err(http_err)?;
        if cut {
            return Err(too_large(method));
        }
        let value = serde_json::from_slice(&body).map_err(|e| GitHubError::Decode {
            method,
            url: shown,
            reason: e.to_string(),
        })?;
        Ok((value, link))
    }
}

fn to_pull_request(pr: PullJson, created: bool) -> PullRequest {
    PullRequest {
        number: pr.number,
        url: pr.html_url.or(pr.url).unwrap_or_default(),
        created,
    }
}

/// Reads PEM certificates from `path`.
fn read_ca(path: &Path) -> Result<Vec<reqwest::Certificate>, GitHubError> {
    let err = |reason: String| GitHubError::Ca {
        path: path.to_path_buf(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// The `rel="next"` target of a `Link` header (RFC 8288), if any.
fn next_link(header: &str) -> Option<&str> {
    header.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let is_next = params.split(';').any(|p| {
            p.trim()
                .strip_prefix("rel=")
                .is_some_and(|r| r.trim_matches('"').split_whitespace().any(|r| r == "next"))
        });
        is_next.then(|| target.trim().trim_start_matches('<').trim_end_matches('>'))
    })
}

/// Whether `e` is GitHub's `422` for a pull request that already exists for the head.
fn is_already_exists(e: &GitHubError) -> bool {
    matches!(e, GitHubError::Api { status, message, .. }
        if *status == StatusCode::UNPROCESSABLE_ENTITY
            && message.to_ascii_lowercase().contains("already exists"))
}

/// Longest excerpt of a code host's error answer kept in a message.
const MAX_ERROR_EXCERPT: usize = 300;

/// Extracts GitHub's `message` and any `errors[].message`/`code` from an error body, as a
/// short excerpt scrubbed of secrets (a server may echo the request, token included).
fn api_message(body: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(body) else {
        let trimmed = body.trim();
        return if trimmed.is_empty() {
            "(empty body)".into()
        } else {
            crate::secrets::excerpt(trimmed, MAX_ERROR_EXCERPT)
        };
    };
    let mut msg = v["message"].as_str().unwrap_or("(no message)").to_string();
    let details: Vec<String> = v["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            e["message"]
                .as_str()
                .or_else(|| e["code"].as_str())
                .or_else(|| e.as_str())
                .map(str::to_string)
        })
        .collect();
    if !details.is_empty() {
        msg = format!("{msg} ({})", details.join("; "));
    }
    crate::secrets::excerpt(&msg, MAX_ERROR_EXCERPT)
}

/// A GitHub repository to open the review pull request in.
#[derive(Debug, Clone)]
pub struct GitHubTarget {
    /// API base URL, e.g. `https://api.github.com`.
    pub api_base: String,
    /// A token allowed to open pull requests.
    pub token: String,
    /// `owner/name`.
    pub repo: String,
    /// Extra PEM CA certificates to trust for the API (a private CA), beside the system's.
    pub ca_file: Option<std::path::PathBuf>,
}

#[cfg(test)]
mod tests;
