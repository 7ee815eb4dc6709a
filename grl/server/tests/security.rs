//! TLS on every link and authorised admin calls, with the `grl` binary as real processes
//! and certificates made here with rcgen: mutual TLS from a client through an aggregator to
//! a controller; a plaintext client refused by a TLS port; a rotated certificate served to
//! new connections, a half-written one not; admin calls (raw `ApplyConfig`, `grl override`)
//! refused without or with wrong credentials, counted, and logged with the peer but never
//! the token.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use grl_client::{Client, ClientConfig};
use grl_core::proto;
use grl_core::proto::control_client::ControlClient;
use grl_core::tls::ClientTls;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

use super::support::{scrape, until};
use test_support::ports::free_addr;

const BIN: &str = env!("CARGO_BIN_EXE_grl");
pub(crate) const TOKEN: &str = "planted-admin-token-7f3a9c2e51";
pub(crate) const LONG: Duration = Duration::from_secs(30);

/// A test CA that writes its certificate and signs leaf certificates into a directory.
pub(crate) struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
    name: String,
}

impl Ca {
    pub(crate) fn new(dir: &Path, name: &str) -> Self {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), issuer.pem()).unwrap();
        Self {
            issuer,
            dir: dir.to_path_buf(),
            name: name.into(),
        }
    }

    pub(crate) fn cert_path(&self) -> PathBuf {
        self.dir.join(format!("{}.pem", self.name))
    }

    /// A leaf for `cn` (also a SAN DNS name) plus `localhost` and 127.0.0.1, usable as
    /// server and client certificate; written to `<file>.crt` and `<file>.key`.
    pub(crate) fn leaf(&self, cn: &str, file: &str) -> (PathBuf, PathBuf) {
        let mut p =
            CertificateParams::new(vec![cn.to_string(), "localhost".into(), "127.0.0.1".into()])
                .unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            self.dir.join(format!("{file}.crt")),
            self.dir.join(format!("{file}.key")),
        );
        write_atomically(&c, &cert.pem());
        write_atomically(&k, &key.serialize_pem());
        (c, k)
    }

    /// A client certificate with exactly `sans` (and CN `cn`), written to `<file>.crt` and
    /// `<file>.key`.
    pub(crate) fn client_leaf(
        &self,
        cn: &str,
        sans: Vec<rcgen::SanType>,
        file: &str,
    ) -> (PathBuf, PathBuf) {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.subject_alt_names = sans;
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            self.dir.join(format!("{file}.crt")),
            self.dir.join(format!("{file}.key")),
        );
        write_atomically(&c, &cert.pem());
        write_atomically(&k, &key.serialize_pem());
        (c, k)
    }
}

/// Replaces a file in one rename, as a secret mounter does.
pub(crate) fn write_atomically(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A `grl` process whose stderr goes to a file, killed on drop.
pub(crate) struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    pub(crate) fn spawn(args: &[&str], log: PathBuf) -> Self {
        let child = Command::new(BIN)
            .args(args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self { child, log }
    }

    /// Its stderr so far, without terminal colour codes.
    pub(crate) fn log(&self) -> String {
        let raw = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut out = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                // CSI: ESC [ params final-byte
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn wait_port(addr: SocketAddr) {
    let ok = until(LONG, || std::net::TcpStream::connect(addr).is_ok()).await;
    assert!(ok.is_some(), "{addr} never opened");
}

pub(crate) fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

pub(crate) const SERVICE: &str = "service: payments\nbuckets:\n  - name: gateway-pay\n    match: { caller: gateway }\n    scope: global\n    mode: deny\n    policy: { kind: fixed, rps: 500 }\n";

/// Certificates, a config dir and a token file in one temp dir.
struct Setup {
    dir: tempfile::TempDir,
    ca: Ca,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config/services")).unwrap();
        std::fs::write(dir.path().join("config/services/payments.yaml"), SERVICE).unwrap();
        std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
        std::fs::write(
            dir.path().join("wrong-token"),
            "not-the-admin-token-at-all\n",
        )
        .unwrap();
        let ca = Ca::new(dir.path(), "ca");
        Self { dir, ca }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A TLS controller on `addr` at a 200 ms interval, admin by token; with `mutual`,
    /// mutual TLS with the test CA is required and the identity `admin` is an admin too.
    fn controller(&self, addr: SocketAddr, mutual: bool, extra: &[&str]) -> Proc {
        let (cert, key) = self.ca.leaf("controller", "controller");
        let (config, token, ca) = (self.path("config"), self.path("token"), self.ca.cert_path());
        let addr = addr.to_string();
        let mut args = vec![
            "controller",
            "--listen",
            &addr,
            "--config",
            p(&config),
            "--interval-ms",
            "200",
            "--metrics-listen",
            "127.0.0.1:0",
            "--tls-cert",
            p(&cert),
            "--tls-key",
            p(&key),
            "--admin-token-file",
            p(&token),
        ];
        if mutual {
            args.extend_from_slice(&["--tls-client-ca", p(&ca), "--admin-allow", "admin"]);
        }
        args.extend_from_slice(extra);
        Proc::spawn(&args, self.path("controller.log"))
    }
}

/// The metrics address a tier logged at start-up.
pub(crate) async fn metrics_addr(proc_: &Proc) -> SocketAddr {
    let mut found = None;
    until(LONG, || {
        found = proc_.log().lines().find_map(|l| {
            let i = l.find("metrics=Some(")? + "metrics=Some(".len();
            l[i..].split(')').next()?.parse().ok()
        });
        found.is_some()
    })
    .await;
    found.unwrap_or_else(|| panic!("no metrics address logged:\n{}", proc_.log()))
}

fn tls(s: &Setup, identity: Option<&str>) -> ClientTls {
    ClientTls {
        ca: s.ca.cert_path(),
        identity: identity.map(|n| s.ca.leaf(n, n)),
    }
}

/// A raw `Control` client (no token) over TLS with an optional client certificate.
pub(crate) async fn control(
    addr: SocketAddr,
    t: &ClientTls,
) -> ControlClient<tonic::transport::Channel> {
    let ch = grl_core::tls::endpoint(&addr.to_string(), Some(t))
        .unwrap()
        .connect()
        .await
        .unwrap();
    ControlClient::new(ch)
}

fn empty_apply() -> tonic::Request<proto::ApplyConfigRequest> {
    tonic::Request::new(proto::ApplyConfigRequest {
        version: "wipe".into(),
        files: vec![],
    })
}

pub(crate) fn bearer<T>(mut r: tonic::Request<T>, token: &str) -> tonic::Request<T> {
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

pub(crate) fn metric(m: &std::collections::BTreeMap<String, f64>, key: &str) -> f64 {
    m.get(key).copied().unwrap_or(0.0)
}

/// Polls `/metrics` at `addr` until `key` reaches `min` (at most [`LONG`]); its last value.
pub(crate) async fn wait_metric(addr: SocketAddr, key: &str, min: f64) -> f64 {
    let start = tokio::time::Instant::now();
    loop {
        let v = metric(&scrape(addr).await, key);
        if v >= min || start.elapsed() > LONG {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_link_from_client_through_aggregator_to_controller_enforces() {
    let s = Setup::new();
    let (ctl_addr, agg_addr) = (free_addr(), free_addr());
    let ctl = s.controller(ctl_addr, true, &["--child-allow", "aggregator-a"]);
    wait_port(ctl_addr).await;
    let (cert, key) = s.ca.leaf("aggregator-a", "aggregator-a");
    let ca = s.ca.cert_path();
    let agg = Proc::spawn(
        &[
            "aggregator",
            "--listen",
            &agg_addr.to_string(),
            "--zone",
            "a",
            "--region",
            "eu",
            "--controller",
            &format!("https://127.0.0.1:{}", ctl_addr.port()),
            "--interval-ms",
            "200",
            "--metrics-listen",
            "127.0.0.1:0",
            "--tls-cert",
            p(&cert),
            "--tls-key",
            p(&key),
            "--tls-client-ca",
            p(&ca),
            "--tls-ca",
            p(&ca),
        ],
        s.path("aggregator.log"),
    );
    wait_port(agg_addr).await;

    let mut cfg = ClientConfig::new("payments", agg_addr.to_string());
    cfg.zone = "a".into();
    cfg.region = "eu".into();
    cfg.interval = Duration::from_millis(200);
    cfg.tls = Some(tls(&s, Some("client-1")));
    let c = Client::new(cfg);
    c.spawn();
    let load = super::support::Traffic::start(vec![(c.clone(), "gateway".into(), 1000.0)]);
    // 1000 rps against a 500 limit: a ratio near 0.5 must come down the TLS links.
    let ratio = || {
        c.status()
            .ratios
            .iter()
            .find(|(b, _)| b.as_str() == "gateway-pay")
            .map_or(0.0, |(_, r)| *r)
    };
    let took = until(LONG, || ratio() > 0.3).await;
    drop(load);
    eprintln!(
        "measured: drop ratio {:.2} at the client after {took:?} over mTLS",
        ratio()
    );
    assert!(
        took.is_some(),
        "no drop ratio reached the client over mTLS (ratio {});\ncontroller:\n{}\naggregator:\n{}",
        ratio(),
        ctl.log(),
        agg.log()
    );

    // Over mutual TLS a certificate is an admin credential only for --admin-allow names.
    let mut child = control(ctl_addr, &tls(&s, Some("aggregator-a"))).await;
    let e = child.apply_config(empty_apply()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    let mut admin = control(ctl_addr, &tls(&s, Some("admin"))).await;
    let r = admin
        .clear_override(tonic::Request::new(proto::ClearOverrideRequest {
            service: "payments".into(),
            ..Default::default()
        }))
        .await;
    assert!(r.is_ok(), "{r:?}");

    // An aggregator whose certificate is from the CA but not on --child-allow is refused.
    let other = free_addr();
    let (cert, key) = s.ca.leaf("intruder", "intruder");
    let _intruder = Proc::spawn(
        &[
            "aggregator",
            "--listen",
            &other.to_string(),
            "--zone",
            "b",
            "--region",
            "eu",
            "--controller",
            &ctl_addr.to_string(),
            "--interval-ms",
            "200",
            "--tls-cert",
            p(&cert),
            "--tls-key",
            p(&key),
            "--tls-ca",
            p(&ca),
        ],
        s.path("intruder.log"),
    );
    let m = metrics_addr(&ctl).await;
    let key = "grl_tier_child_refused_total{reason=\"identity_not_allowed\"}";
    let refused = wait_metric(m, key, 1.0).await;
    assert!(refused >= 1.0, "intruder not refused:\n{}", ctl.log());
    assert!(ctl.log().contains("identity=intruder"), "{}", ctl.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_client_cannot_use_a_tls_port() {
    let s = Setup::new();
    let ctl_addr = free_addr();
    let ctl = s.controller(ctl_addr, true, &[]);
    wait_port(ctl_addr).await;
    let m = metrics_addr(&ctl).await;

    // A plaintext gRPC client: the call fails, nothing is served.
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{ctl_addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await;
    if let Ok(ch) = ch {
        let r = ControlClient::new(ch)
            .list_overrides(proto::ListOverridesRequest {})
            .await;
        assert!(r.is_err(), "plaintext call answered: {r:?}");
    }
    // TLS without a client certificate: mutual TLS is required.
    let no_cert = ClientTls {
        ca: s.ca.cert_path(),
        identity: None,
    };
    let ep = grl_core::tls::endpoint(&ctl_addr.to_string(), Some(&no_cert)).unwrap();
    let r = match ep.connect().await {
        Ok(ch) => ControlClient::new(ch)
            .list_overrides(proto::ListOverridesRequest {})
            .await
            .map(|_| ()),
        Err(e) => Err(tonic::Status::unavailable(e.to_string())),
    };
    assert!(r.is_err(), "a client without certificate was served");
    let failed = "grl_tier_tls_events_total{event=\"handshake_failed\"}";
    let n = wait_metric(m, failed, 2.0).await;
    assert!(n >= 2.0, "handshake failures not counted: {n}");

    // `grl override list` without --tls-ca refuses an https address before dialling.
    let out = Command::new(BIN)
        .args([
            "override",
            "list",
            "--controller",
            &format!("https://{ctl_addr}"),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--tls-ca"),
        "{out:?}"
    );
}

/// Runs `grl override ...` against `addr` with `extra` flags.
pub(crate) fn override_cmd(addr: SocketAddr, action: &[&str], extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("override")
        .args(action)
        .args(["--json", "--controller", &addr.to_string()])
        .args(extra)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_to_new_connections() {
    let s = Setup::new();
    let ctl_addr = free_addr();
    let ctl = s.controller(ctl_addr, true, &[]);
    wait_port(ctl_addr).await;
    let m = metrics_addr(&ctl).await;
    let (admin_cert, admin_key) = s.ca.leaf("admin", "admin");
    let list = |ca: &Path| {
        override_cmd(
            ctl_addr,
            &["list"],
            &[
                "--tls-ca",
                p(ca),
                "--tls-cert",
                p(&admin_cert),
                "--tls-key",
                p(&admin_key),
            ],
        )
    };
    assert!(
        list(&s.ca.cert_path()).status.success(),
        "{:?}",
        list(&s.ca.cert_path())
    );

    // A new server certificate from another CA, written over the served files.
    let new_ca = Ca::new(s.dir.path(), "ca2");
    let (c2, k2) = new_ca.leaf("controller", "ca2-controller");
    std::fs::copy(&k2, s.path("controller.key.new")).unwrap();
    std::fs::copy(&c2, s.path("controller.crt.new")).unwrap();
    std::fs::rename(s.path("controller.key.new"), s.path("controller.key")).unwrap();
    std::fs::rename(s.path("controller.crt.new"), s.path("controller.crt")).unwrap();

    // New connections get the new certificate: trusted by the new CA only.
    let took = until(LONG, || list(&new_ca.cert_path()).status.success()).await;
    assert!(
        took.is_some(),
        "rotated certificate never served:\n{}",
        ctl.log()
    );
    eprintln!("measured: rotated certificate served after {took:?}");
    assert!(
        !list(&s.ca.cert_path()).status.success(),
        "the old CA still verifies the served certificate"
    );
    let reloads = wait_metric(m, "grl_tier_tls_events_total{event=\"reloaded\"}", 1.0).await;
    assert!(reloads >= 1.0, "reload not counted");
}

/// The pair is replaced one file at a time, as a copy that is not atomic leaves it: the new
/// key beside the old certificate, then the new certificate cut short. Each change that does
/// not load is counted once and the previous pair stays served; the whole pair is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_written_certificate_pair_keeps_the_previous_one_and_counts_reload_failed() {
    let s = Setup::new();
    let ctl_addr = free_addr();
    let ctl = s.controller(ctl_addr, true, &[]);
    wait_port(ctl_addr).await;
    let m = metrics_addr(&ctl).await;
    let (admin_cert, admin_key) = s.ca.leaf("admin", "admin");
    let list = |ca: &Path| {
        let tls = ["--tls-ca", p(ca), "--tls-cert", p(&admin_cert)];
        override_cmd(
            ctl_addr,
            &["list"],
            &[&tls[..], &["--tls-key", p(&admin_key)]].concat(),
        )
    };
    let served_by = |ca: &Path| list(ca).status.success();
    assert!(
        served_by(&s.ca.cert_path()),
        "{:?}",
        list(&s.ca.cert_path())
    );
    let (failed, reloaded) = (
        "grl_tier_tls_events_total{event=\"reload_failed\"}",
        "grl_tier_tls_events_total{event=\"reloaded\"}",
    );

    let new_ca = Ca::new(s.dir.path(), "ca2");
    let (c2, k2) = new_ca.leaf("controller", "ca2-controller");
    let (cert, key) = (s.path("controller.crt"), s.path("controller.key"));
    write_atomically(&key, &std::fs::read_to_string(&k2).unwrap());
    assert!(
        served_by(&s.ca.cert_path()),
        "the previous pair is not served beside a new key:\n{}",
        ctl.log()
    );
    assert_eq!(wait_metric(m, failed, 1.0).await, 1.0, "the new key alone");

    let pem = std::fs::read_to_string(&c2).unwrap();
    write_atomically(&cert, &pem[..pem.len() / 2]);
    assert!(
        served_by(&s.ca.cert_path()),
        "the previous pair is not served beside a cut certificate:\n{}",
        ctl.log()
    );
    assert!(
        !served_by(&new_ca.cert_path()),
        "a half-written pair served"
    );
    assert_eq!(
        wait_metric(m, failed, 2.0).await,
        2.0,
        "the cut certificate"
    );
    assert_eq!(metric(&scrape(m).await, reloaded), 0.0);

    write_atomically(&cert, &pem);
    let took = until(LONG, || served_by(&new_ca.cert_path())).await;
    assert!(
        took.is_some(),
        "the whole new pair never served:\n{}",
        ctl.log()
    );
    let after = scrape(m).await;
    assert_eq!(
        (metric(&after, failed), metric(&after, reloaded)),
        (2.0, 1.0)
    );
    assert!(
        ctl.log().contains("TLS files changed but do not load"),
        "{}",
        ctl.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_calls_without_or_with_wrong_credentials_change_nothing() {
    let s = Setup::new();
    let ctl_addr = free_addr();
    let ctl = s.controller(ctl_addr, false, &[]);
    wait_port(ctl_addr).await;
    let m = metrics_addr(&ctl).await;
    let limit = "grl_tier_limit_rps{service=\"payments\",bucket=\"gateway-pay\"}";
    assert_eq!(metric(&scrape(m).await, limit), 500.0);

    // The hostile client of the issue: ApplyConfig with zero files, no credentials.
    let mut raw = control(ctl_addr, &tls(&s, None)).await;
    let e = raw.apply_config(empty_apply()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    let e = raw
        .apply_config(bearer(empty_apply(), "guessed-token-0000000"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    let set = || {
        tonic::Request::new(proto::SetOverrideRequest {
            service: "payments".into(),
            caller: "gateway".into(),
            rps: 1.0,
            ttl_seconds: 600,
            who: "mallory".into(),
            ..Default::default()
        })
    };
    let e = raw.set_override(set()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let clear = || {
        tonic::Request::new(proto::ClearOverrideRequest {
            service: "payments".into(),
            ..Default::default()
        })
    };
    let e = raw.clear_override(clear()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);

    // Nothing changed: the bucket and its limit are still in force a while later.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let after = scrape(m).await;
    assert_eq!(
        metric(&after, limit),
        500.0,
        "a refused ApplyConfig changed the config"
    );
    assert_eq!(metric(&after, "grl_tier_overrides"), 0.0);
    assert_eq!(
        metric(
            &after,
            "grl_controller_admin_refused_total{reason=\"no_credentials\"}"
        ),
        3.0
    );
    assert_eq!(
        metric(
            &after,
            "grl_controller_admin_refused_total{reason=\"wrong_token\"}"
        ),
        1.0
    );

    // The right token may: an override set through the raw client.
    let o = raw
        .set_override(bearer(set(), TOKEN))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(o.service, "payments");

    // `grl override` with the token file: refused without it or with the wrong one.
    let (ca, tok, wrong) = (s.ca.cert_path(), s.path("token"), s.path("wrong-token"));
    let base = ["--tls-ca", p(&ca)];
    let clear_all = ["clear", "--service", "payments"];
    let out = override_cmd(ctl_addr, &clear_all, &base);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.contains("needs an admin client certificate"), "{err}");
    let out = override_cmd(
        ctl_addr,
        &clear_all,
        &[&base[..], &["--token-file", p(&wrong)]].concat(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.contains("bearer token is not accepted"), "{err}");
    assert_eq!(
        metric(&scrape(m).await, "grl_tier_overrides"),
        1.0,
        "refused clear cleared"
    );
    let out = override_cmd(
        ctl_addr,
        &clear_all,
        &[&base[..], &["--token-file", p(&tok)]].concat(),
    );
    assert!(out.status.success(), "{out:?}");
    let cleared: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(cleared["cleared"], 1, "{cleared}");

    // The refusals are logged with the peer; the token is never written anywhere.
    let log = ctl.log();
    assert!(log.contains("admin call refused"), "{log}");
    assert!(log.contains("peer=127.0.0.1:"), "{log}");
    assert!(!log.contains(TOKEN), "the admin token leaked into the log");
    assert!(
        !log.contains("guessed-token"),
        "a presented token leaked into the log"
    );
    assert!(!scrape(m).await.keys().any(|k| k.contains(TOKEN)));
}

#[test]
fn open_admin_calls_on_a_public_address_need_insecure_admin() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("services")).unwrap();
    std::fs::write(dir.path().join("services/payments.yaml"), SERVICE).unwrap();
    let out = Command::new(BIN)
        .args(["controller", "--listen", "0.0.0.0:0", "--config"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a start-up mistake is exit 2");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--insecure-admin") && err.contains("--admin-token-file"),
        "{err}"
    );
}
