//! What the attacks on the operator console share: the console run as the `toolgate console` command
//! (or served in this process), a browser that speaks raw HTTP/1.1 to it and keeps its session cookie,
//! and checks of the pages' HTML: no element or attribute that a text of the store put there, every
//! hidden or reordering character drawn as its marker.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long any one exchange with the console may take before the test fails.
pub(crate) const EXCHANGE_WITHIN: Duration = Duration::from_secs(30);

/// The console's session cookie.
pub(crate) const COOKIE: &str = "toolgate_console";

// ---------------------------------------------------------------------------------------------------
// HTTP.

/// An answer of the console.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) body: String,
}

impl Reply {
    fn parse(raw: &[u8]) -> Reply {
        let text = String::from_utf8_lossy(raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut reply = Reply {
            status,
            head: head.to_owned(),
            body: body.to_owned(),
        };
        if reply
            .header("transfer-encoding")
            .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
        {
            reply.body = dechunk(&reply.body);
        }
        reply
    }

    /// The status of an answer whose head is at the start of `text` (0 if none came).
    pub(crate) fn parse_head(text: &str) -> u16 {
        Reply::parse(text.as_bytes()).status
    }

    /// The first value of the header `name` (any case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers(name).into_iter().next()
    }

    /// Every value of the header `name` (any case).
    pub(crate) fn headers(&self, name: &str) -> Vec<&str> {
        self.head
            .lines()
            .skip(1)
            .filter_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim()
                    .eq_ignore_ascii_case(name)
                    .then_some(value.trim())
            })
            .collect()
    }

    /// The session cookie this answer sets, if any.
    pub(crate) fn session_cookie(&self) -> Option<String> {
        self.headers("set-cookie").into_iter().find_map(|cookie| {
            let pair = cookie.split(';').next()?.trim();
            let (name, value) = pair.split_once('=')?;
            (name == COOKIE && !value.is_empty()).then(|| value.to_owned())
        })
    }

    /// Whether the answer sends the browser to the log-in page.
    pub(crate) fn to_login(&self) -> bool {
        (300..400).contains(&self.status)
            && self
                .header("location")
                .is_some_and(|l| l.starts_with("/login"))
    }

    /// A short account of the answer, for an assertion's message.
    pub(crate) fn describe(&self) -> String {
        let body: String = self.body.chars().take(3000).collect();
        format!("{}\n\n{body}", self.head)
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            out.push_str(&after[..after.len().min(size)]);
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").unwrap_or(&after[size..]);
    }
    out
}

/// Sends `request` (head and body, whole) to `addr` and reads the answer until the server closes.
pub(crate) fn exchange(addr: SocketAddr, request: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("the console accepts a connection");
    stream.set_read_timeout(Some(EXCHANGE_WITHIN)).unwrap();
    // A server may answer and close before reading a request it refuses: its answer is still read.
    let _ = stream.write_all(request);
    let mut raw = Vec::new();
    let mut buf = [0_u8; 16384];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    Reply::parse(&raw)
}

/// `text` encoded for a URL's query or a form's body.
pub(crate) fn urlencode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A form's body of `fields`.
pub(crate) fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A browser on the console: its session cookie (if logged in), sending what a browser sends for the
/// console's own pages and forms unless told otherwise.
#[derive(Debug, Clone)]
pub(crate) struct Browser {
    pub(crate) addr: SocketAddr,
    pub(crate) cookie: Option<String>,
}

impl Browser {
    /// A browser with no session.
    pub(crate) fn new(addr: SocketAddr) -> Browser {
        Browser { addr, cookie: None }
    }

    /// A browser with the session cookie `cookie`.
    pub(crate) fn with_cookie(addr: SocketAddr, cookie: &str) -> Browser {
        Browser {
            addr,
            cookie: Some(cookie.to_owned()),
        }
    }

    /// The console's own origin.
    pub(crate) fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn cookie_line(&self) -> String {
        match &self.cookie {
            Some(cookie) => format!("Cookie: {COOKIE}={cookie}\r\n"),
            None => String::new(),
        }
    }

    /// `GET path`, as a browser follows a link of the console.
    pub(crate) fn get(&self, path: &str) -> Reply {
        self.get_with(path, &[])
    }

    /// `GET path` with extra header lines.
    pub(crate) fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{}",
            self.addr,
            self.cookie_line()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        exchange(self.addr, request.as_bytes())
    }

    /// A form posted from one of the console's pages: same origin, the cookie, `fields` as they are.
    pub(crate) fn post(&self, path: &str, fields: &[(&str, &str)]) -> Reply {
        let origin = self.origin();
        self.post_raw(
            path,
            &form(fields),
            &[("Origin", &origin), ("Sec-Fetch-Site", "same-origin")],
        )
    }

    /// `POST path` with `body` (a form's) and exactly the extra `headers`.
    pub(crate) fn post_raw(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: \
             application/x-www-form-urlencoded\r\nContent-Length: {}\r\n{}",
            self.addr,
            body.len(),
            self.cookie_line()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        exchange(self.addr, request.as_bytes())
    }

    /// The session's CSRF token, as the console's pages carry it in their forms.
    #[track_caller]
    pub(crate) fn csrf(&self) -> String {
        let page = self.get("/approvals");
        assert_eq!(page.status, 200, "{}", page.describe());
        input_value(&page.body, "csrf").expect("a CSRF token in the page's forms")
    }
}

/// Logs in with `token` from the log-in form: the browser, or the answer that refused it.
pub(crate) fn try_login(addr: SocketAddr, token: &str) -> Result<Browser, Reply> {
    let browser = Browser::new(addr);
    let reply = browser.post("/login", &[("token", token)]);
    match reply.session_cookie() {
        Some(cookie) => Ok(Browser::with_cookie(addr, &cookie)),
        None => Err(reply),
    }
}

/// Logs in with `token`, which must be let in.
#[track_caller]
pub(crate) fn login(addr: SocketAddr, token: &str) -> Browser {
    try_login(addr, token).unwrap_or_else(|reply| panic!("not let in: {}", reply.describe()))
}

// ---------------------------------------------------------------------------------------------------
// Reading pages.

/// The value of the first `<input name="NAME" value="...">` of `html`, unescaped.
pub(crate) fn input_value(html: &str, name: &str) -> Option<String> {
    elements(html)
        .into_iter()
        .find(|e| e.name == "input" && e.attr("name") == Some(name))
        .and_then(|e| e.attr("value").map(unescape))
}

/// An element's start tag, as the page's HTML has it.
#[derive(Debug, Clone)]
pub(crate) struct Element {
    pub(crate) name: String,
    pub(crate) attrs: Vec<(String, Option<String>)>,
}

impl Element {
    pub(crate) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_deref().unwrap_or(""))
    }
}

/// The start tags of `html`, as a browser's tokenizer reads them (simplified: no comments inside
/// attributes, raw text of `script` and `style` skipped).
pub(crate) fn elements(html: &str) -> Vec<Element> {
    let bytes = html.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'<' {
            i += 1;
            continue;
        }
        if html[i..].starts_with("<!--") {
            i = html[i..].find("-->").map_or(bytes.len(), |end| i + end + 3);
            continue;
        }
        let Some(&next) = bytes.get(i + 1) else { break };
        if !next.is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < bytes.len()
            && !matches!(
                bytes[j],
                b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'/' | b'>'
            )
        {
            j += 1;
        }
        let name = html[i + 1..j].to_ascii_lowercase();
        let mut attrs = Vec::new();
        // Attributes.
        loop {
            while j < bytes.len()
                && matches!(bytes[j], b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'/')
            {
                j += 1;
            }
            if j >= bytes.len() || bytes[j] == b'>' {
                j += 1;
                break;
            }
            let start = j;
            j += 1;
            while j < bytes.len()
                && !matches!(
                    bytes[j],
                    b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'/' | b'>' | b'='
                )
            {
                j += 1;
            }
            let attr = html[start..j].to_ascii_lowercase();
            while j < bytes.len() && matches!(bytes[j], b' ' | b'\t' | b'\n' | b'\r' | b'\x0c') {
                j += 1;
            }
            if j < bytes.len() && bytes[j] == b'=' {
                j += 1;
                while j < bytes.len() && matches!(bytes[j], b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
                {
                    j += 1;
                }
                let value = match bytes.get(j) {
                    Some(&q) if q == b'"' || q == b'\'' => {
                        let end = html[j + 1..]
                            .find(q as char)
                            .map_or(bytes.len(), |e| j + 1 + e);
                        let value = html[j + 1..end.min(bytes.len())].to_owned();
                        j = end + 1;
                        value
                    }
                    _ => {
                        let start = j;
                        while j < bytes.len()
                            && !matches!(bytes[j], b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'>')
                        {
                            j += 1;
                        }
                        html[start..j].to_owned()
                    }
                };
                attrs.push((attr, Some(value)));
            } else {
                attrs.push((attr, None));
            }
        }
        let raw_text = matches!(name.as_str(), "script" | "style" | "textarea" | "title");
        out.push(Element {
            name: name.clone(),
            attrs,
        });
        i = j.min(bytes.len());
        if raw_text {
            let close = format!("</{name}");
            i = html[i..]
                .to_ascii_lowercase()
                .find(&close)
                .map_or(bytes.len(), |end| i + end);
        }
    }
    out
}

/// The text of `html` as a reader sees it: tags dropped, the character references the console writes
/// resolved.
pub(crate) fn visible_text(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                text.push(' ');
            }
            _ if !in_tag => text.push(c),
            _ => {}
        }
    }
    unescape(&text)
}

/// `text` with HTML's character references resolved (the named ones HTML escaping writes, and
/// numeric ones).
pub(crate) fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';').filter(|e| *e <= 12) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..end];
        let resolved = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "nbsp" => Some('\u{a0}'),
            _ => entity
                .strip_prefix("#x")
                .or_else(|| entity.strip_prefix("#X"))
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match resolved {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The attributes that run script or load from elsewhere, whatever element holds them.
fn dangerous_attribute(name: &str, value: Option<&str>) -> bool {
    if name.starts_with("on") || name == "style" || name == "srcdoc" || name == "formaction" {
        return true;
    }
    let url_valued = matches!(
        name,
        "href" | "src" | "action" | "xlink:href" | "data" | "poster" | "background" | "ping"
    );
    if url_valued && let Some(value) = value {
        let value: String = unescape(value)
            .chars()
            .filter(|c| !c.is_whitespace() && !c.is_control())
            .collect::<String>()
            .to_ascii_lowercase();
        // Only the console's own paths: absolute paths, or fragments.
        let own = (value.starts_with('/') && !value.starts_with("//"))
            || value.starts_with('#')
            || value.starts_with('?');
        return !own;
    }
    false
}

/// Asserts that `page` holds no element or attribute that the text of the store put there: no
/// element other than those a console page is made of, no attribute that runs script, styles inline
/// or points elsewhere, no attribute or element named with `marker` (which every injected text
/// carries), and no script but the console's own.
#[track_caller]
pub(crate) fn assert_inert(what: &str, page: &Reply, marker: &str) {
    const ELEMENTS: &[&str] = &[
        "html",
        "head",
        "meta",
        "title",
        "link",
        "script",
        "body",
        "header",
        "nav",
        "main",
        "section",
        "div",
        "span",
        "p",
        "a",
        "h1",
        "h2",
        "h3",
        "h4",
        "strong",
        "em",
        "code",
        "pre",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "form",
        "label",
        "input",
        "select",
        "option",
        "button",
        "textarea",
        "dl",
        "dt",
        "dd",
        "ul",
        "ol",
        "li",
        "small",
        "br",
        "hr",
        "svg",
        "text",
        "line",
        "rect",
        "g",
        "path",
        "polyline",
        "circle",
        "title",
        "details",
        "summary",
        "kbd",
        "mark",
        "b",
        "i",
        "abbr",
        "time",
        "caption",
        "fieldset",
        "legend",
        "tfoot",
        "col",
        "colgroup",
        "article",
        "aside",
        "footer",
        "figure",
        "figcaption",
        "output",
        "samp",
        "var",
        "q",
        "sub",
        "sup",
        "wbr",
        "del",
        "ins",
    ];
    let marker = marker.to_ascii_lowercase();
    for element in elements(&page.body) {
        assert!(
            ELEMENTS.contains(&element.name.as_str()) && !element.name.contains(&marker),
            "{what}: an element <{}> on the page: {element:?}\n{}",
            element.name,
            page.describe()
        );
        if element.name == "script" {
            assert_eq!(
                element.attr("src"),
                Some("/assets/console.js"),
                "{what}: a script that is not the console's own: {element:?}"
            );
        }
        if element.name == "meta" {
            assert!(
                element.attr("http-equiv").is_none(),
                "{what}: a <meta http-equiv> on the page: {element:?}"
            );
        }
        if element.name == "link" {
            assert_eq!(
                element.attr("href"),
                Some("/assets/console.css"),
                "{what}: a link that is not the console's style sheet: {element:?}"
            );
        }
        for (name, value) in &element.attrs {
            if element.name == "svg" && name == "xmlns" {
                continue;
            }
            assert!(
                !dangerous_attribute(name, value.as_deref()) && !name.contains(&marker),
                "{what}: the attribute {name}={value:?} of <{}> on the page\n{}",
                element.name,
                page.describe()
            );
        }
    }
}

/// Characters that could hide or reorder text: controls, bidirectional controls, zero-width and
/// other default-ignorable characters, separators of lines and paragraphs.
pub(crate) const HIDING: &[char] = &[
    '\u{202e}',
    '\u{202d}',
    '\u{2066}',
    '\u{2067}',
    '\u{2068}',
    '\u{2069}',
    '\u{200e}',
    '\u{200f}',
    '\u{061c}',
    '\u{200b}',
    '\u{200c}',
    '\u{200d}',
    '\u{2060}',
    '\u{2064}',
    '\u{feff}',
    '\u{ad}',
    '\u{34f}',
    '\u{e0041}',
    '\u{e007f}',
    '\u{2028}',
    '\u{2029}',
    '\u{180e}',
    '\u{115f}',
    '\u{1160}',
    '\u{3164}',
    '\u{ffa0}',
    '\u{fe0f}',
    '\u{17b4}',
    '\u{1d173}',
    '\u{1b}',
    '\u{7}',
    '\u{85}',
    '\u{9b}',
    '\u{8}',
    '\u{7f}',
    '\u{0}',
];

/// `HIDING` as one text, each after an `x`.
pub(crate) fn hiding_text() -> String {
    HIDING.iter().map(|c| format!("x{c}")).collect()
}

/// The marker the console draws for `c`: `U+` and its code point, four hex digits at least.
pub(crate) fn marker_of(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

/// Asserts that the text of `page` (character references resolved) holds none of `chars` raw, and
/// shows each as its visible marker.
#[track_caller]
pub(crate) fn assert_marked(what: &str, page: &Reply, chars: &[char]) {
    let text = visible_text(&page.body);
    let raw_body = &page.body;
    for &c in chars {
        let marker = marker_of(c);
        assert!(
            !text.contains(c) && !raw_body.contains(c),
            "{what}: {c:?} reaches the page raw, not as {marker}"
        );
        assert!(
            text.to_ascii_uppercase().contains(&marker),
            "{what}: no visible {marker} for {c:?} on the page\n{}",
            page.describe()
        );
    }
}

// ---------------------------------------------------------------------------------------------------
// The console.

/// A TOML operators file in `dir` naming each operator's token by its SHA-256.
pub(crate) fn operators_file(dir: &Path, operators: &[(&str, &str)]) -> PathBuf {
    let mut toml = String::from("[operators]\n");
    for (name, token) in operators {
        toml.push_str(&format!(
            "{} = \"{}\"\n",
            toml_key(name),
            super::sha256_hex(token)
        ));
    }
    let path = dir.join(format!("operators-{}.toml", operators.len()));
    std::fs::write(&path, toml).expect("the operators file");
    path
}

fn toml_key(name: &str) -> String {
    let mut key = String::from("\"");
    for c in name.chars() {
        match c {
            '"' => key.push_str("\\\""),
            '\\' => key.push_str("\\\\"),
            c if c.is_control() => key.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => key.push(c),
        }
    }
    key.push('"');
    key
}

/// `toolgate console` run as a command, on a port of its own.
pub(crate) struct ConsoleProcess {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl ConsoleProcess {
    /// `toolgate console --store URL --listen 127.0.0.1:0 --operators FILE ARGS`, once it listens.
    pub(crate) fn start(url: &str, operators: &Path, args: &[&str]) -> ConsoleProcess {
        Self::try_start(url, operators, args).unwrap_or_else(|said| {
            panic!("the console did not start: {said}");
        })
    }

    /// As [`ConsoleProcess::start`], or what it said when it stopped without listening.
    pub(crate) fn try_start(
        url: &str,
        operators: &Path,
        args: &[&str],
    ) -> Result<ConsoleProcess, String> {
        Self::try_start_at(url, operators, "127.0.0.1:0", args)
    }

    /// As [`ConsoleProcess::try_start`], listening on `listen`.
    pub(crate) fn try_start_at(
        url: &str,
        operators: &Path,
        listen: &str,
        args: &[&str],
    ) -> Result<ConsoleProcess, String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .arg("console")
            .args(["--store", url, "--listen", listen, "--operators"])
            .arg(operators)
            .args(args)
            .env_remove("TOOLGATE_STORE")
            .env_remove("TOOLGATE_STORE_SCHEMA")
            .env_remove("TOOLGATE_CONSOLE_OPERATORS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("toolgate console starts");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let pipe = child.stderr.take().unwrap();
            let stderr = stderr.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Some(addr) = line.split("listening on http://").nth(1) {
                        let _ = tx.send(addr.trim().to_owned());
                    }
                    let mut all = stderr.lock().unwrap();
                    all.push_str(&line);
                    all.push('\n');
                }
            });
        }
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => Ok(ConsoleProcess {
                child,
                addr: addr.parse().expect("the console's address"),
            }),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                std::thread::sleep(Duration::from_millis(100));
                Err(format!(
                    "{status:?}: {}",
                    stderr.lock().unwrap_or_else(|e| e.into_inner())
                ))
            }
        }
    }

    /// A browser with no session on this console.
    pub(crate) fn browser(&self) -> Browser {
        Browser::new(self.addr)
    }

    /// Whether the console's process is still running.
    pub(crate) fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ConsoleProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (up to a minute) for `condition`.
pub(crate) fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A console served in this process, on a runtime of its own, until dropped.
pub(crate) struct InProcessConsole {
    pub(crate) addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcessConsole {
    /// `builder` connected to `url` and served on a port of its own.
    pub(crate) fn start(builder: toolgate::console::ConsoleBuilder, url: &str) -> InProcessConsole {
        Self::start_with(move || async move { builder }, url)
    }

    /// The builder `make` makes on the console's runtime (for what must be built there), connected to
    /// `url` and served on a port of its own.
    pub(crate) fn start_with<F, Fut>(make: F, url: &str) -> InProcessConsole
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = toolgate::console::ConsoleBuilder>,
    {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel();
        let url = url.to_owned();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let builder = make().await;
                let console = match builder.connect(&url).await {
                    Ok(console) => console,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("a port");
                let _ = tx.send(Ok(listener.local_addr().expect("its address")));
                tokio::select! {
                    _ = console.serve(listener) => {}
                    _ = stopped => {}
                }
            });
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the console starts")
            .unwrap_or_else(|e| panic!("the console did not connect: {e}"));
        InProcessConsole {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for InProcessConsole {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Keys of an authorization server made for these tests alone (RS256, what `toolgate console --jwks`
// pins), with the modulus of each in base64url for its JWK.

/// The authorization server's key.
pub(crate) const RSA_KEY: &str = "-----BEGIN RSA PRIVATE KEY-----
MIIEogIBAAKCAQEArpMXuCqnZBnd3KPy+KOnDx6yue69zOU4ZAagkx/RBqbKmTzz
+iKaGzxhFNZIweJLdQpNvTTLlmSTDdChi+hhcRdT6A1dxcIxFD9qWl+/NR+HcWbU
cfuCvCOqBPx9kjkLpH88QchnQrQD/yRPekF1K/iYtAmN8b0wpwVJUX7HqDB7cqof
aJogzpuX0NY+T7hNPBbYKqIpxjOXXX3tiM1jsNG4pB46Pl3YT423rsm5B7BGJhZL
ujsqESJGI/WIwGuxZNnT1UZeDr9WpCNKC4BVumcKu6h9iwMs0BDes3IRn5LwnJwL
l4At5bbNjhrE0WX8xjIqTYHuE6uyrfbo0752+wIDAQABAoIBAAgTlg1XK9dduv3y
N9N4/smcSfiAKxfHoww9okAsQKdmIAlm4IK6Bxcre/JS15rgtUz85QvT3Xdfv83r
0Q1/+sIYqjEaLTRw/4RISstTkq0KgGGmuD1tvWam377LT6PsL7W0jT0d4GkdmvG6
5FJrpNgb8DSkHIUKk62mePXkP6hwQjY5rns8A/bEayPM1rZn8cX7tGYGoPScBL8z
l3oNa5qvkjLKAeIUD5iHi5BB+frk5/hdRb8Igxuvro8VpCAkuco2gOm0nTJstV6L
NRlSwN79SWmnIkMz8rY2a0HoPCPU+JVuXND51Li/doF2bXprsea24bMhQ7h2C4rq
NbWp6oECgYEA041T0fmWe7sj/gOWs6j5zwUTq5/ouzCGj5KtcWMkCehDvCKOv9H/
gJ2AVQnSuwcSRN0DQzqnw80tWA/fZ9mR1bbb/qYKFLHzA8ZyS/ik2qg43M0Dsx/8
c+KtYYPuCIVwk0aQ+QBca5sUGDaMKt6QX/vJzYlWrphA65I3EltdyVMCgYEA00Df
BhhYJS3HJO2sFCvsaMZsWE0AcQNbL19jK/dRECYs+6GgpU7SYXCa4v+vNE22wVjX
wIkt5j+rHXcGUmXEFIIPzmmItNeSQFqaZQlp0WIKWJNpBPxm0GLS0OpS5EiltPF9
CTCVblEJcQrQNeiae31Ww/Essio2bd3L8X/W3rkCgYAzUYNV2m/wz/LpOcGjD4iZ
+adN6NqyHhFmXrSIXv5tENTtnIx4Z97NOmfZOSrPh+WcouiZtG7iBrHLPP562MKR
z2wKmAi2AHztG4S6fTSwfkJc/ba6CzZYflKE51Yk5wnqECI25SmGSPZU8VaLR7ZK
MnA/1eMbM3/8JVoKr/NOVQKBgEFL/uOiaLRtNu3aLOM7RGKKWnjcrDNCZ0/4Ou4f
DsZgFm1c4wvVlj+aD7X0dBJFpySSMnYHsNFHgrujy6dyXy47mWkiw6eqLkGH/8sV
IskedbY1MjPhVGI6+ZCrrR10uwt3zT8m7jlgAPwY7IyNLhrXfhcol7kmRRamhOBL
tH25AoGAekrZnoaxzxH9QHFAdjstrhdh3riahzf+0z39LUMSF1WKW51AuRqarELP
k2Az5tyxDnuylgVHnfzoOqVv0N7D1GYGbz77CQd/yZEgGF2CZ+vlNiGvDrAd2B1w
c3CqlIvocXdzs4oHT9n8Kl/ULPn1y+MJmM1fR3eMgfibd48KSEY=
-----END RSA PRIVATE KEY-----";
/// Its modulus.
pub(crate) const RSA_N: &str = "rpMXuCqnZBnd3KPy-KOnDx6yue69zOU4ZAagkx_RBqbKmTzz-iKaGzxhFNZIweJLdQpNvTTLlmSTDdChi-hhcRdT6A1dxcIxFD9qWl-_NR-HcWbUcfuCvCOqBPx9kjkLpH88QchnQrQD_yRPekF1K_iYtAmN8b0wpwVJUX7HqDB7cqofaJogzpuX0NY-T7hNPBbYKqIpxjOXXX3tiM1jsNG4pB46Pl3YT423rsm5B7BGJhZLujsqESJGI_WIwGuxZNnT1UZeDr9WpCNKC4BVumcKu6h9iwMs0BDes3IRn5LwnJwLl4At5bbNjhrE0WX8xjIqTYHuE6uyrfbo0752-w";
/// A key the console does not trust.
pub(crate) const RSA_FORGER_KEY: &str = "-----BEGIN RSA PRIVATE KEY-----
MIIEpAIBAAKCAQEAwrEH11TkRCvOOO3sjsvZGlVHhfO21AXjIG9/byYPKuClYtMt
oYzZx1z6UHGNhBWYyOx0wjQdeiMmGPwsy6IsAi9dJMRd03rsExHxam9RArmkPjCC
Lo1IiRrxqIIOZgDcVcB1iiYObigc84XNr5J4Y1zdKZSXlsTX0SAVsfieFPAbEHwN
JvEYPUTtfKWyZD2srgJxFvfJQrKlT3dT24jA0CK2XGFouIC49uT1vGzopbwOuYib
a+Prnh2u8MVGuzH/wS0l1T+jgvML2X0CfWDMIN8lqVvRFcrCxU8waOl/5ujLe9T1
Rp1rEl9q3dPmOG+V+jZM7bvz8d+erKvrP/+0rwIDAQABAoIBAC4ey9G53X08t1SL
ID/PkHWJgDD+Q/BEGMLlRtXouS0aHHOlvSiI+koc/3sw+yowB4qJYTtkJxt42hyP
GHmAyFYYLEN6dROVCfmWhY8GIbW4jmzhBuXKOEWqaVbWwFxvlcKGnhGE5GQ6Amm5
57jQxM4dAJNKDQL9THbQ1/LaB3DD6l0kZYgmP8GujIk+4s53mHz1dsPq/VtMs4Il
2pURKwudBFeS39gNwlBWF+nloK6CjTRN5Gyi8eWO+N0Nf8lWce0Cu7/7OAtSi+zm
ElxMN6zUsXkO3Eqo2icT5ZdPGto6F2OYhhzD+9cfhYWHYGk6MJItotVyb32ExKCr
UF4NoWECgYEA7UkS3tLRe7QTUtekGaHLJFOIk0fY6KNpzEgpqoZwjST45E5DH4hp
AUQfFLOwTv66pU26i80MHGDcWTGxsNsR8zr8E0R6GMsH+4VdIqCUj+W79KBTNkRI
JUc7C1Q8seQ36tbfxwUZmIlW5YFjbJxmBzXbZFBYkK4z/SEziwSyF78CgYEA0gv2
OKiWI8jBgTAnicw4E/YOOjGRMeC7BkMFwUsBzqQOKxbBWBAG7Nevsk2OG06q0ECR
Wd03gYhErOSmcaJaAVpvIGep6+YYfQUwbPlMdVVdweIpi4pfO1TaooNkCKRORsTq
d6ErS+3xeXRu7Q8sgJiv+lstpj7eItT/fZO0HxECgYEA6d4Y1Dcystq0JPVWztCR
WHdgZ9Drb7cIIoiJUIH60pI7IUIllCGtZMsQWyYTQnh720r17q4lHp807lA1UxtH
4NQk+JSIRoFtl7BFMEjWw9Do5F1URmscNGm1PyBCRg6qMjKgEhbruFS8qa1SIg0v
3jFtz7wE3mxj3zvnAkCZix8CgYB/GrHyc0H3gYJnFKa4YhYFLj5JxLjh/+Xs0h3n
a+Y6D1hrhqeVDI3EQHiXYwr9R0tiHdBXGuB9x+IW5X47AU2JyBm6+EAA+goTjVJS
f0FfNzs3Gg6d3CvokV6EPRIJkLO1a2+e2K6EkgYvwt9lIGuDneHPk+E52o09crrw
WLMEoQKBgQDJ3M6Kq4kpeH+d384cEUZwWT570lj97V4+AzWqurZH8/bczPifrekd
G7KKQ91UKu7ov6osiaITitguyyRXjPhExN/OZhbsRF5nzZL3ts9LtNC+a0KCOFjq
lGi0gqFkiJBAGbZvPuRT0zUisD1XVAu+2JqhpqMHbS7Bv0KoC0o+ZA==
-----END RSA PRIVATE KEY-----";

/// What a reader is shown of `html`: its text, and the attributes a browser shows (titles,
/// placeholders, alternative texts, labels, the values of fields that are not hidden). The fields a
/// form sends unseen (hidden inputs) carry a text as it is, to name it.
pub(crate) fn shown_text(html: &str) -> String {
    let mut shown = visible_text(html);
    for element in elements(html) {
        let hidden_input = element.name == "input" && element.attr("type") == Some("hidden");
        for (name, value) in &element.attrs {
            let seen = matches!(
                name.as_str(),
                "title" | "placeholder" | "alt" | "aria-label"
            ) || (name == "value" && !hidden_input);
            if seen && let Some(value) = value {
                shown.push(' ');
                shown.push_str(&unescape(value));
            }
        }
    }
    shown
}

/// Asserts that what `page` shows (see [`shown_text`]) holds none of `chars` raw, and shows each as
/// its visible marker.
#[track_caller]
pub(crate) fn assert_shown_marked(what: &str, page: &Reply, chars: &[char]) {
    let shown = shown_text(&page.body);
    let text = visible_text(&page.body).to_ascii_uppercase();
    for &c in chars {
        let marker = marker_of(c);
        if let Some(at) = shown.find(c) {
            let from = shown[..at]
                .char_indices()
                .rev()
                .nth(100)
                .map_or(0, |(i, _)| i);
            let context: String = shown[from..].chars().take(200).collect();
            panic!("{what}: {c:?} is shown raw, not as {marker}, in: {context:?}");
        }
        assert!(
            text.contains(&marker),
            "{what}: no visible {marker} for {c:?} on the page\n{}",
            page.describe()
        );
    }
}
