//! Every refusal of the config model, each checking that the message names file, line, field.

use super::*;

const PAYMENTS: &str = "\
service: payments
buckets:
  - name: gateway-pay
    match: { caller: gateway, procedure: \"Pay/*\" }
    scope: global
    mode: deny
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
  - name: partner-acme
    match: { caller: partner-acme }
    scope: region
    mode: shadow
    policy: { kind: fixed, rps: 500 }
  - name: refunds
    match: { procedure: Refund }
    scope: zone
    mode: deny
    policy: { kind: historical-peak }
";

const LIMITS: &str = "\
service: payments
limits:
  gateway-pay: { rps: 1250, policy: historical-peak, observed_peak: 1000 }
";

fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(p, c)| (p.to_string(), c.to_string()))
        .collect()
}

fn refused(list: &[(&str, &str)]) -> ConfigError {
    let errs = from_files("v", files(list)).expect_err("config should be refused");
    assert_eq!(errs.0.len(), 1, "expected one error, got {errs}");
    errs.0.into_iter().next().unwrap()
}

fn assert_refusal(e: &ConfigError, file: &str, line: usize, field: &str, words: &str) {
    assert_eq!(e.file, file, "{e}");
    assert_eq!(e.line, Some(line), "{e}");
    assert_eq!(e.field, field, "{e}");
    assert!(e.message.contains(words), "`{e}` should mention `{words}`");
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("{file}:{line}: {field}: ")),
        "{shown}"
    );
}

#[test]
fn valid_config_gives_effective_limits() {
    let snap = from_files(
        "abc",
        files(&[
            ("services/payments.yaml", PAYMENTS),
            ("limits/payments.yaml", LIMITS),
            ("README.md", "ignored"),
        ]),
    )
    .unwrap();
    assert_eq!(snap.version, "abc");
    let svc = snap.service("payments").unwrap();
    let gw = svc.bucket("gateway-pay").unwrap();
    assert_eq!(gw.limit, Some(1250.0));
    assert_eq!(gw.limit_source, LimitSource::Computed);
    assert_eq!(gw.evidence["observed_peak"], serde_json::json!(1000));
    assert_eq!(gw.policy.params["window"], serde_json::json!("28d"));
    let acme = svc.bucket("partner-acme").unwrap();
    assert_eq!(
        (acme.limit, acme.mode, acme.scope),
        (Some(500.0), Mode::Shadow, Scope::Region)
    );
    let unenforced: Vec<_> = snap.unenforced().map(|(_, b)| b.name.as_str()).collect();
    assert_eq!(unenforced, ["refunds"]);
    assert_eq!(svc.find("gateway", "Pay/Card").unwrap().name, "gateway-pay");
    assert_eq!(
        svc.find("partner-acme", "Refund").unwrap().name,
        "partner-acme"
    );
    assert_eq!(svc.find("web", "Refund").unwrap().name, "refunds");
    assert!(svc.find("web", "Pay/Card").is_none());
}

#[test]
fn load_dir_reads_services_and_limits() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("services")).unwrap();
    std::fs::create_dir_all(dir.path().join("limits")).unwrap();
    std::fs::write(dir.path().join("services/payments.yaml"), PAYMENTS).unwrap();
    std::fs::write(dir.path().join("limits/payments.yaml"), LIMITS).unwrap();
    let a = load_dir(dir.path(), None).unwrap();
    let b = load_dir(dir.path(), None).unwrap();
    assert_eq!(a.version, b.version, "content version is stable");
    std::fs::write(
        dir.path().join("limits/payments.yaml"),
        LIMITS.replace("1250", "1300"),
    )
    .unwrap();
    let c = load_dir(dir.path(), None).unwrap();
    assert_ne!(a.version, c.version, "content version follows content");
    assert_eq!(
        c.service("payments")
            .unwrap()
            .bucket("gateway-pay")
            .unwrap()
            .limit,
        Some(1300.0)
    );
}

#[test]
fn unknown_scope_is_refused() {
    let text = PAYMENTS.replace("scope: region", "scope: planet");
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        10,
        "buckets[1].scope",
        "unknown variant `planet`",
    );
}

#[test]
fn unknown_mode_is_refused() {
    let text = PAYMENTS.replace("mode: shadow", "mode: maybe");
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        11,
        "buckets[1].mode",
        "unknown variant `maybe`",
    );
}

#[test]
fn unknown_policy_kind_is_refused() {
    let text = PAYMENTS.replace("kind: historical-peak }", "kind: magic }");
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        17,
        "buckets[2].policy.kind",
        "unknown policy \"magic\"",
    );
}

/// The loader knows exactly the kinds of the `policies` registry: a kind added there is
/// accepted here, with no second list to keep in step.
#[test]
fn every_registered_policy_kind_is_known_to_the_loader() {
    for kind in policies::KINDS {
        let text = PAYMENTS.replace("kind: historical-peak }", &format!("kind: {kind} }}"));
        if let Err(errors) = from_files("v", files(&[("services/payments.yaml", &text)])) {
            for e in &errors.0 {
                assert_ne!(e.field, "buckets[2].policy.kind", "kind `{kind}`: {e}");
            }
        }
    }
}

#[test]
fn unknown_policy_parameter_is_refused_at_load() {
    let text = PAYMENTS.replace(
        "kind: historical-peak }",
        "kind: historical-peak, bufer: 2.0 }",
    );
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        17,
        "buckets[2].policy.bufer",
        "unknown",
    );
}

#[test]
fn bad_policy_parameter_value_is_refused_at_load() {
    let text = PAYMENTS.replace(
        "kind: historical-peak }",
        "kind: historical-peak, buffer: -1 }",
    );
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        17,
        "buckets[2].policy.buffer",
        "",
    );
}

#[test]
fn bad_guard_override_is_refused_at_load() {
    let text = PAYMENTS.replace(
        "kind: historical-peak }",
        "kind: historical-peak }\n    guards: { max_decrease: 3 }",
    );
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        18,
        "buckets[2].guards.max_decrease",
        "between 0 and 1",
    );
}

#[test]
fn duplicate_bucket_name_is_refused() {
    let text = PAYMENTS.replace("name: refunds", "name: gateway-pay");
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        13,
        "buckets[2].name",
        "duplicate bucket name `gateway-pay` (first declared at line 3)",
    );
}

#[test]
fn two_buckets_with_the_same_match_are_refused() {
    let text = PAYMENTS.replace(
        "match: { procedure: Refund }",
        "match: { caller: partner-acme }",
    );
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        14,
        "buckets[2].match",
        "same match",
    );
    assert!(e.message.contains("partner-acme"), "{e}");
}

#[test]
fn fixed_limit_must_be_positive() {
    let text = PAYMENTS.replace("rps: 500", "rps: -3");
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        12,
        "buckets[1].policy.rps",
        "greater than 0",
    );
}

#[test]
fn computed_limit_must_be_finite_and_positive() {
    for bad in ["0", "-1", ".nan", ".inf"] {
        let limits = LIMITS.replace("rps: 1250", &format!("rps: {bad}"));
        let e = refused(&[
            ("services/payments.yaml", PAYMENTS),
            ("limits/payments.yaml", &limits),
        ]);
        assert_refusal(
            &e,
            "limits/payments.yaml",
            3,
            "limits.gateway-pay.rps",
            "not a finite number > 0",
        );
    }
}

#[test]
fn computed_limit_that_is_not_a_number_is_refused() {
    let limits = "service: payments\nlimits:\n  gateway-pay:\n    rps: lots\n";
    let e = refused(&[
        ("services/payments.yaml", PAYMENTS),
        ("limits/payments.yaml", limits),
    ]);
    assert_eq!(e.file, "limits/payments.yaml");
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.to_string().contains("rps"), "{e}");
}

#[test]
fn limit_for_a_missing_bucket_is_refused() {
    let limits = format!("{LIMITS}  ghost: {{ rps: 10 }}\n");
    let e = refused(&[
        ("services/payments.yaml", PAYMENTS),
        ("limits/payments.yaml", &limits),
    ]);
    assert_refusal(
        &e,
        "limits/payments.yaml",
        4,
        "limits.ghost",
        "bucket `ghost` does not exist",
    );
}

#[test]
fn limits_for_a_missing_service_are_refused() {
    let limits = LIMITS.replace("payments", "billing");
    let e = refused(&[
        ("services/payments.yaml", PAYMENTS),
        ("limits/billing.yaml", &limits),
    ]);
    assert_refusal(
        &e,
        "limits/billing.yaml",
        1,
        "service",
        "no services/billing.yaml",
    );
}

#[test]
fn unknown_field_is_refused() {
    let text = PAYMENTS.replace(
        "    mode: deny\n    policy: { kind: fixed",
        "    mode: deny\n    colour: red\n    policy: { kind: fixed",
    );
    let text = text.replacen(
        "    scope: global\n",
        "    scope: global\n    colour: red\n",
        1,
    );
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_eq!(e.line, Some(6), "{e}");
    assert!(e.message.contains("unknown field `colour`"), "{e}");
}

#[test]
fn malformed_yaml_names_the_line() {
    let e = refused(&[("services/payments.yaml", "service: payments\nbuckets: [\n")]);
    assert_eq!(e.file, "services/payments.yaml");
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn service_name_must_match_file() {
    let e = refused(&[("services/billing.yaml", PAYMENTS)]);
    assert_refusal(
        &e,
        "services/billing.yaml",
        1,
        "service",
        "must live in services/payments.yaml",
    );
}
