//! TLS for every PostgreSQL connection, with rustls (ring): the URL's `sslmode`, `sslrootcert`,
//! `sslcert` and `sslkey`, read as libpq reads them (tokio-postgres itself knows `sslmode` only as
//! `disable`, `prefer` and `require`), and the handshake's failures told as sentences that name their
//! cause.
//!
//! | `sslmode` | encrypted | the server's certificate |
//! | --- | --- | --- |
//! | `disable` | never | not asked for |
//! | `prefer` (unset) | when the server offers TLS, else in the clear | not checked |
//! | `require` | always: a server without TLS is refused | not checked, unless `sslrootcert` names a file: then as `verify-ca` |
//! | `verify-ca` | always | signed by a root of `sslrootcert` (or the system's), valid now; its names not checked |
//! | `verify-full` | always | as `verify-ca`, and it names the host connected to |

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::Config;
use tokio_postgres::config::{Host, SslMode as WireMode};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::approval::store::StoreError;

/// The URL's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow is not supported: use prefer (TLS when the server offers \
                            it) or a stronger mode"
                        .into(),
                );
            }
            other => {
                return Err(format!(
                    "sslmode={other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where the roots that vouch for the server's certificate come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// `sslrootcert=PATH`: the certificates of a PEM file.
    File(String),
    /// `sslrootcert=system`, or no `sslrootcert`: the system's store (`SSL_CERT_FILE` and
    /// `SSL_CERT_DIR` where set).
    System,
}

impl fmt::Display for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Roots::File(path) => write!(f, "sslrootcert {path}"),
            Roots::System => f.write_str("the system's roots"),
        }
    }
}

/// The TLS parameters of a URL, taken out of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Params {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    sslcert: Option<String>,
    sslkey: Option<String>,
}

impl Params {
    /// Takes `key`'s `value` if it is one of ours: `false` for any other key.
    fn take(&mut self, key: &str, value: String) -> bool {
        let slot = match key {
            "sslmode" => &mut self.sslmode,
            "sslrootcert" => &mut self.sslrootcert,
            "sslcert" => &mut self.sslcert,
            "sslkey" => &mut self.sslkey,
            _ => return false,
        };
        *slot = Some(value);
        true
    }
}

/// A connection's TLS: what tokio-postgres is given, and what the messages of its failures say.
#[derive(Clone)]
pub(super) struct Tls {
    /// The mode in force: `require` with a root file is `verify-ca`.
    pub(super) mode: SslMode,
    /// The mode as the URL named it, for messages.
    asked: SslMode,
    /// The roots checked against, where the mode checks the certificate.
    roots: Option<Roots>,
    pub(super) connector: MakeRustlsConnect,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("mode", &self.mode)
            .field("roots", &self.roots)
            .finish_non_exhaustive()
    }
}

/// The client's configuration of `url` (a `postgres://` URL or key-value pairs) and its TLS. Errors
/// name the parameter at fault.
pub(super) fn configure(url: &str) -> Result<(Config, Tls), StoreError> {
    let invalid = |why: String| StoreError::Unavailable(format!("not configured: {why}"));
    let (rest, params) = split(url).map_err(invalid)?;
    let mut config = Config::from_str(&rest)
        .map_err(|e| StoreError::Unavailable(format!("not a PostgreSQL address: {e}")))?;
    let tls = tls(&params).map_err(invalid)?;
    config.ssl_mode(match tls.mode {
        SslMode::Disable => WireMode::Disable,
        SslMode::Prefer => WireMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
    });
    Ok((config, tls))
}

/// The TLS the parameters ask for, the files they name read.
fn tls(params: &Params) -> Result<Tls, String> {
    let system = params.sslrootcert.as_deref() == Some("system");
    let mode = match params.sslmode.as_deref() {
        Some(mode) => SslMode::parse(mode)?,
        // As libpq: the system's roots vouch for host names, so they are checked.
        None if system => SslMode::VerifyFull,
        None => SslMode::Prefer,
    };
    if system && mode != SslMode::VerifyFull {
        return Err(format!(
            "sslrootcert=system needs sslmode=verify-full, not {}: the system's roots vouch for host \
             names, so the name must be checked",
            mode.as_str()
        ));
    }
    let roots = match (&params.sslrootcert, mode) {
        (_, SslMode::Disable | SslMode::Prefer) => None,
        (None, SslMode::Require) => None,
        (Some(path), _) if path != "system" => Some(Roots::File(path.clone())),
        _ => Some(Roots::System),
    };
    // `require` with a root file checks the chain, as libpq does.
    let asked = mode;
    let mode = match (mode, &roots) {
        (SslMode::Require, Some(_)) => SslMode::VerifyCa,
        (mode, _) => mode,
    };
    let client = match (&params.sslcert, &params.sslkey) {
        (None, None) => None,
        (Some(_), None) => {
            return Err("sslcert names a client certificate, and no sslkey names its key".into());
        }
        (None, Some(_)) => {
            return Err("sslkey names a client key, and no sslcert names its certificate".into());
        }
        (Some(cert), Some(key)) => Some(client_identity(cert, key)?),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match (mode, &roots) {
        (SslMode::VerifyFull, Some(roots)) => builder.with_root_certificates(root_store(roots)?),
        (SslMode::VerifyCa, Some(roots)) => {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly {
                    roots: root_store(roots)?,
                    provider,
                }))
        }
        _ => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked { provider })),
    };
    let config = match client {
        Some((certs, key)) => builder.with_client_auth_cert(certs, key).map_err(|e| {
            format!(
                "sslkey {} is not the key of sslcert {}: {e}",
                params.sslkey.as_deref().unwrap_or_default(),
                params.sslcert.as_deref().unwrap_or_default()
            )
        })?,
        None => builder.with_no_client_auth(),
    };
    Ok(Tls {
        mode,
        asked,
        roots,
        connector: MakeRustlsConnect::new(config),
    })
}

fn root_store(roots: &Roots) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path) => {
            for cert in certificates(path, "sslrootcert")? {
                store.add(cert).map_err(|e| {
                    format!("sslrootcert {path} holds a certificate rustls refuses: {e}")
                })?;
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(
                    "no sslrootcert is given and the system has no root certificates: name the \
                     server's certificate authority with sslrootcert=FILE"
                        .into(),
                );
            }
        }
    }
    Ok(store)
}

/// The certificates of the PEM file at `path`, named `parameter` in errors.
fn certificates(path: &str, parameter: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let read = |e: &dyn fmt::Display| format!("{parameter} {path} cannot be read: {e}");
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| read(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read(&e))?;
    if certs.is_empty() {
        return Err(format!("{parameter} {path} holds no PEM certificate"));
    }
    Ok(certs)
}

fn client_identity(
    cert: &str,
    key: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let certs = certificates(cert, "sslcert")?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("sslkey {key} holds no PEM private key it can read: {e}"))?;
    Ok((certs, key))
}

/// Splits `url` into what tokio-postgres parses and the TLS parameters it does not know.
fn split(url: &str) -> Result<(String, Params), String> {
    let mut params = Params::default();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((address, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), params));
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if !params.take(&decode(key)?, decode(value)?) {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            address.to_owned()
        } else {
            format!("{address}?{}", kept.join("&"))
        };
        return Ok((rest, params));
    }
    let mut kept = String::new();
    for (key, value) in key_values(url)? {
        if !params.take(&key, value.clone()) {
            let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
            kept.push_str(&format!("{key}='{quoted}' "));
        }
    }
    Ok((kept.trim_end().to_owned(), params))
}

/// A URL's percent-encoded text, decoded.
fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| format!("the URL's query has a bad percent escape in {text:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("the URL's query {text:?} is not UTF-8"))
}

/// The pairs of a key-value connection string (`host=db port=5432 sslrootcert='/a b/ca.pem'`): values
/// quoted with `'`, `\` escaping the next character, as libpq reads them.
fn key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("the connection string has no `=` after {key:?}"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => return Err(format!("the value of {key:?} has no closing quote")),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

/// What a failed connection means, in a sentence: the TLS handshake's causes named, the rest as the
/// client says it. `None` when the failure is not TLS's.
pub(super) fn failure(error: &tokio_postgres::Error, config: &Config, tls: &Tls) -> Option<String> {
    let cause = std::error::Error::source(error)?;
    let mode = tls.asked.as_str();
    if cause.to_string() == "server does not support TLS" {
        return Some(format!(
            "the server at {} does not offer TLS, and sslmode={mode} needs it",
            hosts(config)
        ));
    }
    let rustls = cause
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())?;
    let roots = tls
        .roots
        .as_ref()
        .map_or(Cow::Borrowed("no roots"), |r| Cow::Owned(r.to_string()));
    Some(match rustls {
        rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected,
            presented,
        }) => format!(
            "the server's certificate is not valid for the host name {} (it names {}): \
             sslmode={mode} checks that the certificate names the host connected to",
            expected.to_str(),
            names(presented)
        ),
        rustls::Error::InvalidCertificate(CertificateError::NotValidForName) => format!(
            "the server's certificate is not valid for the host name {}: sslmode={mode} checks \
             that the certificate names the host connected to",
            hosts(config)
        ),
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "the server's certificate is not signed by a certificate authority of {roots} \
             (sslmode={mode})"
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => format!("the server's certificate has expired (sslmode={mode})"),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => format!("the server's certificate is not valid yet (sslmode={mode})"),
        other => format!(
            "the TLS handshake with {} failed (sslmode={mode}): {other}",
            hosts(config)
        ),
    })
}

/// The hosts of `config`, as a message names them.
fn hosts(config: &Config) -> String {
    let names: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    if names.is_empty() {
        "localhost".into()
    } else {
        names.join(", ")
    }
}

/// The names a certificate presents (`DnsName("db.internal")`), as a person reads them.
fn names(presented: &[String]) -> String {
    if presented.is_empty() {
        return "no name".into();
    }
    presented
        .iter()
        .map(|name| {
            name.strip_prefix("DnsName(\"")
                .and_then(|rest| rest.strip_suffix("\")"))
                .or_else(|| {
                    name.strip_prefix("IpAddress(")
                        .and_then(|rest| rest.strip_suffix(')'))
                })
                .unwrap_or(name)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `verify-ca`: the chain to a root, checked as `verify-full` checks it, the names left out.
#[derive(Debug)]
struct ChainOnly {
    roots: RootCertStore,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `prefer` and `require` without a root file, as libpq: encrypted, the certificate not checked (the
/// handshake's signatures still are, by the certificate's key).
#[derive(Debug)]
struct Unchecked {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(url: &str) -> (String, Params) {
        split(url).unwrap()
    }

    #[test]
    fn a_urls_tls_parameters_are_taken_out_and_the_rest_kept() {
        let (rest, taken) = params(
            "postgres://u@db:5432/app?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&connect_timeout=3",
        );
        assert_eq!(
            rest,
            "postgres://u@db:5432/app?application_name=x&connect_timeout=3"
        );
        assert_eq!(taken.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(taken.sslrootcert.as_deref(), Some("/etc/ca.pem"));
        let (rest, taken) = params("postgresql://u@db/app?sslmode=require");
        assert_eq!(rest, "postgresql://u@db/app");
        assert_eq!(taken.sslmode.as_deref(), Some("require"));
        assert_eq!(params("postgres://u@db/app").0, "postgres://u@db/app");
    }

    #[test]
    fn key_value_strings_keep_their_quoting() {
        let (rest, taken) = params(
            r"host=/run/postgresql dbname = 'my db' sslmode=verify-ca sslcert='/a b/c\'s.pem' sslkey=k\ ey",
        );
        assert_eq!(rest, "host='/run/postgresql' dbname='my db'");
        assert_eq!(taken.sslmode.as_deref(), Some("verify-ca"));
        assert_eq!(taken.sslcert.as_deref(), Some("/a b/c's.pem"));
        assert_eq!(taken.sslkey.as_deref(), Some("k ey"));
        let config = Config::from_str(&rest).unwrap();
        assert_eq!(config.get_dbname(), Some("my db"));
        assert!(split("host=db sslmode='verify-full").is_err());
        assert!(split("host db").is_err());
    }

    fn refused(url: &str) -> String {
        match configure(url) {
            Ok(_) => panic!("{url} configured"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn every_mode_is_read_and_the_refused_ones_are_named() {
        for (given, mode) in [
            ("disable", SslMode::Disable),
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
        ] {
            let (config, tls) = configure(&format!("postgres://u@db/app?sslmode={given}")).unwrap();
            assert_eq!(tls.mode, mode);
            assert_eq!(
                config.get_ssl_mode(),
                match mode {
                    SslMode::Disable => WireMode::Disable,
                    SslMode::Prefer => WireMode::Prefer,
                    _ => WireMode::Require,
                }
            );
        }
        let (_, tls) = configure("postgres://u@db/app").unwrap();
        assert_eq!(tls.mode, SslMode::Prefer);
        assert_eq!(
            refused("postgres://u@db/app?sslmode=allow"),
            "unavailable: not configured: sslmode=allow is not supported: use prefer (TLS when the \
             server offers it) or a stronger mode"
        );
        assert_eq!(
            refused("postgres://u@db/app?sslmode=verify"),
            "unavailable: not configured: sslmode=\"verify\" is not one of disable, prefer, require, \
             verify-ca, verify-full"
        );
        assert_eq!(
            refused("postgres://u@db/app?sslmode=require&sslrootcert=system"),
            "unavailable: not configured: sslrootcert=system needs sslmode=verify-full, not require: \
             the system's roots vouch for host names, so the name must be checked"
        );
    }

    #[test]
    fn files_that_cannot_serve_are_named() {
        let dir = std::env::temp_dir().join(format!("toolgate-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let empty = empty.display().to_string();
        assert_eq!(
            refused(&format!("host=db sslmode=verify-full sslrootcert={empty}")),
            format!("unavailable: not configured: sslrootcert {empty} holds no PEM certificate")
        );
        assert!(
            refused("host=db sslmode=verify-ca sslrootcert=/nonexistent/ca.pem").starts_with(
                "unavailable: not configured: sslrootcert /nonexistent/ca.pem cannot be read: "
            )
        );
        assert_eq!(
            refused("host=db sslcert=/c.pem"),
            "unavailable: not configured: sslcert names a client certificate, and no sslkey names \
             its key"
        );
        assert_eq!(
            refused("host=db sslkey=/k.pem"),
            "unavailable: not configured: sslkey names a client key, and no sslcert names its \
             certificate"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn system_roots_mean_verify_full_and_require_alone_checks_nothing() {
        let (_, tls) = configure("host=db sslrootcert=system").expect("the system's roots");
        assert_eq!(
            (tls.mode, tls.roots),
            (SslMode::VerifyFull, Some(Roots::System))
        );
        let (_, tls) = configure("host=db sslmode=verify-ca").expect("the system's roots");
        assert_eq!(
            (tls.mode, tls.roots),
            (SslMode::VerifyCa, Some(Roots::System))
        );
        let (_, tls) = configure("host=db sslmode=require").unwrap();
        assert_eq!(
            (tls.mode, tls.asked, tls.roots),
            (SslMode::Require, SslMode::Require, None)
        );
    }

    #[test]
    fn presented_names_are_shown_plainly() {
        assert_eq!(
            names(&[
                "DnsName(\"localhost\")".into(),
                "IpAddress(10.0.0.1)".into()
            ]),
            "localhost, 10.0.0.1"
        );
        assert_eq!(names(&[]), "no name");
    }
}
