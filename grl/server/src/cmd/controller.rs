//! `grl controller`: a regional or global controller.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use grl::net::admin::AdminHttp;
use grl::tier::controller::{self, ConfigSource, ControllerOptions};
use grl::tier::election;

use super::validate::Usage;
use tracing::info;

/// Flags of `grl controller`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// gRPC address to serve `Tier` and `Control` on.
    #[arg(long, default_value = "127.0.0.1:7300")]
    listen: String,
    /// Config directory (`services/`, `limits/`), followed for changes.
    #[arg(long, conflicts_with = "config_git", value_parser = super::validate::config_dir)]
    config: Option<PathBuf>,
    /// Config repo URL, cloned and fetched; read at `--config-ref`.
    #[arg(long)]
    config_git: Option<String>,
    /// The branch of `--config-git` to run: `main`, or the region's `regions/<region>`
    /// that the configurator's staged rollout moves.
    #[arg(
        long,
        default_value = "main",
        requires = "config_git",
        value_name = "REF"
    )]
    config_ref: String,
    /// This controller's region.
    #[arg(long, default_value = "")]
    region: String,
    /// The global controller, if this one is regional; repeat the flag for global
    /// controllers that run active/standby (the leader is followed).
    #[arg(long = "parent", value_name = "ADDR")]
    parents: Vec<String>,
    #[command(flatten)]
    election: ElectionArgs,
    /// Address for `/metrics`.
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Reporting interval in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = super::validate::interval_ms)]
    interval_ms: u64,
    /// Highest offered rate one client may report, per second; a report row above it (per
    /// contributing client) is refused and counted (`grl_tier_reports_refused_total`).
    #[arg(long, default_value_t = 1e6, value_parser = super::validate::max_client_rps)]
    max_client_rps: f64,
    /// Highest rate one row of a tier child (an aggregator's zone sum of a bucket) may
    /// carry, per second, whatever number of clients it claims; above it the row is refused
    /// and counted. A client's row always counts as one client (`--max-client-rps`).
    #[arg(long, default_value_t = 1e7, value_parser = super::validate::max_child_rps)]
    max_child_rps: f64,
    /// Partition hold in milliseconds: a tier child (an aggregator, a region) that stops
    /// reporting keeps its last demand and share of every limit reserved this long (its
    /// zone enforces its last allowance meanwhile), so the others are not handed its share
    /// during a partition; with a parent, its last ratios are applied this long when it
    /// stops answering. Then the share is released and the children fail open. Size it to
    /// the partitions to ride out plus a few intervals (it runs from the last report
    /// heard); 0: no hold (fail open at the instructions' expiry).
    #[arg(long, default_value_t = 90_000, value_parser = super::validate::hold_ms)]
    partition_hold_ms: u64,
    /// How often to look for config changes, in milliseconds.
    #[arg(long, default_value_t = 2000, value_parser = super::validate::poll_ms)]
    poll_ms: u64,
    #[command(flatten)]
    tls: super::tls_args::ServerTlsArgs,
    #[command(flatten)]
    uplink_tls: super::tls_args::UplinkTlsArgs,
    #[command(flatten)]
    admin: super::tls_args::AdminAuthArgs,
}

/// Flags of active/standby controllers.
#[derive(Debug, clap::Args)]
struct ElectionArgs {
    /// Run active/standby: leadership comes from this engine (`etcd=http://HOST:PORT`, or
    /// `kubernetes=NAMESPACE[@API-URL]` for a Lease). Only the leader serves children; the
    /// others refuse them with the leader's address.
    #[arg(long, value_name = "BACKEND", requires = "election_key")]
    election: Option<Election>,
    /// The election's key, the same on every controller of the region (e.g.
    /// `/grl/region-1`).
    #[arg(long, value_name = "KEY")]
    election_key: Option<String>,
    /// Seconds a dead leader keeps its leadership (2 to 60): the longest a standby waits
    /// before it takes over.
    #[arg(long, value_name = "SECS", default_value_t = 3,
          value_parser = clap::value_parser!(u64).range(2..=60))]
    election_ttl: u64,
    /// The address children reach this controller at, sent to them by followers.
    /// Default: the address `--listen` bound (required when it is a wildcard).
    #[arg(long, value_name = "ADDR")]
    advertise: Option<String>,
}

/// `--election`'s value.
#[derive(Debug, Clone)]
struct Election(election::Backend);

impl std::str::FromStr for Election {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse()
            .map(Self)
            .map_err(|e: election::ElectionError| e.to_string())
    }
}

impl ElectionArgs {
    fn options(
        &self,
        bound: &std::net::SocketAddr,
    ) -> Result<Option<election::ElectionOptions>, Usage> {
        let (Some(Election(backend)), Some(key)) = (&self.election, &self.election_key) else {
            return Ok(None);
        };
        let advertise = match &self.advertise {
            Some(a) => a.clone(),
            None if bound.ip().is_unspecified() => {
                return Err(Usage(format!(
                    "--advertise is required with --election when --listen is {bound}"
                )));
            }
            None => bound.to_string(),
        };
        Ok(Some(election::ElectionOptions {
            backend: backend.clone(),
            key: key.clone(),
            ttl: Duration::from_secs(self.election_ttl),
            advertise,
        }))
    }
}

/// Runs until SIGTERM or Ctrl-C; refuses to start on an invalid config.
pub(crate) async fn run(a: Args) -> anyhow::Result<()> {
    let config = match (a.config, a.config_git) {
        (Some(d), _) => ConfigSource::Dir(d),
        (None, Some(url)) => ConfigSource::Git(url, a.config_ref),
        (None, None) if !a.parents.is_empty() => ConfigSource::None,
        (None, None) => anyhow::bail!("--config DIR or --config-git URL is required"),
    };
    let listener = super::bind(&a.listen).await?;
    let server_tls = a.tls.server_tls()?;
    let security = grl::tier::Security {
        admin: a
            .admin
            .admin(&listener.local_addr()?, server_tls.is_some())?,
        server_tls,
        uplink_tls: a.uplink_tls.client(&a.tls),
        children: a.tls.children(),
        admin_http: AdminHttp {
            tls: a.tls.metrics_tls()?,
            insecure: a.admin.insecure_admin,
        },
    };
    let metrics = match &a.metrics_listen {
        Some(m) => Some(super::bind(m).await?),
        None => None,
    };
    let opts = ControllerOptions {
        region: a.region,
        parents: a.parents,
        election: a.election.options(&listener.local_addr()?)?,
        interval: Duration::from_millis(a.interval_ms),
        config,
        poll: Duration::from_millis(a.poll_ms),
        security,
    };
    let (running, ctl) = controller::start(opts, listener, metrics)
        .await
        .context("controller refused to start")?;
    running
        .node
        .set_partition_hold(Duration::from_millis(a.partition_hold_ms));
    running
        .node
        .set_report_limits(super::validate::report_limits(
            a.max_client_rps,
            Some(a.max_child_rps),
        ));
    info!(addr = %running.addr, metrics = ?running.metrics_addr, version = %ctl.snapshot().version, "controller serving");
    tokio::select! {
        () = running.wait() => {}
        () = super::terminated() => info!("terminated"),
    }
    Ok(())
}
