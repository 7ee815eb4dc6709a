//! The one TLS stack of the configurator's HTTP clients: rustls with the `ring` provider
//! (pure Rust apart from `ring`'s small assembly core; no OpenSSL, no aws-lc). reqwest is
//! built without a provider of its own, so every client is made through [`client_builder`],
//! which installs `ring` as the process default first.

/// A reqwest client builder whose TLS uses rustls with `ring`.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}

/// Installs `ring` as rustls' process-wide provider; a no-op if one is installed already.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
