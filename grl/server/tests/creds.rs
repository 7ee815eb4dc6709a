//! Credentials and the files around them, with `grl` as real processes (issue 24, items 3,
//! 8 and 10): an admin token on a public port without TLS stops start-up, and one sent in
//! the clear is logged and counted; a token file others may write is refused and a
//! readable key warned about; rotations that keep modification time and length are seen,
//! and a Kubernetes `..data` swap is served within a second; an override records the
//! identity that set it. Also the helpers of [`super::config_links`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use grl_core::proto;
use grl_core::tls::ClientTls;
use test_support::ports::free_addr;

use super::security::{
    Ca, LONG, Proc, SERVICE, TOKEN, bearer, metric, metrics_addr, override_cmd, p, wait_metric,
    wait_port,
};
use super::support::scrape;

const BIN: &str = env!("CARGO_BIN_EXE_grl");
/// A secret no output may contain.
pub(crate) const PLANTED: &str = "planted-secret-5d2e8b17";

/// Runs `grl args` until it exits (killed after 20 s: it must not start serving); its exit
/// code (`None`: it was still running) and its stdout and stderr.
pub(crate) fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let (o, e) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = std::fs::read_to_string(o).unwrap() + &std::fs::read_to_string(e).unwrap();
    (code, out)
}

/// A temp dir with `config/services/payments.yaml` and a secret file `shadow` beside it.
pub(crate) struct Dir(pub(crate) tempfile::TempDir);

impl Dir {
    pub(crate) fn new() -> Self {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("config/services")).unwrap();
        std::fs::write(d.path().join("config/services/payments.yaml"), SERVICE).unwrap();
        std::fs::write(
            d.path().join("shadow"),
            format!("root:{PLANTED}:19000:0:99999:7:::\n"),
        )
        .unwrap();
        Self(d)
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

#[cfg(unix)]
pub(crate) fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The second line of a PEM file: base64 of the secret itself.
pub(crate) fn pem_body(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().nth(1).unwrap().to_string()
}

/// A token file with the admin token, mode 0600.
fn token_file(d: &Dir, name: &str, token: &str) -> PathBuf {
    let t = d.path(name);
    std::fs::write(&t, format!("{token}\n")).unwrap();
    #[cfg(unix)]
    chmod(&t, 0o600);
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_token_on_a_public_port_without_tls_needs_insecure_admin() {
    let d = Dir::new();
    let (config, token) = (d.path("config"), token_file(&d, "token", TOKEN));
    let (code, out) = run_to_exit(&[
        "controller",
        "--listen",
        "0.0.0.0:0",
        "--config",
        p(&config),
        "--admin-token-file",
        p(&token),
    ]);
    assert_eq!(code, Some(2), "a start-up mistake is exit 2:\n{out}");
    assert!(out.contains("in the clear"), "{out}");
    assert!(
        out.contains("--tls-cert") && out.contains("--insecure-admin"),
        "{out}"
    );

    // With TLS on the port it starts.
    let ca = Ca::new(d.0.path(), "ca");
    let (cert, key) = ca.leaf("controller", "controller");
    let tls_addr = free_addr();
    let listen = format!("0.0.0.0:{}", tls_addr.port());
    let _tls = Proc::spawn(
        &[
            "controller",
            "--listen",
            &listen,
            "--config",
            p(&config),
            "--admin-token-file",
            p(&token),
            "--tls-cert",
            p(&cert),
            "--tls-key",
            p(&key),
        ],
        d.path("tls.log"),
    );
    wait_port(tls_addr).await;

    // With --insecure-admin it starts, and every token sent in the clear is logged and
    // counted (never the token itself).
    let addr = free_addr();
    let listen = format!("0.0.0.0:{}", addr.port());
    let ctl = Proc::spawn(
        &[
            "controller",
            "--listen",
            &listen,
            "--config",
            p(&config),
            "--admin-token-file",
            p(&token),
            "--insecure-admin",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        d.path("controller.log"),
    );
    wait_port(addr).await;
    let m = metrics_addr(&ctl).await;
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut raw = proto::control_client::ControlClient::new(ch);
    for _ in 0..2 {
        let r = raw
            .clear_override(bearer(
                tonic::Request::new(proto::ClearOverrideRequest {
                    service: "payments".into(),
                    ..Default::default()
                }),
                TOKEN,
            ))
            .await;
        assert!(r.is_ok(), "{r:?}");
    }
    let n = wait_metric(m, "grl_controller_admin_plaintext_tokens_total", 2.0).await;
    assert_eq!(n, 2.0, "tokens in the clear not counted");
    let log = ctl.log();
    assert!(log.contains("crossed the network in the clear"), "{log}");
    assert!(!log.contains(TOKEN), "the token was logged:\n{log}");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_others_may_write_is_refused_and_a_readable_key_warned_about() {
    let d = Dir::new();
    let config = d.path("config");
    let token = token_file(&d, "token", TOKEN);
    chmod(&token, 0o666);
    let (code, out) = run_to_exit(&[
        "controller",
        "--listen",
        "127.0.0.1:0",
        "--config",
        p(&config),
        "--admin-token-file",
        p(&token),
    ]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(p(&token)) && out.contains("chmod go-w"),
        "{out}"
    );
    assert!(!out.contains(TOKEN), "{out}");
    // The client side too: `grl override` refuses to send it.
    let out = override_cmd(
        "127.0.0.1:9".parse().unwrap(),
        &["clear", "--service", "payments"],
        &["--token-file", p(&token)],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("chmod go-w"),
        "{out:?}"
    );
    chmod(&token, 0o600);

    // A key others may read: served, with a warning and a count; a 0600 key: no warning.
    let ca = Ca::new(d.0.path(), "ca");
    let warning = "TLS private key is readable by others";
    let event = "grl_tier_tls_events_total{event=\"key_readable\"}";
    for (mode, warned) in [(0o644, 1.0), (0o600, 0.0)] {
        let (cert, key) = ca.leaf("controller", &format!("controller-{mode:o}"));
        chmod(&key, mode);
        let addr = free_addr();
        let ctl = Proc::spawn(
            &[
                "controller",
                "--listen",
                &addr.to_string(),
                "--config",
                p(&config),
                "--tls-cert",
                p(&cert),
                "--tls-key",
                p(&key),
                "--admin-token-file",
                p(&token),
                "--metrics-listen",
                "127.0.0.1:0",
            ],
            d.path(&format!("controller-{mode:o}.log")),
        );
        wait_port(addr).await;
        let m = metrics_addr(&ctl).await;
        assert_eq!(metric(&scrape(m).await, event), warned, "mode {mode:o}");
        assert_eq!(
            ctl.log().contains(warning),
            warned > 0.0,
            "mode {mode:o}:\n{}",
            ctl.log()
        );
    }
}

/// Whether a TLS call to `addr` trusting only `ca` succeeds (the served certificate is
/// from `ca`).
async fn served_by(addr: SocketAddr, ca: &Path) -> bool {
    let t = ClientTls {
        ca: ca.to_path_buf(),
        identity: None,
    };
    let Ok(ep) = grl_core::tls::endpoint(&addr.to_string(), Some(&t)) else {
        return false;
    };
    let Ok(ch) = ep.connect_timeout(Duration::from_secs(2)).connect().await else {
        return false;
    };
    proto::control_client::ControlClient::new(ch)
        .list_overrides(proto::ListOverridesRequest {})
        .await
        .is_ok()
}

/// Polls `served_by` until true; how long it took.
async fn until_served(addr: SocketAddr, ca: &Path) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < LONG {
        if served_by(addr, ca).await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Pads the file at `path` with newlines to `len` bytes (PEM readers skip them).
fn pad(path: &Path, len: usize) {
    let mut text = std::fs::read(path).unwrap();
    assert!(text.len() <= len);
    text.resize(len, b'\n');
    std::fs::write(path, text).unwrap();
}

/// Gives the file at `path` the modification time of `like`.
fn same_mtime(path: &Path, like: &Path) {
    let t = std::fs::metadata(like).unwrap().modified().unwrap();
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn cp_p(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .arg("-p")
        .arg(from)
        .arg(to)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotations_keeping_mtime_and_length_are_seen() {
    let d = Dir::new();
    let config = d.path("config");
    let token = token_file(&d, "token", TOKEN);
    let ca = Ca::new(d.0.path(), "ca");
    let (cert, key) = ca.leaf("controller", "controller");
    // Room to give the next certificate exactly the same length.
    pad(&cert, 4096);
    pad(&key, 4096);
    let addr = free_addr();
    let ctl = Proc::spawn(
        &[
            "controller",
            "--listen",
            &addr.to_string(),
            "--config",
            p(&config),
            "--tls-cert",
            p(&cert),
            "--tls-key",
            p(&key),
            "--admin-token-file",
            p(&token),
        ],
        d.path("controller.log"),
    );
    wait_port(addr).await;
    assert!(served_by(addr, &ca.cert_path()).await, "{}", ctl.log());

    // `cp -p` of a token of the same length with the same modification time.
    let other = "other-admin-token-00c0ffee4242";
    assert_eq!(other.len(), TOKEN.len());
    let new_token = token_file(&d, "token.new", other);
    same_mtime(&new_token, &token);
    cp_p(&new_token, &token);
    let t = ClientTls {
        ca: ca.cert_path(),
        identity: None,
    };
    let mut raw = super::security::control(addr, &t).await;
    let clear = |tok: &str| {
        bearer(
            tonic::Request::new(proto::ClearOverrideRequest {
                service: "payments".into(),
                ..Default::default()
            }),
            tok,
        )
    };
    assert!(
        raw.clear_override(clear(other)).await.is_ok(),
        "the rewritten token is not in use"
    );
    assert!(
        raw.clear_override(clear(TOKEN)).await.is_err(),
        "the old token still works"
    );

    // `cp -p` of a certificate and key of the same lengths and modification times.
    let ca2 = Ca::new(d.0.path(), "ca2");
    let (c2, k2) = ca2.leaf("controller", "controller2");
    pad(&c2, 4096);
    pad(&k2, 4096);
    same_mtime(&c2, &cert);
    same_mtime(&k2, &key);
    cp_p(&k2, &key);
    cp_p(&c2, &cert);
    let took = until_served(addr, &ca2.cert_path()).await;
    assert!(
        took.is_some(),
        "the copied certificate was never served:\n{}",
        ctl.log()
    );
    eprintln!("measured: certificate rotated by cp -p served after {took:?}");
}

/// Issue 24: rotation by a Kubernetes `..data` swap must keep being served within 1 s.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_data_swap_is_served_within_a_second() {
    let d = Dir::new();
    let ca = Ca::new(d.0.path(), "ca");
    let ca2 = Ca::new(d.0.path(), "ca2");
    let secret = d.path("secret");
    let version = |name: &str, ca: &Ca| {
        let v = secret.join(name);
        std::fs::create_dir_all(&v).unwrap();
        let (c, k) = ca.leaf("controller", name);
        std::fs::rename(c, v.join("tls.crt")).unwrap();
        std::fs::rename(k, v.join("tls.key")).unwrap();
        chmod(&v.join("tls.key"), 0o600);
    };
    version("..2026_12_01_a", &ca);
    std::os::unix::fs::symlink("..2026_12_01_a", secret.join("..data")).unwrap();
    for f in ["tls.crt", "tls.key"] {
        std::os::unix::fs::symlink(format!("..data/{f}"), secret.join(f)).unwrap();
    }
    let addr = free_addr();
    let ctl = Proc::spawn(
        &[
            "controller",
            "--listen",
            &addr.to_string(),
            "--config",
            p(&d.path("config")),
            "--tls-cert",
            p(&secret.join("tls.crt")),
            "--tls-key",
            p(&secret.join("tls.key")),
        ],
        d.path("controller.log"),
    );
    wait_port(addr).await;
    assert!(served_by(addr, &ca.cert_path()).await, "{}", ctl.log());

    // What the kubelet does: a new version directory, a new link, renamed over `..data`.
    version("..2026_12_01_b", &ca2);
    std::os::unix::fs::symlink("..2026_12_01_b", secret.join("..data_tmp")).unwrap();
    std::fs::rename(secret.join("..data_tmp"), secret.join("..data")).unwrap();
    let took = until_served(addr, &ca2.cert_path()).await;
    eprintln!("measured: ..data swap served after {took:?}");
    assert!(
        took.is_some_and(|t| t <= Duration::from_secs(1)),
        "served after {took:?}:\n{}",
        ctl.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_set_with_an_admin_certificate_records_its_identity() {
    let d = Dir::new();
    let ca = Ca::new(d.0.path(), "ca");
    let (cert, key) = ca.leaf("controller", "controller");
    let addr = free_addr();
    let ctl = Proc::spawn(
        &[
            "controller",
            "--listen",
            &addr.to_string(),
            "--config",
            p(&d.path("config")),
            "--tls-cert",
            p(&cert),
            "--tls-key",
            p(&key),
            "--tls-client-ca",
            p(&ca.cert_path()),
            "--admin-allow",
            "oncall-admin",
        ],
        d.path("controller.log"),
    );
    wait_port(addr).await;
    let (ac, ak) = ca.leaf("oncall-admin", "oncall-admin");
    let ca_path = ca.cert_path();
    let tls = [
        "--tls-ca",
        p(&ca_path),
        "--tls-cert",
        p(&ac),
        "--tls-key",
        p(&ak),
    ];
    let set = [
        "set",
        "--service",
        "payments",
        "--caller",
        "gateway",
        "--rps",
        "5",
        "--ttl",
        "10m",
    ];
    let out = Command::new(BIN)
        .arg("override")
        .args(set)
        .args(["--controller", &addr.to_string()])
        .args(tls)
        .env("USER", "alice")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = override_cmd(addr, &["list"], &tls);
    assert!(out.status.success(), "{out:?}");
    let listed: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(listed["who"], "cert:oncall-admin (user alice)", "{listed}");
    let log = ctl.log();
    assert!(log.contains("who=cert:oncall-admin"), "{log}");
}
