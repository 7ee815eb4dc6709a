//! The one TLS stack of the configurator's HTTP clients: rustls with the `ring` provider
//! (pure Rust apart from `ring`'s small assembly core; no OpenSSL, no aws-lc). reqwest is
//! built without a provider of its own, so every client is made through [`client_builder`],
//! which installs `ring` as the process default first. [`read_capped`] reads an answer's
//! body no further than its caller will use.

/// A reqwest client builder whose TLS uses rustls with `ring`.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}

/// Installs `ring` as rustls' process-wide provider; a no-op if one is installed already.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Reads `resp`'s body chunk by chunk, at most `max` bytes of it: the bytes, and whether the
/// body went on past `max` (the rest is not read; the connection is closed). A peer sending
/// an endless body costs `max` bytes of memory.
pub async fn read_capped(
    mut resp: reqwest::Response,
    max: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let expected = resp.content_length().unwrap_or(0).min(max as u64) as usize;
    let mut body = Vec::with_capacity(expected);
    while let Some(chunk) = resp.chunk().await? {
        let room = max - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}
