//! `grl override set|list|clear`: incident overrides on a controller.

use std::time::Duration;

use grl_core::proto;
use grl_core::proto::control_client::ControlClient;

/// Flags of `grl override`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    conn: super::tls_args::AdminClientArgs,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Throttle a caller and/or procedure of a service for a while.
    Set {
        /// The controller's address.
        #[arg(long)]
        controller: String,
        /// The service to protect.
        #[arg(long)]
        service: String,
        /// Caller to throttle.
        #[arg(long, default_value = "")]
        caller: String,
        /// Procedure (or `Prefix/*`) to throttle.
        #[arg(long, default_value = "")]
        procedure: String,
        /// The limit in requests per second.
        #[arg(long, value_parser = super::validate::limit_rps)]
        rps: f64,
        /// How long it lasts, e.g. `30m`.
        #[arg(long, value_parser = super::validate::override_ttl)]
        ttl: Duration,
        /// Why (logged and listed).
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// List the overrides in force.
    List {
        /// The controller's address.
        #[arg(long)]
        controller: String,
    },
    /// Clear one override by id, or all of a service.
    Clear {
        /// The controller's address.
        #[arg(long)]
        controller: String,
        /// The override's id.
        #[arg(long, required_unless_present = "service")]
        id: Option<String>,
        /// Clear every override of this service.
        #[arg(long)]
        service: Option<String>,
    },
}

/// Adds the admin bearer token, if there is one, to every call (its value never printed).
#[derive(Clone)]
struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(h) = &self.0 {
            req.metadata_mut().insert("authorization", h.clone());
        }
        Ok(req)
    }
}

type Authorized =
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>;

/// A `Control` client of `addr` over TLS if configured, sending the bearer token if given.
async fn client(
    addr: &str,
    conn: &super::tls_args::AdminClientArgs,
) -> anyhow::Result<ControlClient<Authorized>> {
    let channel = grl_core::tls::endpoint(addr, conn.tls().as_ref())?
        .connect()
        .await?;
    let header = conn
        .token()?
        .map(|t| tonic::metadata::MetadataValue::try_from(format!("Bearer {t}")))
        .transpose()
        .map_err(|_| anyhow::anyhow!("the token file holds characters not allowed in a header"))?;
    Ok(ControlClient::with_interceptor(channel, Bearer(header))
        .max_decoding_message_size(grl_core::wire::MAX_CONTROL_MESSAGE_BYTES)
        .max_encoding_message_size(grl_core::wire::MAX_CONTROL_MESSAGE_BYTES))
}

/// Runs one override action and prints the result as JSON.
pub(crate) async fn run(a: Args) -> anyhow::Result<()> {
    match a.action {
        Action::Set {
            controller,
            service,
            caller,
            procedure,
            rps,
            ttl,
            reason,
        } => {
            let who = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
            let o = client(&controller, &a.conn)
                .await?
                .set_override(proto::SetOverrideRequest {
                    service,
                    caller,
                    procedure,
                    rps,
                    ttl_seconds: ttl.as_secs(),
                    reason,
                    who,
                })
                .await?
                .into_inner();
            println!("{}", json(&o));
        }
        Action::List { controller } => {
            let l = client(&controller, &a.conn)
                .await?
                .list_overrides(proto::ListOverridesRequest {})
                .await?
                .into_inner();
            for o in &l.overrides {
                println!("{}", json(o));
            }
        }
        Action::Clear {
            controller,
            id,
            service,
        } => {
            let r = client(&controller, &a.conn)
                .await?
                .clear_override(proto::ClearOverrideRequest {
                    id: id.unwrap_or_default(),
                    service: service.unwrap_or_default(),
                })
                .await?
                .into_inner();
            println!("{{\"cleared\":{}}}", r.cleared);
        }
    }
    Ok(())
}

fn json(o: &proto::Override) -> serde_json::Value {
    serde_json::json!({
        "id": o.id, "service": o.service, "caller": o.caller, "procedure": o.procedure,
        "rps": o.rps, "expires_at_unix": o.expires_at_unix, "reason": o.reason, "who": o.who,
    })
}
