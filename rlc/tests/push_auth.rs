//! rlc's push to a controller that runs mutual TLS and takes admin calls only with its
//! bearer token: certificates made by the documented script (`deploy/tls/make-certs.sh`,
//! openssl), a real controller on 127.0.0.1, and `rlc::output::to_controllers::apply_config`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use grl::net::auth::AdminAuth;
use grl::net::tls::{ServerTls, ServerTlsFiles};
use grl::tier::Security;
use grl::tier::controller::{self, ConfigSource, ControllerOptions};
use grl_core::tls::ClientTls;
use rlc::output::to_controllers::{ControllerAuth, PushError, apply_config};

const SERVICE: &str = "service: payments\nbuckets:\n  - name: gateway-pay\n    match: { caller: gateway }\n    scope: global\n    mode: deny\n    policy: { kind: fixed, rps: 500 }\n";

fn make_certs(dir: &Path) -> Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/tls/make-certs.sh");
    let out = Command::new("sh")
        .arg(script)
        .arg(dir)
        .args(["controller:localhost,127.0.0.1", "rlc"])
        .output()?;
    ensure!(out.status.success(), "make-certs.sh: {out:?}");
    Ok(())
}

fn files() -> Vec<(String, String)> {
    vec![("services/payments.yaml".into(), SERVICE.into())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_over_mtls_needs_the_admin_token() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    make_certs(d)?;
    let p = |n: &str| -> PathBuf { d.join(n) };
    let security = Security {
        server_tls: Some(Arc::new(ServerTls::load(ServerTlsFiles {
            cert: p("controller.crt"),
            key: p("controller.key"),
            client_ca: Some(p("ca.crt")),
        })?)),
        admin: Arc::new(AdminAuth::new(vec![], Some(p("admin-token")))?),
        ..Default::default()
    };
    let (running, ctl) = controller::start(
        ControllerOptions {
            region: "r".into(),
            parents: Vec::new(),
            election: None,
            interval: Duration::from_millis(500),
            config: ConfigSource::None,
            poll: Duration::from_secs(60),
            security,
        },
        tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        None,
    )
    .await?;
    let addr = running.addr.to_string();
    std::fs::write(p("wrong-token"), "0123456789abcdef-not-it\n")?;
    let tls = Some(ClientTls {
        ca: p("ca.crt"),
        identity: Some((p("rlc.crt"), p("rlc.key"))),
    });
    let auth = |token: Option<&str>| ControllerAuth {
        tls: tls.clone(),
        token_file: token.map(p),
    };
    let token = std::fs::read_to_string(p("admin-token"))?;

    // No token, a wrong token: refused with the right codes, nothing applied.
    for (t, code) in [
        (None, tonic::Code::Unauthenticated),
        (Some("wrong-token"), tonic::Code::PermissionDenied),
    ] {
        match apply_config(&addr, "v1", files(), &auth(t)).await {
            Err(PushError::Refused { status, .. }) => ensure!(status.code() == code, "{status:?}"),
            other => anyhow::bail!("expected a refusal for {t:?}, got {other:?}"),
        }
    }
    ensure!(ctl.snapshot().services.is_empty(), "a refused push applied");

    // Plaintext to the TLS port fails; so does an http:// address with TLS configured.
    let plain = apply_config(&addr, "v1", files(), &ControllerAuth::default()).await;
    ensure!(plain.is_err(), "plaintext push accepted");
    let mixed = apply_config(
        &format!("http://{addr}"),
        "v1",
        files(),
        &auth(Some("admin-token")),
    )
    .await
    .unwrap_err()
    .to_string();
    ensure!(mixed.contains("http:// is plaintext"), "{mixed}");
    ensure!(
        !mixed.contains(token.trim()),
        "the token leaked into an error"
    );

    // With TLS, the rlc certificate and the token: applied.
    let r = apply_config(&addr, "v1", files(), &auth(Some("admin-token")))
        .await
        .context("the authorised push")?;
    ensure!(r.buckets == 1, "{r:?}");
    ensure!(ctl.snapshot().version == "v1");
    Ok(())
}
