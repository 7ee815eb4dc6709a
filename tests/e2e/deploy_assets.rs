//! The deployment and operations assets, checked against the contract and against real tools:
//! `docker-compose.yml` (the demo stack), `grl/deploy/Dockerfile`, the Prometheus scrape config,
//! the alerting rules and their promtool tests, the Grafana dashboard and its provisioning, the
//! config-repo seeding script and the demo traffic profile.
//!
//! Nothing here needs Docker: the compose file is read as YAML and cross-checked (commands
//! against the CLI contract and the real binaries' `--help`, scrape targets against the
//! processes' `--metrics-listen`, mounts against the repo), the rules go through `promtool`,
//! and every dashboard query is parsed by a real Prometheus.
//!
//! [`dashboard_exprs`] and [`substitute_grafana_vars`] are public so that other end-to-end
//! tests can run the dashboard's queries against a Prometheus that has data.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde_yaml::Value;

// ---- The CLI contract --------------------------------------------------------------------

/// How a flag is used on the command line.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Arg {
    /// Takes a value and must be given.
    Required,
    /// Takes a value.
    Optional,
    /// A switch without a value, which must be given.
    RequiredSwitch,
}
use Arg::{Optional, Required, RequiredSwitch};

/// One subcommand of the contract: binary, subcommand path, flags.
struct Subcommand {
    bin: &'static str,
    path: &'static [&'static str],
    flags: &'static [(&'static str, Arg)],
}

/// The CLI contract of `grl` and `rlc` that the deploy assets may use.
const CONTRACT: &[Subcommand] = &[
    Subcommand {
        bin: "grl",
        path: &["controller"],
        flags: &[
            ("listen", Required),
            ("config", Required),
            ("region", Optional),
            ("parent", Optional),
            ("metrics-listen", Optional),
            ("interval-ms", Optional),
            ("config-git", Optional),
        ],
    },
    Subcommand {
        bin: "grl",
        path: &["aggregator"],
        flags: &[
            ("listen", Required),
            ("zone", Required),
            ("region", Required),
            ("controller", Required),
            ("metrics-listen", Optional),
            ("interval-ms", Optional),
        ],
    },
    Subcommand {
        bin: "grl",
        path: &["loadgen"],
        flags: &[
            ("aggregator", Required),
            ("zone", Required),
            ("clients", Required),
            ("profile", Required),
            ("duration", Required),
            ("service", Optional),
            ("region", Optional),
            ("metrics-listen", Optional),
        ],
    },
    Subcommand {
        bin: "grl",
        path: &["override", "set"],
        flags: &[
            ("controller", Required),
            ("service", Required),
            ("caller", Optional),
            ("procedure", Optional),
            ("rps", Required),
            ("ttl", Required),
            ("reason", Optional),
        ],
    },
    Subcommand {
        bin: "grl",
        path: &["override", "list"],
        flags: &[("controller", Required)],
    },
    Subcommand {
        bin: "grl",
        path: &["override", "clear"],
        flags: &[
            ("controller", Required),
            ("id", Optional),
            ("service", Optional),
        ],
    },
    Subcommand {
        bin: "rlc",
        path: &["serve"],
        flags: &[
            ("schedule", Required),
            ("config-repo", Required),
            ("prometheus", Required),
            ("mode", Optional),
            ("db", Optional),
            ("controller", Optional),
            ("metrics-listen", Optional),
            ("workdir", Optional),
        ],
    },
    Subcommand {
        bin: "rlc",
        path: &["run"],
        flags: &[
            ("once", RequiredSwitch),
            ("config-repo", Required),
            ("prometheus", Required),
            ("mode", Optional),
            ("db", Optional),
            ("controller", Optional),
        ],
    },
];

/// Metric names of the contract (histograms also expose `_bucket`, `_sum`, `_count`).
const CONTRACT_METRICS: &[&str] = &[
    "grl_requests_total",
    "grl_client_fail_open",
    "grl_client_drop_ratio",
    "grl_tier_offered_rps",
    "grl_tier_drop_ratio",
    "grl_tier_limit_rps",
    "grl_tier_children",
    "grl_tier_stale_children",
    "grl_tier_config_info",
    "grl_tier_fail_open",
    "grl_tier_parent_connected",
    "grl_controller_apply_total",
    "rlc_runs_total",
    "rlc_last_success_timestamp_seconds",
    "rlc_buckets",
    "rlc_run_duration_seconds",
    "rlc_limit_changes_total",
];
const HISTOGRAMS: &[&str] = &["rlc_run_duration_seconds"];

// ---- Paths and tools ---------------------------------------------------------------------

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn read_repo_file(rel: &str) -> Result<String> {
    let path = repo_root().join(rel);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

fn read_yaml(rel: &str) -> Result<Value> {
    serde_yaml::from_str(&read_repo_file(rel)?).with_context(|| format!("{rel} is not valid YAML"))
}

fn target_bin(name: &str) -> Result<PathBuf> {
    test_support::process::target_bin(name)
}

/// A tool from the environment variable `var` or its default path.
fn tool(var: &str, default: &str) -> Result<PathBuf> {
    let path = PathBuf::from(std::env::var_os(var).unwrap_or_else(|| default.into()));
    ensure!(
        path.is_file(),
        "{} not found (set {var} or install it): run via bash tests/run.sh",
        path.display()
    );
    Ok(path)
}

// ---- docker-compose.yml ------------------------------------------------------------------

/// A GRL/RLC process of the compose file: `bin path... --flag value...`.
#[derive(Debug)]
struct Invocation {
    service: String,
    bin: String,
    path: Vec<String>,
    flags: BTreeMap<String, Option<String>>,
}

impl Invocation {
    fn is(&self, bin: &str, path: &[&str]) -> bool {
        self.bin == bin
            && self
                .path
                .iter()
                .map(String::as_str)
                .eq(path.iter().copied())
    }

    fn flag(&self, name: &str) -> Result<&str> {
        self.flags
            .get(name)
            .and_then(Option::as_deref)
            .ok_or_else(|| anyhow!("service {}: --{name} is not set", self.service))
    }
}

/// The compose file with the parts the tests look at.
struct Compose {
    doc: Value,
}

impl Compose {
    fn load() -> Result<Self> {
        let doc = read_yaml("docker-compose.yml")?;
        ensure!(
            doc.get("services").and_then(Value::as_mapping).is_some(),
            "no `services` mapping"
        );
        Ok(Self { doc })
    }

    fn services(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.doc["services"]
            .as_mapping()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str()?, v)))
    }

    fn service(&self, name: &str) -> Result<&Value> {
        self.doc["services"]
            .get(name)
            .ok_or_else(|| anyhow!("docker-compose.yml has no service `{name}`"))
    }

    /// The command of a service as a list of strings (the list form is required).
    fn command(&self, name: &str) -> Result<Option<Vec<String>>> {
        let Some(cmd) = self.service(name)?.get("command") else {
            return Ok(None);
        };
        let seq = cmd
            .as_sequence()
            .ok_or_else(|| anyhow!("service {name}: write `command` in list form"))?;
        seq.iter()
            .map(|v| scalar(v).ok_or_else(|| anyhow!("service {name}: non-scalar command item")))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// Every service whose command runs `grl` or `rlc`, parsed against the contract.
    fn invocations(&self) -> Result<Vec<Invocation>> {
        let mut out = Vec::new();
        for (name, _) in self.services() {
            if let Some(cmd) = self.command(name)?
                && let Some(inv) = parse_invocation(name, &cmd)?
            {
                out.push(inv);
            }
        }
        Ok(out)
    }

    /// Volumes of a service as (source, target); a bind source starts with `.` or `/`.
    fn mounts(&self, name: &str) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        let Some(vols) = self.service(name)?.get("volumes") else {
            return Ok(out);
        };
        for v in vols
            .as_sequence()
            .ok_or_else(|| anyhow!("service {name}: volumes is not a list"))?
        {
            if let Some(s) = v.as_str() {
                let mut parts = s.split(':');
                let (Some(src), Some(dst)) = (parts.next(), parts.next()) else {
                    bail!("service {name}: volume `{s}` has no target");
                };
                out.push((src.to_string(), dst.to_string()));
            } else {
                let src = v.get("source").and_then(Value::as_str);
                let dst = v.get("target").and_then(Value::as_str);
                let (Some(src), Some(dst)) = (src, dst) else {
                    bail!("service {name}: volume {v:?} needs source and target");
                };
                out.push((src.to_string(), dst.to_string()));
            }
        }
        Ok(out)
    }

    /// The repo file (or directory) bind-mounted at `container_path` in `service`.
    fn mounted_source(&self, service: &str, container_path: &str) -> Result<PathBuf> {
        for (src, dst) in self.mounts(service)? {
            if !is_bind(&src) {
                continue;
            }
            let rest = if container_path == dst {
                Some("")
            } else {
                container_path.strip_prefix(&format!("{}/", dst.trim_end_matches('/')))
            };
            if let Some(rest) = rest {
                let mut path = repo_root().join(src.trim_start_matches("./"));
                if !rest.is_empty() {
                    path.push(rest);
                }
                ensure!(
                    path.exists(),
                    "service {service}: {} is mounted but missing",
                    path.display()
                );
                return Ok(path);
            }
        }
        bail!("service {service}: nothing from the repo is mounted at {container_path}")
    }

    /// Named volumes mounted at a prefix of `container_path` in `service`.
    fn named_volume_at(&self, service: &str, container_path: &str) -> Result<String> {
        for (src, dst) in self.mounts(service)? {
            if !is_bind(&src) && container_path.starts_with(dst.trim_end_matches('/')) {
                return Ok(src);
            }
        }
        bail!("service {service}: no named volume holds {container_path}")
    }

    fn depends_on(&self, name: &str) -> Result<Vec<(String, Option<String>)>> {
        Ok(match self.service(name)?.get("depends_on") {
            None => Vec::new(),
            Some(Value::Sequence(s)) => s
                .iter()
                .filter_map(Value::as_str)
                .map(|d| (d.to_string(), None))
                .collect(),
            Some(Value::Mapping(m)) => m
                .iter()
                .filter_map(|(k, v)| {
                    let cond = v
                        .get("condition")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    Some((k.as_str()?.to_string(), cond))
                })
                .collect(),
            Some(other) => bail!("service {name}: depends_on {other:?}"),
        })
    }
}

fn is_bind(src: &str) -> bool {
    src.starts_with('.') || src.starts_with('/')
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Parses `grl ...`/`rlc ...` against [`CONTRACT`]; `None` for other commands.
fn parse_invocation(service: &str, cmd: &[String]) -> Result<Option<Invocation>> {
    let Some(bin) = cmd.first().map(|b| b.rsplit('/').next().unwrap_or(b)) else {
        return Ok(None);
    };
    if bin != "grl" && bin != "rlc" {
        return Ok(None);
    }
    let sub = CONTRACT
        .iter()
        .filter(|s| s.bin == bin)
        .filter(|s| cmd.len() > s.path.len() && cmd[1..=s.path.len()].iter().eq(s.path.iter()))
        .max_by_key(|s| s.path.len())
        .ok_or_else(|| {
            anyhow!(
                "service {service}: `{}` is not a subcommand of the contract",
                cmd.join(" ")
            )
        })?;
    let mut flags = BTreeMap::new();
    let mut args = cmd[1 + sub.path.len()..].iter();
    while let Some(arg) = args.next() {
        let Some(flag) = arg.strip_prefix("--") else {
            bail!("service {service}: unexpected positional argument `{arg}`");
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag, None),
        };
        let kind = sub
            .flags
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, k)| *k)
            .ok_or_else(|| {
                anyhow!(
                    "service {service}: `{bin} {}` has no flag --{name} in the contract",
                    sub.path.join(" ")
                )
            })?;
        let value = match (kind, inline) {
            (RequiredSwitch, None) => None,
            (RequiredSwitch, Some(_)) => bail!("service {service}: --{name} takes no value"),
            (_, Some(v)) => Some(v),
            (_, None) => match args.next() {
                Some(v) if !v.starts_with("--") => Some(v.clone()),
                _ => bail!("service {service}: --{name} needs a value"),
            },
        };
        ensure!(
            flags.insert(name.to_string(), value).is_none(),
            "service {service}: --{name} given twice"
        );
    }
    for (name, kind) in sub.flags {
        if matches!(kind, Required | RequiredSwitch) {
            ensure!(
                flags.contains_key(*name),
                "service {service}: required flag --{name} is missing"
            );
        }
    }
    Ok(Some(Invocation {
        service: service.to_string(),
        bin: bin.to_string(),
        path: sub.path.iter().map(|s| s.to_string()).collect(),
        flags,
    }))
}

/// `host:port` → (host, port).
fn host_port(s: &str) -> Result<(&str, u16)> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("`{s}` is not host:port"))?;
    Ok((
        host,
        port.parse().with_context(|| format!("port of `{s}`"))?,
    ))
}

/// The process of the compose file listening on `addr` (`service:port`) with `--listen`.
fn listener<'a>(
    invs: &'a [Invocation],
    addr: &str,
    bin: &str,
    path: &[&str],
) -> Result<&'a Invocation> {
    let (host, port) = host_port(addr)?;
    let inv = invs
        .iter()
        .find(|i| i.service == host)
        .ok_or_else(|| anyhow!("`{addr}`: no GRL/RLC service named {host}"))?;
    ensure!(
        inv.is(bin, path),
        "`{addr}`: service {host} does not run `{bin} {}`",
        path.join(" ")
    );
    let (_, listen_port) = host_port(inv.flag("listen")?)?;
    ensure!(
        listen_port == port,
        "`{addr}`: service {host} listens on port {listen_port}"
    );
    Ok(inv)
}

#[test]
fn compose_runs_the_whole_stack_with_contract_commands() -> Result<()> {
    let compose = Compose::load()?;
    let names: BTreeSet<&str> = compose.services().map(|(n, _)| n).collect();
    for want in [
        "prometheus",
        "postgres",
        "grafana",
        "config-repo-init",
        "controller",
        "aggregator-a",
        "aggregator-b",
        "loadgen-a",
        "loadgen-b",
        "rlc",
    ] {
        ensure!(
            names.contains(want),
            "docker-compose.yml has no service `{want}` (has {names:?})"
        );
    }
    for (name, svc) in compose.services() {
        for (dep, _) in compose.depends_on(name)? {
            ensure!(
                names.contains(dep.as_str()),
                "service {name} depends on unknown service {dep}"
            );
        }
        // Every service built here uses the one Dockerfile.
        if let Some(build) = svc.get("build") {
            ensure!(
                build.get("context").and_then(Value::as_str) == Some("."),
                "service {name}: build context must be the repo root"
            );
            ensure!(
                build.get("dockerfile").and_then(Value::as_str) == Some("grl/deploy/Dockerfile"),
                "service {name}: build must use grl/deploy/Dockerfile"
            );
        }
    }

    let invs = compose.invocations()?;
    for inv in &invs {
        ensure!(
            compose.service(&inv.service)?.get("build").is_some(),
            "service {} runs {} but is not built from grl/deploy/Dockerfile",
            inv.service,
            inv.bin
        );
        // Every long-running GRL/RLC process exports metrics on all interfaces.
        let (host, _) = host_port(inv.flag("metrics-listen")?)?;
        ensure!(
            host == "0.0.0.0",
            "service {}: --metrics-listen must bind 0.0.0.0 to be scraped",
            inv.service
        );
    }
    let of = |bin: &str, path: &[&str]| invs.iter().filter(|i| i.is(bin, path)).collect::<Vec<_>>();

    let controllers = of("grl", &["controller"]);
    ensure!(
        controllers.len() == 1,
        "expected one controller, found {}",
        controllers.len()
    );
    let controller = controllers[0];

    let aggregators = of("grl", &["aggregator"]);
    let zones: BTreeSet<&str> = aggregators
        .iter()
        .map(|a| a.flag("zone"))
        .collect::<Result<_>>()?;
    ensure!(
        zones.len() >= 2 && zones.len() == aggregators.len(),
        "expected aggregators in >= 2 distinct zones, got {zones:?}"
    );
    for agg in &aggregators {
        listener(&invs, agg.flag("controller")?, "grl", &["controller"])?;
        if let Ok(region) = controller.flag("region") {
            ensure!(
                agg.flag("region")? == region,
                "service {}: region differs from the controller's",
                agg.service
            );
        }
    }

    let loadgens = of("grl", &["loadgen"]);
    ensure!(
        loadgens.len() >= 2,
        "expected a load generator per zone, found {}",
        loadgens.len()
    );
    for lg in &loadgens {
        let agg = listener(&invs, lg.flag("aggregator")?, "grl", &["aggregator"])?;
        ensure!(
            lg.flag("zone")? == agg.flag("zone")?,
            "service {}: zone differs from its aggregator's",
            lg.service
        );
        let profile = compose.mounted_source(&lg.service, lg.flag("profile")?)?;
        let profile_len = check_traffic_profile(&profile)?;
        let duration: u64 = lg.flag("duration")?.parse().context("--duration")?;
        ensure!(
            duration > 0 && duration <= profile_len,
            "service {}: --duration {duration} outruns the {profile_len} s profile",
            lg.service
        );
        for n in ["clients", "duration"] {
            let v: u64 = lg
                .flag(n)?
                .parse()
                .with_context(|| format!("service {}: --{n}", lg.service))?;
            ensure!(v > 0, "service {}: --{n} must be > 0", lg.service);
        }
    }
    let lg_zones: BTreeSet<&str> = loadgens
        .iter()
        .map(|l| l.flag("zone"))
        .collect::<Result<_>>()?;
    ensure!(
        lg_zones == zones,
        "load generators cover zones {lg_zones:?}, aggregators {zones:?}"
    );

    // The config store: a bare repo in a named volume, seeded by config-repo-init.
    let seed_cmd = compose.command("config-repo-init")?.unwrap_or_default();
    ensure!(
        seed_cmd.iter().any(|a| a.ends_with("seed-config-repo.sh")),
        "config-repo-init must run seed-config-repo.sh"
    );
    let seed_env = compose
        .service("config-repo-init")?
        .get("environment")
        .cloned()
        .unwrap_or_default();
    let bare = seed_env
        .get("BARE_REPO")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("config-repo-init: BARE_REPO unset"))?;
    let checkout = seed_env
        .get("CHECKOUT_DIR")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("config-repo-init: CHECKOUT_DIR unset"))?;
    let seed = seed_env
        .get("SEED_DIR")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("config-repo-init: SEED_DIR unset"))?;
    ensure!(
        compose
            .mounted_source("config-repo-init", seed)?
            .join("services")
            .is_dir(),
        "config-repo-init: SEED_DIR must be the config-repo/ template"
    );
    let git_volume = compose.named_volume_at("config-repo-init", bare)?;
    ensure!(
        controller.flag("config")? == checkout,
        "controller --config must be the seeded checkout {checkout}"
    );
    ensure!(
        compose.named_volume_at(&controller.service, checkout)?
            == compose.named_volume_at("config-repo-init", checkout)?,
        "controller and config-repo-init must share the checkout volume"
    );
    if let Ok(git) = controller.flag("config-git") {
        ensure!(
            git == bare,
            "controller --config-git must be the seeded repo {bare}"
        );
        ensure!(
            compose.named_volume_at(&controller.service, git)? == git_volume,
            "controller must mount volume {git_volume}"
        );
    }
    for svc in ["controller", "rlc"] {
        let deps = compose.depends_on(svc)?;
        ensure!(
            deps.iter().any(|(d, c)| d == "config-repo-init"
                && c.as_deref() == Some("service_completed_successfully")),
            "{svc} must wait for config-repo-init to complete"
        );
    }

    // The configurator.
    let rlcs = of("rlc", &["serve"]);
    ensure!(
        rlcs.len() == 1,
        "expected one `rlc serve`, found {}",
        rlcs.len()
    );
    let rlc = rlcs[0];
    ensure!(
        rlc.flag("schedule")?.split_whitespace().count() == 5,
        "rlc --schedule must be a 5-field cron expression"
    );
    ensure!(
        rlc.flag("config-repo")? == bare,
        "rlc --config-repo must be the seeded repo {bare}"
    );
    ensure!(
        compose.named_volume_at(&rlc.service, bare)? == git_volume,
        "rlc must mount volume {git_volume}"
    );
    ensure!(
        matches!(rlc.flag("mode")?, "direct" | "pr"),
        "rlc --mode is direct or pr"
    );
    listener(&invs, rlc.flag("controller")?, "grl", &["controller"])?;
    let prom = rlc.flag("prometheus")?;
    ensure!(
        prom == "http://prometheus:9090",
        "rlc --prometheus must be the prometheus service, got {prom}"
    );
    check_rlc_db(&compose, rlc)?;
    Ok(())
}

/// `--db postgres://user:pass@host:port/db` names the postgres service and its credentials.
fn check_rlc_db(compose: &Compose, rlc: &Invocation) -> Result<()> {
    let db = rlc.flag("db")?;
    let rest = db
        .strip_prefix("postgres://")
        .ok_or_else(|| anyhow!("rlc --db must be a postgres:// URL, got {db}"))?;
    let (userinfo, rest) = rest
        .split_once('@')
        .ok_or_else(|| anyhow!("rlc --db has no user"))?;
    let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let (hostport, dbname) = rest
        .split_once('/')
        .ok_or_else(|| anyhow!("rlc --db has no database"))?;
    let (host, port) = host_port(hostport)?;
    ensure!(port == 5432, "rlc --db: postgres listens on 5432");
    let env = compose
        .service(host)?
        .get("environment")
        .cloned()
        .unwrap_or_default();
    for (var, want) in [
        ("POSTGRES_USER", user),
        ("POSTGRES_PASSWORD", pass),
        ("POSTGRES_DB", dbname),
    ] {
        ensure!(
            env.get(var).and_then(Value::as_str) == Some(want),
            "service {host}: {var} must be `{want}` to match rlc --db"
        );
    }
    ensure!(
        compose
            .depends_on(&rlc.service)?
            .iter()
            .any(|(d, c)| d == host && c.as_deref() == Some("service_healthy")),
        "rlc must wait for {host} to be healthy"
    );
    Ok(())
}

#[test]
fn compose_commands_are_accepted_by_the_built_binaries() -> Result<()> {
    let invs = Compose::load()?.invocations()?;
    ensure!(
        !invs.is_empty(),
        "no grl/rlc commands in docker-compose.yml"
    );
    let mut checked = BTreeSet::new();
    for inv in &invs {
        let bin = target_bin(&inv.bin)?;
        let out = Command::new(&bin)
            .args(&inv.path)
            .arg("--help")
            .output()
            .with_context(|| format!("running {}", bin.display()))?;
        let help = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "`{} {} --help` failed ({}): {}{}",
            inv.bin,
            inv.path.join(" "),
            out.status,
            help,
            String::from_utf8_lossy(&out.stderr)
        );
        let known = help_flags(&help);
        for flag in inv.flags.keys() {
            ensure!(
                known.contains(flag),
                "service {}: `{} {}` does not accept --{flag} (its --help lists {known:?})",
                inv.service,
                inv.bin,
                inv.path.join(" ")
            );
        }
        checked.insert(format!("{} {}", inv.bin, inv.path.join(" ")));
    }
    ensure!(
        checked.len() >= 4,
        "expected controller, aggregator, loadgen and rlc serve, checked {checked:?}"
    );
    Ok(())
}

/// Every `--flag` token of a `--help` text.
fn help_flags(help: &str) -> BTreeSet<String> {
    help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter_map(|t| t.strip_prefix("--"))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn compose_mounts_and_build_files_exist() -> Result<()> {
    let compose = Compose::load()?;
    let declared: BTreeSet<String> = compose
        .doc
        .get("volumes")
        .and_then(Value::as_mapping)
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.as_str().map(str::to_string))
        .collect();
    let mut binds = 0;
    for (name, svc) in compose.services() {
        for (src, dst) in compose.mounts(name)? {
            if is_bind(&src) {
                let path = repo_root().join(src.trim_start_matches("./"));
                ensure!(
                    path.exists(),
                    "service {name}: mounted {src} (at {dst}) does not exist in the repo"
                );
                binds += 1;
            } else {
                ensure!(
                    declared.contains(&src),
                    "service {name}: named volume {src} is not declared under `volumes`"
                );
            }
        }
        if let Some(build) = svc.get("build") {
            let ctx = build.get("context").and_then(Value::as_str).unwrap_or(".");
            let file = build
                .get("dockerfile")
                .and_then(Value::as_str)
                .unwrap_or("Dockerfile");
            let path = repo_root().join(ctx).join(file);
            ensure!(
                path.is_file(),
                "service {name}: {} does not exist",
                path.display()
            );
        }
    }
    ensure!(
        binds >= 6,
        "expected the deploy files to be bind-mounted, found {binds} bind mounts"
    );
    Ok(())
}

#[test]
fn prometheus_scrapes_exactly_the_metrics_listeners() -> Result<()> {
    let compose = Compose::load()?;
    let prom = read_yaml("grl/deploy/prometheus.yml")?;

    // The compose service mounts this very file as its --config.file, and every rule file.
    let cmd = compose.command("prometheus")?.unwrap_or_default();
    let config = cmd
        .iter()
        .find_map(|a| a.strip_prefix("--config.file="))
        .ok_or_else(|| anyhow!("prometheus: no --config.file= in its command"))?;
    ensure!(
        compose.mounted_source("prometheus", config)?
            == repo_root().join("grl/deploy/prometheus.yml"),
        "prometheus: --config.file is not grl/deploy/prometheus.yml"
    );
    let rules: Vec<&str> = prom["rule_files"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    ensure!(!rules.is_empty(), "prometheus.yml loads no rule_files");
    for r in &rules {
        compose.mounted_source("prometheus", r)?;
    }
    ensure!(
        rules
            .iter()
            .any(|r| compose.mounted_source("prometheus", r).ok()
                == Some(repo_root().join("grl/deploy/alerts.yml"))),
        "prometheus.yml does not load grl/deploy/alerts.yml"
    );

    let mut targets = Vec::new();
    for job in prom["scrape_configs"]
        .as_sequence()
        .ok_or_else(|| anyhow!("no scrape_configs"))?
    {
        for sc in job["static_configs"].as_sequence().into_iter().flatten() {
            for t in sc["targets"].as_sequence().into_iter().flatten() {
                let t = t
                    .as_str()
                    .ok_or_else(|| anyhow!("non-string target {t:?}"))?;
                let (host, port) = host_port(t)?;
                targets.push((host.to_string(), port));
            }
        }
    }
    let scraped: BTreeSet<(String, u16)> = targets.iter().cloned().collect();
    ensure!(
        scraped.len() == targets.len(),
        "a target is scraped twice: {targets:?}"
    );

    let mut listening = BTreeSet::new();
    for inv in compose.invocations()? {
        let (_, port) = host_port(inv.flag("metrics-listen")?)?;
        listening.insert((inv.service.clone(), port));
    }
    if let Some(t) = scraped.difference(&listening).next() {
        bail!(
            "prometheus.yml scrapes {}:{} but no compose service exports metrics there",
            t.0,
            t.1
        );
    }
    if let Some(l) = listening.difference(&scraped).next() {
        bail!(
            "service {} exports metrics on port {} but prometheus.yml does not scrape it",
            l.0,
            l.1
        );
    }
    Ok(())
}

#[test]
fn dockerfile_builds_every_binary_compose_runs() -> Result<()> {
    let text = read_repo_file("grl/deploy/Dockerfile")?;
    // Join continuation lines, drop comments: one instruction per entry.
    let mut instrs = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => cur.push_str(part),
            None => {
                cur.push_str(line);
                instrs.push(std::mem::take(&mut cur));
            }
        }
    }
    let froms: Vec<&String> = instrs.iter().filter(|i| i.starts_with("FROM ")).collect();
    ensure!(
        froms.len() >= 2,
        "expected a multi-stage build, found {} stages",
        froms.len()
    );
    let first: Vec<&str> = froms[0].split_whitespace().collect();
    ensure!(
        first.len() == 4 && first[1].starts_with("rust:1.95") && first[2] == "AS",
        "the builder must be `FROM rust:1.95... AS <name>`: {}",
        froms[0]
    );
    let builder = first[3];
    let runtime = froms.last().expect("two stages");
    ensure!(
        runtime.split_whitespace().nth(1) == Some("debian:bookworm-slim"),
        "the runtime stage must be debian:bookworm-slim: {runtime}"
    );
    // glibc: a builder on a newer Debian than bookworm makes binaries that do not start.
    ensure!(
        first[1].contains("bookworm"),
        "the builder must be bookworm-based like the runtime: {}",
        first[1]
    );

    let last_from = instrs
        .iter()
        .rposition(|i| i.starts_with("FROM "))
        .expect("a FROM");
    let (build_stage, runtime_stage) = instrs.split_at(last_from);
    let cargo = build_stage
        .iter()
        .find(|i| i.contains("cargo build"))
        .ok_or_else(|| anyhow!("the builder stage runs no `cargo build`"))?;
    ensure!(
        cargo.contains("--release"),
        "cargo build must use --release"
    );
    ensure!(
        runtime_stage
            .iter()
            .any(|i| i.starts_with("RUN") && i.contains("install") && i.contains(" git")),
        "the runtime image must install git"
    );

    let bins: BTreeSet<String> = Compose::load()?
        .invocations()?
        .into_iter()
        .map(|i| i.bin)
        .collect();
    ensure!(
        bins.contains("grl") && bins.contains("rlc"),
        "compose should run both grl and rlc, runs {bins:?}"
    );
    for bin in &bins {
        let words: Vec<&str> = cargo.split_whitespace().collect();
        ensure!(
            words.windows(2).any(|w| w == ["--bin", bin.as_str()]),
            "cargo build does not build --bin {bin}: {cargo}"
        );
        ensure!(
            runtime_stage.iter().any(|i| {
                i.starts_with(&format!("COPY --from={builder} "))
                    && i.split_whitespace()
                        .any(|w| w.rsplit('/').next() == Some(bin.as_str()))
            }),
            "the runtime stage does not copy {bin} from the {builder} stage"
        );
    }

    // The build context is the repo root: target/ (GBs) must not be sent to the daemon.
    let ignore = read_repo_file("grl/deploy/Dockerfile.dockerignore")?;
    ensure!(
        ignore.lines().any(|l| l.trim() == "target"),
        "Dockerfile.dockerignore must exclude target"
    );
    Ok(())
}

// ---- Demo data and the config-repo seed --------------------------------------------------

/// Checks a `second,caller,procedure,rps` profile; returns its length in seconds.
fn check_traffic_profile(path: &Path) -> Result<u64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = text.lines();
    ensure!(
        lines.next() == Some("second,caller,procedure,rps"),
        "{}: header must be `second,caller,procedure,rps`",
        path.display()
    );
    let mut per_second: BTreeMap<u64, f64> = BTreeMap::new();
    let mut per_pair: BTreeMap<(String, String), BTreeSet<u64>> = BTreeMap::new();
    for (n, line) in lines.enumerate() {
        let at = || format!("{} line {}", path.display(), n + 2);
        let f: Vec<&str> = line.split(',').collect();
        ensure!(f.len() == 4, "{}: expected 4 fields", at());
        let second: u64 = f[0].parse().with_context(at)?;
        let rps: f64 = f[3].parse().with_context(at)?;
        ensure!(
            !f[1].is_empty() && !f[2].is_empty(),
            "{}: empty caller or procedure",
            at()
        );
        ensure!(rps.is_finite() && rps >= 0.0, "{}: rps must be >= 0", at());
        ensure!(
            per_pair
                .entry((f[1].into(), f[2].into()))
                .or_default()
                .insert(second),
            "{}: duplicate row",
            at()
        );
        *per_second.entry(second).or_default() += rps;
    }
    let len = per_second.len() as u64;
    ensure!(
        len >= 60,
        "{}: expected at least a minute of traffic",
        path.display()
    );
    ensure!(
        per_second.keys().copied().eq(0..len),
        "{}: seconds must run 0..{len} without gaps",
        path.display()
    );
    for (pair, secs) in &per_pair {
        ensure!(
            secs.len() as u64 == len,
            "{}: {pair:?} does not cover every second",
            path.display()
        );
    }
    let mut totals: Vec<f64> = per_second.values().copied().collect();
    totals.sort_by(f64::total_cmp);
    let (median, peak) = (totals[totals.len() / 2], totals[totals.len() - 1]);
    ensure!(
        median > 0.0 && peak >= 1.5 * median,
        "{}: no surge (peak {peak} rps vs median {median} rps)",
        path.display()
    );
    Ok(len)
}

#[test]
fn demo_traffic_profile_has_a_surge() -> Result<()> {
    let len = check_traffic_profile(&repo_root().join("grl/deploy/traffic.csv"))?;
    ensure!(
        len >= 300,
        "the demo profile should last at least 5 minutes, lasts {len} s"
    );
    Ok(())
}

#[test]
fn seed_script_creates_the_config_repo_once() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (bare, checkout) = (
        tmp.path().join("git/config.git"),
        tmp.path().join("checkout"),
    );
    let run = || -> Result<String> {
        let out = Command::new("sh")
            .arg(repo_root().join("grl/deploy/seed-config-repo.sh"))
            .env("SEED_DIR", repo_root().join("config-repo"))
            .env("BARE_REPO", &bare)
            .env("CHECKOUT_DIR", &checkout)
            .output()
            .context("running seed-config-repo.sh")?;
        ensure!(
            out.status.success(),
            "seed-config-repo.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let repo = git2::Repository::open_bare(&bare)?;
        let head = repo.find_reference("refs/heads/main")?.peel_to_commit()?;
        for file in [
            "services/payments.yaml",
            "limits/payments.yaml",
            "README.md",
        ] {
            head.tree()?
                .get_path(Path::new(file))
                .with_context(|| format!("{file} is not on main"))?;
            ensure!(
                checkout.join(file).is_file(),
                "{file} is not in the checkout"
            );
        }
        Ok(head.id().to_string())
    };
    let first = run()?;
    let again = run()?;
    ensure!(
        first == again,
        "a second run must leave the seeded repo as it is"
    );
    Ok(())
}

// ---- Alerting rules ----------------------------------------------------------------------

fn promtool(args: &[&str]) -> Result<()> {
    let promtool = tool("GRL_TEST_PROMTOOL", "/usr/bin/promtool")?;
    let out = Command::new(&promtool)
        .args(args)
        .current_dir(repo_root())
        .output()
        .with_context(|| format!("running {}", promtool.display()))?;
    ensure!(
        out.status.success(),
        "promtool {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn alerting_rules_pass_promtool_check_and_unit_tests() -> Result<()> {
    promtool(&["check", "rules", "grl/deploy/alerts.yml"])?;
    promtool(&["test", "rules", "grl/deploy/alerts_test.yml"])
}

/// (alert name, expr) of every alerting rule.
fn alert_rules() -> Result<Vec<(String, String)>> {
    let doc = read_yaml("grl/deploy/alerts.yml")?;
    let mut out = Vec::new();
    for group in doc["groups"]
        .as_sequence()
        .ok_or_else(|| anyhow!("alerts.yml: no groups"))?
    {
        for rule in group["rules"].as_sequence().into_iter().flatten() {
            if let Some(name) = rule["alert"].as_str() {
                let expr = rule["expr"]
                    .as_str()
                    .ok_or_else(|| anyhow!("alert {name}: no expr"))?;
                out.push((name.to_string(), expr.to_string()));
            }
        }
    }
    Ok(out)
}

#[test]
fn every_alert_has_a_firing_and_a_quiet_unit_test() -> Result<()> {
    let alerts = alert_rules()?;
    ensure!(
        alerts.len() >= 6,
        "expected at least 6 alerts, found {}",
        alerts.len()
    );
    let tests = read_yaml("grl/deploy/alerts_test.yml")?;
    ensure!(
        tests["rule_files"]
            .as_sequence()
            .into_iter()
            .flatten()
            .any(|f| f.as_str() == Some("alerts.yml")),
        "alerts_test.yml must load alerts.yml"
    );
    let (mut firing, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for t in tests["tests"].as_sequence().into_iter().flatten() {
        for case in t["alert_rule_test"].as_sequence().into_iter().flatten() {
            let name = case["alertname"].as_str().unwrap_or_default().to_string();
            match case.get("exp_alerts").and_then(Value::as_sequence) {
                Some(exp) if !exp.is_empty() => firing.insert(name),
                _ => quiet.insert(name),
            };
        }
    }
    let names: BTreeSet<String> = alerts.iter().map(|(n, _)| n.clone()).collect();
    ensure!(
        names.len() == alerts.len(),
        "duplicate alert names in alerts.yml"
    );
    for name in &names {
        ensure!(
            firing.contains(name),
            "alert {name} has no unit test where it fires"
        );
        ensure!(
            quiet.contains(name),
            "alert {name} has no unit test where it stays quiet"
        );
    }
    for name in firing.union(&quiet) {
        ensure!(
            names.contains(name),
            "alerts_test.yml tests unknown alert {name}"
        );
    }
    for (kind, want) in [
        ("shadow", "grl_requests_total"),
        ("client fail-open", "grl_client_fail_open"),
        ("tier fail-open", "grl_tier_fail_open"),
        ("rlc failing", "rlc_runs_total"),
        ("rlc stale", "rlc_last_success_timestamp_seconds"),
        ("limit change", "grl_tier_limit_rps"),
        ("config refused", "grl_controller_apply_total"),
    ] {
        ensure!(
            alerts.iter().any(|(_, e)| e.contains(want)),
            "no {kind} alert (on {want})"
        );
    }
    Ok(())
}

// ---- Grafana -----------------------------------------------------------------------------

fn dashboard() -> Result<serde_json::Value> {
    let text = read_repo_file("grl/deploy/grafana/grl-dashboard.json")?;
    serde_json::from_str(&text).context("grl-dashboard.json is not valid JSON")
}

/// Every panel, rows' nested panels included (rows themselves excluded).
fn panels(dash: &serde_json::Value) -> Vec<&serde_json::Value> {
    fn walk<'a>(list: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
        for p in list.as_array().into_iter().flatten() {
            if p["type"] == "row" {
                walk(&p["panels"], out);
            } else {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    out
}

/// (panel title, PromQL expr) of every query of the GRL dashboard, with Grafana variables
/// (`$service`, `$__rate_interval`) left in: pass an expr through [`substitute_grafana_vars`]
/// before sending it to Prometheus.
pub fn dashboard_exprs() -> Vec<(String, String)> {
    let dash = dashboard().expect("grl-dashboard.json");
    panels(&dash)
        .into_iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_string();
            p["targets"].as_array().into_iter().flatten().map(move |t| {
                (
                    title.clone(),
                    t["expr"].as_str().unwrap_or_default().to_string(),
                )
            })
        })
        .collect()
}

/// Replaces Grafana's variables with values Prometheus accepts: interval variables with a
/// duration, and template variables (used in `=~` matchers) with the regex `.*`.
pub fn substitute_grafana_vars(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').map_or(braced.len(), |e| e + 1);
            (
                braced[..end.saturating_sub(1)]
                    .split(':')
                    .next()
                    .unwrap_or_default(),
                end + 1,
            )
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        out.push_str(match name {
            "" => "$",
            "__rate_interval" | "__interval" => "1m",
            "__range" => "1h",
            "__interval_ms" => "60000",
            "__range_s" => "3600",
            _ => ".*",
        });
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// Names of `$var`/`${var}` references in a text.
fn var_refs(text: &str) -> BTreeSet<String> {
    text.split('$')
        .skip(1)
        .map(|s| {
            let s = s.strip_prefix('{').unwrap_or(s);
            s.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

#[test]
fn dashboard_panels_have_queries_and_defined_variables() -> Result<()> {
    let dash = dashboard()?;
    ensure!(
        dash["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "the dashboard needs a fixed uid"
    );
    let vars: BTreeSet<String> = dash["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(str::to_string))
        .collect();
    let mut ids = BTreeSet::new();
    let all = panels(&dash);
    ensure!(
        all.len() >= 8,
        "expected at least 8 panels, found {}",
        all.len()
    );
    for p in &all {
        let title = p["title"].as_str().unwrap_or_default();
        ensure!(!title.is_empty(), "a panel has no title: {p}");
        ensure!(
            ids.insert(
                p["id"]
                    .as_u64()
                    .ok_or_else(|| anyhow!("panel {title}: no id"))?
            ),
            "panel {title}: duplicate id"
        );
        ensure!(
            p["gridPos"]["w"].as_u64().is_some(),
            "panel {title}: no gridPos"
        );
        let targets = p["targets"]
            .as_array()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| anyhow!("panel {title}: no targets"))?;
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            ensure!(
                !expr.trim().is_empty(),
                "panel {title}: a target has an empty expr"
            );
            for v in var_refs(expr) {
                ensure!(
                    v.starts_with("__") || vars.contains(&v),
                    "panel {title}: ${v} is not a dashboard variable"
                );
            }
        }
    }
    // The dashboard covers what an operator needs.
    let exprs = dashboard_exprs();
    for (what, needle) in [
        ("offered vs admitted", "grl_requests_total"),
        ("drop ratios", "grl_tier_drop_ratio"),
        ("virtual drops", "shadow_dropped"),
        ("fail-open clients", "grl_client_fail_open"),
        ("config version", "grl_tier_config_info"),
        ("rlc runs", "rlc_runs_total"),
        ("limit changes", "rlc_limit_changes_total"),
    ] {
        ensure!(
            exprs.iter().any(|(_, e)| e.contains(needle)),
            "no panel shows {what} ({needle})"
        );
    }
    Ok(())
}

#[test]
fn grafana_provisioning_matches_compose_and_dashboard() -> Result<()> {
    let compose = Compose::load()?;
    let dash = dashboard()?;
    let prov = "/etc/grafana/provisioning";
    let ds = read_yaml("grl/deploy/grafana/provisioning/datasources/prometheus.yml")?;
    let ds = &ds["datasources"][0];
    ensure!(
        ds["type"].as_str() == Some("prometheus"),
        "the provisioned datasource must be Prometheus"
    );
    ensure!(
        ds["url"].as_str() == Some("http://prometheus:9090"),
        "the datasource must point at the prometheus service"
    );
    compose.service("prometheus")?;
    let uid = ds["uid"]
        .as_str()
        .ok_or_else(|| anyhow!("the provisioned datasource needs a uid"))?;
    for p in panels(&dash) {
        let title = p["title"].as_str().unwrap_or_default();
        ensure!(
            p["datasource"]["uid"].as_str() == Some(uid),
            "panel {title}: datasource uid must be {uid}"
        );
        for t in p["targets"].as_array().into_iter().flatten() {
            ensure!(
                t["datasource"]["uid"].as_str().is_none_or(|u| u == uid),
                "panel {title}: target datasource uid must be {uid}"
            );
        }
    }
    ensure!(
        compose
            .mounted_source("grafana", &format!("{prov}/datasources/prometheus.yml"))?
            .is_file(),
        "grafana: datasource provisioning is not mounted"
    );
    let providers = read_yaml("grl/deploy/grafana/provisioning/dashboards/grl.yml")?;
    compose.mounted_source("grafana", &format!("{prov}/dashboards/grl.yml"))?;
    let dir = providers["providers"][0]["options"]["path"]
        .as_str()
        .ok_or_else(|| anyhow!("dashboard provider has no options.path"))?;
    ensure!(
        compose.mounted_source("grafana", &format!("{dir}/grl-dashboard.json"))?
            == repo_root().join("grl/deploy/grafana/grl-dashboard.json"),
        "grafana: grl-dashboard.json is not mounted in the provider's folder {dir}"
    );
    Ok(())
}

/// Metric names (`grl_*`, `rlc_*`) in a PromQL expression, outside string literals.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = expr.chars().peekable();
    let mut word = String::new();
    let flush = |word: &mut String, names: &mut BTreeSet<String>| {
        if word.starts_with("grl_") || word.starts_with("rlc_") {
            names.insert(word.clone());
        }
        word.clear();
    };
    while let Some(c) = chars.next() {
        if c == '"' || c == '\'' || c == '`' {
            flush(&mut word, &mut names);
            while let Some(d) = chars.next() {
                if d == '\\' {
                    chars.next();
                } else if d == c {
                    break;
                }
            }
        } else if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            flush(&mut word, &mut names);
        }
    }
    flush(&mut word, &mut names);
    names
}

#[test]
fn alerts_and_dashboard_use_only_contract_metrics() -> Result<()> {
    let mut known: BTreeSet<String> = CONTRACT_METRICS.iter().map(|m| m.to_string()).collect();
    for h in HISTOGRAMS {
        for suffix in ["_bucket", "_sum", "_count"] {
            known.insert(format!("{h}{suffix}"));
        }
    }
    let alerts = alert_rules()?
        .into_iter()
        .map(|(n, e)| (format!("alert {n}"), e));
    let panels = dashboard_exprs()
        .into_iter()
        .map(|(t, e)| (format!("panel {t}"), e));
    for (whose, expr) in alerts.chain(panels) {
        for m in metric_names(&expr) {
            ensure!(
                known.contains(&m),
                "{whose}: {m} is not a metric of the contract"
            );
        }
    }
    ensure!(
        metric_names(r#"rate(grl_x_total{job="grl_y"}[5m])"#)
            == BTreeSet::from(["grl_x_total".to_string()])
    );
    Ok(())
}

// ---- A real Prometheus to parse every dashboard query ------------------------------------

/// A Prometheus server on a free port of 127.0.0.1 with an empty config; killed on drop.
struct Prometheus {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    async fn start() -> Result<Self> {
        let bin = tool("GRL_TEST_PROMETHEUS", "/usr/bin/prometheus")?;
        let mut last_err = anyhow!("not started");
        // The free port may be taken between probing and binding: retry with another.
        for _ in 0..3 {
            match Self::start_once(&bin).await {
                Ok(p) => return Ok(p),
                Err(e) => last_err = e,
            }
        }
        Err(last_err)
    }

    async fn start_once(bin: &Path) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, "scrape_configs: []\n")?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = dir.path().join("prometheus.log");
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut prom = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
            _dir: dir,
        };
        let client = test_support::process::http_client_builder().build()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = prom.child.try_wait()? {
                bail!("prometheus exited ({status}):\n{}", prom.log_text());
            }
            let ready = client.get(format!("{}/-/ready", prom.url)).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return Ok(prom);
            }
            ensure!(
                Instant::now() < deadline,
                "prometheus not ready after 60 s:\n{}",
                prom.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_text(&self) -> String {
        let mut s = String::new();
        let _ = std::fs::File::open(&self.log).and_then(|mut f| f.read_to_string(&mut s));
        s
    }

    /// Runs an instant query; returns the response's `status` and `error`.
    async fn query(&self, client: &reqwest::Client, expr: &str) -> Result<(String, String)> {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query", self.url),
            &[("query", expr)],
        )?;
        let body: serde_json::Value = client.get(url).send().await?.json().await?;
        Ok((
            body["status"].as_str().unwrap_or_default().to_string(),
            body["error"].as_str().unwrap_or_default().to_string(),
        ))
    }
}

#[tokio::test]
async fn dashboard_and_alert_queries_parse_in_a_real_prometheus() -> Result<()> {
    let prom = Prometheus::start().await?;
    let client = test_support::process::http_client_builder().build()?;
    // The check can fail: a malformed query is refused.
    let (status, _) = prom
        .query(&client, "sum(rate(grl_requests_total[5m])")
        .await?;
    ensure!(status == "error", "prometheus accepted a malformed query");
    let (status, _) = prom
        .query(
            &client,
            &substitute_grafana_vars(
                r#"rate(grl_requests_total{service=~"$service"}[$__rate_interval])"#,
            ),
        )
        .await?;
    ensure!(
        status == "success",
        "the substitution of Grafana variables is broken"
    );

    let exprs = dashboard_exprs();
    ensure!(!exprs.is_empty(), "the dashboard has no queries");
    let alerts = alert_rules()?
        .into_iter()
        .map(|(n, e)| (format!("alert {n}"), e));
    let mut failures = Vec::new();
    for (title, expr) in exprs.into_iter().chain(alerts) {
        let sent = substitute_grafana_vars(&expr);
        let (status, error) = prom.query(&client, &sent).await?;
        if status != "success" {
            failures.push(format!("{title}: {error}\n    {sent}"));
        }
    }
    ensure!(
        failures.is_empty(),
        "queries refused by Prometheus:\n{}",
        failures.join("\n")
    );
    Ok(())
}
