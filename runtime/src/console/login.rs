//! The log-in page, and logging in and out: a token exchanged for a session cookie.

use std::time::SystemTime;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::html::{page, problem};
use super::operators::{COOKIE, cookie_of};
use super::shared::{Operator, Shared};

#[derive(serde::Deserialize)]
pub(super) struct LoginForm {
    token: String,
}

#[derive(serde::Deserialize)]
pub(super) struct CsrfForm {
    csrf: String,
}

pub(super) async fn login_page() -> Response {
    login_form(None, StatusCode::OK)
}

fn login_form(error: Option<&str>, status: StatusCode) -> Response {
    let body = html! {
        section.login {
            h1 { "Operator log-in" }
            (problem(error))
            form #login method="post" action="/login" {
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="current-password" required autofocus;
                button #login-submit.primary type="submit" { "Log in" }
            }
            p.muted { "An operator's token, or an access token of the authorization server." }
        }
    };
    (status, page("Log in", "/login", None, body)).into_response()
}

pub(super) async fn login(
    State(console): State<Shared>,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    let Some(login) = console.operators.who(form.token.trim()).await else {
        console.sessions.failed_slowly().await;
        return login_form(
            Some("That token names no operator of this console."),
            StatusCode::UNAUTHORIZED,
        );
    };
    // A session lasts no longer than the access token it was made with.
    let ttl = match login.expires {
        Some(at) => match at.duration_since(SystemTime::now()) {
            Ok(left) if !left.is_zero() => left.min(console.session_ttl),
            _ => {
                return login_form(
                    Some("That token names no operator of this console."),
                    StatusCode::UNAUTHORIZED,
                );
            }
        },
        None => console.session_ttl,
    };
    let cookie = console.sessions.start(login.operator, ttl);
    let mut response = Redirect::to("/approvals").into_response();
    if let Ok(value) = HeaderValue::from_str(&format!(
        "{COOKIE}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        ttl.as_secs().max(1)
    )) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

pub(super) async fn logout(
    State(console): State<Shared>,
    headers: HeaderMap,
    operator: Operator,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Response {
    if !operator.checks(&form.csrf) {
        return Operator::forged();
    }
    if let Some(cookie) = cookie_of(&headers) {
        console.sessions.end(cookie);
    }
    let mut response = Redirect::to("/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("toolgate_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    response
}
