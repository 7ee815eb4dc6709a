//! Who the caller of a request is, and how long a name may grow before it stops being a
//! metric label.
//!
//! [`CallerFrom::Header`] (the default) reads the caller header: anyone who reaches the
//! port may name any caller, so it suits a port only trusted peers reach. A repeated header
//! is refused (GRL would count one value while the upstream saw both), and so is one that is
//! not UTF-8 (GRL would count `""` while the upstream saw the bytes).
//! [`CallerFrom::PeerCert`] takes the caller from the connection's client certificate
//! ([`of_certificate`]: its first URI SAN, a SPIFFE ID such as
//! `spiffe://cluster.local/ns/x/sa/y`, else its first DNS SAN); the header is then ignored and
//! removed before forwarding.
//!
//! [`capped`] bounds a caller or procedure at [`MAX_NAME_BYTES`], the longest name a config
//! may hold: a longer one is cut there and marked with `...`, which keeps every bucket it
//! matched (no configured name is that long, and procedure prefixes are shorter) while the
//! pair table and `/metrics` hold at most that many bytes per name.

use std::borrow::Cow;

use http::header::{HeaderMap, HeaderName};

/// Longest caller or procedure kept whole, in bytes (the config's name limit).
pub const MAX_NAME_BYTES: usize = grl_config::bounds::MAX_NAME_BYTES;

/// What a name longer than [`MAX_NAME_BYTES`] is cut to ends with.
pub const CUT_MARK: &str = "...";

/// Where the caller of a request comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CallerFrom {
    /// The caller header (`--caller-header`): set by whoever sends the request.
    #[default]
    Header,
    /// The client certificate of the connection (mutual TLS on the proxy's port).
    PeerCert,
}

/// Why a request's caller could not be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallerError {
    /// The caller header appears more than once.
    #[error("the caller header appears more than once")]
    Repeated,
    /// The caller header is not UTF-8.
    #[error("the caller header is not UTF-8")]
    NotUtf8,
    /// The client certificate names no URI or DNS SAN.
    #[error("the client certificate has no URI or DNS subject alternative name")]
    NoIdentity,
}

/// The caller named by header `name`: `""` when absent.
pub fn from_header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Result<&'a str, CallerError> {
    let mut all = headers.get_all(name).iter();
    let Some(first) = all.next() else {
        return Ok("");
    };
    if all.next().is_some() {
        return Err(CallerError::Repeated);
    }
    std::str::from_utf8(first.as_bytes()).map_err(|_| CallerError::NotUtf8)
}

/// The caller a DER client certificate names: its first URI SAN, else its first DNS SAN.
pub fn of_certificate(der: &[u8]) -> Result<String, CallerError> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Err(CallerError::NoIdentity);
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Err(CallerError::NoIdentity);
    };
    let names = &san.value.general_names;
    let uri = names.iter().find_map(|n| match n {
        GeneralName::URI(u) => Some(*u),
        _ => None,
    });
    let dns = || {
        names.iter().find_map(|n| match n {
            GeneralName::DNSName(d) => Some(*d),
            _ => None,
        })
    };
    uri.or_else(dns)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .ok_or(CallerError::NoIdentity)
}

/// `name`, or when longer than [`MAX_NAME_BYTES`] its first bytes up to there (on a
/// character boundary) followed by [`CUT_MARK`], always longer than any configured name.
pub fn capped(name: &str) -> Cow<'_, str> {
    if name.len() <= MAX_NAME_BYTES {
        return Cow::Borrowed(name);
    }
    let mut end = MAX_NAME_BYTES;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + CUT_MARK.len() + 3);
    out.push_str(&name[..end]);
    out.push_str(CUT_MARK);
    while out.len() <= MAX_NAME_BYTES {
        out.push('.');
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn the_caller_header_once_absent_repeated_or_not_utf8() {
        let name = HeaderName::from_static("rpc-caller");
        let mut h = HeaderMap::new();
        assert_eq!(from_header(&h, &name), Ok(""));
        h.append(&name, HeaderValue::from_static("checkout"));
        assert_eq!(from_header(&h, &name), Ok("checkout"));
        h.append(&name, HeaderValue::from_static("victim"));
        assert_eq!(from_header(&h, &name), Err(CallerError::Repeated));
        let mut h = HeaderMap::new();
        h.insert(&name, HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        assert_eq!(from_header(&h, &name), Ok("café"));
        h.insert(&name, HeaderValue::from_bytes(b"a\xff").unwrap());
        assert_eq!(from_header(&h, &name), Err(CallerError::NotUtf8));
    }

    #[test]
    fn long_names_are_cut_past_every_configured_length() {
        assert_eq!(capped("gateway"), "gateway");
        let exact = "a".repeat(MAX_NAME_BYTES);
        assert_eq!(capped(&exact), exact.as_str());
        let long = "b".repeat(60_000);
        let c = capped(&long);
        assert_eq!(c.len(), MAX_NAME_BYTES + CUT_MARK.len());
        assert!(c.starts_with(&long[..MAX_NAME_BYTES]) && c.ends_with(CUT_MARK));
        // A four-byte character across the limit: cut before it, still too long to configure.
        let wide = format!("{}{}", "c".repeat(MAX_NAME_BYTES - 3), "😀".repeat(10));
        let c = capped(&wide);
        assert!(c.len() > MAX_NAME_BYTES && c.is_char_boundary(MAX_NAME_BYTES - 3));
        assert!(c.starts_with(&"c".repeat(MAX_NAME_BYTES - 3)));
    }

    #[test]
    fn the_certificate_names_its_uri_san_first_then_its_dns_san() {
        use rcgen::{CertificateParams, KeyPair, SanType};
        let der = |sans: Vec<SanType>| {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.subject_alt_names = sans;
            p.self_signed(&KeyPair::generate().unwrap())
                .unwrap()
                .der()
                .to_vec()
        };
        let spiffe = "spiffe://cluster.local/ns/x/sa/y";
        let both = der(vec![
            SanType::DnsName("y.x.svc".try_into().unwrap()),
            SanType::URI(spiffe.try_into().unwrap()),
        ]);
        assert_eq!(of_certificate(&both).unwrap(), spiffe);
        let dns = der(vec![SanType::DnsName("y.x.svc".try_into().unwrap())]);
        assert_eq!(of_certificate(&dns).unwrap(), "y.x.svc");
        assert_eq!(of_certificate(&der(vec![])), Err(CallerError::NoIdentity));
        assert_eq!(of_certificate(b"junk"), Err(CallerError::NoIdentity));
    }
}
