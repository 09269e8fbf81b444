//! `toolgate console`: the operator console.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use toolgate::console::{Console, Operators, RunError};
use toolgate::mcp::oauth::{Algorithm, Jwks, OAuth};
use toolgate::terminal::escaped;

const REFUSED: u8 = 1;
const UNAVAILABLE: u8 = 3;

pub(super) const CONSOLE_EXIT_STATUS: &str = "\
Serves the console until stopped, on loopback unless --listen names another address (then put a TLS
proxy in front: the session cookie would otherwise cross the network in the clear). Operators log in
with a token of --operators FILE (TOML: `[operators]`, each name mapped to the SHA-256 of its token in
hex, as `sha256sum` prints it), or with an access token of --jwt-issuer (checked against --jwks, for
--jwt-audience, granting --jwt-scope; the operator is its subject; beyond loopback, --public-url names
the console's https:// URL). The store records who answered.

Exit status:
  1   refused: no operators, an operators file that does not read, or a JWT setting refused
  3   the store could not be reached, or the address could not be listened on
  64  the command line is invalid (no store; --jwt-issuer beyond loopback without --public-url)";

#[derive(Debug, Args)]
pub(super) struct ConsoleArgs {
    #[command(flatten)]
    database: super::Database,
    /// Where to listen.
    #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1:8640")]
    listen: SocketAddr,
    /// The console's URL as its operators reach it (the TLS proxy's, beyond this machine): the
    /// resource its access tokens are for. Default: http://ADDRESS/ on a loopback --listen; needed
    /// with --jwt-issuer on any other.
    #[arg(long, value_name = "URL", requires = "jwt_issuer")]
    public_url: Option<String>,
    /// The operators and the SHA-256 of their tokens (TOML: `[operators]`, `name = "hex"`).
    #[arg(long, env = "TOOLGATE_CONSOLE_OPERATORS", value_name = "FILE")]
    operators: Option<PathBuf>,
    /// Also accept JWT access tokens of this issuer (its `iss`).
    #[arg(long, value_name = "URL", requires_all = ["jwks", "jwt_audience"])]
    jwt_issuer: Option<String>,
    /// The audience the access tokens must name (`aud`): the console's own URL, as the
    /// authorization server knows it.
    #[arg(long, value_name = "AUDIENCE")]
    jwt_audience: Option<String>,
    /// The issuer's keys: a JWKS file, or an https:// URL.
    #[arg(long, value_name = "FILE|URL")]
    jwks: Option<String>,
    /// The algorithms an access token may be signed with (comma-separated JOSE names).
    #[arg(
        long,
        value_name = "ALG",
        value_delimiter = ',',
        default_value = "RS256"
    )]
    jwt_algorithms: Vec<Algorithm>,
    /// The scope an access token must grant to log in.
    #[arg(long, value_name = "SCOPE", default_value = "toolgate:console")]
    jwt_scope: String,
    /// How long a log-in lasts, in minutes.
    #[arg(long, value_name = "MINUTES", default_value_t = 480)]
    session_minutes: u64,
}

pub(super) fn run(args: ConsoleArgs) -> u8 {
    let Some(url) = args.database.store.filter(|url| !url.is_empty()) else {
        eprintln!("toolgate: which store? give --store URL or set TOOLGATE_STORE");
        return super::USAGE;
    };
    let mut operators = Operators::new();
    if let Some(path) = &args.operators {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) => {
                eprintln!("toolgate: cannot read {}: {error}", path.display());
                return REFUSED;
            }
        };
        operators = match Operators::from_toml(&text) {
            Ok(operators) => operators,
            Err(error) => {
                eprintln!(
                    "toolgate: {}: {}",
                    path.display(),
                    escaped(&error.to_string())
                );
                return REFUSED;
            }
        };
    }
    let mut builder = Console::builder()
        .schema(&args.database.schema)
        .operators(operators)
        .session_ttl(Duration::from_secs(args.session_minutes.max(1) * 60));
    if let (Some(issuer), Some(audience), Some(jwks)) =
        (args.jwt_issuer, args.jwt_audience, args.jwks)
    {
        let keys = if jwks.starts_with("https://") || jwks.starts_with("http://") {
            Jwks::url(jwks)
        } else {
            Jwks::file(jwks)
        };
        // The console's own URL is the resource the tokens are for; their audience is given. Plain
        // http is a resource only on loopback: beyond it, the URL is the TLS proxy's.
        let resource = match args.public_url {
            Some(url) => url,
            None if args.listen.ip().is_loopback() => format!("http://{}/", args.listen),
            None => {
                eprintln!(
                    "toolgate: --listen {} is beyond this machine: give --public-url, the console's \
                     https:// URL as its operators reach it, the resource its access tokens are for",
                    args.listen
                );
                return super::USAGE;
            }
        };
        let oauth = OAuth::builder(resource)
            .authorization_server(issuer)
            .audience(audience)
            .algorithms(args.jwt_algorithms)
            .jwks(keys);
        builder = builder.access_tokens(oauth, args.jwt_scope);
    }
    if !args.listen.ip().is_loopback() {
        eprintln!(
            "toolgate console: warning: listening on {}, beyond this machine: serve it behind \
             TLS, or the session cookie crosses the network in the clear",
            args.listen
        );
    }
    let ran = builder.run(&url, args.listen, |address| {
        eprintln!("toolgate console: listening on http://{address}");
    });
    match ran {
        Ok(()) => 0,
        Err(RunError::Store(error)) => {
            let text = error.to_string();
            eprintln!("toolgate console: {}", escaped(&text));
            if text.contains("not configured") {
                REFUSED
            } else {
                UNAVAILABLE
            }
        }
        Err(error) => {
            eprintln!("toolgate console: {}", escaped(&error.to_string()));
            UNAVAILABLE
        }
    }
}
