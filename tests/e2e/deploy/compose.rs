//! `docker-compose.yml`: the whole stack is there, wired consistently (zones, regions,
//! listeners, the config store, the configurator's database), runs only commands of the
//! contract that the built binaries accept, and mounts files that exist.

use std::collections::BTreeSet;
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde_yaml::Value;

use super::compose_file::{Compose, Invocation, host_port, is_bind, listener};
use super::traffic::check_traffic_profile;
use super::{deploy_file, repo_root};

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
    let dockerfile = deploy_file("Dockerfile");
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
                build.get("dockerfile").and_then(Value::as_str) == Some(dockerfile.as_str()),
                "service {name}: build must use {dockerfile}"
            );
        }
    }

    let invs = compose.invocations()?;
    for inv in &invs {
        ensure!(
            compose.service(&inv.service)?.get("build").is_some(),
            "service {} runs {} but is not built from {dockerfile}",
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

    // One controller, or a region's active/standby controllers: then every one of them is
    // in the same etcd election, advertises its own compose address, and every aggregator
    // lists all of them.
    let controllers = of("grl", &["controller"]);
    ensure!(!controllers.is_empty(), "expected a controller");
    let controller = controllers[0];
    if controllers.len() > 1 {
        for c in &controllers {
            ensure!(
                c.flag("election")?.starts_with("etcd=http://"),
                "service {}: active/standby controllers need --election etcd=…",
                c.service
            );
            ensure!(
                c.flag("election-key")? == controller.flag("election-key")?,
                "service {}: another --election-key than {}",
                c.service,
                controller.service
            );
            let (_, port) = host_port(c.flag("listen")?)?;
            ensure!(
                c.flag("advertise")? == format!("{}:{port}", c.service),
                "service {}: --advertise must be its own compose address",
                c.service
            );
            let (etcd, _) = host_port(c.flag("election")?.trim_start_matches("etcd=http://"))?;
            ensure!(
                names.contains(etcd),
                "service {}: --election names no service {etcd}",
                c.service
            );
        }
    }

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
        let listed = agg.flag_all("controller");
        for addr in &listed {
            listener(&invs, addr, "grl", &["controller"])?;
        }
        ensure!(
            listed.len() == controllers.len(),
            "service {}: --controller must list every controller ({})",
            agg.service,
            controllers.len()
        );
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
    // Empty: no checkout (the controllers follow the bare repo with --config-git).
    let checkout = seed_env
        .get("CHECKOUT_DIR")
        .and_then(Value::as_str)
        .unwrap_or("/srv/grl-config");
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
    for controller in &controllers {
        // `--config` and `--config-git` exclude each other (clap refuses the pair).
        match (controller.flag("config"), controller.flag("config-git")) {
            (Ok(_), Ok(_)) => bail!("controller: --config and --config-git exclude each other"),
            (Err(_), Err(_)) => bail!("controller: neither --config nor --config-git"),
            (Ok(dir), Err(_)) => {
                ensure!(
                    !checkout.is_empty() && dir == checkout,
                    "controller --config must be the seeded checkout {checkout}"
                );
                ensure!(
                    compose.named_volume_at(&controller.service, checkout)?
                        == compose.named_volume_at("config-repo-init", checkout)?,
                    "controller and config-repo-init must share the checkout volume"
                );
            }
            (Err(_), Ok(_)) => {}
        }
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
    }
    let waiting: Vec<&str> = controllers
        .iter()
        .map(|c| c.service.as_str())
        .chain(["rlc"])
        .collect();
    for svc in waiting {
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
    let pushed = rlc.flag_all("controller");
    for addr in &pushed {
        listener(&invs, addr, "grl", &["controller"])?;
    }
    ensure!(
        pushed.len() == controllers.len(),
        "rlc --controller must list every controller ({})",
        controllers.len()
    );
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
        let bin = test_support::process::target_bin(&inv.bin)?;
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

/// Every path a GRL/RLC process of the compose file writes or reads is in a volume it mounts
/// and uses (issue 40): rlc's lock and history cache, kept beside `--workdir`, land in its
/// volume (not in root-owned `/var/lib` while the container runs as uid 10001); every volume
/// a process mounts is named by one of its flags; every controller's metrics and `/status`
/// port is published to the host.
#[test]
fn compose_paths_are_in_used_volumes_and_status_ports_published() -> Result<()> {
    let compose = Compose::load()?;
    for inv in compose.invocations()? {
        let values: Vec<String> = inv
            .flags
            .values()
            .flatten()
            .cloned()
            .chain(inv.repeated.values().flatten().cloned())
            .collect();
        for (src, dst) in compose.mounts(&inv.service)? {
            if is_bind(&src) {
                continue;
            }
            let dst = dst.split(':').next().unwrap_or(&dst).trim_end_matches('/');
            ensure!(
                values
                    .iter()
                    .any(|v| v.starts_with(&format!("{dst}/")) || v == dst),
                "service {}: volume {src} at {dst} is mounted but no flag uses it",
                inv.service
            );
        }
        if let Ok(workdir) = inv.flag("workdir") {
            let parent = std::path::Path::new(workdir)
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            ensure!(
                compose
                    .named_volume_at(&inv.service, &format!("{parent}/x"))
                    .is_ok()
                    && parent != "/",
                "service {}: --workdir {workdir} keeps its lock and cache in {parent}, \
                 which no volume holds",
                inv.service
            );
        }
        if inv.is("grl", &["controller"]) {
            let listen = inv.flag("metrics-listen")?;
            let port = listen.rsplit(':').next().unwrap_or_default();
            let ports = compose.service(&inv.service)?.get("ports").cloned();
            let published = ports
                .as_ref()
                .and_then(Value::as_sequence)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .any(|p| p.ends_with(&format!(":{port}")));
            ensure!(
                published,
                "service {}: the metrics and /status port {port} is not published",
                inv.service
            );
        }
    }
    Ok(())
}
