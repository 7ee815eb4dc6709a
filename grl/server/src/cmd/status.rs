//! `grl status`: a tier's state as a table or JSON (`--json`, fields in README "Operating
//! it"): config version, leader and standby, zones and their age, every bucket's limit,
//! offered, admitted and dropped rates, its top zones, and the overrides in force.

use grl::view::{self, StatusView};
use grl_core::proto;
use grl_core::proto::tier_client::TierClient;

/// Flags of `grl status`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    target: Target,
    /// Only this service's buckets.
    #[arg(long)]
    service: Option<String>,
    /// One JSON object instead of tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: super::tls_args::AdminClientArgs,
}

/// Which tiers to ask: controllers (repeat for an active/standby region) or an aggregator.
#[derive(Debug, Clone, clap::Args)]
#[group(required = true, multiple = false)]
pub(crate) struct Target {
    /// A controller's gRPC address; repeat for each controller of an active/standby
    /// region (the leader's state is shown, every controller's role listed).
    #[arg(long = "controller", value_name = "ADDR")]
    controllers: Vec<String>,
    /// A zone aggregator's gRPC address.
    #[arg(long, value_name = "ADDR")]
    aggregator: Option<String>,
}

impl Target {
    pub(crate) fn addresses(&self) -> Vec<String> {
        let mut all = self.controllers.clone();
        all.extend(self.aggregator.clone());
        all
    }
}

/// A `Tier` client of `addr`, over TLS when configured.
pub(crate) async fn tier_client(
    addr: &str,
    conn: &super::tls_args::AdminClientArgs,
) -> anyhow::Result<TierClient<tonic::transport::Channel>> {
    let channel = grl_core::tls::endpoint(addr, conn.tls().as_ref())?
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach {addr}: {e}"))?;
    Ok(TierClient::new(channel)
        .max_decoding_message_size(grl_core::wire::MAX_CONTROL_MESSAGE_BYTES))
}

/// One tier's answer, or why there is none.
pub(crate) struct Answer {
    pub(crate) address: String,
    pub(crate) status: anyhow::Result<proto::StatusResponse>,
}

/// Asks every tier of `target`; the chosen answer is the first leader's (else the first
/// answer). Fails when none answered.
pub(crate) async fn ask(
    target: &Target,
    service: Option<&str>,
    conn: &super::tls_args::AdminClientArgs,
) -> anyhow::Result<(StatusView, Vec<Answer>)> {
    let req = proto::StatusRequest {
        service: service.unwrap_or_default().to_string(),
        detail: true,
    };
    let mut answers = Vec::new();
    for address in target.addresses() {
        let status = async {
            let mut c = tier_client(&address, conn).await?;
            Ok(c.status(req.clone()).await?.into_inner())
        }
        .await;
        answers.push(Answer { address, status });
    }
    let chosen = answers
        .iter()
        .filter_map(|a| a.status.as_ref().ok())
        .max_by_key(|s| s.leading)
        .map(StatusView::from);
    match chosen {
        Some(v) => Ok((v, answers)),
        None => {
            let why: Vec<String> = answers
                .iter()
                .filter_map(|a| {
                    a.status
                        .as_ref()
                        .err()
                        .map(|e| format!("{}: {e:#}", a.address))
                })
                .collect();
            anyhow::bail!("no tier answered ({})", why.join("; "))
        }
    }
}

/// Each tier's role, for JSON.
fn roles(answers: &[Answer]) -> serde_json::Value {
    answers
        .iter()
        .map(|a| match &a.status {
            Ok(s) => serde_json::json!({
                "address": a.address, "leading": s.leading, "leader": s.leader,
                "config_version": s.config_version,
            }),
            Err(e) => serde_json::json!({ "address": a.address, "error": format!("{e:#}") }),
        })
        .collect()
}

/// Prints the state of the tiers asked.
pub(crate) async fn run(a: Args) -> anyhow::Result<()> {
    let (v, answers) = ask(&a.target, a.service.as_deref(), &a.conn).await?;
    if let (Some(s), true) = (&a.service, v.buckets.is_empty()) {
        eprintln!(
            "note: no bucket of service `{s}` in config version {}",
            v.config_version
        );
    }
    if a.json {
        let mut out = serde_json::to_value(&v)?;
        out["tiers"] = roles(&answers);
        println!("{out}");
        return Ok(());
    }
    print!("{}", view::text::status(&v));
    if answers.len() > 1 {
        println!();
        for a in &answers {
            match &a.status {
                Ok(s) if s.leading => println!("{}: leading", a.address),
                Ok(_) => println!("{}: standby", a.address),
                Err(e) => println!("{}: unreachable ({e:#})", a.address),
            }
        }
    }
    Ok(())
}
