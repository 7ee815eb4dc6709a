//! What `grl` says when it is misused (issue 40): each error once, the misspelled field
//! named, no colours in a file or pipe, negative numbers read as values, unknown services
//! refused with the names that exist, a region's controller named by its region.

use std::process::{Command, Output};

use test_support::ports::free_port;

use super::binary::{BIN, controller, spawn, wait_port};

fn grl(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn controller_config_error_is_said_once_and_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("services")).unwrap();
    std::fs::write(
        dir.path().join("services/orders.yaml"),
        "service: orders\nbuckets:\n  - name: a\n    match: { caller: web }\n    scpoe: global\n    mode: deny\n    policy: { kind: fixed, rps: 5 }\n",
    )
    .unwrap();
    let config = dir.path().display().to_string();
    let o = grl(&["controller", "--listen", "127.0.0.1:0", "--config", &config]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.matches("services/orders.yaml:5").count(), 1, "{e}");
    assert!(
        e.contains("unknown field `scpoe` (did you mean `scope`?)"),
        "{e}"
    );
    assert!(!e.contains("Caused by"), "{e}");
    assert!(!e.contains('\x1b'), "no colours in a pipe: {e}");
}

#[test]
fn negative_rps_gets_the_flags_message() {
    let o = grl(&[
        "override",
        "set",
        "--controller",
        "127.0.0.1:1",
        "--service",
        "orders",
        "--rps",
        "-1",
        "--ttl",
        "5m",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("invalid value '-1' for '--rps"), "{e}");
    assert!(!e.contains("unexpected argument"), "{e}");
}

#[test]
fn unknown_service_is_refused_with_the_names_that_exist() {
    let dir = tempfile::tempdir().unwrap();
    crate::support::write_config(dir.path(), 100.0);
    let cp = free_port();
    let _c = controller(cp, dir.path());
    let ctl = format!("127.0.0.1:{cp}");
    let set = grl(&[
        "override",
        "set",
        "--controller",
        &ctl,
        "--service",
        "nosuch",
        "--rps",
        "5",
        "--ttl",
        "5m",
    ]);
    assert_eq!(set.status.code(), Some(2), "{}", stderr(&set));
    assert!(
        stderr(&set).contains("no service `nosuch` (services: payments)"),
        "{}",
        stderr(&set)
    );
    let list = grl(&["override", "list", "--controller", &ctl, "--json"]);
    assert!(list.status.success(), "{}", stderr(&list));
    assert!(list.stdout.is_empty(), "nothing was set");

    let explain = grl(&["explain", "--controller", &ctl, "--service", "nosuch"]);
    assert_eq!(explain.status.code(), Some(2), "{}", stderr(&explain));
    assert!(
        stderr(&explain).contains("(services: payments)"),
        "{}",
        stderr(&explain)
    );
    let explain = grl(&[
        "explain",
        "--controller",
        &ctl,
        "--service",
        "payments",
        "--caller",
        "gateway",
    ]);
    assert!(explain.status.success(), "{}", stderr(&explain));
}

#[test]
fn a_region_controller_without_a_parent_says_so() {
    let dir = tempfile::tempdir().unwrap();
    crate::support::write_config(dir.path(), 100.0);
    let cp = free_port();
    let ctl = format!("127.0.0.1:{cp}");
    let config = dir.path().display().to_string();
    let _c = spawn(&[
        "controller",
        "--listen",
        &ctl,
        "--config",
        &config,
        "--region",
        "r1",
    ]);
    wait_port(cp);
    let o = grl(&["status", "--controller", &ctl]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("controller of region r1"), "{out}");
    assert!(!out.contains("global controller"), "{out}");
}
