//! Talking to the remote: credentials for fetch and push, and remote URLs made safe to show.

use git2::{Cred, CredentialType, RemoteCallbacks};

/// Remote callbacks with credentials: user and password from the URL, else git's credential
/// helpers. Gives up after a few tries instead of looping on bad credentials.
pub(crate) fn callbacks<'a>() -> RemoteCallbacks<'a> {
    let mut cb = RemoteCallbacks::new();
    let mut tries = 0;
    cb.credentials(move |url, username, allowed| {
        tries += 1;
        if tries > 3 {
            return Err(git2::Error::from_str("authentication failed"));
        }
        if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            if let Some((user, pass)) = url_userinfo(url) {
                return Cred::userpass_plaintext(&user, &pass);
            }
            let config = git2::Config::open_default()?;
            return Cred::credential_helper(&config, url, username);
        }
        Cred::default()
    });
    cb
}

/// `user:password` from a URL's authority, if present.
fn url_userinfo(url: &str) -> Option<(String, String)> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split('/').next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (user, pass) = userinfo.split_once(':')?;
    Some((user.to_string(), pass.to_string()))
}

/// A remote URL without its password, for logs and errors.
pub(crate) fn redact(remote: &str) -> String {
    let Some((scheme, rest)) = remote.split_once("://") else {
        return remote.to_string();
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}@{host}/{path}")
        }
        None => remote.to_string(),
    }
}
