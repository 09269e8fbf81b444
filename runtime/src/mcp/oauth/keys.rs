//! The keys of a JWK set: which are kept (public signature keys fit for a pinned algorithm), read
//! into verifying keys.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::algorithms::{Algorithm, KeyKind};
use super::error::JwksError;

/// The smallest RSA modulus accepted, in bits.
const MIN_RSA_BITS: usize = 2048;

/// A key of the JWKS fit for a pinned algorithm.
pub(super) struct Key {
    pub(super) kid: Option<String>,
    pub(super) kind: KeyKind,
    /// The key's own `alg`, when it names one: then the only algorithm it verifies.
    pub(super) alg: Option<Algorithm>,
    pub(super) decoding: jsonwebtoken::DecodingKey,
    /// The SHA-256 of what makes the key (its id, kind, algorithm and parameters), to tell a key
    /// removed or changed by a new load.
    pub(super) id: [u8; 32],
}

impl Key {
    pub(super) fn verifies(&self, alg: Algorithm) -> bool {
        self.kind == alg.kind() && self.alg.is_none_or(|own| own == alg)
    }
}

/// The keys of a JWK set fit for one of `algorithms`, in its order; the others are left out.
pub(super) fn parse_jwks(document: &[u8], algorithms: &[Algorithm]) -> Result<Vec<Key>, JwksError> {
    let set: Value = serde_json::from_slice(document)
        .map_err(|error| JwksError::NotAKeySet(format!("not JSON ({error})")))?;
    let Some(keys) = set.get("keys").and_then(Value::as_array) else {
        return Err(JwksError::NotAKeySet("no `keys` array".to_owned()));
    };
    Ok(keys
        .iter()
        .filter_map(|key| parse_key(key, algorithms))
        .collect())
}

/// One JWK, if it is a public signature key fit for one of `algorithms`.
pub(super) fn parse_key(key: &Value, algorithms: &[Algorithm]) -> Option<Key> {
    let key = key.as_object()?;
    let text = |name: &str| key.get(name).and_then(Value::as_str);
    if key.get("use").is_some() && text("use") != Some("sig") {
        return None;
    }
    if let Some(ops) = key.get("key_ops")
        && !ops
            .as_array()?
            .iter()
            .any(|op| op.as_str() == Some("verify"))
    {
        return None;
    }
    let kind = match (text("kty")?, text("crv")) {
        ("RSA", _) => KeyKind::Rsa,
        ("EC", Some("P-256")) => KeyKind::P256,
        ("EC", Some("P-384")) => KeyKind::P384,
        ("OKP", Some("Ed25519")) => KeyKind::Ed25519,
        // `oct` (a shared secret) among them: never a key to verify with here.
        _ => return None,
    };
    let alg = match key.get("alg") {
        None => None,
        Some(alg) => Some(Algorithm::from_name(alg.as_str()?).filter(|a| a.kind() == kind)?),
    };
    let decoded = |name: &str| URL_SAFE_NO_PAD.decode(text(name)?).ok();
    let (decoding, parameters) = match kind {
        KeyKind::Rsa => {
            let (n, e) = (decoded("n")?, decoded("e")?);
            let n_bits = rsa_bits(&n);
            if n_bits < MIN_RSA_BITS || e.is_empty() || e.len() > 8 {
                return None;
            }
            (
                jsonwebtoken::DecodingKey::from_rsa_raw_components(&n, &e),
                [text("n")?, text("e")?],
            )
        }
        KeyKind::P256 | KeyKind::P384 => {
            let size = if kind == KeyKind::P256 { 32 } else { 48 };
            if decoded("x")?.len() != size || decoded("y")?.len() != size {
                return None;
            }
            let (x, y) = (text("x")?, text("y")?);
            (
                jsonwebtoken::DecodingKey::from_ec_components(x, y).ok()?,
                [x, y],
            )
        }
        KeyKind::Ed25519 => {
            if decoded("x")?.len() != 32 {
                return None;
            }
            let x = text("x")?;
            (
                jsonwebtoken::DecodingKey::from_ed_components(x).ok()?,
                [x, ""],
            )
        }
    };
    // A curve point that is not on its curve is refused when a verifier is made of it: find out now,
    // rather than fail every token of the key. (An RSA key is read only when it verifies.)
    let probe = algorithms
        .iter()
        .find(|pinned| pinned.kind() == kind && alg.is_none_or(|own| own == **pinned))?;
    jsonwebtoken::crypto::verify("", b"", &decoding, probe.jwt()).ok()?;
    let kid = text("kid").map(str::to_owned);
    let mut id = Sha256::new();
    for part in [
        kid.as_deref().unwrap_or(""),
        &format!("{kind:?}"),
        alg.map_or("", Algorithm::name),
        parameters[0],
        parameters[1],
    ] {
        id.update((part.len() as u64).to_be_bytes());
        id.update(part.as_bytes());
    }
    Some(Key {
        kid,
        kind,
        alg,
        decoding,
        id: id.finalize().into(),
    })
}

/// The size of a big-endian modulus, in bits.
pub(super) fn rsa_bits(n: &[u8]) -> usize {
    let n = &n[n.iter().take_while(|b| **b == 0).count()..];
    match n.first() {
        Some(first) => n.len() * 8 - first.leading_zeros() as usize,
        None => 0,
    }
}
