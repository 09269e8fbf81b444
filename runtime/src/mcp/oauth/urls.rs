//! The URLs of the configuration, checked: `https` (or `http` on loopback), a host, no fragment,
//! and nothing a challenge's quoted string cannot hold.

use std::net::IpAddr;

use http::Uri;

use super::error::OAuthError;

/// Whether a URL may carry a query.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Query {
    Allowed,
    Refused,
}

/// `url`, parsed, if it is `https` (or `http` on loopback), has a host, no fragment, and nothing a
/// header's quoted string cannot hold.
pub(super) fn checked_url(what: &'static str, url: &str, query: Query) -> Result<Uri, OAuthError> {
    if !url
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    {
        return Err(url_error(
            what,
            url,
            "it holds a space, a quote, a backslash or a character outside visible ASCII",
        ));
    }
    if url.contains('#') {
        return Err(url_error(what, url, "it has a fragment"));
    }
    let uri: Uri = url
        .parse()
        .map_err(|_| url_error(what, url, "it is not an absolute URL"))?;
    let Some(host) = uri.host() else {
        return Err(url_error(what, url, "it has no host"));
    };
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") if is_loopback(host) => {}
        Some("http") => {
            return Err(url_error(
                what,
                url,
                "it is http: only https is accepted, or http on a loopback address",
            ));
        }
        _ => return Err(url_error(what, url, "it is not an https URL")),
    }
    if query == Query::Refused && uri.query().is_some() {
        return Err(url_error(what, url, "it has a query"));
    }
    Ok(uri)
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

pub(super) fn url_error(what: &'static str, url: &str, reason: &'static str) -> OAuthError {
    OAuthError::InvalidUrl {
        what,
        url: url.to_owned(),
        reason,
    }
}
