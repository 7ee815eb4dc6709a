//! `grl override set|list|clear`: incident overrides on a controller, or on each of a
//! region's active/standby controllers (`--controller A --controller B`), so that a standby
//! that takes over has them in force too.

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
        /// The controller's address; repeat for every controller of an active/standby
        /// region (each gets the call; ids are per controller).
        #[arg(long = "controller", value_name = "ADDR", required = true)]
        controllers: Vec<String>,
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
        /// The controller's address; repeat for every controller of an active/standby
        /// region (each gets the call; ids are per controller).
        #[arg(long = "controller", value_name = "ADDR", required = true)]
        controllers: Vec<String>,
    },
    /// Clear one override by id, or all of a service.
    Clear {
        /// The controller's address; repeat for every controller of an active/standby
        /// region (each gets the call; ids are per controller).
        #[arg(long = "controller", value_name = "ADDR", required = true)]
        controllers: Vec<String>,
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
/// The `authorization` header from `--token-file`, read once before any controller is
/// dialled (a token file others may write is a usage error, exit 2).
fn bearer(conn: &super::tls_args::AdminClientArgs) -> anyhow::Result<Bearer> {
    let header = conn
        .token()?
        .map(|t| tonic::metadata::MetadataValue::try_from(format!("Bearer {t}")))
        .transpose()
        .map_err(|_| anyhow::anyhow!("the token file holds characters not allowed in a header"))?;
    Ok(Bearer(header))
}

async fn client(
    addr: &str,
    conn: &super::tls_args::AdminClientArgs,
    bearer: Bearer,
) -> anyhow::Result<ControlClient<Authorized>> {
    let channel = grl_core::tls::endpoint(addr, conn.tls().as_ref())?
        .connect()
        .await?;
    Ok(ControlClient::with_interceptor(channel, bearer)
        .max_decoding_message_size(grl_core::wire::MAX_CONTROL_MESSAGE_BYTES)
        .max_encoding_message_size(grl_core::wire::MAX_CONTROL_MESSAGE_BYTES))
}

/// Runs one override action on every controller given and prints each result as JSON
/// (one line per override, with the controller's address). Fails if any controller
/// failed, after trying them all.
pub(crate) async fn run(a: Args) -> anyhow::Result<()> {
    let controllers = match &a.action {
        Action::Set { controllers, .. }
        | Action::List { controllers }
        | Action::Clear { controllers, .. } => controllers.clone(),
    };
    let bearer = bearer(&a.conn)?;
    if let Action::Set { service, .. } = &a.action {
        // An override of a service no controller knows would limit nothing: refused
        // before any controller is changed.
        let mut reached = None;
        for controller in &controllers {
            match super::known::require_service(controller, &a.conn, service).await {
                Ok(()) => {
                    reached = Some(Ok(()));
                    break;
                }
                Err(e) if super::validate::exit_code(&e) == 2 => reached = Some(Err(e)),
                Err(_) => {}
            }
        }
        if let Some(Err(e)) = reached {
            return Err(e);
        }
    }
    let mut failed = Vec::new();
    for controller in &controllers {
        if let Err(e) = run_on(controller, &a.action, &a.conn, bearer.clone()).await {
            eprintln!("{controller}: {e:#}");
            failed.push(controller.as_str());
        }
    }
    match failed.as_slice() {
        [] => Ok(()),
        f => anyhow::bail!("failed on {}", f.join(", ")),
    }
}

async fn run_on(
    controller: &str,
    action: &Action,
    conn: &super::tls_args::AdminClientArgs,
    bearer: Bearer,
) -> anyhow::Result<()> {
    let mut client = client(controller, conn, bearer).await?;
    match action {
        Action::Set {
            service,
            caller,
            procedure,
            rps,
            ttl,
            reason,
            ..
        } => {
            let who = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
            let o = client
                .set_override(proto::SetOverrideRequest {
                    service: service.clone(),
                    caller: caller.clone(),
                    procedure: procedure.clone(),
                    rps: *rps,
                    ttl_seconds: ttl.as_secs(),
                    reason: reason.clone(),
                    who,
                })
                .await?
                .into_inner();
            println!("{}", json(controller, &o));
        }
        Action::List { .. } => {
            let l = client
                .list_overrides(proto::ListOverridesRequest {})
                .await?
                .into_inner();
            for o in &l.overrides {
                println!("{}", json(controller, o));
            }
        }
        Action::Clear { id, service, .. } => {
            let r = client
                .clear_override(proto::ClearOverrideRequest {
                    id: id.clone().unwrap_or_default(),
                    service: service.clone().unwrap_or_default(),
                })
                .await?
                .into_inner();
            println!(
                "{}",
                serde_json::json!({ "controller": controller, "cleared": r.cleared })
            );
        }
    }
    Ok(())
}

fn json(controller: &str, o: &proto::Override) -> serde_json::Value {
    serde_json::json!({
        "controller": controller, "id": o.id, "service": o.service, "caller": o.caller, "procedure": o.procedure,
        "rps": o.rps, "expires_at_unix": o.expires_at_unix, "reason": o.reason, "who": o.who,
    })
}
