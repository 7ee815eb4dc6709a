//! `grl aggregator`: one zone's aggregator.

use std::time::Duration;

use grl::tier::aggregator::{self, AggregatorOptions};
use tracing::info;

/// Flags of `grl aggregator`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// gRPC address to serve `Tier` on.
    #[arg(long, default_value = "127.0.0.1:7301")]
    listen: String,
    /// This aggregator's zone.
    #[arg(long)]
    zone: String,
    /// This aggregator's region.
    #[arg(long)]
    region: String,
    /// The controller's address; repeat the flag for a region's active/standby
    /// controllers (the leader is followed).
    #[arg(long = "controller", value_name = "ADDR", required = true)]
    controllers: Vec<String>,
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
    /// Partition hold in milliseconds: when the controller stops answering (a partition, a
    /// frozen or lost controller, instructions lost on the way) this zone keeps enforcing
    /// the last ratios and allowances it heard this long, re-sending them to its clients,
    /// and the controller keeps the zone's share reserved as long (its own
    /// `--partition-hold-ms`); then the clients fail open. 0: fail open at the
    /// instructions' expiry (5 intervals).
    #[arg(long, default_value_t = 90_000, value_parser = super::validate::hold_ms)]
    partition_hold_ms: u64,
    #[command(flatten)]
    tls: super::tls_args::ServerTlsArgs,
    #[command(flatten)]
    uplink_tls: super::tls_args::UplinkTlsArgs,
}

/// Runs until SIGTERM or Ctrl-C.
pub(crate) async fn run(a: Args) -> anyhow::Result<()> {
    let listener = super::bind(&a.listen).await?;
    let metrics = match &a.metrics_listen {
        Some(m) => Some(super::bind(m).await?),
        None => None,
    };
    let opts = AggregatorOptions {
        zone: a.zone,
        region: a.region,
        controllers: a.controllers,
        interval: Duration::from_millis(a.interval_ms),
        security: grl::tier::Security {
            server_tls: a.tls.server_tls()?,
            uplink_tls: a.uplink_tls.client(&a.tls),
            children: a.tls.children(),
            admin_http: grl::net::admin::AdminHttp {
                tls: a.tls.metrics_tls()?,
                insecure: false,
            },
            ..Default::default()
        },
    };
    let running = aggregator::start(opts, listener, metrics)?;
    running
        .node
        .set_partition_hold(Duration::from_millis(a.partition_hold_ms));
    running
        .node
        .set_report_limits(super::validate::report_limits(a.max_client_rps, None));
    info!(addr = %running.addr, metrics = ?running.metrics_addr, "aggregator serving");
    tokio::select! {
        () = running.wait() => {}
        () = super::terminated() => info!("terminated"),
    }
    Ok(())
}
