//! How the pages show text: escaped for HTML by maud, and every character that could hide, fake or
//! reorder what a person reads ([`terminal::hides`](crate::terminal::hides)) drawn as a visible
//! marker naming its code point. The page shell, its style sheet and its one script.

use maud::{DOCTYPE, Markup, Render, html};

/// Text an agent, a writer of the trail or a fleet member controls, as a page shows it.
pub(super) struct Shown<'a>(pub(super) &'a str);

impl Render for Shown<'_> {
    fn render_to(&self, buffer: &mut String) {
        let mut plain = String::new();
        for c in self.0.chars() {
            if crate::terminal::hides(c) {
                html_escape(&plain, buffer);
                plain.clear();
                let code = format!("U+{:04X}", u32::from(c));
                buffer.push_str("<span class=\"invisible\" title=\"");
                buffer.push_str(&code);
                buffer.push_str(" (hidden or reordering character)\">");
                buffer.push_str(&code);
                buffer.push_str("</span>");
            } else {
                plain.push(c);
            }
        }
        html_escape(&plain, buffer);
    }
}

/// Text the console laid out over lines itself (JSON it indented, a plan's steps): its line breaks
/// are kept, and everything else is shown as [`Shown`] shows it.
pub(super) struct ShownLines<'a>(pub(super) &'a str);

impl Render for ShownLines<'_> {
    fn render_to(&self, buffer: &mut String) {
        for (i, line) in self.0.split('\n').enumerate() {
            if i > 0 {
                buffer.push('\n');
            }
            Shown(line).render_to(buffer);
        }
    }
}

/// An optional text, or a dash.
pub(super) struct OrDash<'a>(pub(super) Option<&'a str>);

impl Render for OrDash<'_> {
    fn render_to(&self, buffer: &mut String) {
        match self.0 {
            Some(text) => Shown(text).render_to(buffer),
            None => buffer.push('—'),
        }
    }
}

/// Names shown together (principals, tools of one table): those a person could take for another.
pub(super) struct Names(std::collections::BTreeSet<String>);

impl Names {
    /// The readings that two or more of `names` share.
    pub(super) fn of<'n>(names: impl Iterator<Item = &'n str>) -> Names {
        let mut seen = std::collections::BTreeSet::new();
        let mut readings = std::collections::BTreeMap::<String, usize>::new();
        for name in names {
            if seen.insert(name) {
                *readings.entry(crate::names::reading(name)).or_default() += 1;
            }
        }
        Names(
            readings
                .into_iter()
                .filter(|(_, n)| *n > 1)
                .map(|(reading, _)| reading)
                .collect(),
        )
    }

    /// `name` as [`Shown`] shows it, or spelled out ([`Spelled`]) where it reads as another name of
    /// the set, or the rule of names refuses it (a spelling that reads as a plainer one, scripts
    /// mixed, spaces around it): so that no two names shown look the same, and none looks plainer
    /// than it is.
    pub(super) fn show(&self, name: &str) -> Markup {
        let alike =
            crate::names::refusal(name).is_some() || self.0.contains(&crate::names::reading(name));
        html! {
            @if alike { span.alike title="spelled out: it reads as another name" { (Spelled(name)) } }
            @else { (Shown(name)) }
        }
    }
}

/// A name spelled out: every character but printable ASCII (a space too) drawn as a marker naming
/// its code point.
pub(super) struct Spelled<'a>(pub(super) &'a str);

impl Render for Spelled<'_> {
    fn render_to(&self, buffer: &mut String) {
        let mut plain = String::new();
        for c in self.0.chars() {
            if c.is_ascii_graphic() {
                plain.push(c);
                continue;
            }
            html_escape(&plain, buffer);
            plain.clear();
            let code = format!("U+{:04X}", u32::from(c));
            let why = if crate::terminal::hides(c) {
                "hidden or reordering character"
            } else {
                "a character that may read as another"
            };
            buffer.push_str("<span class=\"invisible\" title=\"");
            buffer.push_str(&code);
            buffer.push_str(" (");
            buffer.push_str(why);
            buffer.push_str(")\">");
            buffer.push_str(&code);
            buffer.push_str("</span>");
        }
        html_escape(&plain, buffer);
    }
}

fn html_escape(text: &str, buffer: &mut String) {
    for c in text.chars() {
        match c {
            '&' => buffer.push_str("&amp;"),
            '<' => buffer.push_str("&lt;"),
            '>' => buffer.push_str("&gt;"),
            '"' => buffer.push_str("&quot;"),
            '\'' => buffer.push_str("&#39;"),
            c => buffer.push(c),
        }
    }
}

/// The pages' navigation, in order.
const NAV: [(&str, &str); 5] = [
    ("/approvals", "Approvals"),
    ("/fleet", "Fleet"),
    ("/trail", "Audit trail"),
    ("/promotion", "Promotion"),
    ("/policy/replay", "Policy replay"),
];

/// A whole page: `operator` is who is logged in (none on the login page), `csrf` the session's token
/// for the log-out form.
pub(super) fn page(
    title: &str,
    current: &str,
    operator: Option<(&str, &str)>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · toolgate console" }
                link rel="stylesheet" href="/assets/console.css";
                script src="/assets/console.js" defer {}
            }
            body {
                header {
                    span.brand { "toolgate" }
                    @if let Some((name, csrf)) = operator {
                        nav {
                            @for (href, label) in NAV {
                                a href=(href) class=[(href == current).then_some("current")] { (label) }
                            }
                        }
                        form #logout method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(csrf);
                            span.operator { "operator " strong { (Shown(name)) } }
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The sentence of a page's table of problems that a query's `problem` key names: the key only
/// chooses, so that nothing of the request is repeated.
pub(super) fn problem_named(
    key: Option<&str>,
    problems: &[(&str, &'static str)],
) -> Option<&'static str> {
    let key = key?;
    problems
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, text)| *text)
}

/// A problem to show at the top of a page: one of the console's own sentences, never text from a
/// request.
pub(super) fn problem(text: Option<&str>) -> Markup {
    html! {
        @if let Some(text) = text {
            p #error.problem role="alert" { (text) }
        }
    }
}

/// The style sheet: served from the console itself, as the page's policy allows nothing else.
pub(super) const CSS: &str = r#"
:root { --fg: #1d232a; --muted: #5b6672; --line: #d8dde3; --bg: #f6f7f9; --accent: #2458c6;
  --bad: #b42318; --good: #18794e; --warn: #9a6700; font-family: system-ui, sans-serif; }
body { margin: 0; color: var(--fg); background: var(--bg); }
header { display: flex; align-items: center; gap: 2rem; padding: .6rem 1.5rem; background: #fff;
  border-bottom: 1px solid var(--line); }
header .brand { font-weight: 700; letter-spacing: .02em; }
header nav { display: flex; gap: 1.2rem; flex: 1; }
header nav a { color: var(--muted); text-decoration: none; padding: .3rem 0; }
header nav a.current { color: var(--fg); border-bottom: 2px solid var(--accent); }
#logout { display: flex; gap: .8rem; align-items: center; margin-left: auto; }
main { padding: 1.2rem 1.5rem; max-width: 1200px; }
h1 { font-size: 1.3rem; margin: .2rem 0 1rem; }
h2 { font-size: 1.05rem; margin: 1.4rem 0 .6rem; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid var(--line); }
th, td { text-align: left; padding: .4rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top;
  font-size: .9rem; }
th { background: #eef1f4; font-weight: 600; }
td.written { white-space: nowrap; }
td.code, pre, code { font-family: ui-monospace, monospace; font-size: .85rem; }
pre { white-space: pre-wrap; word-break: break-all; background: #fff; border: 1px solid var(--line);
  padding: .6rem; margin: 0; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .35rem 1.2rem; background: #fff;
  border: 1px solid var(--line); padding: .8rem 1rem; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; }
.invisible { background: #ffe08a; color: #5c3c00; border: 1px solid #c99a00; border-radius: 3px;
  padding: 0 .2rem; font-family: ui-monospace, monospace; font-size: .8em; }
.risk-HIGH_WRITE { color: var(--bad); font-weight: 600; }
.risk-LOW_WRITE { color: var(--warn); font-weight: 600; }
.irreversible { color: #fff; background: var(--bad); padding: .1rem .4rem; border-radius: 3px;
  font-weight: 700; }
.problem { color: var(--bad); background: #fff1f0; border: 1px solid #f5c2bd; padding: .6rem .8rem; }
.notice { color: var(--good); background: #effaf4; border: 1px solid #b7e4c9; padding: .6rem .8rem; }
.intact { color: var(--good); font-weight: 600; }
.broken { color: var(--bad); font-weight: 600; }
.muted { color: var(--muted); }
form.answer { background: #fff; border: 1px solid var(--line); padding: .8rem 1rem; margin: .8rem 0; }
form.answer label { display: block; margin: .3rem 0; }
form.inline { display: inline-flex; gap: .4rem; align-items: center; }
form#search { display: flex; flex-wrap: wrap; gap: .6rem; align-items: end; margin-bottom: 1rem; }
form#search label { display: flex; flex-direction: column; font-size: .8rem; color: var(--muted); }
input, select, textarea, button { font: inherit; }
input, select, textarea { padding: .3rem .4rem; border: 1px solid #b8c0c8; border-radius: 4px; }
textarea { width: 100%; min-height: 3rem; }
button { padding: .35rem .8rem; border-radius: 4px; border: 1px solid #8792a0; background: #fff;
  cursor: pointer; }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
button.danger { background: var(--bad); border-color: var(--bad); color: #fff; }
.pager { margin: .8rem 0; display: flex; gap: 1rem; }
.side { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }
svg text { font-family: system-ui, sans-serif; font-size: 11px; fill: var(--fg); }
.login { max-width: 420px; margin: 4rem auto; background: #fff; border: 1px solid var(--line);
  padding: 1.5rem; }
table#flips tr.widens td.flip { color: var(--bad); font-weight: 600; }
.alert { color: #fff; background: var(--bad); padding: .8rem 1rem; font-weight: 600; }
.alert pre { color: var(--fg); margin-top: .4rem; font-weight: 400; }
ul.counts li { margin: .3rem 0; }
ol.errors { font-family: ui-monospace, monospace; font-size: .85rem; }
form#replay textarea { min-height: 12rem; font-family: ui-monospace, monospace; font-size: .85rem; }
form#replay .filters { display: flex; flex-wrap: wrap; gap: .6rem; margin: .6rem 0; }
form#replay .filters label { display: flex; flex-direction: column; font-size: .8rem; color: var(--muted); }
.login input { width: 100%; box-sizing: border-box; margin: .5rem 0 1rem; }
"#;

/// The one script: the pending list follows the store live (server-sent events), re-reading its
/// table from the server, which escapes it as it escapes every page.
pub(super) const JS: &str = r#"
(function () {
  var section = document.getElementById('pending-section');
  if (!section || !window.EventSource) { return; }
  var source = new EventSource('/approvals/events');
  source.onmessage = function () {
    fetch('/approvals/table' + window.location.search, { credentials: 'same-origin' })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) { if (text !== null) { section.innerHTML = text; } });
  };
})();
"#;

/// What the console's pages may load and do: its own style sheet and script, forms posted to
/// itself, nothing framed.
pub(super) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: &str) -> String {
        let mut out = String::new();
        Shown(text).render_to(&mut out);
        out
    }

    /// Every character of Unicode, alone and between markup: what could hide or reorder text is a
    /// marker naming it, what HTML reads as markup is an entity, the rest is itself.
    #[test]
    fn every_character_is_shown_as_itself_an_entity_or_a_visible_marker() {
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            let out = shown(&format!("<{c}>"));
            let inner = out
                .strip_prefix("&lt;")
                .and_then(|rest| rest.strip_suffix("&gt;"))
                .unwrap_or_else(|| panic!("{c:?}: {out}"));
            if crate::terminal::hides(c) {
                let code = format!("U+{:04X}", u32::from(c));
                assert_eq!(
                    inner,
                    format!(
                        "<span class=\"invisible\" title=\"{code} (hidden or reordering character)\">{code}</span>"
                    ),
                    "{c:?}"
                );
            } else {
                let expected = match c {
                    '&' => "&amp;".to_owned(),
                    '<' => "&lt;".to_owned(),
                    '>' => "&gt;".to_owned(),
                    '"' => "&quot;".to_owned(),
                    '\'' => "&#39;".to_owned(),
                    c => c.to_string(),
                };
                assert_eq!(inner, expected, "{c:?}");
            }
        }
    }

    #[test]
    fn a_typed_marker_is_not_a_marker() {
        // Text that spells a marker's markup is escaped: only a real hidden character makes a span.
        let typed = "<span class=\"invisible\">U+202E</span>";
        assert!(!shown(typed).contains("<span"));
        assert_ne!(shown("U+202E"), shown("\u{202E}"));
    }
}
