//! The CLI contract of `grl` and `rlc` that the deploy assets may use (subcommands and their
//! flags), and the contract's metric names.

/// How a flag is used on the command line.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Arg {
    /// Takes a value and must be given.
    Required,
    /// Takes a value.
    Optional,
    /// A switch without a value, which must be given.
    RequiredSwitch,
    /// Takes a value, may be given several times, and must be given at least once.
    RequiredRepeated,
    /// Takes a value and may be given several times.
    Repeated,
}
pub(super) use Arg::{Optional, Repeated, Required, RequiredRepeated, RequiredSwitch};

/// One subcommand of the contract: binary, subcommand path, flags.
pub(super) struct Subcommand {
    pub(super) bin: &'static str,
    pub(super) path: &'static [&'static str],
    pub(super) flags: &'static [(&'static str, Arg)],
}

/// The CLI contract of `grl` and `rlc` that the deploy assets may use.
pub(super) const CONTRACT: &[Subcommand] = &[
    Subcommand {
        bin: "grl",
        path: &["controller"],
        flags: &[
            ("listen", Required),
            ("config", Optional),
            ("region", Optional),
            ("parent", Repeated),
            ("election", Optional),
            ("election-key", Optional),
            ("election-ttl", Optional),
            ("advertise", Optional),
            ("metrics-listen", Optional),
            ("interval-ms", Optional),
            ("config-git", Optional),
            ("tls-cert", Optional),
            ("tls-key", Optional),
            ("tls-client-ca", Optional),
            ("tls-ca", Optional),
            ("child-allow", Optional),
            ("admin-allow", Optional),
            ("admin-token-file", Optional),
        ],
    },
    Subcommand {
        bin: "grl",
        path: &["aggregator"],
        flags: &[
            ("listen", Required),
            ("zone", Required),
            ("region", Required),
            ("controller", RequiredRepeated),
            ("metrics-listen", Optional),
            ("interval-ms", Optional),
            ("tls-cert", Optional),
            ("tls-key", Optional),
            ("tls-client-ca", Optional),
            ("tls-ca", Optional),
            ("child-allow", Optional),
        ],
    },
    Subcommand {
        bin: "grl",
        path: &["loadgen"],
        flags: &[
            ("aggregator", Required),
            ("zone", Required),
            ("clients", Required),
            ("profile", Required),
            ("duration", Required),
            ("service", Optional),
            ("region", Optional),
            ("metrics-listen", Optional),
            ("tls-ca", Optional),
            ("tls-cert", Optional),
            ("tls-key", Optional),
        ],
    },
    Subcommand {
        bin: "grl",
        path: &["override", "set"],
        flags: &[
            ("controller", RequiredRepeated),
            ("service", Required),
            ("caller", Optional),
            ("procedure", Optional),
            ("rps", Required),
            ("ttl", Required),
            ("reason", Optional),
        ],
    },
    Subcommand {
        bin: "grl",
        path: &["override", "list"],
        flags: &[("controller", RequiredRepeated)],
    },
    Subcommand {
        bin: "grl",
        path: &["override", "clear"],
        flags: &[
            ("controller", RequiredRepeated),
            ("id", Optional),
            ("service", Optional),
        ],
    },
    Subcommand {
        bin: "rlc",
        path: &["serve"],
        flags: &[
            ("schedule", Required),
            ("config-repo", Required),
            ("prometheus", Required),
            ("mode", Optional),
            ("db", Optional),
            ("controller", Repeated),
            ("metrics-listen", Optional),
            ("workdir", Optional),
            ("tls-ca", Optional),
            ("tls-cert", Optional),
            ("tls-key", Optional),
            ("token-file", Optional),
        ],
    },
    Subcommand {
        bin: "rlc",
        path: &["run"],
        flags: &[
            ("once", RequiredSwitch),
            ("config-repo", Required),
            ("prometheus", Required),
            ("mode", Optional),
            ("db", Optional),
            ("controller", Repeated),
            ("tls-ca", Optional),
            ("tls-cert", Optional),
            ("tls-key", Optional),
            ("token-file", Optional),
        ],
    },
];

/// Metric names of the contract (histograms also expose `_bucket`, `_sum`, `_count`).
pub(super) const CONTRACT_METRICS: &[&str] = &[
    "grl_requests_total",
    "grl_client_fail_open",
    "grl_client_drop_ratio",
    "grl_tier_offered_rps",
    "grl_tier_drop_ratio",
    "grl_tier_limit_rps",
    "grl_tier_children",
    "grl_tier_stale_children",
    "grl_tier_config_info",
    "grl_tier_fail_open",
    "grl_tier_parent_connected",
    "grl_controller_apply_total",
    "rlc_runs_total",
    "rlc_last_success_timestamp_seconds",
    "rlc_buckets",
    "rlc_run_duration_seconds",
    "rlc_limit_changes_total",
];
pub(super) const HISTOGRAMS: &[&str] = &["rlc_run_duration_seconds"];
