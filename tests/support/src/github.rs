//! A stand-in for GitHub's pull-request REST API over HTTPS with a test CA, checking every
//! request against GitHub's published OpenAPI description (`tests/github-standin/standin.py`).
//!
//! The stand-in is a small Python server (standard library + `jsonschema`); it answers with the
//! description's own example responses carrying its state, pages list answers with a `Link`
//! header, refuses a duplicate create with GitHub's `422`, and merges by fast-forwarding the
//! base branch of a real bare git repository. `bash tests/run.sh` installs what it needs and
//! sets `GRL_TEST_GITHUB_PYTHON` (a venv's python with `jsonschema`) and
//! `GRL_TEST_GITHUB_OPENAPI` (`api.github.com.json` from npm `@octokit/openapi`). The CA and
//! the server certificate (for `127.0.0.1`) are made per stand-in with the `openssl` CLI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::process::{ChildGuard, http_client_builder, spawn};

/// A running stand-in; killed on drop.
#[derive(Debug)]
pub struct GitHubStandIn {
    child: ChildGuard,
    dir: tempfile::TempDir,
    port: u16,
    http: reqwest::Client,
}

fn env_path(name: &str) -> Result<PathBuf> {
    std::env::var_os(name).map(PathBuf::from).with_context(|| {
        format!("{name} is not set: run the tests through `bash tests/run.sh`, which installs the GitHub stand-in's parts")
    })
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running openssl (the test CA is made with the openssl CLI)")?;
    if !out.status.success() {
        bail!(
            "openssl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Makes `ca.pem` and a server certificate `cert.pem` + `key.pem` for 127.0.0.1 in `dir`.
fn make_certificates(dir: &Path) -> Result<()> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=grl test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca)?;
    let mut req = vec!["req"];
    req.extend(ec);
    req.extend([
        "-keyout",
        "key.pem",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(dir, &req)?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "cert.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    )
}

impl GitHubStandIn {
    /// Starts a stand-in for repository `owner/repo` whose branches are those of the bare git
    /// repository `git_dir`, accepting only `token`. Waits until it answers.
    pub async fn start(git_dir: &Path, owner: &str, repo: &str, token: &str) -> Result<Self> {
        let python = env_path("GRL_TEST_GITHUB_PYTHON")?;
        let openapi = env_path("GRL_TEST_GITHUB_OPENAPI")?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../github-standin/standin.py");
        let dir = tempfile::Builder::new().prefix("grl-github-").tempdir()?;
        make_certificates(dir.path())?;
        let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.path().join("ca.pem"))?)?;
        let http = http_client_builder()
            .tls_certs_only([ca])
            .timeout(Duration::from_secs(10))
            .build()?;
        let port = crate::ports::free_port();
        let mut cmd = Command::new(&python);
        cmd.arg(&script)
            .arg("--openapi")
            .arg(&openapi)
            .arg("--cert")
            .arg(dir.path().join("cert.pem"))
            .arg("--key")
            .arg(dir.path().join("key.pem"))
            .arg("--git-dir")
            .arg(git_dir)
            .args(["--port", &port.to_string(), "--token", token])
            .args(["--owner", owner, "--repo", repo]);
        let child = spawn(&mut cmd)?;
        let mut standin = GitHubStandIn {
            child,
            dir,
            port,
            http,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = standin.child.try_exited() {
                bail!(
                    "the GitHub stand-in exited ({status}):\n{}",
                    standin.child.output_tail(30)
                );
            }
            if standin.pulls().await.is_ok() {
                return Ok(standin);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "the GitHub stand-in did not answer within 60 s:\n{}",
                    standin.child.output_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The API base URL (`https://127.0.0.1:PORT`).
    pub fn api_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The PEM file of the CA that signed the stand-in's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Everything the stand-in printed (its request log on stderr), for failure messages.
    pub fn output(&self) -> String {
        self.child.output()
    }

    async fn control(&self, method: reqwest::Method, path: &str, body: Value) -> Result<Value> {
        let url = format!("{}/_standin/{path}", self.api_url());
        let mut req = self.http.request(method, &url);
        if !body.is_null() {
            req = req.json(&body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("stand-in {url}"))?;
        let status = resp.status();
        let value: Value = resp.json().await?;
        if !status.is_success() {
            bail!("stand-in {url} answered {status}: {value}");
        }
        Ok(value)
    }

    /// Every pull request the stand-in holds (its own records: number, head, base, title,
    /// body, state, merged_at, ...).
    pub async fn pulls(&self) -> Result<Vec<Value>> {
        let v = self
            .control(reqwest::Method::GET, "pulls", Value::Null)
            .await?;
        Ok(v.as_array().cloned().unwrap_or_default())
    }

    /// Every comment made on a pull request, as `{"number", "body"}`.
    pub async fn comments(&self) -> Result<Vec<Value>> {
        let v = self
            .control(reqwest::Method::GET, "comments", Value::Null)
            .await?;
        Ok(v.as_array().cloned().unwrap_or_default())
    }

    /// The API requests seen (method, path, query, operation, body, status) and every
    /// violation of the description found in them (or in the stand-in's own answers).
    pub async fn log(&self) -> Result<(Vec<Value>, Vec<String>)> {
        let v = self
            .control(reqwest::Method::GET, "log", Value::Null)
            .await?;
        let requests = v["requests"].as_array().cloned().unwrap_or_default();
        let violations = v["violations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect();
        Ok((requests, violations))
    }

    /// Adds an open pull request from `head` into `base` (no git check); returns its number.
    pub async fn seed(&self, head: &str, base: &str, title: &str) -> Result<u64> {
        let v = self
            .control(
                reqwest::Method::POST,
                "pulls",
                json!({ "head": head, "base": base, "title": title }),
            )
            .await?;
        v["number"]
            .as_u64()
            .context("seeded pull request has no number")
    }

    /// Merges pull request `number` by fast-forwarding its base branch to its head in the git
    /// repository, and marks it closed and merged.
    pub async fn merge(&self, number: u64) -> Result<()> {
        self.control(
            reqwest::Method::POST,
            &format!("pulls/{number}/merge"),
            Value::Null,
        )
        .await
        .map(drop)
    }

    /// Closes pull request `number` without merging it.
    pub async fn close(&self, number: u64) -> Result<()> {
        self.control(
            reqwest::Method::POST,
            &format!("pulls/{number}/close"),
            Value::Null,
        )
        .await
        .map(drop)
    }

    /// Makes the next list answer leave out open pull requests (a lagging search index), so
    /// a create that follows meets GitHub's `422` "already exists".
    pub async fn stale_list_once(&self) -> Result<()> {
        self.control(reqwest::Method::POST, "stale-list", Value::Null)
            .await
            .map(drop)
    }
}
