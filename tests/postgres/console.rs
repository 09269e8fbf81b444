//! The operator console (`toolgate console`) in a real browser: a headless Chromium logs in as an
//! operator and answers, on the console's pages, the requests that an agent in another process makes
//! and waits on; the agent runs what was approved, once, and reads the reason of what was rejected.
//! An irreversible call is approved only with its target typed back. Log-ins are refused without the
//! right token, characters that hide text are shown as markers, and a fleet is lowered from its page.
//!
//! With `TOOLGATE_SCREENSHOTS=DIR`, a screenshot of each page is saved in DIR.

use std::fs;
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use fantoccini::Locator;
use toolgate::postgres::Fleet;
use toolgate::{Gate, Mode};

use crate::common::Scratch;
use crate::common::browser::Browser;
use crate::support::bank::CHILD_ROLE;
use crate::support::console::{AGENT, Call, PRINCIPAL, Watched, spawn_agent};
use crate::support::{parent_database, sha256_hex, wait};

const OPERATOR: &str = "operator-olga";
/// How long any one wait may take: far longer than it does, so that what never comes fails the test.
const WITHIN: Duration = Duration::from_secs(20);
const RIGHT_TO_LEFT_OVERRIDE: char = '\u{202e}';

#[test]
fn the_operator_approves_and_rejects_an_agents_calls_in_the_browser() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "console_answers") else {
        return;
    };
    let desk = Desk::start(&url);
    let runs = desk.scratch.path("runs");
    wait(async {
        let browser = Browser::start().await;
        desk.log_in(&browser).await;

        // Approved once: the agent's call runs, once, and the request says who approved it.
        let agent = spawn_agent(&url, &runs, Call::Refund("acct-1", 40));
        let id = desk.request_of(&agent).await;
        let row = format!("table#pending tr.request[data-request=\"{id}\"]");
        desk.until(
            &format!("request {id} listed on /approvals"),
            &[&agent],
            async || {
                browser.goto(&desk.page("/approvals")).await.map_err(seen)?;
                found(&browser, &row).await
            },
        )
        .await;
        browser.save_screenshot("approvals").await;
        desk.open(&browser, &row, id, &[&agent]).await;
        for (field, expected) in [
            ("#tool", "console.refund"),
            ("#principal", PRINCIPAL),
            ("#agent", AGENT),
            ("#risk", "HIGH_WRITE"),
            ("#arguments", "acct-1"),
            ("#arguments", "40"),
            ("#state", "pending"),
        ] {
            let text = text_of(&browser, field).await.unwrap_or_else(|e| {
                panic!(
                    "{field} on /approvals/{id}: {e}\n{}",
                    desk.printed(&[&agent])
                )
            });
            assert!(
                text.contains(expected),
                "{field} on /approvals/{id} is {text:?}, without {expected:?}"
            );
        }
        for button in [
            "form#approve button#approve-once",
            "form#approve button#approve-session",
            "form#reject button#reject",
            "form#reject button#reject-stop",
        ] {
            let kind = browser
                .find(Locator::Css(button))
                .await
                .unwrap_or_else(|e| panic!("{button}: {e}\n{}", desk.printed(&[&agent])))
                .prop("type")
                .await
                .unwrap();
            assert_eq!(kind.as_deref(), Some("submit"), "{button}");
        }
        browser.save_screenshot("request").await;
        click(&browser, "form#approve button#approve-once").await;
        desk.until("the agent's approved call to run", &[&agent], async || {
            let Some(ran) = agent.line_with("RAN refund acct-1 40") else {
                return Err(format!(
                    "no RAN line; the browser shows {}",
                    shown(&browser).await
                ));
            };
            Ok(ran)
        })
        .await;
        desk.until_state(&browser, id, &format!("approved by {OPERATOR}"), &[&agent])
            .await;
        let mut agent = agent;
        desk.until("the agent to end", &[], async || {
            agent.exited().then_some(()).ok_or_else(|| agent.output())
        })
        .await;
        assert_eq!(run_lines(&runs), ["refund acct-1 40"], "{}", agent.output());

        // Rejected with a reason: listed on the open page without reloading it, the agent reads the
        // reason, and the body never runs.
        browser.goto(&desk.page("/approvals")).await.unwrap();
        let mut agent = spawn_agent(&url, &runs, Call::Refund("acct-2", 99));
        let id = desk.request_of(&agent).await;
        let row = format!("table#pending tr.request[data-request=\"{id}\"]");
        desk.until(
            &format!("request {id} listed on /approvals without a reload (server-sent events)"),
            &[&agent],
            async || found(&browser, &row).await,
        )
        .await;
        desk.open(&browser, &row, id, &[&agent]).await;
        type_into(
            &browser,
            "form#reject textarea#reason[name=reason]",
            "over the limit",
        )
        .await;
        click(&browser, "form#reject button#reject").await;
        let rejected = desk
            .until("the agent to read the rejection", &[&agent], async || {
                agent
                    .line_with("REJECTED")
                    .or_else(|| agent.line_with("RAN refund"))
                    .or_else(|| agent.line_with("REFUSED"))
                    .ok_or_else(|| "no REJECTED line".to_owned())
            })
            .await;
        assert!(
            rejected.contains("REJECTED") && rejected.contains("over the limit"),
            "{rejected:?}\n{}",
            agent.output()
        );
        desk.until_state(&browser, id, &format!("rejected by {OPERATOR}"), &[&agent])
            .await;
        desk.until("the agent to end", &[], async || {
            agent.exited().then_some(()).ok_or_else(|| agent.output())
        })
        .await;
        assert_eq!(run_lines(&runs), ["refund acct-1 40"], "{}", agent.output());

        // The approved call in the trail: its `enter` and `exit` records on the call's page.
        desk.call_in_trail(&browser, "acct-1").await;
        browser.close().await;
    });
}

#[test]
fn every_page_leads_to_the_log_in_until_an_operator_logs_in() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "console_no_log_in") else {
        return;
    };
    let desk = Desk::start(&url);
    wait(async {
        let browser = Browser::start().await;
        for page in [
            "/approvals",
            "/approvals/1",
            "/fleet",
            "/trail",
            "/promotion",
        ] {
            desk.leads_to_log_in(&browser, page).await;
        }
        desk.must_find(&browser, "form#login input#token[name=token]")
            .await;
        desk.must_find(&browser, "form#login button#login-submit")
            .await;
        browser.save_screenshot("login").await;
        browser.close().await;
    });
}

#[test]
fn a_wrong_token_is_refused() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "console_wrong_token") else {
        return;
    };
    let desk = Desk::start(&url);
    wait(async {
        let browser = Browser::start().await;
        browser.goto(&desk.page("/login")).await.unwrap();
        let wrong = "0".repeat(desk.token.len());
        assert_ne!(wrong, desk.token);
        type_into(&browser, "form#login input#token", &wrong).await;
        click(&browser, "form#login button#login-submit").await;
        desk.until("the log-in page to show #error", &[], async || {
            found(&browser, "#error").await
        })
        .await;
        desk.must_find(&browser, "form#login input#token[name=token]")
            .await;
        browser.save_screenshot("login-refused").await;
        // Still not logged in.
        desk.leads_to_log_in(&browser, "/approvals").await;
        browser.close().await;
    });
}

#[test]
fn hidden_characters_show_as_markers_and_every_page_renders() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "console_pages") else {
        return;
    };
    let desk = Desk::start(&url);
    let runs = desk.scratch.path("runs");
    let fleet = Fleet::connect(&url, "payments").expect("the fleet");
    let member = fleet
        .join(Gate::builder().mode(Mode::FullAuto).agent("payments-1"))
        .expect("a gate of the fleet");
    wait(async {
        let browser = Browser::start().await;
        desk.log_in(&browser).await;

        let account = format!("acct-{RIGHT_TO_LEFT_OVERRIDE}3-evil");
        let agent = spawn_agent(&url, &runs, Call::Refund(&account, 3));
        let id = desk.request_of(&agent).await;
        let row = format!("table#pending tr.request[data-request=\"{id}\"]");
        desk.until(
            &format!("request {id} listed on /approvals"),
            &[&agent],
            async || {
                browser.goto(&desk.page("/approvals")).await.map_err(seen)?;
                found(&browser, &row).await
            },
        )
        .await;
        assert_no_raw_override(&browser, "/approvals").await;
        desk.open(&browser, &row, id, &[&agent]).await;
        let arguments = text_of(&browser, "#arguments").await.unwrap();
        assert!(
            arguments.contains("U+202E") && !arguments.contains(RIGHT_TO_LEFT_OVERRIDE),
            "#arguments on /approvals/{id} is {arguments:?}"
        );
        let marker = browser
            .find(Locator::Css("#arguments span.invisible[title]"))
            .await
            .unwrap_or_else(|e| panic!("no marker span in #arguments: {e}"));
        assert_eq!(marker.text().await.unwrap(), "U+202E");
        assert_no_raw_override(&browser, &format!("/approvals/{id}")).await;
        browser.save_screenshot("request-hidden").await;

        // The fleet, lowered from its page: the member gate follows.
        browser.goto(&desk.page("/fleet")).await.unwrap();
        let fleet_row = "table#fleets tr.fleet[data-fleet=\"payments\"] td.mode";
        desk.must_find(&browser, fleet_row).await;
        assert_eq!(member.mode(), Mode::FullAuto);
        browser.save_screenshot("fleet").await;
        let lower = "form.lower[data-fleet=\"payments\"]";
        choose(&browser, &format!("{lower} select[name=mode]"), "SHADOW").await;
        type_into(
            &browser,
            &format!("{lower} input[name=reason]"),
            "incident 42",
        )
        .await;
        click(&browser, &format!("{lower} button")).await;
        desk.until("the fleet's row to say SHADOW", &[], async || {
            browser.goto(&desk.page("/fleet")).await.map_err(seen)?;
            let mode = text_of(&browser, fleet_row).await?;
            mode.contains("SHADOW").then_some(()).ok_or(mode)
        })
        .await;
        desk.until("the fleet's gate to be lowered", &[], async || {
            let mode = member.mode();
            (mode == Mode::Shadow)
                .then_some(())
                .ok_or(format!("{mode:?}"))
        })
        .await;

        browser.goto(&desk.page("/trail")).await.unwrap();
        for field in ["tool", "principal", "decision", "code", "since", "until"] {
            desk.must_find(&browser, &format!("form#search [name={field}]"))
                .await;
        }
        desk.must_find(&browser, "table#results").await;
        browser.save_screenshot("trail").await;
        crate::support::console::shadow_history(&url);
        browser.goto(&desk.page("/promotion")).await.unwrap();
        desk.must_find(&browser, "svg#chart").await;
        // What SHADOW refused only for the mode is drawn, and counted for the modes that would run it.
        desk.must_find(&browser, "svg#chart rect.would").await;
        let would = text_of(&browser, "table#would-run").await.unwrap();
        assert!(would.contains("FULL_AUTO"), "{would}");
        browser.save_screenshot("promotion").await;
        browser.close().await;
        drop(agent);
    });
    drop(member);
}

#[test]
fn an_irreversible_call_is_approved_only_with_its_target_typed_back() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "console_irreversible") else {
        return;
    };
    let desk = Desk::start(&url);
    let runs = desk.scratch.path("runs");
    wait(async {
        let browser = Browser::start().await;
        desk.log_in(&browser).await;
        let agent = spawn_agent(&url, &runs, Call::CloseAccount("acct-9"));
        let id = desk.request_of(&agent).await;
        let row = format!("table#pending tr.request[data-request=\"{id}\"]");
        desk.until(
            &format!("request {id} listed on /approvals"),
            &[&agent],
            async || {
                browser.goto(&desk.page("/approvals")).await.map_err(seen)?;
                found(&browser, &row).await
            },
        )
        .await;
        desk.open(&browser, &row, id, &[&agent]).await;
        let confirmation = "form#approve input#confirmation[name=confirmation]";
        desk.must_find(&browser, confirmation).await;
        browser.save_screenshot("request-irreversible").await;

        // Another target typed: not approved, and the call still waits.
        type_into(&browser, confirmation, "acct-8").await;
        click(&browser, "form#approve button#approve-once").await;
        desk.until("the refusal of another target", &[&agent], async || {
            found(&browser, "#error").await
        })
        .await;
        desk.until_state(&browser, id, "pending", &[&agent]).await;
        assert_eq!(agent.line_with("RAN"), None, "{}", agent.output());

        type_into(&browser, confirmation, "acct-9").await;
        click(&browser, "form#approve button#approve-once").await;
        desk.until("the agent's confirmed call to run", &[&agent], async || {
            let Some(ran) = agent.line_with("RAN close_account acct-9") else {
                return Err(format!(
                    "no RAN line; the browser shows {}",
                    shown(&browser).await
                ));
            };
            Ok(ran)
        })
        .await;
        desk.until_state(&browser, id, &format!("approved by {OPERATOR}"), &[&agent])
            .await;
        let mut agent = agent;
        desk.until("the agent to end", &[], async || {
            agent.exited().then_some(()).ok_or_else(|| agent.output())
        })
        .await;
        assert_eq!(
            run_lines(&runs),
            ["close_account acct-9"],
            "{}",
            agent.output()
        );
        browser.close().await;
    });
}

/// The operator pastes a stricter candidate on `/policy/replay` and reads the flip table: alice's three
/// calls would ask, bob's two would be refused. The console serves in this process, which links the
/// tools the trail's records name (`toolgate console` links none).
#[test]
fn the_operator_replays_a_candidate_policy_and_reads_the_flips_in_the_browser() {
    use crate::g20_console_replay::{STRICTER, trail};
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "console_replay_browser") else {
        return;
    };
    trail(&url);
    let served = crate::g20_console::serve(&url, crate::g20_console::operators());
    let base = format!("http://{}", served.addr);
    wait(async {
        let browser = Browser::start().await;
        browser.goto(&format!("{base}/login")).await.unwrap();
        type_into(
            &browser,
            "form#login input#token[name=token]",
            crate::g20_console::TOKEN,
        )
        .await;
        click(&browser, "form#login button#login-submit").await;
        let started = Instant::now();
        while path_of(&browser).await.as_deref() != Ok("/approvals") {
            assert!(started.elapsed() < WITHIN, "{}", shown(&browser).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        click(&browser, "header nav a[href=\"/policy/replay\"]").await;
        type_into(&browser, "form#replay textarea#candidate", STRICTER).await;
        type_into(&browser, "form#replay textarea#in-force-0", "format = 1\n").await;
        click(&browser, "form#replay button#run").await;
        let started = Instant::now();
        let table = loop {
            if let Ok(text) = text_of(&browser, "table#flips tbody").await {
                break text;
            }
            assert!(started.elapsed() < WITHIN, "{}", shown(&browser).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        browser.save_screenshot("policy-replay").await;
        let rows: Vec<String> = table
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|line| !line.is_empty())
            .collect();
        assert_eq!(
            rows,
            [
                "fa.mark alice allowed → asks 3",
                "fa.mark bob allowed → refused 2"
            ],
            "{table}"
        );
        // The count opens exactly its records.
        click(&browser, "table#flips tr.flip a.records").await;
        let started = Instant::now();
        while path_of(&browser).await.as_deref() != Ok("/trail/records") {
            assert!(started.elapsed() < WITHIN, "{}", shown(&browser).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let listed = browser
            .find_all(Locator::Css("table#results tr.record"))
            .await
            .unwrap();
        assert_eq!(listed.len(), 3);
    });
}

/// A database's console, started with one operator, `operator-olga`, whose token is random.
struct Desk {
    console: Watched,
    base: String,
    token: String,
    scratch: Scratch,
}

impl Desk {
    /// `toolgate console` on the store of `url`, listening on a free port; returns once it says so.
    fn start(url: &str) -> Desk {
        let scratch = Scratch::new("console");
        let mut secret = [0u8; 16];
        getrandom::fill(&mut secret).expect("random bytes");
        let token: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        let operators = scratch.path("operators.toml");
        fs::write(
            &operators,
            format!("[operators]\n{OPERATOR} = \"{}\"\n", sha256_hex(&token)),
        )
        .expect("the operators file");
        let address = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port");
        let console = Watched::spawn(
            "the console",
            Command::new(env!("CARGO_BIN_EXE_toolgate"))
                .args(["console", "--store", url, "--listen"])
                .arg(address.to_string())
                .arg("--operators")
                .arg(&operators)
                .env_remove("TOOLGATE_STORE")
                .env_remove("TOOLGATE_STORE_SCHEMA"),
        );
        let base = format!("http://{address}");
        let mut desk = Desk {
            console,
            base,
            token,
            scratch,
        };
        let listening = format!("toolgate console: listening on {}", desk.base);
        let started = Instant::now();
        while desk.console.line_with(&listening).is_none() {
            assert!(
                !desk.console.exited() && started.elapsed() < WITHIN,
                "the console did not say {listening:?}\n{}",
                desk.console.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        desk
    }

    /// The URL of the console's `path`.
    fn page(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Polls `check` until it gives a value; past [`WITHIN`], fails saying what was awaited, what was
    /// seen last, and what the console and `agents` printed.
    async fn until<T>(
        &self,
        what: &str,
        agents: &[&Watched],
        mut check: impl AsyncFnMut() -> Result<T, String>,
    ) -> T {
        let started = Instant::now();
        loop {
            let last = match check().await {
                Ok(value) => return value,
                Err(last) => last,
            };
            if started.elapsed() > WITHIN {
                let printed = self.printed(agents);
                panic!("waited {WITHIN:?} for {what}; seen last: {last}\n{printed}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Logs in with the operator's token, and waits for `/approvals`.
    async fn log_in(&self, browser: &Browser) {
        browser.goto(&self.page("/login")).await.unwrap();
        type_into(browser, "form#login input#token[name=token]", &self.token).await;
        click(browser, "form#login button#login-submit").await;
        self.until("/approvals after logging in", &[], async || {
            match path_of(browser).await? == "/approvals" {
                true => Ok(()),
                false => Err(shown(browser).await),
            }
        })
        .await;
    }

    /// Opens `page`, and waits until the browser is led to `/login`.
    async fn leads_to_log_in(&self, browser: &Browser, page: &str) {
        browser.goto(&self.page(page)).await.unwrap();
        self.until(
            &format!("{page} before logging in to lead to /login"),
            &[],
            async || {
                let path = path_of(browser).await?;
                (path == "/login").then_some(()).ok_or(path)
            },
        )
        .await;
    }

    /// Fails the test, with what the console printed, unless the page has an element matching `css`.
    async fn must_find(&self, browser: &Browser, css: &str) {
        if let Err(e) = found(browser, css).await {
            panic!("{e}\n{}", self.printed(&[]));
        }
    }

    /// What the console and `agents` printed so far, for a failure message.
    fn printed(&self, agents: &[&Watched]) -> String {
        std::iter::once(&self.console)
            .chain(agents.iter().copied())
            .map(Watched::output)
            .collect()
    }

    /// The id of the request the agent waits on.
    async fn request_of(&self, agent: &Watched) -> i64 {
        let line = self
            .until("the agent's request", &[agent], async || {
                agent
                    .line_with("PENDING ")
                    .ok_or_else(|| "no PENDING line".to_owned())
            })
            .await;
        let id = line.split_once("PENDING ").map(|(_, id)| id.trim());
        id.and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("no request id in {line:?}"))
    }

    /// Follows the `a.open` link of the request's `row` to `/approvals/ID`.
    async fn open(&self, browser: &Browser, row: &str, id: i64, agents: &[&Watched]) {
        let page = format!("/approvals/{id}");
        let link = format!("{row} a.open");
        self.until(&format!("{page} from its row"), agents, async || {
            if path_of(browser).await? != page {
                browser
                    .find(Locator::Css(&link))
                    .await
                    .map_err(seen)?
                    .click()
                    .await
                    .map_err(seen)?;
            }
            let path = path_of(browser).await?;
            (path == page).then_some(()).ok_or(path)
        })
        .await;
    }

    /// Waits until `/approvals/ID`'s `#state` says `expected`, reading the page again while it does not.
    async fn until_state(&self, browser: &Browser, id: i64, expected: &str, agents: &[&Watched]) {
        let page = format!("/approvals/{id}");
        self.until(
            &format!("#state of {page} to say {expected:?}"),
            agents,
            async || {
                if path_of(browser).await? != page {
                    browser.goto(&self.page(&page)).await.map_err(seen)?;
                }
                let state = text_of(browser, "#state").await?;
                if state.contains(expected) {
                    return Ok(());
                }
                browser.refresh().await.map_err(seen)?;
                Err(state)
            },
        )
        .await;
    }

    /// Finds the call on `account` in the trail, and checks its page shows its two records.
    async fn call_in_trail(&self, browser: &Browser, account: &str) {
        browser.goto(&self.page("/trail")).await.unwrap();
        type_into(browser, "form#search [name=tool]", "console.refund").await;
        browser
            .form(Locator::Css("form#search"))
            .await
            .unwrap_or_else(|e| panic!("the trail's search: {e}"))
            .submit_direct()
            .await
            .unwrap_or_else(|e| panic!("the trail's search: {e}"));
        let calls = self
            .until("the trail's calls of console.refund", &[], async || {
                let mut calls = Vec::new();
                let links = browser
                    .find_all(Locator::Css("table#results tr.record a.call"))
                    .await
                    .map_err(seen)?;
                for link in links {
                    if let Some(href) = link.prop("href").await.map_err(seen)? {
                        calls.push(href);
                    }
                }
                if calls.is_empty() {
                    Err(browser.source().await.map_err(seen)?)
                } else {
                    Ok(calls)
                }
            })
            .await;
        browser.save_screenshot("trail-results").await;
        let mut pages = Vec::new();
        for call in &calls {
            browser.goto(call).await.unwrap();
            let enter = text_of(browser, "#enter").await;
            let exit = text_of(browser, "#exit").await;
            match (enter, exit) {
                (Ok(enter), Ok(exit)) if enter.contains(account) && !exit.trim().is_empty() => {
                    browser.save_screenshot("call").await;
                    return;
                }
                other => pages.push(format!("{call}: {other:?}")),
            }
        }
        panic!(
            "no call page with #enter of {account} and its #exit:\n{}",
            pages.join("\n")
        );
    }
}

/// What a failed WebDriver command says, as the last thing a wait saw.
fn seen(error: fantoccini::error::CmdError) -> String {
    error.to_string()
}

/// The path of the page the browser shows.
async fn path_of(browser: &Browser) -> Result<String, String> {
    Ok(browser.current_url().await.map_err(seen)?.path().to_owned())
}

/// Whether the page has an element matching `css`.
async fn found(browser: &Browser, css: &str) -> Result<(), String> {
    match browser.find_all(Locator::Css(css)).await.map_err(seen)? {
        elements if elements.is_empty() => Err(format!("no {css} on {}", shown(browser).await)),
        _ => Ok(()),
    }
}

/// The page the browser shows, its path and the start of its text, for a failure message.
async fn shown(browser: &Browser) -> String {
    let path = path_of(browser).await.unwrap_or_else(|e| e);
    let text = text_of(browser, "body").await.unwrap_or_else(|e| e);
    let start: String = text.chars().take(300).collect();
    format!("{path}, which says {start:?}")
}

/// The text of the element matching `css`.
async fn text_of(browser: &Browser, css: &str) -> Result<String, String> {
    browser
        .find(Locator::Css(css))
        .await
        .map_err(seen)?
        .text()
        .await
        .map_err(seen)
}

async fn type_into(browser: &Browser, css: &str, text: &str) {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .send_keys(text)
        .await
        .unwrap_or_else(|e| panic!("typing into {css}: {e}"));
}

/// Chooses the option of the `select` matching `css` whose value, or else whose text, is `option`.
async fn choose(browser: &Browser, css: &str, option: &str) {
    let select = browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    let mut shown = Vec::new();
    for element in select.find_all(Locator::Css("option")).await.unwrap() {
        let value = element.prop("value").await.unwrap().unwrap_or_default();
        let text = element.text().await.unwrap();
        if value == option || text.trim() == option {
            element.click().await.unwrap();
            return;
        }
        shown.push(format!("{value:?} ({text:?})"));
    }
    panic!("no option {option} in {css}: {}", shown.join(", "));
}

async fn click(browser: &Browser, css: &str) {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
}

/// Asserts that the page's HTML holds no right-to-left override, anywhere.
async fn assert_no_raw_override(browser: &Browser, page: &str) {
    let html = browser.source().await.unwrap();
    assert!(
        !html.contains(RIGHT_TO_LEFT_OVERRIDE),
        "{page} holds a raw U+202E: {html}"
    );
}

/// The lines of the runs file, without the process ids.
fn run_lines(runs: &std::path::Path) -> Vec<String> {
    fs::read_to_string(runs)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            line.rsplit_once(' ')
                .map_or(line, |(run, _)| run)
                .to_owned()
        })
        .collect()
}
