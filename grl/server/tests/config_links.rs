//! Config files that are not config (issue 24, item 7), with `grl controller` as a
//! process: a symbolic link out of the `--config` directory (to a secret file or the
//! controller's own TLS key), at start-up or added while followed, and a link committed to
//! the `--config-git` repo are refused naming the file, and neither the target nor its
//! content appears in any output; a value that does not parse is named by file, line and
//! field, never quoted.

use test_support::git_remote::BareRemote;
use test_support::ports::free_addr;

use super::creds::{Dir, PLANTED, pem_body, run_to_exit};
use super::security::{Ca, Proc, SERVICE, metric, metrics_addr, p, wait_metric, wait_port};
use super::support::scrape;

#[cfg(unix)]
#[test]
fn a_symlink_out_of_the_config_dir_stops_start_up_and_leaks_nothing() {
    let d = Dir::new();
    let config = d.path("config");
    std::os::unix::fs::symlink(d.path("shadow"), d.path("config/services/evil.yaml")).unwrap();
    let (code, out) = run_to_exit(&[
        "controller",
        "--listen",
        "127.0.0.1:0",
        "--config",
        p(&config),
    ]);
    assert!(
        code.is_some_and(|c| c != 0),
        "started anyway ({code:?}):\n{out}"
    );
    assert!(out.contains("services/evil.yaml"), "{out}");
    assert!(out.contains("leads out of the config directory"), "{out}");
    assert!(
        !out.contains(PLANTED),
        "the link's target was printed:\n{out}"
    );

    // The same with a link to the controller's own TLS key.
    let ca = Ca::new(d.0.path(), "ca");
    let (cert, key) = ca.leaf("controller", "controller");
    std::fs::remove_file(d.path("config/services/evil.yaml")).unwrap();
    std::os::unix::fs::symlink(&key, d.path("config/services/evil.yaml")).unwrap();
    let (code, out) = run_to_exit(&[
        "controller",
        "--listen",
        "127.0.0.1:0",
        "--config",
        p(&config),
        "--tls-cert",
        p(&cert),
        "--tls-key",
        p(&key),
    ]);
    assert!(
        code.is_some_and(|c| c != 0),
        "started anyway ({code:?}):\n{out}"
    );
    assert!(out.contains("services/evil.yaml"), "{out}");
    assert!(
        !out.contains(&pem_body(&key)),
        "the TLS key was printed:\n{out}"
    );
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_added_to_a_followed_config_dir_is_refused_and_not_logged() {
    let d = Dir::new();
    let addr = free_addr();
    let config = d.path("config");
    let ctl = Proc::spawn(
        &[
            "controller",
            "--listen",
            &addr.to_string(),
            "--config",
            p(&config),
            "--poll-ms",
            "100",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        d.path("controller.log"),
    );
    wait_port(addr).await;
    let m = metrics_addr(&ctl).await;
    std::os::unix::fs::symlink(d.path("shadow"), d.path("config/services/evil.yaml")).unwrap();
    let refused = wait_metric(m, "grl_controller_config_refused_total", 1.0).await;
    assert!(refused >= 1.0, "the link was not refused:\n{}", ctl.log());
    let log = ctl.log();
    assert!(log.contains("services/evil.yaml"), "{log}");
    assert!(
        !log.contains(PLANTED),
        "the link's target was logged:\n{log}"
    );
    let limit = "grl_tier_limit_rps{service=\"payments\",bucket=\"gateway-pay\"}";
    assert_eq!(
        metric(&scrape(m).await, limit),
        500.0,
        "the config in force changed"
    );
}

#[test]
fn a_config_repo_with_a_symlink_is_refused_without_echo() {
    let d = Dir::new();
    let remote = BareRemote::with_files(&[("services/payments.yaml", SERVICE)]).unwrap();
    let target = d.path("shadow").display().to_string();
    remote
        .commit_symlink("services/evil.yaml", &target)
        .unwrap();
    let (code, out) = run_to_exit(&[
        "controller",
        "--listen",
        "127.0.0.1:0",
        "--config-git",
        &remote.url(),
    ]);
    assert!(
        code.is_some_and(|c| c != 0),
        "started anyway ({code:?}):\n{out}"
    );
    assert!(out.contains("services/evil.yaml"), "{out}");
    assert!(out.contains("is a symbolic link"), "{out}");
    assert!(
        !out.contains(&target),
        "the link's target was printed:\n{out}"
    );
    assert!(!out.contains(PLANTED), "{out}");
}

#[test]
fn a_bad_scalar_is_named_by_file_line_and_field_not_echoed() {
    let bad = SERVICE.replace("mode: deny", &format!("mode: {PLANTED}"));
    let remote = BareRemote::with_files(&[("services/payments.yaml", bad.as_str())]).unwrap();
    let (code, out) = run_to_exit(&[
        "controller",
        "--listen",
        "127.0.0.1:0",
        "--config-git",
        &remote.url(),
    ]);
    assert!(
        code.is_some_and(|c| c != 0),
        "started anyway ({code:?}):\n{out}"
    );
    assert!(
        out.contains("services/payments.yaml:6: buckets[0].mode"),
        "{out}"
    );
    assert!(!out.contains(PLANTED), "the value was echoed:\n{out}");

    let d = Dir::new();
    let bad = SERVICE.replace("rps: 500", &format!("rps: \"{PLANTED}\""));
    std::fs::write(d.path("config/services/payments.yaml"), bad).unwrap();
    let (code, out) = run_to_exit(&[
        "controller",
        "--listen",
        "127.0.0.1:0",
        "--config",
        p(&d.path("config")),
    ]);
    assert!(
        code.is_some_and(|c| c != 0),
        "started anyway ({code:?}):\n{out}"
    );
    assert!(
        out.contains("services/payments.yaml:7: buckets[0].policy.rps"),
        "{out}"
    );
    assert!(!out.contains(PLANTED), "the value was echoed:\n{out}");
}
