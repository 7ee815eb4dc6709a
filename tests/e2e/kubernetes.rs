//! The Kubernetes manifests (`deploy/kubernetes/`), checked offline: no cluster runs here.
//!
//! The example overlay is rendered by the real `kubectl kustomize`; every rendered object
//! (and the `rlc serve` alternative) is validated against the Kubernetes OpenAPI schema by
//! `kubernetes-validate`; every `grl`/`rlc` container's command is checked against the real
//! binaries' `--help` (each flag exists, each required flag is given by flag or by its env
//! var, every `$(VAR)` is defined); and the references between objects agree: the addresses
//! the processes dial are Services that select the pods listening there, probes hit the
//! `--metrics-listen` port, aggregators are pinned to the zone they report, and the Envoy and
//! Istio rate limit configs point at the sidecar's `--rls-listen` with its `--service` as
//! domain.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, ensure};
use serde::Deserialize;
use serde_yaml::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn env_tool(var: &str, what: &str) -> Result<PathBuf> {
    let path = PathBuf::from(std::env::var_os(var).unwrap_or_default());
    ensure!(
        path.is_file(),
        "{var} ({}) is not {what}: run via `bash tests/run.sh`, or \
         `eval \"$(GRL_TEST_ENV_ONLY=1 bash tests/run.sh)\"` first",
        path.display()
    );
    Ok(path)
}

/// `kubectl kustomize deploy/kubernetes/overlays/example`.
fn render() -> Result<String> {
    let kubectl = env_tool("GRL_TEST_KUBECTL", "kubectl")?;
    let dir = repo_root().join("deploy/kubernetes/overlays/example");
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(&dir)
        .output()
        .context("running kubectl")?;
    ensure!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

fn docs(text: &str) -> Result<Vec<Value>> {
    serde_yaml::Deserializer::from_str(text)
        .map(Value::deserialize)
        .filter(|d| !matches!(d, Ok(Value::Null)))
        .collect::<Result<_, _>>()
        .context("parsing YAML")
}

fn file_docs(rel: &str) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(repo_root().join(rel)).with_context(|| rel.to_string())?;
    docs(&text)
}

fn s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_str()
}

fn kind_name(d: &Value) -> String {
    format!(
        "{}/{}",
        s(d, &["kind"]).unwrap_or("?"),
        s(d, &["metadata", "name"]).unwrap_or("?")
    )
}

/// The pod template of a workload, if it is one.
fn pod_spec(d: &Value) -> Option<&Value> {
    match s(d, &["kind"])? {
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => d.get("spec")?.get("template"),
        "CronJob" => d
            .get("spec")?
            .get("jobTemplate")?
            .get("spec")?
            .get("template"),
        _ => None,
    }
}

fn seq(v: Option<&Value>) -> Vec<&Value> {
    v.and_then(Value::as_sequence)
        .map(|s| s.iter().collect())
        .unwrap_or_default()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    seq(v)
        .into_iter()
        .map(|x| match x {
            Value::String(s) => s.clone(),
            other => serde_yaml::to_string(other).unwrap().trim().to_string(),
        })
        .collect()
}

/// One `grl`/`rlc` container: its workload, command line and environment.
#[derive(Debug)]
struct Proc {
    workload: String,
    kind: String,
    labels: BTreeMap<String, String>,
    container: Value,
    argv: Vec<String>,
    env: BTreeSet<String>,
}

impl Proc {
    /// The value of `--flag`.
    fn flag(&self, name: &str) -> Option<&str> {
        let want = format!("--{name}");
        let i = self.argv.iter().position(|a| *a == want)?;
        self.argv.get(i + 1).map(String::as_str)
    }

    /// Every value of a repeated `--flag`.
    fn flag_all(&self, name: &str) -> Vec<&str> {
        let want = format!("--{name}");
        self.argv
            .windows(2)
            .filter(|w| w[0] == want)
            .map(|w| w[1].as_str())
            .collect()
    }

    fn subcommand(&self) -> &str {
        self.argv.get(1).map_or("", String::as_str)
    }

    fn container_ports(&self) -> BTreeMap<String, u64> {
        seq(self.container.get("ports"))
            .into_iter()
            .filter_map(|p| {
                Some((
                    s(p, &["name"]).unwrap_or("").to_string(),
                    p.get("containerPort")?.as_u64()?,
                ))
            })
            .collect()
    }
}

fn procs(all: &[Value]) -> Vec<Proc> {
    let mut out = Vec::new();
    for d in all {
        let Some(tpl) = pod_spec(d) else { continue };
        let labels: BTreeMap<String, String> = tpl
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_mapping)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        for c in seq(tpl.get("spec").and_then(|s| s.get("containers"))) {
            let mut argv = strings(c.get("command"));
            argv.extend(strings(c.get("args")));
            let bin = argv
                .first()
                .map(|b| b.rsplit('/').next().unwrap_or(b).to_string());
            if !matches!(bin.as_deref(), Some("grl" | "rlc")) {
                continue;
            }
            argv[0] = bin.unwrap();
            let env = seq(c.get("env"))
                .into_iter()
                .filter_map(|e| s(e, &["name"]).map(str::to_string))
                .collect();
            out.push(Proc {
                workload: kind_name(d),
                kind: s(d, &["kind"]).unwrap_or("").to_string(),
                labels: labels.clone(),
                container: c.clone(),
                argv,
                env,
            });
        }
    }
    out
}

/// The flags of `bin sub --help`: name → (required, env var).
fn help(bin: &str, sub: &str) -> Result<BTreeMap<String, (bool, Option<String>)>> {
    let path = test_support::process::target_bin(bin)?;
    let out = Command::new(&path).args([sub, "--help"]).output()?;
    ensure!(out.status.success(), "`{bin} {sub} --help` failed");
    let text = String::from_utf8(out.stdout)?;
    let usage = text
        .lines()
        .find(|l| l.starts_with("Usage:"))
        .ok_or_else(|| anyhow!("`{bin} {sub} --help` has no Usage line"))?;
    // Outside brackets in the usage line = required.
    let mut required = BTreeSet::new();
    let mut depth = 0;
    for tok in usage.split_whitespace() {
        if depth == 0
            && let Some(f) = tok.strip_prefix("--")
        {
            required.insert(f.trim_end_matches(['>', ']']).to_string());
        }
        depth += tok.matches('[').count() as i32 - tok.matches(']').count() as i32;
    }
    let mut flags = BTreeMap::new();
    let mut last: Option<String> = None;
    for line in text.lines().skip_while(|l| !l.starts_with("Options:")) {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("--").or_else(|| {
            t.strip_prefix('-')
                .and_then(|x| x.split_once(", --").map(|(_, r)| r))
        }) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            flags.insert(name.clone(), (required.contains(&name), None));
            last = Some(name);
        }
        if let (Some(i), Some(name)) = (line.find("[env: "), &last) {
            let var: String = line[i + 6..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            flags.get_mut(name).unwrap().1 = Some(var);
        }
    }
    Ok(flags)
}

fn check_command(p: &Proc) -> Result<()> {
    let flags = help(&p.argv[0], p.subcommand())?;
    let given: BTreeSet<&str> = p
        .argv
        .iter()
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| a.split('=').next().unwrap())
        .collect();
    for f in &given {
        ensure!(
            flags.contains_key(*f),
            "{}: `{} {}` has no flag --{f} (its --help lists {:?})",
            p.workload,
            p.argv[0],
            p.subcommand(),
            flags.keys().collect::<Vec<_>>()
        );
    }
    for (f, (required, env)) in &flags {
        let by_env = env.as_ref().is_some_and(|e| p.env.contains(e));
        ensure!(
            !required || given.contains(f.as_str()) || by_env,
            "{}: required --{f} is neither given nor set through its env var {env:?}",
            p.workload
        );
    }
    for a in &p.argv {
        if let Some(i) = a.find("$(") {
            let var = &a[i + 2..a[i..].find(')').map_or(a.len(), |j| i + j)];
            ensure!(
                p.env.contains(var),
                "{}: $({var}) is not in env",
                p.workload
            );
        }
    }
    Ok(())
}

fn port_of(addr: &str) -> Result<u64> {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .ok_or_else(|| anyhow!("{addr:?} has no port"))
}

/// The Service `addr`'s host names, and the port it is dialled on: the host's first label,
/// or for a StatefulSet pod's name (`<set>-<n>.<service>`) the headless Service of the
/// second label, whose StatefulSet has a pod `n`.
fn service_for<'a>(all: &'a [Value], addr: &str) -> Result<(&'a Value, u64)> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("{addr:?} has no port"))?;
    let service = |name: &str| {
        all.iter().find(|d| {
            s(d, &["kind"]) == Some("Service") && s(d, &["metadata", "name"]) == Some(name)
        })
    };
    let mut labels = host.split('.');
    let first = labels.next().unwrap();
    if let Some(svc) = service(first) {
        return Ok((svc, port.parse()?));
    }
    let second = labels
        .next()
        .ok_or_else(|| anyhow!("{addr}: no Service {first}"))?;
    let svc = service(second).ok_or_else(|| anyhow!("{addr}: no Service {first} or {second}"))?;
    ensure!(
        s(svc, &["spec", "clusterIP"]) == Some("None"),
        "{addr}: Service {second} is not headless, so {first} is no pod name"
    );
    let set = all
        .iter()
        .find(|d| {
            s(d, &["kind"]) == Some("StatefulSet") && s(d, &["spec", "serviceName"]) == Some(second)
        })
        .ok_or_else(|| anyhow!("{addr}: no StatefulSet governs Service {second}"))?;
    let (set_name, ordinal) = first
        .rsplit_once('-')
        .ok_or_else(|| anyhow!("{addr}: {first} is no StatefulSet pod name"))?;
    let replicas = set["spec"]["replicas"].as_u64().unwrap_or(1);
    ensure!(
        s(set, &["metadata", "name"]) == Some(set_name)
            && ordinal.parse::<u64>().is_ok_and(|n| n < replicas),
        "{addr}: StatefulSet {} with {replicas} replicas has no pod {first}",
        kind_name(set)
    );
    Ok((svc, port.parse()?))
}

/// Checks that `addr` reaches a `grl <sub>` whose `--listen` port is the target port.
fn check_dial(all: &[Value], procs: &[Proc], from: &Proc, addr: &str, sub: &str) -> Result<()> {
    let (svc, port) = service_for(all, addr)?;
    let sp = seq(svc.get("spec").and_then(|s| s.get("ports")))
        .into_iter()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(port))
        .ok_or_else(|| anyhow!("{}: {addr}: the Service has no port {port}", from.workload))?;
    let selector: BTreeMap<String, String> = svc["spec"]["selector"]
        .as_mapping()
        .ok_or_else(|| anyhow!("{addr}: Service without selector"))?
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().into(), v.as_str().unwrap().into()))
        .collect();
    let targets: Vec<&Proc> = procs
        .iter()
        .filter(|p| selector.iter().all(|(k, v)| p.labels.get(k) == Some(v)))
        .collect();
    ensure!(
        !targets.is_empty(),
        "{}: {addr}: the Service selects no pod",
        from.workload
    );
    for t in targets {
        ensure!(
            t.subcommand() == sub,
            "{addr} reaches {} not a {sub}",
            t.workload
        );
        let listen = port_of(t.flag("listen").unwrap_or_default())?;
        let target = &sp["targetPort"];
        let ok = match target {
            Value::Number(n) => n.as_u64() == Some(listen),
            Value::String(name) => t.container_ports().get(name) == Some(&listen),
            _ => false,
        };
        ensure!(
            ok,
            "{}: {addr} targets {target:?}, but {} listens on {listen}",
            from.workload,
            t.workload
        );
    }
    Ok(())
}

fn check_pod(p: &Proc) -> Result<()> {
    let c = &p.container;
    for r in ["cpu", "memory"] {
        ensure!(
            c.get("resources")
                .and_then(|x| x.get("requests"))
                .and_then(|x| x.get(r))
                .is_some(),
            "{}: no {r} request",
            p.workload
        );
    }
    let ports = p.container_ports();
    if let Some(m) = p.flag("metrics-listen") {
        let mp = port_of(m)?;
        let named: Vec<&String> = ports
            .iter()
            .filter(|(_, v)| **v == mp)
            .map(|(k, _)| k)
            .collect();
        ensure!(
            !named.is_empty(),
            "{}: metrics port {mp} is not a containerPort",
            p.workload
        );
        if matches!(p.kind.as_str(), "Deployment" | "StatefulSet") {
            for probe in ["readinessProbe", "livenessProbe"] {
                let port = &c[probe]["httpGet"]["port"];
                ensure!(
                    s(&c[probe], &["httpGet", "path"]) == Some("/metrics")
                        && (port.as_str().is_some_and(|n| named.iter().any(|x| *x == n))
                            || port.as_u64() == Some(mp)),
                    "{}: {probe} does not hit /metrics on {mp}",
                    p.workload
                );
            }
        }
    } else {
        ensure!(
            p.kind == "CronJob",
            "{}: a long-running process without --metrics-listen",
            p.workload
        );
    }
    if let Some(l) = p.flag("listen")
        && !l.starts_with("127.0.0.1")
    {
        let lp = port_of(l)?;
        ensure!(
            ports.values().any(|v| *v == lp),
            "{}: --listen port {lp} not declared",
            p.workload
        );
    }
    Ok(())
}

/// Active/standby controllers: a Lease election in the pod's namespace, each pod advertising
/// its own stable name, every aggregator listing every pod, and a Role that allows exactly
/// the Lease calls, bound to the controllers' ServiceAccount (which mounts its token).
fn check_election(all: &[Value], p: &Proc) -> Result<()> {
    ensure!(
        p.flag("election") == Some("kubernetes=$(POD_NAMESPACE)")
            && p.env.contains("POD_NAMESPACE"),
        "{}: --election must be kubernetes=$(POD_NAMESPACE) from the downward API",
        p.workload
    );
    let d = all.iter().find(|d| kind_name(d) == p.workload).unwrap();
    ensure!(
        p.kind == "StatefulSet",
        "{}: a StatefulSet gives the pods stable names",
        p.workload
    );
    let svc = s(d, &["spec", "serviceName"]).unwrap_or_default();
    ensure!(
        p.flag("advertise") == Some(&format!("$(POD_NAME).{svc}:7300"))
            && p.env.contains("POD_NAME"),
        "{}: --advertise must be $(POD_NAME).{svc}:<port>",
        p.workload
    );
    let replicas = d["spec"]["replicas"].as_u64().unwrap_or(1);
    ensure!(
        replicas >= 2,
        "{}: active/standby needs 2 replicas",
        p.workload
    );
    let name = s(d, &["metadata", "name"]).unwrap();
    let pods: BTreeSet<String> = (0..replicas)
        .map(|n| format!("{name}-{n}.{svc}:7300"))
        .collect();
    for agg in procs(all).iter().filter(|a| a.subcommand() == "aggregator") {
        let listed: BTreeSet<String> = agg
            .flag_all("controller")
            .into_iter()
            .map(str::to_string)
            .collect();
        ensure!(
            listed == pods,
            "{}: --controller lists {listed:?}, not every controller {pods:?}",
            agg.workload
        );
    }
    let sa = pod_spec(d)
        .and_then(|t| s(t, &["spec", "serviceAccountName"]))
        .unwrap_or_default();
    ensure!(
        pod_spec(d).and_then(|t| t["spec"]["automountServiceAccountToken"].as_bool()) == Some(true),
        "{}: the election needs the ServiceAccount token mounted",
        p.workload
    );
    let binding = all
        .iter()
        .find(|b| {
            s(b, &["kind"]) == Some("RoleBinding")
                && seq(b.get("subjects"))
                    .iter()
                    .any(|x| s(x, &["name"]) == Some(sa))
        })
        .ok_or_else(|| anyhow!("no RoleBinding for ServiceAccount {sa}"))?;
    let role_name = s(binding, &["roleRef", "name"]).unwrap_or_default();
    let role = all
        .iter()
        .find(|r| s(r, &["kind"]) == Some("Role") && s(r, &["metadata", "name"]) == Some(role_name))
        .ok_or_else(|| anyhow!("no Role {role_name}"))?;
    let rules = seq(role.get("rules"));
    ensure!(
        rules.len() == 1
            && strings(rules[0].get("apiGroups")) == ["coordination.k8s.io"]
            && strings(rules[0].get("resources")) == ["leases"]
            && strings(rules[0].get("verbs")) == ["get", "create", "update"],
        "Role {role_name} must allow get, create and update on leases only"
    );
    Ok(())
}

#[test]
fn example_overlay_renders_and_every_object_validates_offline() -> Result<()> {
    let rendered = render()?;
    let all = docs(&rendered)?;
    let names: BTreeSet<String> = all.iter().map(kind_name).collect();
    for want in [
        "Namespace/grl",
        "StatefulSet/grl-controller",
        "Service/grl-controller",
        "Service/grl-controller-pods",
        "Role/grl-controller-lease",
        "RoleBinding/grl-controller-lease",
        "PodDisruptionBudget/grl-controller",
        "Deployment/grl-aggregator-zone-a",
        "Service/grl-aggregator-zone-a",
        "PodDisruptionBudget/grl-aggregator-zone-a",
        "Deployment/grl-aggregator-zone-b",
        "CronJob/rlc",
        "Secret/rlc",
        "Deployment/orders",
        "Deployment/payments",
    ] {
        ensure!(
            names.contains(want),
            "the overlay renders no {want}: {names:?}"
        );
    }
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, &rendered)?;
    let python = env_tool(
        "GRL_TEST_PYTHON",
        "a venv's python with kubernetes-validate",
    )?;
    let validate = python.with_file_name("kubernetes-validate");
    let out = Command::new(&validate)
        .args(["--kubernetes-version", "1.30.0", "--strict"])
        .arg(&file)
        .arg(repo_root().join("deploy/kubernetes/alternatives/rlc-serve.yaml"))
        .output()
        .with_context(|| format!("running {}", validate.display()))?;
    let report = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && !report.contains("ERROR"),
        "objects do not validate against the Kubernetes 1.30 schema:\n{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let valid = report.matches("INFO").count();
    ensure!(
        valid > all.len(),
        "validated {valid} objects of {}:\n{report}",
        all.len() + 1
    );
    Ok(())
}

#[test]
fn every_container_command_matches_the_binaries_help_and_the_objects_agree() -> Result<()> {
    let mut all = docs(&render()?)?;
    all.extend(file_docs("deploy/kubernetes/alternatives/rlc-serve.yaml")?);
    let procs = procs(&all);
    let subs: BTreeSet<String> = procs
        .iter()
        .map(|p| format!("{} {}", p.argv[0], p.subcommand()))
        .collect();
    for want in [
        "grl controller",
        "grl aggregator",
        "grl sidecar",
        "rlc run",
        "rlc serve",
    ] {
        ensure!(subs.contains(want), "no container runs `{want}`: {subs:?}");
    }
    for p in &procs {
        check_command(p)?;
        check_pod(p)?;
        match p.subcommand() {
            "aggregator" => {
                for addr in p.flag_all("controller") {
                    check_dial(&all, &procs, p, addr, "controller")?;
                }
            }
            "controller" if p.flag("election").is_some() => check_election(&all, p)?,
            "sidecar" => {
                check_dial(&all, &procs, p, p.flag("aggregator").unwrap(), "aggregator")?;
            }
            _ => {}
        }
        // A zone's processes run in that zone.
        if let Some(zone) = p.flag("zone") {
            let d = all.iter().find(|d| kind_name(d) == p.workload).unwrap();
            let terms = &pod_spec(d).unwrap()["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"];
            let pinned = seq(Some(terms)).iter().any(|t| {
                seq(t.get("matchExpressions")).iter().any(|e| {
                    s(e, &["key"]) == Some("topology.kubernetes.io/zone")
                        && strings(e.get("values")) == [zone.to_string()]
                })
            });
            ensure!(
                pinned,
                "{}: --zone {zone} but not pinned to that zone",
                p.workload
            );
        }
    }
    Ok(())
}

/// The first mapping under `v` whose `name` is `name`.
fn find_named<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    match v {
        Value::Mapping(m) => {
            if m.get("name").and_then(Value::as_str) == Some(name) {
                return Some(v);
            }
            m.values().find_map(|x| find_named(x, name))
        }
        Value::Sequence(s) => s.iter().find_map(|x| find_named(x, name)),
        _ => None,
    }
}

/// The first `port_value` under `v`.
fn port_value(v: &Value) -> Option<u64> {
    match v {
        Value::Mapping(m) => m
            .get("port_value")
            .and_then(Value::as_u64)
            .or_else(|| m.values().find_map(port_value)),
        Value::Sequence(s) => s.iter().find_map(port_value),
        _ => None,
    }
}

/// The rate limit filter's domain and the port of its `grl_rls` cluster in an Envoy config.
fn envoy_rls(config: &Value) -> Result<(String, u64)> {
    let text = serde_yaml::to_string(config)?;
    let domain = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("domain: "))
        .ok_or_else(|| anyhow!("no rate limit domain"))?
        .to_string();
    ensure!(
        text.contains("cluster_name: grl_rls"),
        "the filter does not use cluster grl_rls"
    );
    let port = find_named(config, "grl_rls").and_then(port_value);
    Ok((
        domain,
        port.ok_or_else(|| anyhow!("no grl_rls cluster port"))?,
    ))
}

#[test]
fn envoy_and_istio_rate_limit_configs_point_at_the_sidecar() -> Result<()> {
    let all = docs(&render()?)?;
    let procs = procs(&all);
    let sidecar = procs
        .iter()
        .find(|p| p.workload == "Deployment/payments" && p.subcommand() == "sidecar")
        .ok_or_else(|| anyhow!("no sidecar in Deployment/payments"))?;
    let rls = sidecar
        .flag("rls-listen")
        .ok_or_else(|| anyhow!("the payments sidecar has no --rls-listen"))?;
    ensure!(
        rls.starts_with("127.0.0.1:"),
        "--rls-listen {rls} is not localhost"
    );
    let want = (sidecar.flag("service").unwrap().to_string(), port_of(rls)?);
    let cm = all
        .iter()
        .find(|d| {
            s(d, &["kind"]) == Some("ConfigMap")
                && s(d, &["metadata", "name"]).is_some_and(|n| n.starts_with("payments-envoy"))
        })
        .ok_or_else(|| anyhow!("no payments-envoy ConfigMap"))?;
    let envoy: Value = serde_yaml::from_str(
        s(cm, &["data", "envoy.yaml"]).ok_or_else(|| anyhow!("no envoy.yaml in the ConfigMap"))?,
    )?;
    ensure!(
        envoy_rls(&envoy)? == want,
        "envoy.yaml: {:?} != {want:?}",
        envoy_rls(&envoy)?
    );
    let d = all
        .iter()
        .find(|d| kind_name(d) == "Deployment/payments")
        .unwrap();
    let mounted = serde_yaml::to_string(pod_spec(d).unwrap())?;
    ensure!(
        mounted.contains(&format!("name: {}", s(cm, &["metadata", "name"]).unwrap())),
        "the payments pod does not mount the Envoy ConfigMap"
    );
    let istio = file_docs("deploy/kubernetes/istio/envoyfilter-ratelimit.yaml")?;
    ensure!(istio.len() == 1 && s(&istio[0], &["kind"]) == Some("EnvoyFilter"));
    ensure!(
        envoy_rls(&istio[0])? == want,
        "istio: {:?} != {want:?}",
        envoy_rls(&istio[0])?
    );
    Ok(())
}
