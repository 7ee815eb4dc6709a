//! `grl explain`: which bucket a request would fall in on a tier, every rule considered
//! (most specific first) and why, the ratio a client applies to it now, and whether the
//! bucket is in shadow.

use grl::view::{self, ExplainView};
use grl_core::proto;

/// Flags of `grl explain`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    target: super::status::Target,
    /// The called service.
    #[arg(long)]
    service: String,
    /// The caller (empty: a request that names none).
    #[arg(long, default_value = "")]
    caller: String,
    /// The called procedure.
    #[arg(long, default_value = "")]
    procedure: String,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: super::tls_args::AdminClientArgs,
}

/// Prints the explanation.
pub(crate) async fn run(a: Args) -> anyhow::Result<()> {
    // The first tier named answers (the same flags as `grl status`).
    let addr = a.target.addresses().remove(0);
    let mut c = super::status::tier_client(&addr, &a.conn).await?;
    let e = c
        .explain(proto::ExplainRequest {
            service: a.service.clone(),
            caller: a.caller.clone(),
            procedure: a.procedure.clone(),
        })
        .await?
        .into_inner();
    if !e.service_known {
        // Names what exists (exit 2), as `rlc explain` does for a service not in the repo.
        super::known::require_service(&addr, &a.conn, &a.service).await?;
    }
    let v = ExplainView::of(&e, &a.service, &a.caller, &a.procedure);
    if a.json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        print!("{}", view::text::explain(&v));
    }
    Ok(())
}
