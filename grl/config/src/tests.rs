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
        "unknown variant, expected",
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
        "unknown variant, expected",
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
        "unknown policy kind",
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
        "duplicate bucket name (first declared at line 3)",
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
        "same match as the bucket at line 9",
    );
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
            "must be a finite number between",
        );
    }
}

/// A limits file with two scheduled limits of `gateway-pay` (the second given first).
const SCHEDULED: &str = "\
service: payments
limits:
  gateway-pay:
    rps: 1250
    scheduled:
      - rps: 500
        effective: { from: \"2027-01-02T00:00:00Z\", until: \"2027-01-03T00:00:00Z\" }
      - rps: 3750
        effective: { from: \"2026-12-31T22:00:00Z\", until: \"2027-01-01T02:00:00+00:00\" }
        reason: new-years-eve
";

#[test]
fn scheduled_limits_are_in_force_inside_their_windows_only() {
    let snap = from_files(
        "v",
        files(&[
            ("services/payments.yaml", PAYMENTS),
            ("limits/payments.yaml", SCHEDULED),
        ]),
    )
    .unwrap();
    let b = snap
        .service("payments")
        .unwrap()
        .bucket("gateway-pay")
        .unwrap();
    let t = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp();
    assert_eq!(b.scheduled.len(), 2);
    assert_eq!(b.scheduled[0].reason, "new-years-eve", "sorted by start");
    assert_eq!(b.limit_at(t("2026-12-31T21:59:59Z")), Some(1250.0));
    assert_eq!(
        b.limit_at(t("2026-12-31T22:00:00Z")),
        Some(3750.0),
        "from is included"
    );
    assert_eq!(
        b.limit_at(t("2027-01-01T02:00:00Z")),
        Some(1250.0),
        "until is excluded"
    );
    assert_eq!(b.limit_at(t("2027-01-02T12:00:00Z")), Some(500.0));
    let next = b.next_change(t("2026-12-30T00:00:00Z")).unwrap();
    assert_eq!(
        (next.at, next.rps),
        (t("2026-12-31T22:00:00Z"), Some(3750.0))
    );
    let next = b.next_change(t("2026-12-31T23:00:00Z")).unwrap();
    assert_eq!(
        (next.at, next.rps),
        (t("2027-01-01T02:00:00Z"), Some(1250.0))
    );
    assert!(b.next_change(t("2027-01-03T00:00:00Z")).is_none());
    let epochs: Vec<_> = [
        "2026-12-01T00:00:00Z",
        "2026-12-31T22:00:00Z",
        "2027-01-01T02:00:00Z",
    ]
    .iter()
    .map(|s| snap.schedule_epoch(t(s)))
    .collect();
    assert_eq!(
        epochs,
        [Some(0), Some(1), Some(2)],
        "one step per start or end"
    );
    let plain = from_files(
        "v",
        files(&[
            ("services/payments.yaml", PAYMENTS),
            ("limits/payments.yaml", LIMITS),
        ]),
    )
    .unwrap();
    assert_eq!(plain.schedule_epoch(0), None);
}

#[test]
fn overlapping_or_inverted_scheduled_limits_are_refused_by_field() {
    let overlapping = SCHEDULED.replace("2027-01-02T00:00:00Z", "2027-01-01T01:00:00Z");
    let e = refused(&[
        ("services/payments.yaml", PAYMENTS),
        ("limits/payments.yaml", &overlapping),
    ]);
    assert_refusal(
        &e,
        "limits/payments.yaml",
        7,
        "limits.gateway-pay.scheduled[0].effective.from",
        "overlaps scheduled[1]",
    );
    let inverted = SCHEDULED.replace(
        "until: \"2027-01-03T00:00:00Z\"",
        "until: \"2027-01-01T00:00:00Z\"",
    );
    let e = refused(&[
        ("services/payments.yaml", PAYMENTS),
        ("limits/payments.yaml", &inverted),
    ]);
    assert_refusal(
        &e,
        "limits/payments.yaml",
        7,
        "limits.gateway-pay.scheduled[0].effective.until",
        "must be after `from`",
    );
    let not_an_instant = SCHEDULED.replace("2027-01-02T00:00:00Z", "next tuesday");
    let e = refused(&[
        ("services/payments.yaml", PAYMENTS),
        ("limits/payments.yaml", &not_an_instant),
    ]);
    assert_refusal(
        &e,
        "limits/payments.yaml",
        7,
        "limits.gateway-pay.scheduled[0].effective.from",
        "is not an RFC 3339 instant",
    );
    let zero = SCHEDULED.replace("rps: 500", "rps: 0");
    let e = refused(&[
        ("services/payments.yaml", PAYMENTS),
        ("limits/payments.yaml", &zero),
    ]);
    assert_refusal(
        &e,
        "limits/payments.yaml",
        6,
        "limits.gateway-pay.scheduled[0].rps",
        "finite number",
    );
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
    // A key that misspells no field is not repeated (it may come from a secret file).
    assert!(e.message.starts_with("unknown field, expected"), "{e}");
    assert!(!e.message.contains("colour"), "{e}");
}

#[test]
fn misspelled_field_is_named() {
    let text = PAYMENTS.replacen("    scope: global\n", "    scpoe: global\n", 1);
    let e = refused(&[("services/payments.yaml", &text)]);
    assert!(
        e.message
            .starts_with("unknown field `scpoe` (did you mean `scope`?), expected one of"),
        "{e}"
    );
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
        "must be `billing`, the name of its file",
    );
}

/// Issue 12: a 200 KB file of `[` nested 100,000 deep took over 30 s to refuse.
#[test]
fn deeply_nested_brackets_are_refused_before_parsing_and_fast() {
    let text = format!("service: payments\nbuckets: {}", "[".repeat(200_000));
    let start = std::time::Instant::now();
    let e = refused(&[("services/payments.yaml", &text)]);
    assert!(
        start.elapsed() < std::time::Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(
        (e.file.as_str(), e.line),
        ("services/payments.yaml", Some(2))
    );
    assert!(e.message.contains("nested more than"), "{e}");
}

#[test]
fn a_file_over_the_size_limit_is_refused() {
    let text = format!(
        "{PAYMENTS}description: \"{}\"\n",
        "x".repeat(bounds::MAX_FILE_BYTES)
    );
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_eq!(e.file, "services/payments.yaml");
    assert!(e.message.contains("more than the 1048576 allowed"), "{e}");
}

#[test]
fn absurd_limits_are_refused() {
    for bad in ["1e300", "1e-300", "0.0000001", "2e9"] {
        let text = PAYMENTS.replace("rps: 500", &format!("rps: {bad}"));
        let e = refused(&[("services/payments.yaml", &text)]);
        assert_refusal(
            &e,
            "services/payments.yaml",
            12,
            "buckets[1].policy.rps",
            "between 0.001 and 1000000000",
        );
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
            "between 0.001 and 1000000000",
        );
    }
    let edge = PAYMENTS.replace("rps: 500", "rps: 1e9");
    from_files("v", files(&[("services/payments.yaml", &edge)])).unwrap();
}

#[test]
fn long_names_are_refused_and_not_echoed_whole() {
    let long = "a".repeat(10_000);
    let text = PAYMENTS.replace("name: refunds", &format!("name: {long}"));
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        13,
        "buckets[2].name",
        "at most 256 bytes",
    );
    assert!(e.message.len() < 300, "{e}");
    let text = PAYMENTS.replace("caller: partner-acme", &format!("caller: {long}"));
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        9,
        "buckets[1].match.caller",
        "10000 bytes",
    );
}

#[test]
fn control_and_bidi_characters_in_names_are_refused() {
    for (bad, code) in [
        ("\u{202E}", "U+202E"),
        ("\u{2066}", "U+2066"),
        ("\\u0007", "U+0007"),
    ] {
        let text = PAYMENTS.replace("procedure: Refund", &format!("procedure: \"Ref{bad}und\""));
        let e = refused(&[("services/payments.yaml", &text)]);
        assert_refusal(
            &e,
            "services/payments.yaml",
            14,
            "buckets[2].match.procedure",
            code,
        );
        let text = PAYMENTS.replace("caller: gateway,", &format!("caller: \"gate{bad}way\","));
        let e = refused(&[("services/payments.yaml", &text)]);
        assert_refusal(
            &e,
            "services/payments.yaml",
            4,
            "buckets[0].match.caller",
            code,
        );
    }
    let text = PAYMENTS.replace("name: refunds", "name: \"ref\u{202E}unds\"");
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_eq!(e.field, "buckets[2].name");
    assert!(
        !e.message.contains('\u{202E}'),
        "the refusal does not echo the character: {e}"
    );
}

#[test]
fn too_many_buckets_in_a_service_are_refused() {
    let mut text = String::from("service: payments\nbuckets:\n");
    for i in 0..=bounds::MAX_BUCKETS_PER_SERVICE {
        text.push_str(&format!(
            "  - {{ name: b{i}, match: {{ caller: c{i} }}, scope: zone, mode: deny, policy: {{ kind: fixed, rps: 5 }} }}\n"
        ));
    }
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_refusal(
        &e,
        "services/payments.yaml",
        2,
        "buckets",
        "1001 buckets, more than the 1000",
    );
}

#[test]
fn a_snapshot_of_12000_files_is_read_and_one_more_is_refused() {
    let list = |n: usize| -> Vec<(String, String)> {
        (0..n)
            .map(|s| {
                let text = format!(
                    "service: s{s}\nbuckets:\n  - {{ name: b, match: {{ caller: c }}, scope: zone, mode: deny, policy: {{ kind: fixed, rps: 5 }} }}\n"
                );
                (format!("services/s{s}.yaml"), text)
            })
            .collect()
    };
    assert_eq!(bounds::MAX_FILES, 12_000);
    let snap = from_files("v", list(12_000)).unwrap();
    assert_eq!(snap.services.len(), 12_000);
    let errs = from_files("v", list(12_001)).expect_err("too many files");
    assert!(
        errs.to_string()
            .contains("12001 config files, more than the 12000 allowed"),
        "{errs}"
    );
}

#[test]
fn too_many_buckets_in_a_snapshot_are_refused() {
    let per = bounds::MAX_BUCKETS_PER_SERVICE;
    let services = bounds::MAX_BUCKETS / per + 1;
    let list: Vec<(String, String)> = (0..services)
        .map(|s| {
            let mut text = format!("service: s{s}\nbuckets:\n");
            for i in 0..per {
                text.push_str(&format!(
                    "  - {{ name: b{i}, match: {{ caller: c{i} }}, scope: zone, mode: deny, policy: {{ kind: fixed, rps: 5 }} }}\n"
                ));
            }
            (format!("services/s{s}.yaml"), text)
        })
        .collect();
    let errs = from_files("v", list).expect_err("too many buckets");
    assert!(
        errs.to_string().contains("61000 buckets in all services"),
        "{errs}"
    );
}

#[cfg(unix)]
#[test]
fn a_fifo_named_yaml_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("services")).unwrap();
    std::fs::write(dir.path().join("services/payments.yaml"), PAYMENTS).unwrap();
    let fifo = dir.path().join("services/zz.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let (tx, rx) = std::sync::mpsc::channel();
    let root = dir.path().to_path_buf();
    std::thread::spawn(move || tx.send(load_dir(&root, None)));
    let errs = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("loading blocked on the FIFO")
        .expect_err("a FIFO is refused");
    assert_eq!(errs.0[0].file, "services/zz.yaml", "{errs}");
    assert!(errs.0[0].message.contains("not a regular file"), "{errs}");
}

/// A string planted where a value goes; no refusal may repeat it.
const PLANTED: &str = "planted-secret-9c41e7";

/// Issue 24 (7): errors quoted the values they refused (`invalid type: string "…"`), so a
/// file that is not config at all (a key, a password file) was printed by the refusal.
#[test]
fn no_refusal_quotes_a_value_of_the_file() {
    let values = [
        "payments",
        "gateway-pay",
        "gateway",
        "\"Pay/*\"",
        "global",
        "deny",
        "historical-peak",
        "28d",
        "0.25",
        "partner-acme",
        "region",
        "shadow",
        "fixed",
        "500",
        "refunds",
        "Refund",
        "zone",
        "1250",
        "1000",
    ];
    let mut tried = 0;
    for (file, text) in [
        ("services/payments.yaml", PAYMENTS),
        ("limits/payments.yaml", LIMITS),
    ] {
        for v in values {
            // Whole values only; keys are fields, and an unknown one is named as the field
            // path names it.
            let word =
                |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || "-_:".contains(c));
            for (at, _) in text.match_indices(v).filter(|(at, _)| {
                !word(text[..*at].chars().next_back()) && !word(text[at + v.len()..].chars().next())
            }) {
                let planted = format!("{}{PLANTED}{}", &text[..at], &text[at + v.len()..]);
                let mut list = vec![
                    ("services/payments.yaml", PAYMENTS),
                    ("limits/payments.yaml", LIMITS),
                ];
                list.retain(|(f, _)| *f != file);
                list.push((file, &planted));
                if let Err(errs) = from_files("v", files(&list)) {
                    tried += 1;
                    assert!(
                        !errs.to_string().contains(PLANTED),
                        "{file}, {v} at {at}: {errs}"
                    );
                }
            }
        }
    }
    assert!(tried >= 12, "only {tried} planted values were refused");
    for whole in [
        PLANTED.to_string(),
        format!("root:{PLANTED}:19000:0:99999:7:::\n"),
        format!("-----BEGIN PRIVATE KEY-----\n{PLANTED}\n-----END PRIVATE KEY-----\n"),
        format!("{PLANTED}: 1\n"),
        format!("service: payments\nbuckets: {PLANTED}\n"),
        format!("service: payments\nservice: {PLANTED}\n"),
    ] {
        let errs = from_files("v", files(&[("services/payments.yaml", &whole)]))
            .expect_err("not a service file");
        let shown = errs.to_string();
        assert!(shown.contains("services/payments.yaml:"), "{shown}");
        assert!(!shown.contains(PLANTED), "{shown}");
    }
}

/// A config dir with `services/payments.yaml` and a secret file next to it (outside).
#[cfg(unix)]
fn dir_with_secret_outside() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let top = tempfile::tempdir().unwrap();
    let root = top.path().join("config");
    std::fs::create_dir_all(root.join("services")).unwrap();
    std::fs::write(root.join("services/payments.yaml"), PAYMENTS).unwrap();
    let secret = top.path().join("shadow");
    std::fs::write(&secret, format!("{PLANTED}\n")).unwrap();
    (top, root, secret)
}

/// Issue 24 (7): `services/evil.yaml -> /etc/shadow` was followed, and its content printed
/// in the refusal.
#[cfg(unix)]
#[test]
fn a_symlink_out_of_the_config_dir_is_refused_unread() {
    let (_top, root, secret) = dir_with_secret_outside();
    std::os::unix::fs::symlink(&secret, root.join("services/evil.yaml")).unwrap();
    let errs = load_dir(&root, None).expect_err("a link out is refused");
    assert_eq!(errs.0[0].file, "services/evil.yaml", "{errs}");
    assert!(
        errs.0[0]
            .message
            .contains("leads out of the config directory"),
        "{errs}"
    );
    assert!(!errs.to_string().contains(PLANTED), "{errs}");
    assert!(
        !errs.to_string().contains("shadow"),
        "the target is not named: {errs}"
    );

    // A relative link out, and `services/` itself linking out, are refused the same way.
    std::fs::remove_file(root.join("services/evil.yaml")).unwrap();
    std::os::unix::fs::symlink("../../shadow", root.join("services/evil.yaml")).unwrap();
    let errs = load_dir(&root, None).expect_err("a relative link out is refused");
    assert!(!errs.to_string().contains(PLANTED), "{errs}");
    assert_eq!(errs.0[0].file, "services/evil.yaml", "{errs}");
    let other = root.parent().unwrap().join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(&secret, other.join("x.yaml")).unwrap();
    std::fs::create_dir_all(root.join("limits")).ok();
    std::fs::remove_dir(root.join("limits")).unwrap();
    std::os::unix::fs::symlink(&other, root.join("limits")).unwrap();
    std::fs::remove_file(root.join("services/evil.yaml")).unwrap();
    let errs = load_dir(&root, None).expect_err("limits/ linking out is refused");
    assert_eq!(errs.0[0].file, "limits", "{errs}");
    assert!(!errs.to_string().contains(PLANTED), "{errs}");
}

/// Links that stay inside the directory (a Kubernetes `..data` projection) are followed.
#[cfg(unix)]
#[test]
fn symlinks_inside_the_config_dir_are_followed() {
    let top = tempfile::tempdir().unwrap();
    let root = top.path().join("config");
    let data = root.join("..2026_12_01/services");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("payments.yaml"), PAYMENTS).unwrap();
    std::os::unix::fs::symlink("..2026_12_01", root.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/services", root.join("services")).unwrap();
    let s = load_dir(&root, None).unwrap();
    assert!(s.service("payments").is_some());
    // The root itself may be a link (git-sync), and a file may link to a sibling.
    let link = top.path().join("current");
    std::os::unix::fs::symlink(&root, &link).unwrap();
    std::fs::create_dir_all(root.join("limits")).unwrap();
    std::fs::write(root.join("limits/real.data"), LIMITS).unwrap();
    std::os::unix::fs::symlink("real.data", root.join("limits/payments.yaml")).unwrap();
    let s = load_dir(&link, None).unwrap();
    let b = s
        .service("payments")
        .unwrap()
        .find("gateway", "Pay/x")
        .unwrap();
    assert_eq!(b.limit, Some(1250.0));
}

#[test]
fn a_missing_path_or_a_plain_file_as_root_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let errs = load_dir(&dir.path().join("nope"), None).expect_err("missing root");
    assert!(errs.to_string().contains("nope"), "{errs}");
    let file = dir.path().join("file.yaml");
    std::fs::write(&file, PAYMENTS).unwrap();
    let errs = load_dir(&file, None).expect_err("a file as root");
    assert!(errs.to_string().contains("is not a directory"), "{errs}");
}

mod properties {
    //! Property tests of the loader: any text is answered without a panic, every refusal
    //! names a given file and a line inside it, and generated valid configs load with every
    //! bucket found by its own match.

    use super::*;
    use proptest::prelude::*;

    /// YAML-ish text: indicators, quotes, brackets, newlines and words.
    fn yamlish() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just("[".to_string()),
                Just("]".to_string()),
                Just("{".to_string()),
                Just("}".to_string()),
                Just("\"".to_string()),
                Just("'".to_string()),
                Just(": ".to_string()),
                Just("- ".to_string()),
                Just("\n".to_string()),
                Just("  ".to_string()),
                Just("# ".to_string()),
                Just("&a ".to_string()),
                Just("*a".to_string()),
                Just("service".to_string()),
                Just("buckets".to_string()),
                Just("payments".to_string()),
                Just("rps: 1e300".to_string()),
                "[a-z0-9]{1,8}",
                any::<char>().prop_map(|c| c.to_string()),
            ],
            0..200,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_text_is_answered_and_refusals_name_the_file(text in yamlish()) {
            // YAML breaks lines at "\r\n", "\n" and a lone "\r" (`str::lines` does not at
            // the last), and its line numbers count them that way.
            let lines = text.replace("\r\n", "\n").replace('\r', "\n").lines().count().max(1);
            for path in ["services/payments.yaml", "limits/payments.yaml"] {
                if let Err(errs) = from_files("v", files(&[(path, &text)])) {
                    for e in &errs.0 {
                        prop_assert_eq!(&e.file, path);
                        if let Some(l) = e.line {
                            prop_assert!(l >= 1 && l <= lines + 1, "line {} of {}: {}", l, lines, e);
                        }
                    }
                }
            }
        }

        #[test]
        fn mutated_valid_files_are_answered(at in 0usize..PAYMENTS.len(), insert in "[\\[\\]{}:\"' \n-]{1,4}") {
            let mut text = PAYMENTS.to_string();
            let at = (0..=at).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
            text.insert_str(at, &insert);
            if let Err(errs) = from_files("v", files(&[("services/payments.yaml", &text)])) {
                prop_assert!(errs.0.iter().all(|e| e.file == "services/payments.yaml"));
            }
        }

        #[test]
        fn generated_valid_configs_load_and_every_bucket_matches_itself(
            buckets in proptest::collection::btree_map(
                "[a-z][a-z0-9-]{0,11}",
                ("[a-z]{1,6}", proptest::option::of("[A-Z][a-z]{0,5}(/\\*)?"), 0.001f64..1e9),
                1..12,
            )
        ) {
            let mut text = String::from("service: payments\nbuckets:\n");
            for (i, (name, (caller, procedure, rps))) in buckets.iter().enumerate() {
                // Callers are made unique so no two buckets share a match.
                let caller = format!("{caller}{i}");
                let procedure = procedure
                    .as_ref()
                    .map_or(String::new(), |p| format!(", procedure: \"{p}\""));
                text.push_str(&format!(
                    "  - name: {name}\n    match: {{ caller: {caller}{procedure} }}\n    scope: zone\n    mode: deny\n    policy: {{ kind: fixed, rps: {rps} }}\n"
                ));
            }
            let snap = from_files("v", files(&[("services/payments.yaml", &text)]))
                .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            let svc = snap.service("payments").unwrap();
            prop_assert_eq!(svc.buckets.len(), buckets.len());
            for (i, (name, (caller, procedure, rps))) in buckets.iter().enumerate() {
                let caller = format!("{caller}{i}");
                let probe = procedure.as_deref().map_or("Any/Thing".to_string(), |p| p.replace('*', "x"));
                let found = svc.find(&caller, &probe).expect("its own request matches");
                prop_assert_eq!(&found.name, name);
                prop_assert_eq!(found.limit, Some(*rps));
            }
        }
    }
}

#[test]
fn a_bucket_marked_in_addition_applies_beside_the_caller_bucket() {
    let text = PAYMENTS.replace(
        "    match: { procedure: Refund }\n",
        "    match: { procedure: Refund }\n    in_addition: true\n",
    );
    let snap = from_files("v", files(&[("services/payments.yaml", &text)])).unwrap();
    let svc = snap.service("payments").unwrap();
    assert!(svc.bucket("refunds").unwrap().in_addition);
    assert!(!svc.bucket("partner-acme").unwrap().in_addition);
    assert_eq!(
        svc.find("partner-acme", "Refund").unwrap().name,
        "partner-acme"
    );
    assert_eq!(
        svc.find_in_addition("partner-acme", "Refund").unwrap().name,
        "refunds"
    );
    assert!(
        svc.find_in_addition("web", "Refund").is_none(),
        "a bucket is not applied twice when it is the request's own"
    );
    let plain = from_files("v", files(&[("services/payments.yaml", PAYMENTS)])).unwrap();
    assert!(
        plain
            .service("payments")
            .unwrap()
            .find_in_addition("partner-acme", "Refund")
            .is_none()
    );
}

#[test]
fn in_addition_must_be_a_bool() {
    let text = PAYMENTS.replace(
        "    match: { procedure: Refund }\n",
        "    match: { procedure: Refund }\n    in_addition: always\n",
    );
    let e = refused(&[("services/payments.yaml", &text)]);
    assert_eq!(e.file, "services/payments.yaml", "{e}");
    assert_eq!(e.line, Some(15), "{e}");
    assert!(e.to_string().contains("in_addition"), "{e}");
}

/// PAYMENTS with `lines` added to the bucket `gateway-pay` (after its policy, line 7).
fn with_gateway_lines(lines: &str) -> String {
    PAYMENTS.replace(
        "    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }\n",
        &format!("    policy: {{ kind: historical-peak, window: 28d, buffer: 0.25 }}\n{lines}"),
    )
}

#[test]
fn priority_classes_are_read_in_order_with_their_floors_and_a_default() {
    let text = with_gateway_lines(
        "    priorities: [critical, default, sheddable]\n    min_share: { sheddable: 0.05 }\n",
    );
    let snap = from_files("v", files(&[("services/payments.yaml", &text)])).unwrap();
    let svc = snap.service("payments").unwrap();
    let b = svc.bucket("gateway-pay").unwrap();
    let names: Vec<&str> = b.priorities.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["critical", "default", "sheddable"]);
    assert_eq!(b.priorities[2].min_share, 0.05);
    assert_eq!(b.priorities[0].min_share, 0.0);
    assert_eq!(b.default_class(), Some(1));
    assert!(svc.bucket("refunds").unwrap().priorities.is_empty());
    // Without a class named `default`, requests without a class count in the lowest.
    let text = with_gateway_lines("    priorities: [user, batch]\n");
    let snap = from_files("v", files(&[("services/payments.yaml", &text)])).unwrap();
    let b = snap
        .service("payments")
        .unwrap()
        .bucket("gateway-pay")
        .unwrap();
    assert_eq!(b.default_class(), Some(1));
}

#[test]
fn a_service_gives_its_buckets_a_default_list_of_classes() {
    let text = PAYMENTS.replace(
        "service: payments\n",
        "service: payments\npriorities: [critical, default, sheddable]\n",
    );
    let text = text.replace(
        "    match: { procedure: Refund }\n",
        "    match: { procedure: Refund }\n    priorities: []\n",
    );
    let snap = from_files("v", files(&[("services/payments.yaml", &text)])).unwrap();
    let svc = snap.service("payments").unwrap();
    assert_eq!(svc.bucket("gateway-pay").unwrap().priorities.len(), 3);
    assert_eq!(svc.bucket("partner-acme").unwrap().priorities.len(), 3);
    assert!(
        svc.bucket("refunds").unwrap().priorities.is_empty(),
        "`priorities: []` opts out"
    );
}

#[test]
fn bad_priority_classes_are_refused_with_file_line_and_field() {
    let file = "services/payments.yaml";
    let cases = [
        (
            "    priorities: [critical, default, critical]\n",
            "buckets[0].priorities[2]",
            "listed twice",
        ),
        (
            "    priorities: [critical, \"bad#name\"]\n",
            "buckets[0].priorities[1]",
            "not a valid class name",
        ),
        (
            "    priorities: [a, b, c, d, e, f, g, h, i]\n",
            "buckets[0].priorities",
            "more than the 8 allowed",
        ),
        (
            "    priorities: [critical, sheddable]\n    min_share: { bulk: 0.1 }\n",
            "buckets[0].min_share.bulk",
            "not one of the bucket's classes",
        ),
        (
            "    priorities: [critical, sheddable]\n    min_share: { sheddable: 1.5 }\n",
            "buckets[0].min_share.sheddable",
            "between 0 and 1",
        ),
        (
            "    priorities: [critical, sheddable]\n    min_share: { critical: 0.6, sheddable: 0.6 }\n",
            "buckets[0].min_share",
            "more than all of it",
        ),
        (
            "    min_share: { sheddable: 0.05 }\n",
            "buckets[0].min_share",
            "need priority classes",
        ),
    ];
    for (lines, field, words) in cases {
        let e = refused(&[(file, &with_gateway_lines(lines))]);
        let line = if field.contains("min_share") && lines.starts_with("    priorities") {
            9
        } else {
            8
        };
        assert_refusal(&e, file, line, field, words);
    }
}
