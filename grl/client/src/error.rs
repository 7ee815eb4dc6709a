//! Errors of the client's control plane (the hot path has none).

/// Why a stream to the aggregator could not be opened or went down.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The aggregator address is not a valid URI.
    #[error("invalid aggregator address {address:?}: {source}")]
    Address {
        /// As configured.
        address: String,
        /// Why.
        source: tonic::transport::Error,
    },
    /// The connection could not be made.
    #[error("connecting to the aggregator: {0}")]
    Connect(#[from] tonic::transport::Error),
    /// The aggregator refused or ended the stream.
    #[error("aggregator stream: {0}")]
    Stream(#[from] tonic::Status),
    /// TLS files could not be read, or the address's scheme does not fit the TLS setting.
    #[cfg(feature = "tls")]
    #[error("aggregator TLS: {0}")]
    Tls(#[from] grl_core::tls::TlsError),
    /// The aggregator did not answer in time.
    #[error("aggregator did not answer within {0:?}")]
    Timeout(std::time::Duration),
}
