//! The signature algorithms a token may be signed with, and the kind of key each needs.

use std::fmt;

/// A signature algorithm a token may be signed with. Asymmetric only: a JWKS holds public keys, and a
/// token MACed with one (HS256 keyed with an RSA key's bytes) is refused by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RS384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RS512,
    /// RSASSA-PSS with SHA-256.
    PS256,
    /// RSASSA-PSS with SHA-384.
    PS384,
    /// RSASSA-PSS with SHA-512.
    PS512,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// ECDSA on P-384 with SHA-384.
    ES384,
    /// EdDSA on Ed25519.
    EdDSA,
}

/// Reads an algorithm by its JOSE name, exactly (`"RS256"`, `"EdDSA"`, ...).
impl std::str::FromStr for Algorithm {
    type Err = String;

    fn from_str(name: &str) -> Result<Algorithm, String> {
        Algorithm::from_name(name).ok_or_else(|| {
            let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
            format!(
                "{name:?} is not an accepted algorithm: one of {}",
                names.join(", ")
            )
        })
    }
}

/// What a key is, as far as which algorithms it verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyKind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl Algorithm {
    const ALL: [Algorithm; 9] = [
        Algorithm::RS256,
        Algorithm::RS384,
        Algorithm::RS512,
        Algorithm::PS256,
        Algorithm::PS384,
        Algorithm::PS512,
        Algorithm::ES256,
        Algorithm::ES384,
        Algorithm::EdDSA,
    ];

    /// Its name in a JOSE header (`"RS256"`, `"EdDSA"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::RS256 => "RS256",
            Algorithm::RS384 => "RS384",
            Algorithm::RS512 => "RS512",
            Algorithm::PS256 => "PS256",
            Algorithm::PS384 => "PS384",
            Algorithm::PS512 => "PS512",
            Algorithm::ES256 => "ES256",
            Algorithm::ES384 => "ES384",
            Algorithm::EdDSA => "EdDSA",
        }
    }

    pub(super) fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|alg| alg.name() == name)
    }

    pub(super) fn jwt(self) -> jsonwebtoken::Algorithm {
        match self {
            Algorithm::RS256 => jsonwebtoken::Algorithm::RS256,
            Algorithm::RS384 => jsonwebtoken::Algorithm::RS384,
            Algorithm::RS512 => jsonwebtoken::Algorithm::RS512,
            Algorithm::PS256 => jsonwebtoken::Algorithm::PS256,
            Algorithm::PS384 => jsonwebtoken::Algorithm::PS384,
            Algorithm::PS512 => jsonwebtoken::Algorithm::PS512,
            Algorithm::ES256 => jsonwebtoken::Algorithm::ES256,
            Algorithm::ES384 => jsonwebtoken::Algorithm::ES384,
            Algorithm::EdDSA => jsonwebtoken::Algorithm::EdDSA,
        }
    }

    /// The algorithm of a token's header; `None` for an HMAC one.
    pub(super) fn from_jwt(alg: jsonwebtoken::Algorithm) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|ours| ours.jwt() == alg)
    }

    pub(super) fn kind(self) -> KeyKind {
        match self {
            Algorithm::ES256 => KeyKind::P256,
            Algorithm::ES384 => KeyKind::P384,
            Algorithm::EdDSA => KeyKind::Ed25519,
            _ => KeyKind::Rsa,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
