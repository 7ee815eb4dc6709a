//! The generated subset of Envoy's v3 rate limit service API (`proto/envoy/...`), in modules
//! that mirror the protobuf packages so the generated cross-package paths resolve.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// `envoy.*`
pub mod envoy {
    /// `envoy.config.*`
    pub mod config {
        /// `envoy.config.core.*`
        pub mod core {
            /// `envoy.config.core.v3`
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
    /// `envoy.extensions.*`
    pub mod extensions {
        /// `envoy.extensions.common.*`
        pub mod common {
            /// `envoy.extensions.common.ratelimit.*`
            pub mod ratelimit {
                /// `envoy.extensions.common.ratelimit.v3`
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }
    /// `envoy.type.*`
    pub mod r#type {
        /// `envoy.type.v3`
        pub mod v3 {
            tonic::include_proto!("envoy.r#type.v3");
        }
    }
    /// `envoy.service.*`
    pub mod service {
        /// `envoy.service.rate_limit_quota.*`
        pub mod rate_limit_quota {
            /// `envoy.service.rate_limit_quota.v3`
            pub mod v3 {
                tonic::include_proto!("envoy.service.rate_limit_quota.v3");
            }
        }
        /// `envoy.service.ratelimit.*`
        pub mod ratelimit {
            /// `envoy.service.ratelimit.v3`
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
    }
}

pub use envoy::extensions::common::ratelimit::v3::{RateLimitDescriptor, rate_limit_descriptor};
/// The rate limit quota service's messages and service (`envoy.service.rate_limit_quota.v3`).
pub use envoy::service::rate_limit_quota::v3 as quota;
pub use envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse, rate_limit_response, rate_limit_service_client,
    rate_limit_service_server,
};
/// `envoy.type.v3`: the rate limit strategy an assignment carries.
pub use envoy::r#type::v3 as types;
