//! Where the JWKS comes from, and its loading: a file, a fixed document, or a URL fetched over
//! HTTPS.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http::header::ACCEPT;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::algorithms::Algorithm;
use super::error::{JwksError, MAX_JWKS_BYTES, OAuthError};
use super::keys::{Key, parse_jwks};
use super::urls::{Query, checked_url};

/// Where the authorization server's keys (a JSON Web Key Set, RFC 7517) come from.
#[derive(Debug, Clone)]
pub struct Jwks(pub(super) JwksSource);

#[derive(Debug, Clone)]
pub(super) enum JwksSource {
    Url(String),
    File(PathBuf),
    Fixed(Bytes),
}

impl Jwks {
    /// Fetched from `url`: `https` (the system's root certificates), or `http` on a loopback address
    /// (`127.0.0.1`, `[::1]`, `localhost`). A redirect is not followed. Loaded again as the
    /// [module docs](super#keys) say.
    pub fn url(url: impl Into<String>) -> Jwks {
        Jwks(JwksSource::Url(url.into()))
    }

    /// Read from the file at `path`. Read again as a URL is fetched again.
    pub fn file(path: impl Into<PathBuf>) -> Jwks {
        Jwks(JwksSource::File(path.into()))
    }

    /// This JSON document, never loaded again.
    pub fn json(document: impl Into<String>) -> Jwks {
        Jwks(JwksSource::Fixed(Bytes::from(document.into())))
    }
}

/// Loads the JWKS from its source.
pub(super) enum Loader {
    Url {
        url: String,
        uri: Uri,
        client: Box<Client<HttpsConnector<HttpConnector>, Empty<Bytes>>>,
        timeout: Duration,
    },
    File(PathBuf),
    Fixed(Bytes),
}

impl Loader {
    pub(super) fn new(source: JwksSource, timeout: Duration) -> Result<Loader, OAuthError> {
        Ok(match source {
            JwksSource::File(path) => Loader::File(path),
            JwksSource::Fixed(document) => Loader::Fixed(document),
            JwksSource::Url(url) => {
                let uri = checked_url("the JWKS", &url, Query::Allowed)?;
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let builder = hyper_rustls::HttpsConnectorBuilder::new();
                let connector = if uri.scheme_str() == Some("https") {
                    builder
                        .with_provider_and_native_roots(provider)
                        .map_err(|error| JwksError::Fetch {
                            url: url.clone(),
                            reason: format!("no root certificates: {error}"),
                        })?
                        .https_only()
                } else {
                    // Plain http to loopback (checked above): no certificate is ever looked at.
                    let config = rustls::ClientConfig::builder_with_provider(provider)
                        .with_safe_default_protocol_versions()
                        .map_err(|error| JwksError::Fetch {
                            url: url.clone(),
                            reason: error.to_string(),
                        })?
                        .with_root_certificates(rustls::RootCertStore::empty())
                        .with_no_client_auth();
                    builder.with_tls_config(config).https_or_http()
                };
                let client = Box::new(
                    Client::builder(TokioExecutor::new()).build(connector.enable_http1().build()),
                );
                Loader::Url {
                    url,
                    uri,
                    client,
                    timeout,
                }
            }
        })
    }

    pub(super) fn refreshable(&self) -> bool {
        !matches!(self, Loader::Fixed(_))
    }

    pub(super) async fn load(&self, algorithms: &[Algorithm]) -> Result<Vec<Key>, JwksError> {
        let document = match self {
            Loader::Fixed(document) => document.clone(),
            // A key file is small: read in place rather than on a thread of its own.
            Loader::File(path) => {
                std::fs::read(path)
                    .map(Bytes::from)
                    .map_err(|error| JwksError::Read {
                        path: path.clone(),
                        error,
                    })?
            }
            Loader::Url {
                url,
                uri,
                client,
                timeout,
            } => tokio::time::timeout(*timeout, fetch(url, uri, client))
                .await
                .map_err(|_| JwksError::Fetch {
                    url: url.clone(),
                    reason: format!("no answer within {timeout:?}"),
                })??,
        };
        if document.len() > MAX_JWKS_BYTES {
            return Err(JwksError::TooLarge);
        }
        parse_jwks(&document, algorithms)
    }
}

async fn fetch(
    url: &str,
    uri: &Uri,
    client: &Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
) -> Result<Bytes, JwksError> {
    let failed = |reason: String| JwksError::Fetch {
        url: url.to_owned(),
        reason,
    };
    let request = http::Request::get(uri.clone())
        .header(ACCEPT, "application/json")
        .body(Empty::new())
        .map_err(|error| failed(error.to_string()))?;
    let response = client
        .request(request)
        .await
        .map_err(|error| failed(error.to_string()))?;
    if !response.status().is_success() {
        return Err(JwksError::Status {
            url: url.to_owned(),
            status: response.status().as_u16(),
        });
    }
    match Limited::new(response.into_body(), MAX_JWKS_BYTES)
        .collect()
        .await
    {
        Ok(body) => Ok(body.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(JwksError::TooLarge),
        Err(error) => Err(failed(error.to_string())),
    }
}
