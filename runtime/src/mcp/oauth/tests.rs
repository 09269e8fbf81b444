//! The verifier's parts: claims, URLs, keys, the cache, challenges, the metadata, tokens refused.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use super::algorithms::Algorithm;
use super::builder::{OAuthBuilder, valid_scope};
#[cfg(feature = "mcp-http")]
use super::cache::{Cache, Entry, Outcome};
#[cfg(feature = "mcp-http")]
use super::challenge::Challenge;
use super::claims::Claims;
use super::error::{JwksError, OAuthError};
use super::jwks::Jwks;
use super::keys::{parse_jwks, parse_key, rsa_bits};
use super::urls::{Query, checked_url};
#[cfg(feature = "mcp-http")]
use super::verify::METADATA_PATH;
use super::verify::{Failure, OAuth};
#[cfg(feature = "mcp-http")]
use crate::Mode;
#[cfg(feature = "mcp-http")]
use crate::gate::Gate;
#[cfg(feature = "mcp-http")]
use crate::mcp::http::{Principal, TokenVerifier};

fn claims(value: Value) -> Claims {
    let Value::Object(map) = value else {
        panic!("claims are an object")
    };
    Claims {
        map,
        several_issuers: false,
    }
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Public points, not keys of anyone's: Ed25519's base point, and P-256's generator.
const ED25519_BASE: [u8; 32] = [
    0x58, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66,
    0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66,
];
const P256_X: [u8; 32] = [
    0x6b, 0x17, 0xd1, 0xf2, 0xe1, 0x2c, 0x42, 0x47, 0xf8, 0xbc, 0xe6, 0xe5, 0x63, 0xa4, 0x40, 0xf2,
    0x77, 0x03, 0x7d, 0x81, 0x2d, 0xeb, 0x33, 0xa0, 0xf4, 0xa1, 0x39, 0x45, 0xd8, 0x98, 0xc2, 0x96,
];
const P256_Y: [u8; 32] = [
    0x4f, 0xe3, 0x42, 0xe2, 0xfe, 0x1a, 0x7f, 0x9b, 0x8e, 0xe7, 0xeb, 0x4a, 0x7c, 0x0f, 0x9e, 0x16,
    0x2b, 0xce, 0x33, 0x57, 0x6b, 0x31, 0x5e, 0xce, 0xcb, 0xb6, 0x40, 0x68, 0x37, 0xbf, 0x51, 0xf5,
];

#[test]
fn scopes_are_read_from_scope_and_scp_each_once() {
    let both = claims(serde_json::json!({"scope": "a b  a", "scp": ["c", "a", 7]}));
    assert_eq!(both.scopes(), ["a", "b", "c"]);
    assert!(both.has_scope("b"));
    assert!(!both.has_scope("a b"));
    assert!(!both.has_scope(""));
    let spaced = claims(serde_json::json!({"scp": "x y"}));
    assert_eq!(spaced.scopes(), ["x", "y"]);
    let none = claims(serde_json::json!({"scope": 3}));
    assert!(none.scopes().is_empty());
    let client = claims(serde_json::json!({"azp": "cli", "sub": "s", "exp": 12.9}));
    assert_eq!(client.client_id(), Some("cli"));
    assert_eq!(client.subject(), Some("s"));
    assert_eq!(client.expires(), Some(12));
}

#[test]
fn urls_are_https_or_http_on_loopback_with_a_host_and_no_fragment() {
    for ok in [
        "https://mcp.example.com/mcp",
        "https://mcp.example.com:8443",
        "http://127.0.0.1:8080/mcp",
        "http://127.9.0.1/jwks",
        "http://[::1]:3000/mcp",
        "http://localhost/mcp",
    ] {
        assert!(checked_url("it", ok, Query::Refused).is_ok(), "{ok}");
    }
    for (bad, why) in [
        ("http://mcp.example.com/mcp", "only https"),
        ("http://10.0.0.1/mcp", "only https"),
        ("ftp://mcp.example.com/mcp", "not an https URL"),
        ("https://mcp.example.com/mcp#top", "fragment"),
        ("https://mcp.example.com/mcp?x=1", "query"),
        ("/mcp", "no host"),
        ("https://mcp.example.com/a\"b", "quote"),
        ("https://mcp.example.com/a b", "space"),
        ("https://mcp.exämple.com/", "visible ASCII"),
    ] {
        let error = checked_url("it", bad, Query::Refused).expect_err(bad);
        assert!(error.to_string().contains(why), "{bad}: {error}");
    }
    assert!(checked_url("it", "https://a.example/jwks?v=2", Query::Allowed).is_ok());
    assert!(valid_scope("tickets:read"));
    for bad in ["", "a b", "a\"b", "a\\b", "a\u{7}"] {
        assert!(!valid_scope(bad), "{bad:?}");
    }
}

#[test]
fn only_public_signature_keys_fit_for_a_pinned_algorithm_are_kept() {
    let rsa_2048 = {
        let mut n = vec![0xc5; 256];
        n[255] |= 1;
        b64(&n)
    };
    let rsa_1024 = b64(&[0xc5; 128]);
    let e = b64(&[1, 0, 1]);
    let (x32, y32, x48) = (b64(&P256_X), b64(&P256_Y), b64(&[7; 48]));
    let ed = b64(&ED25519_BASE);
    let set = serde_json::json!({"keys": [
        {"kid": "rsa", "kty": "RSA", "n": rsa_2048, "e": e, "use": "sig"},
        {"kid": "rsa-alg", "kty": "RSA", "n": rsa_2048, "e": e, "alg": "PS256"},
        {"kid": "rsa-small", "kty": "RSA", "n": rsa_1024, "e": e},
        {"kid": "rsa-enc", "kty": "RSA", "n": rsa_2048, "e": e, "use": "enc"},
        {"kid": "rsa-ops", "kty": "RSA", "n": rsa_2048, "e": e, "key_ops": ["encrypt"]},
        {"kid": "rsa-verify", "kty": "RSA", "n": rsa_2048, "e": e, "key_ops": ["verify"]},
        {"kid": "rsa-hs", "kty": "RSA", "n": rsa_2048, "e": e, "alg": "HS256"},
        {"kid": "rsa-none", "kty": "RSA", "n": rsa_2048, "e": e, "alg": "none"},
        {"kid": "ec", "kty": "EC", "crv": "P-256", "x": x32, "y": y32},
        {"kid": "ec-short", "kty": "EC", "crv": "P-256", "x": x32, "y": b64(&[9; 31])},
        {"kid": "ec-384-as-256", "kty": "EC", "crv": "P-384", "x": x48, "y": x48, "alg": "ES256"},
        {"kid": "ec-rs", "kty": "EC", "crv": "P-256", "x": x32, "y": y32, "alg": "RS256"},
        {"kid": "ed", "kty": "OKP", "crv": "Ed25519", "x": ed},
        {"kid": "ec-off-curve", "kty": "EC", "crv": "P-256", "x": x32, "y": x32},
        {"kid": "ed-short", "kty": "OKP", "crv": "Ed25519", "x": b64(&[7; 16])},
        {"kid": "ed-448", "kty": "OKP", "crv": "Ed448", "x": b64(&[7; 57])},
        {"kid": "hmac", "kty": "oct", "k": b64(b"secret")},
        {"kid": "odd", "kty": "XYZ"},
        "not a key",
    ]});
    let kept = |algorithms: &[Algorithm]| -> Vec<String> {
        parse_jwks(set.to_string().as_bytes(), algorithms)
            .expect("a key set")
            .into_iter()
            .map(|key| key.kid.expect("a kid"))
            .collect()
    };
    assert_eq!(
        kept(&[Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA]),
        ["rsa", "rsa-verify", "ec", "ed"]
    );
    assert_eq!(kept(&[Algorithm::PS256]), ["rsa", "rsa-alg", "rsa-verify"]);
    assert!(kept(&[Algorithm::ES384]).is_empty());
    let ed = parse_jwks(set.to_string().as_bytes(), &[Algorithm::EdDSA]).expect("a key set");
    assert!(ed[0].verifies(Algorithm::EdDSA) && !ed[0].verifies(Algorithm::ES256));
    for bad in ["[]", "{}", "{\"keys\": 1}", "nope"] {
        assert!(
            matches!(
                parse_jwks(bad.as_bytes(), &[Algorithm::RS256]),
                Err(JwksError::NotAKeySet(_))
            ),
            "{bad}"
        );
    }
}

#[test]
fn a_key_changed_under_its_kid_has_another_id() {
    // The base point and its negation (the sign bit flipped): two valid keys.
    let key = |sign: u8| {
        let mut point = ED25519_BASE;
        point[31] ^= sign;
        let jwk = serde_json::json!({"kid": "k", "kty": "OKP", "crv": "Ed25519", "x": b64(&point)});
        parse_key(&jwk, &[Algorithm::EdDSA]).expect("a key").id
    };
    assert_eq!(key(0), key(0));
    assert_ne!(key(0), key(0x80));
}

#[test]
fn rsa_moduli_are_measured_in_bits() {
    assert_eq!(rsa_bits(&[]), 0);
    assert_eq!(rsa_bits(&[0, 0]), 0);
    assert_eq!(rsa_bits(&[0, 1]), 1);
    assert_eq!(rsa_bits(&[0x80, 0]), 16);
    assert_eq!(rsa_bits(&[0, 0x7f, 0]), 15);
}

#[cfg(feature = "mcp-http")]
fn principal(name: &str) -> Principal {
    Principal::new(name, Gate::new(Mode::Shadow).expect("a gate"))
}

#[cfg(feature = "mcp-http")]
#[test]
fn the_cache_serves_a_token_until_its_exp_in_its_generation_and_stays_bounded() {
    let cache = Cache::new(2);
    let entry = |name: &str, expires, generation| Entry {
        outcome: Ok(principal(name)),
        expires,
        generation,
    };
    let name =
        |outcome: Option<Outcome>| outcome.map(|o| o.expect("a principal").name().to_owned());
    cache.put([1; 32], entry("a", 100, 0), 50);
    assert_eq!(name(cache.get(&[1; 32], 99, 0)).as_deref(), Some("a"));
    assert_eq!(cache.get(&[2; 32], 99, 0).map(|_| ()), None);
    assert!(cache.get(&[1; 32], 100, 0).is_none(), "served at its exp");
    cache.put([1; 32], entry("a", 100, 0), 50);
    assert!(
        cache.get(&[1; 32], 60, 1).is_none(),
        "served in a later generation"
    );
    // Past its exp already: not kept.
    cache.put([3; 32], entry("c", 40, 0), 50);
    assert!(cache.get(&[3; 32], 10, 0).is_none());
    // Full: the expired go first, then one entry, never past the bound.
    cache.put([4; 32], entry("d", 70, 0), 50);
    cache.put([5; 32], entry("e", 200, 0), 50);
    cache.put([6; 32], entry("f", 200, 0), 80);
    assert!(cache.lock().len() <= 2);
    assert_eq!(name(cache.get(&[6; 32], 90, 0)).as_deref(), Some("f"));
    let none = Cache::new(0);
    none.put([1; 32], entry("a", 100, 0), 50);
    assert!(none.get(&[1; 32], 60, 0).is_none());
}

#[cfg(feature = "mcp-http")]
#[test]
fn challenges_are_written_as_rfc_6750_has_them() {
    let challenge = Challenge {
        metadata_url: "https://mcp.example.com/.well-known/oauth-protected-resource/mcp".into(),
        scope: "tickets:read files:read".into(),
    };
    let missing = challenge.missing();
    assert_eq!(missing.status(), http::StatusCode::UNAUTHORIZED);
    assert_eq!(
        missing.challenge(),
        "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\", \
         scope=\"tickets:read files:read\""
    );
    let invalid = challenge.invalid("the token has expired");
    assert_eq!(invalid.status(), http::StatusCode::UNAUTHORIZED);
    assert!(
        invalid
            .challenge()
            .to_str()
            .expect("ASCII")
            .starts_with("Bearer error=\"invalid_token\", error_description=\"the token has expired\", resource_metadata=")
    );
    let insufficient = challenge.insufficient();
    assert_eq!(insufficient.status(), http::StatusCode::FORBIDDEN);
    assert!(
        insufficient
            .challenge()
            .to_str()
            .expect("ASCII")
            .contains("error=\"insufficient_scope\"")
    );
    let unscoped = Challenge {
        metadata_url: "https://a.example/.well-known/oauth-protected-resource".into(),
        scope: String::new(),
    };
    assert_eq!(
        unscoped.missing().challenge(),
        "Bearer resource_metadata=\"https://a.example/.well-known/oauth-protected-resource\""
    );
}

fn built(builder: OAuthBuilder) -> Result<OAuth, OAuthError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(builder.build())
}

fn ed_jwks() -> Jwks {
    Jwks::json(
        serde_json::json!({"keys": [{"kid": "k", "kty": "OKP", "crv": "Ed25519", "x": b64(&ED25519_BASE)}]})
            .to_string(),
    )
}

fn desk(resource: &str) -> OAuthBuilder {
    let builder = OAuth::builder(resource)
        .authorization_server("https://auth.example.com")
        .jwks(ed_jwks())
        .algorithms([Algorithm::EdDSA]);
    #[cfg(feature = "mcp-http")]
    let builder = builder.scope(
        "tickets:read",
        "reader",
        Gate::new(Mode::Shadow).expect("a gate"),
    );
    builder
}

#[cfg(feature = "mcp-http")]
#[test]
fn the_metadata_is_served_at_the_root_and_at_the_resources_path() {
    let oauth = built(desk("https://mcp.example.com/tenant/mcp")).expect("a verifier");
    assert_eq!(
        oauth.metadata_url(),
        "https://mcp.example.com/.well-known/oauth-protected-resource/tenant/mcp"
    );
    for path in [
        METADATA_PATH,
        "/.well-known/oauth-protected-resource/tenant/mcp",
    ] {
        assert_eq!(
            oauth.metadata(path).as_deref(),
            Some(oauth.metadata_document())
        );
    }
    for path in [
        "/",
        "/tenant/mcp",
        "/.well-known/oauth-protected-resource/tenant",
        "/.well-known/oauth-protected-resource/",
    ] {
        assert!(oauth.metadata(path).is_none(), "{path}");
    }
    let document: Value = serde_json::from_slice(oauth.metadata_document()).expect("JSON");
    assert_eq!(
        document,
        serde_json::json!({
            "resource": "https://mcp.example.com/tenant/mcp",
            "authorization_servers": ["https://auth.example.com"],
            "scopes_supported": ["tickets:read"],
            "bearer_methods_supported": ["header"],
        })
    );
    // A resource at the root has its metadata at the well-known path itself.
    let root = built(desk("https://mcp.example.com/")).expect("a verifier");
    assert_eq!(
        root.metadata_url(),
        "https://mcp.example.com/.well-known/oauth-protected-resource"
    );
    // One scope rule: the challenge names it.
    assert_eq!(
        root.challenge().challenge(),
        "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource\", \
         scope=\"tickets:read\""
    );
}

#[cfg(feature = "mcp-http")]
#[test]
fn a_configuration_that_cannot_work_is_refused_with_what_is_wrong() {
    let message = |builder: OAuthBuilder| built(builder).expect_err("refused").to_string();
    assert!(
        message(desk("https://a.example").challenge_scope(["a b"])).contains("the scope `a b`")
    );
    assert!(
        message(desk("https://a.example").resource_documentation("http://docs.example"))
            .contains("the resource documentation")
    );
    assert!(
        message(desk("https://a.example").authorization_server("https://b.example#x"))
            .contains("an authorization server")
    );
    assert!(message(desk("https://a.example").resource_name("desk\n")).contains("control"));
    let no_rule = OAuth::builder("https://a.example")
        .authorization_server("https://auth.example.com")
        .jwks(ed_jwks())
        .algorithms([Algorithm::EdDSA]);
    assert!(message(no_rule).starts_with("no rule"));
    let no_jwks = OAuth::builder("https://a.example")
        .authorization_server("https://auth.example.com")
        .scope("s", "n", Gate::new(Mode::Shadow).expect("a gate"));
    assert!(message(no_jwks).starts_with("no JWKS"));
    // RS256, the default, fits no key of an Ed25519 set.
    let default_alg = OAuth::builder("https://a.example")
        .authorization_server("https://auth.example.com")
        .jwks(ed_jwks())
        .scope("s", "n", Gate::new(Mode::Shadow).expect("a gate"));
    assert!(message(default_alg).contains("no key is fit"));
}

#[test]
fn tokens_that_are_no_jwt_of_a_pinned_algorithm_fail_before_any_key() {
    let oauth = built(desk("https://a.example")).expect("a verifier");
    let keys = oauth.inner.keys.current();
    let part = |value: Value| b64(value.to_string().as_bytes());
    let claims = part(serde_json::json!({"sub": "s"}));
    for (token, failure) in [
        (
            String::new(),
            "the token is not a signed JWT of an accepted algorithm",
        ),
        (
            "a.b".to_owned(),
            "the token is not a signed JWT of an accepted algorithm",
        ),
        (
            format!("{}.{claims}.", part(serde_json::json!({"alg": "none"}))),
            "the token is not a signed JWT of an accepted algorithm",
        ),
        (
            format!(
                "{}.{claims}.c2ln",
                part(serde_json::json!({"alg": "HS256", "kid": "k"}))
            ),
            "the token's algorithm is not accepted",
        ),
        (
            format!(
                "{}.{claims}.c2ln",
                part(serde_json::json!({"alg": "RS256", "kid": "k"}))
            ),
            "the token's algorithm is not accepted",
        ),
        (
            format!(
                "{}.{claims}.c2ln",
                part(serde_json::json!({"alg": "EdDSA", "kid": "k", "crit": ["exp"]}))
            ),
            "the token has critical header parameters this server does not understand",
        ),
    ] {
        assert_eq!(
            oauth.inner.check(&token, &keys).map(|_| ()),
            Err(Failure::Invalid(failure)),
            "{token}"
        );
    }
    let unknown = format!(
        "{}.{claims}.c2ln",
        part(serde_json::json!({"alg": "EdDSA", "kid": "other"}))
    );
    assert_eq!(
        oauth.inner.check(&unknown, &keys).map(|_| ()),
        Err(Failure::UnknownKey)
    );
    // No kid, one key fits: that key is asked, and the signature does not verify.
    let unnamed = format!(
        "{}.{claims}.c2ln",
        part(serde_json::json!({"alg": "EdDSA"}))
    );
    assert_eq!(
        oauth.inner.check(&unnamed, &keys).map(|_| ()),
        Err(Failure::Invalid("the token's signature does not verify"))
    );
}

// RFC 8032's first Ed25519 test key (§7.1): its secret and its public key.
const RFC8032_SECRET: [u8; 32] = [
    0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c, 0xc4,
    0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60,
];
const RFC8032_PUBLIC: [u8; 32] = [
    0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64, 0x07, 0x3a,
    0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68, 0xf7, 0x07, 0x51, 0x1a,
];

// What the console asks of the verifier, with the MCP server built or not (`console` alone
// builds it without rules): the claims of a token its key signed, and none of one altered after.
#[test]
fn a_token_signed_by_a_key_of_the_set_gives_its_claims_and_an_altered_one_none() {
    let resource = "https://console.example.com/";
    let jwks = serde_json::json!({"keys": [
        {"kid": "k", "kty": "OKP", "crv": "Ed25519", "x": b64(&RFC8032_PUBLIC)},
    ]});
    let oauth = built(desk(resource).jwks(Jwks::json(jwks.to_string()))).expect("a verifier");
    // The secret as PKCS #8 (RFC 8410): the fixed prefix of an Ed25519 key, then the key.
    let mut pkcs8 = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    pkcs8.extend_from_slice(&RFC8032_SECRET);
    let key = jsonwebtoken::EncodingKey::from_ed_der(&pkcs8);
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("k".into());
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs()
        + 600;
    let claims = |sub: &str, aud: &str| {
        serde_json::json!({
            "iss": "https://auth.example.com",
            "aud": aud,
            "sub": sub,
            "exp": exp,
            "scope": "toolgate:console",
        })
    };
    let token = jsonwebtoken::encode(&header, &claims("olga", resource), &key).expect("signed");
    let read = |token: &str| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(oauth.claims(token))
    };
    let verified = read(&token).expect("the token verifies");
    assert_eq!(verified.subject(), Some("olga"));
    assert!(verified.has_scope("toolgate:console"));
    assert_eq!(verified.expires(), Some(exp));
    // Another subject put in place of the signed one: the signature no longer covers it.
    let (signed_header, rest) = token.split_once('.').expect("three parts");
    let (_, signature) = rest.split_once('.').expect("three parts");
    let altered_claims = b64(claims("ravi", resource).to_string().as_bytes());
    assert!(read(&format!("{signed_header}.{altered_claims}.{signature}")).is_none());
    // Signed by the right key, for another audience.
    let elsewhere = jsonwebtoken::encode(&header, &claims("olga", "https://other.example"), &key)
        .expect("signed");
    assert!(read(&elsewhere).is_none());
}
