//! Guarantee 16 (Over OAuth, a request is a principal only through a token that verifies), against
//! rmcp handlers gated in place, `#[toolset]` methods on registered instances, OAuth over
//! `HttpService` and request states.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use serde_json::json;
use toolgate::mcp::ToolgateServer;
use toolgate::mcp::http::Principals;
use toolgate::{Gate, Mode};

use crate::common::gates;
use crate::fixtures::handlers::*;

/// a27. Two `Authorization` headers on one request: alice's (SHADOW) and bob's (PARTIAL_AUTO).
/// Credentials that say two things must not be resolved to whichever suits the caller: the request is
/// refused, or decided as one principal whose session it also is. Broken: a session opened by alice
/// runs a LOW_WRITE call (bob's gate deciding on alice's session), or a request with both runs it.
#[test]
fn a27_two_authorization_headers_do_not_mix_principals() {
    runtime().block_on(async {
        let ops = Ops::default();
        let server = ToolgateServer::new(Gate::new(Mode::Shadow).unwrap()).handler(ops.clone());
        let principals = Principals::new()
            .bearer(
                token_of(ALICE),
                "alice",
                gates::of_principal(Mode::Shadow, "alice"),
            )
            .bearer(
                token_of(BOB),
                "bob",
                gates::of_principal(Mode::PartialAuto, "bob"),
            );
        let addr = serve_http(server, principals).await;
        let args = json!({"target": "web"});
        let alices = open_session(addr, &[ALICE]).await.expect("a session");
        for pair in [[ALICE, BOB], [BOB, ALICE]] {
            let on_session = session_call(addr, &pair, &alices, "ops_restart", args.clone()).await;
            assert_eq!(
                ops.restarted(),
                0,
                "{pair:?} on alice's session: {on_session:?}"
            );
            let stateless = http_call(addr, &pair, "ops_restart", args.clone(), None).await;
            assert_eq!(
                ops.restarted(),
                0,
                "{pair:?} without a session: {stateless:?}"
            );
        }
    });
}

/// a28. The anonymous principal serves a request with no `Authorization` header at all; an empty,
/// blank or non-bearer one is not "no header" and must be refused `401`. Broken: any of them is
/// served as the anonymous principal.
#[test]
fn a28_a_malformed_authorization_is_not_anonymous() {
    runtime().block_on(async {
        let (ops, anonymous, server) = ops_server("anon");
        let addr = serve_http(server, Principals::new().anonymous("anon", anonymous)).await;
        let args = json!({"target": "web"});
        let served = http_call(addr, &[], "ops_restart", args.clone(), None).await;
        assert_eq!(served.code(), "OK", "{served:?}");
        for authorization in [
            "",
            "Bearer",
            "Bearer ",
            "Basic YWxpY2U6eA==",
            "bearer",
            "Token abc",
            "Bearer  ",
        ] {
            let refused =
                http_call(addr, &[authorization], "ops_restart", args.clone(), None).await;
            assert_eq!(refused.status, 401, "`{authorization}`: {refused:?}");
        }
        assert_eq!(ops.restarted(), 1);
    });
}

/// a29. An oversized bearer token (256 KiB) and a flood of distinct ones: refused without reaching a
/// handler, never echoed, and the server keeps serving. Broken: a 2xx, the token in the answer, or the
/// next request unanswered.
#[test]
fn a29_an_oversized_token_is_refused_and_the_server_goes_on() {
    runtime().block_on(async {
        let (ops, gate, server) = ops_server("alice");
        let addr = serve_http(
            server,
            Principals::new().bearer(token_of(ALICE), "alice", gate),
        )
        .await;
        let huge = format!("Bearer {}", "A".repeat(256 * 1024));
        let refused = restart_x(addr, &[&huge]).await;
        assert!(
            refused.status >= 400 || refused.status == 0,
            "{}",
            refused.status
        );
        assert!(
            !refused.body.contains(&"A".repeat(64)),
            "the token is echoed"
        );
        for i in 0..50 {
            let bearer = format!("Bearer made-up-{i}");
            let answer = restart_x(addr, &[&bearer]).await;
            assert_eq!(answer.status, 401);
        }
        let served = restart_x(addr, &[ALICE]).await;
        assert_eq!(served.code(), "OK", "{served:?}");
        assert_eq!(ops.restarted(), 1);
    });
}

/// a30. OAuth sessions x subjects: a session opened with subject alice's token, used with subject
/// bob's valid token of the same scope (same gate), for a handler tool. Guarantee 16: subjects never
/// share a session. Broken: anything but `404`, or the body runs.
#[test]
fn a30_a_jwt_of_one_subject_cannot_use_anothers_session() {
    runtime().block_on(async {
        let key = TestKey::ed25519("a30");
        let ops = Ops::default();
        let writers = gates::of_principal(Mode::PartialAuto, "writer");
        let (addr, resource) = oauth_server(&ops, &key, writers, None).await;
        let alice = writer_bearer(&key, &resource, "alice");
        let bob = writer_bearer(&key, &resource, "bob");
        let session = open_session(addr, &[&alice]).await.expect("a session");
        let answer = restart_x_on(addr, &[&bob], &session).await;
        assert_eq!(answer.status, 404, "{answer:?}");
        assert_eq!(ops.restarted(), 0);
        let answer = restart_x_on(addr, &[&alice], &session).await;
        assert_eq!(answer.code(), "OK", "{answer:?}");
    });
}

/// a31. OAuth x the anonymous principal: an expired token, a token signed by an unknown key, and one
/// for another audience are refused `401` where an anonymous principal (PARTIAL_AUTO here) serves
/// requests without a token. Broken: any of them reaches the handler as anonymous.
#[test]
fn a31_a_bad_token_is_never_the_anonymous_principal() {
    runtime().block_on(async {
        let key = TestKey::ed25519("a31");
        let stranger = TestKey::ed25519("a31-stranger");
        let ops = Ops::default();
        let writers = gates::of_principal(Mode::Shadow, "writer");
        let anonymous = gates::of_principal(Mode::PartialAuto, "anonymous");
        let (addr, resource) = oauth_server(&ops, &key, writers, Some(anonymous)).await;
        let mut expired = claims(&resource, "alice", "ops:write");
        expired["exp"] = json!(now() - 3600);
        let mut elsewhere = claims(&resource, "alice", "ops:write");
        elsewhere["aud"] = json!("https://other.example/mcp");
        for token in [
            key.sign(&expired),
            stranger.sign(&claims(&resource, "alice", "ops:write")),
            key.sign(&elsewhere),
        ] {
            let bearer = format!("Bearer {token}");
            let answer = restart_x(addr, &[&bearer]).await;
            assert_eq!(answer.status, 401, "{answer:?}");
            assert!(!answer.head.contains(&token) && !answer.body.contains(&token));
        }
        assert_eq!(ops.restarted(), 0);
        let anon = restart_x(addr, &[]).await;
        assert_eq!(anon.code(), "OK", "{anon:?}");
    });
}

/// a32. OAuth x in band: two subjects of one scope share its gate (and its two-step store); alice's
/// sealed state for a handler tool, answered "approve" with bob's token. Guarantee 16: subjects never
/// share an in-band approval. Broken: bob's answer runs the call.
#[test]
fn a32_subjects_sharing_a_scope_gate_do_not_share_in_band_states() {
    runtime().block_on(async {
        let (key, ops) = (TestKey::ed25519("a32"), Ops::default());
        let (addr, resource) = oauth_server(&ops, &key, two_step_writers(), None).await;
        let alice = writer_bearer(&key, &resource, "alice");
        let bob = writer_bearer(&key, &resource, "bob");
        let args = json!({"target": "db"});
        let asked = http_call(addr, &[&alice], "ops_wipe", args.clone(), None).await;
        let state = asked.state().unwrap_or_else(|| panic!("a form: {asked:?}"));
        let by_bob = http_call(
            addr,
            &[&bob],
            "ops_wipe",
            args.clone(),
            Some((&state, "approve")),
        )
        .await;
        assert_eq!(
            ops.wiped(),
            0,
            "bob approved alice's call: {}",
            by_bob.code()
        );
        let by_alice =
            http_call(addr, &[&alice], "ops_wipe", args, Some((&state, "approve"))).await;
        assert_eq!(by_alice.code(), "OK", "{by_alice:?}");
        assert_eq!(ops.wiped(), 1);
    });
}

/// a40. OAuth x what a person reads: a subject whose `sub` carries a right-to-left override and a
/// zero-width space (an identity provider that lets users pick their id). Such a subject is no name a
/// person can read as one (SECURITY.md, names that read alike): it maps to no principal, so no form
/// ever names it and nothing runs. Broken: the form carries the characters as they are.
#[test]
fn a40_a_subject_with_hidden_characters_is_no_principal() {
    runtime().block_on(async {
        let (key, ops) = (TestKey::ed25519("a40"), Ops::default());
        let (addr, resource) = oauth_server(&ops, &key, two_step_writers(), None).await;
        let sub = "alice\u{202E}nimda\u{200B}";
        let token = writer_bearer(&key, &resource, sub);
        let asked = http_call(addr, &[&token], "ops_wipe", json!({"target": "db"}), None).await;
        assert_eq!(asked.status, 403, "{asked:?}");
        let body = format!("{asked:?}");
        assert!(
            !body.contains('\u{202E}') && !body.contains('\u{200B}'),
            "{body:?}"
        );
        assert_eq!(ops.wiped(), 0);
    });
}

/// The bearer authorization of subject `sub` of the scope `ops:write`, signed by `key` for `resource`.
fn writer_bearer(key: &TestKey, resource: &str, sub: &str) -> String {
    format!("Bearer {}", key.sign(&claims(resource, sub, "ops:write")))
}

/// `ops_restart` of `x`, called over HTTP with the authorizations `authorizations`.
async fn restart_x(
    addr: std::net::SocketAddr,
    authorizations: &[&str],
) -> crate::common::http::Answer {
    http_call(
        addr,
        authorizations,
        "ops_restart",
        json!({"target": "x"}),
        None,
    )
    .await
}

/// `ops_restart` of `x`, called on `session` with the authorizations `authorizations`.
async fn restart_x_on(
    addr: std::net::SocketAddr,
    authorizations: &[&str],
    session: &str,
) -> crate::common::http::Answer {
    session_call(
        addr,
        authorizations,
        session,
        "ops_restart",
        json!({"target": "x"}),
    )
    .await
}

/// New `Ops`, a PARTIAL_AUTO gate of `principal`, and a server of the handler behind it.
fn ops_server(principal: &str) -> (Ops, Gate, ToolgateServer) {
    let ops = Ops::default();
    let gate = gates::of_principal(Mode::PartialAuto, principal);
    let server = ToolgateServer::new(gate.clone()).handler(ops.clone());
    (ops, gate, server)
}

/// The gate of the writers' scope: FULL_AUTO, two-step approvals, principal `writer`.
fn two_step_writers() -> Gate {
    two_step(Mode::FullAuto)
        .principal("writer")
        .build()
        .unwrap()
}
