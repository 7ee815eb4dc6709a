//! The services a tier holds buckets of, so that `grl override set` and `grl explain`
//! refuse a name the config does not know (exit 2, listing the names that exist) instead
//! of acting on nothing.

use std::collections::BTreeSet;

use grl_core::proto;

use super::validate::Usage;

/// Asks the tier at `addr` for its buckets; `Err(Usage)` naming the services it knows when
/// `service` is not one of them.
pub(crate) async fn require_service(
    addr: &str,
    conn: &super::tls_args::AdminClientArgs,
    service: &str,
) -> anyhow::Result<()> {
    let mut c = super::status::tier_client(addr, conn).await?;
    let st = c
        .status(proto::StatusRequest::default())
        .await?
        .into_inner();
    check(&st, service).map_err(anyhow::Error::from)
}

/// `Ok` when `st` holds a (non-override) bucket of `service`.
fn check(st: &proto::StatusResponse, service: &str) -> Result<(), Usage> {
    let known: BTreeSet<&str> = st
        .buckets
        .iter()
        .filter(|b| !b.is_override)
        .map(|b| b.service.as_str())
        .collect();
    if known.contains(service) {
        return Ok(());
    }
    let names = if known.is_empty() {
        "none".to_string()
    } else {
        known.into_iter().collect::<Vec<_>>().join(", ")
    };
    Err(Usage(format!(
        "config version {} has no service `{service}` (services: {names})",
        if st.config_version.is_empty() {
            "(none)"
        } else {
            &st.config_version
        }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(service: &str, is_override: bool) -> proto::BucketStatus {
        proto::BucketStatus {
            service: service.into(),
            bucket: "b".into(),
            is_override,
            ..Default::default()
        }
    }

    #[test]
    fn unknown_service_lists_the_known_ones() {
        let st = proto::StatusResponse {
            config_version: "v7".into(),
            buckets: vec![
                bucket("payments", false),
                bucket("orders", false),
                bucket("ghost", true),
            ],
            ..Default::default()
        };
        assert!(check(&st, "orders").is_ok());
        let e = check(&st, "nosuch").unwrap_err().0;
        assert_eq!(
            e,
            "config version v7 has no service `nosuch` (services: orders, payments)"
        );
        assert!(
            check(&st, "ghost").is_err(),
            "an override alone is no config"
        );
    }
}
