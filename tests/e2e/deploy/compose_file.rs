//! `docker-compose.yml` as the tests see it: its services, their commands parsed against the
//! CLI [contract](super::contract) into [`Invocation`]s, their mounts (bind sources resolved in
//! the repo, named volumes) and their dependencies.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde_yaml::Value;

use super::contract::{CONTRACT, Repeated, Required, RequiredRepeated, RequiredSwitch};
use super::{read_yaml, repo_root};

/// A GRL/RLC process of the compose file: `bin path... --flag value...`.
#[derive(Debug)]
pub(super) struct Invocation {
    /// The compose service running it.
    pub(super) service: String,
    /// `grl` or `rlc`.
    pub(super) bin: String,
    /// The subcommand path, e.g. `["override", "set"]`.
    pub(super) path: Vec<String>,
    /// Each flag given, with its first value (`None` for a switch).
    pub(super) flags: BTreeMap<String, Option<String>>,
    /// Every value of each flag the contract lets repeat, in order.
    pub(super) repeated: BTreeMap<String, Vec<String>>,
}

impl Invocation {
    /// Whether this runs `bin path...`.
    pub(super) fn is(&self, bin: &str, path: &[&str]) -> bool {
        self.bin == bin
            && self
                .path
                .iter()
                .map(String::as_str)
                .eq(path.iter().copied())
    }

    /// Every value of a repeatable `--name` (empty when not given).
    pub(super) fn flag_all(&self, name: &str) -> Vec<&str> {
        self.repeated
            .get(name)
            .map(|v| v.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// The value of `--name`; an error naming the service if it is not set.
    pub(super) fn flag(&self, name: &str) -> Result<&str> {
        self.flags
            .get(name)
            .and_then(Option::as_deref)
            .ok_or_else(|| anyhow!("service {}: --{name} is not set", self.service))
    }
}

/// The compose file with the parts the tests look at.
pub(super) struct Compose {
    /// The whole YAML document.
    pub(super) doc: Value,
}

impl Compose {
    /// Reads `docker-compose.yml` at the repository root.
    pub(super) fn load() -> Result<Self> {
        let doc = read_yaml("docker-compose.yml")?;
        ensure!(
            doc.get("services").and_then(Value::as_mapping).is_some(),
            "no `services` mapping"
        );
        Ok(Self { doc })
    }

    /// Every service as (name, definition).
    pub(super) fn services(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.doc["services"]
            .as_mapping()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str()?, v)))
    }

    /// The definition of service `name`; an error if there is none.
    pub(super) fn service(&self, name: &str) -> Result<&Value> {
        self.doc["services"]
            .get(name)
            .ok_or_else(|| anyhow!("docker-compose.yml has no service `{name}`"))
    }

    /// The command of a service as a list of strings (the list form is required).
    pub(super) fn command(&self, name: &str) -> Result<Option<Vec<String>>> {
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
    pub(super) fn invocations(&self) -> Result<Vec<Invocation>> {
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
    pub(super) fn mounts(&self, name: &str) -> Result<Vec<(String, String)>> {
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
    pub(super) fn mounted_source(&self, service: &str, container_path: &str) -> Result<PathBuf> {
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
    pub(super) fn named_volume_at(&self, service: &str, container_path: &str) -> Result<String> {
        for (src, dst) in self.mounts(service)? {
            if !is_bind(&src) && container_path.starts_with(dst.trim_end_matches('/')) {
                return Ok(src);
            }
        }
        bail!("service {service}: no named volume holds {container_path}")
    }

    /// The services `name` depends on, each with its `condition` if the long form gives one.
    pub(super) fn depends_on(&self, name: &str) -> Result<Vec<(String, Option<String>)>> {
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

/// Whether a volume source is a bind mount (a path) rather than a named volume.
pub(super) fn is_bind(src: &str) -> bool {
    src.starts_with('.') || src.starts_with('/')
}

/// A YAML scalar as the string a command line would receive.
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
    let mut repeated: BTreeMap<String, Vec<String>> = BTreeMap::new();
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
        if matches!(kind, Repeated | RequiredRepeated) {
            repeated
                .entry(name.to_string())
                .or_default()
                .extend(value.clone());
            flags.entry(name.to_string()).or_insert(value);
            continue;
        }
        ensure!(
            flags.insert(name.to_string(), value).is_none(),
            "service {service}: --{name} given twice"
        );
    }
    for (name, kind) in sub.flags {
        if matches!(kind, Required | RequiredSwitch | RequiredRepeated) {
            ensure!(
                flags.contains_key(*name),
                "service {service}: required flag --{name} is missing"
            );
        }
    }
    Ok(Some(Invocation {
        service: service.to_string(),
        bin: bin.to_string(),
        path: sub
            .path
            .iter()
            .map(std::string::ToString::to_string)
            .collect(),
        flags,
        repeated,
    }))
}

/// `host:port` → (host, port).
pub(super) fn host_port(s: &str) -> Result<(&str, u16)> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("`{s}` is not host:port"))?;
    Ok((
        host,
        port.parse().with_context(|| format!("port of `{s}`"))?,
    ))
}

/// The process of the compose file listening on `addr` (`service:port`) with `--listen`.
pub(super) fn listener<'a>(
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
