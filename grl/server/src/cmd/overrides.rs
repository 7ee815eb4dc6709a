//! `grl override set|list|clear`: incident overrides on a controller, or on each of a
//! region's active/standby controllers (`--controller A --controller B`), so that a standby
//! that takes over has them in force too. Prints a table, as `grl status` does, or JSON
//! lines with `--json`.

use std::time::Duration;

use grl_core::proto;
use grl_core::proto::control_client::ControlClient;

/// Flags of `grl override`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
    /// One JSON object per line (per override, with its controller's address) instead of
    /// a table.
    #[arg(long, global = true)]
    json: bool,
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

/// Runs one override action on every controller given and prints the results: a table,
/// or with `--json` one JSON line per override (with the controller's address). Fails if
/// any controller failed, after trying them all.
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
    let mut rows = Vec::new();
    for controller in &controllers {
        match run_on(controller, &a.action, &a.conn, bearer.clone()).await {
            Ok(r) => rows.extend(r),
            Err(e) => {
                eprintln!("{controller}: {e:#}");
                failed.push(controller.as_str());
            }
        }
    }
    if a.json {
        for r in &rows {
            println!("{r}");
        }
    } else {
        print!("{}", table(&a.action, &rows));
    }
    match failed.as_slice() {
        [] => Ok(()),
        f => anyhow::bail!("failed on {}", f.join(", ")),
    }
}

/// The rows of `run` as a table: the overrides, or what each controller cleared.
fn table(action: &Action, rows: &[serde_json::Value]) -> String {
    let s = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) if s.is_empty() => "*".to_string(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Action::Clear { .. } = action {
        let mut t = vec![vec!["CONTROLLER".to_string(), "CLEARED".into()]];
        t.extend(
            rows.iter()
                .map(|r| vec![s(&r["controller"]), s(&r["cleared"])]),
        );
        return grl::view::text::columns(&t, &[false, true]);
    }
    if rows.is_empty() {
        return "no overrides in force\n".into();
    }
    let head = [
        "CONTROLLER",
        "ID",
        "SERVICE",
        "CALLER",
        "PROCEDURE",
        "RPS",
        "EXPIRES",
        "WHO",
        "REASON",
    ];
    let mut t = vec![head.iter().map(ToString::to_string).collect::<Vec<_>>()];
    for r in rows {
        let expires = r["expires_at_unix"]
            .as_i64()
            .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default();
        t.push(vec![
            s(&r["controller"]),
            s(&r["id"]),
            s(&r["service"]),
            s(&r["caller"]),
            s(&r["procedure"]),
            grl::view::text::rate(r["rps"].as_f64().unwrap_or(0.0)),
            expires,
            s(&r["who"]),
            s(&r["reason"]),
        ]);
    }
    let mut right = [false; 9];
    right[5] = true;
    grl::view::text::columns(&t, &right)
}

async fn run_on(
    controller: &str,
    action: &Action,
    conn: &super::tls_args::AdminClientArgs,
    bearer: Bearer,
) -> anyhow::Result<Vec<serde_json::Value>> {
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
            Ok(vec![json(controller, &o)])
        }
        Action::List { .. } => {
            let l = client
                .list_overrides(proto::ListOverridesRequest {})
                .await?
                .into_inner();
            Ok(l.overrides.iter().map(|o| json(controller, o)).collect())
        }
        Action::Clear { id, service, .. } => {
            let r = client
                .clear_override(proto::ClearOverrideRequest {
                    id: id.clone().unwrap_or_default(),
                    service: service.clone().unwrap_or_default(),
                })
                .await?
                .into_inner();
            Ok(vec![
                serde_json::json!({ "controller": controller, "cleared": r.cleared }),
            ])
        }
    }
}

fn json(controller: &str, o: &proto::Override) -> serde_json::Value {
    serde_json::json!({
        "controller": controller, "id": o.id, "service": o.service, "caller": o.caller, "procedure": o.procedure,
        "rps": o.rps, "expires_at_unix": o.expires_at_unix, "reason": o.reason, "who": o.who,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_print_as_a_table() {
        let o = proto::Override {
            id: "o1".into(),
            service: "payments".into(),
            caller: "batch".into(),
            rps: 50.0,
            expires_at_unix: 1_800_000_000,
            reason: "incident".into(),
            who: "alice".into(),
            ..Default::default()
        };
        let list = Action::List {
            controllers: vec![],
        };
        let t = table(&list, &[json("127.0.0.1:7300", &o)]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("CONTROLLER"), "{t}");
        assert!(lines[1].contains("payments  batch"), "{t}");
        assert!(lines[1].contains("2027-01-15T08:00:00Z"), "{t}");
        assert!(!t.contains('{'), "{t}");
        assert_eq!(table(&list, &[]), "no overrides in force\n");
    }
}
