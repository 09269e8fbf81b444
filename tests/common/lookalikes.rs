// The one corpus of look-alikes: names, and spellings of them that a person reads as them. Every
// place that compares names a person reads is tested against it (docs/testing.md lists them), and
// the runtime's own `names` module includes this file for its unit tests. Plain items only: it is
// `include!`d as well as declared as a module.

/// Each name, and spellings that read as it: spaces around it, characters a reader cannot see or that
/// reorder text, Unicode's compatibility forms (fullwidth, mathematical bold, circled, modifier
/// letters), letters of other scripts that look the same (Cyrillic, Greek, Armenian, Hebrew, a whole
/// word in Cyrillic), Latin letters beyond ASCII that read as ASCII ones (a dotless `ı`), dashes and
/// quotes that read as ASCII ones, and path spellings of `.`, `..` and `~` (one through a folder and
/// back: `x/..`).
pub const LOOK_ALIKES: &[(&str, &[&str])] = &[
    (
        "olga",
        &[
            "olga ",
            " olga",
            "olga\u{a0}",
            "\u{3000}olga",
            "\u{43e}lga",
            "olg\u{430}",
            "\u{3bf}lga",
            "ｏｌｇａ",
            "\u{1d428}\u{1d425}\u{1d420}\u{1d41a}",
            "\u{24de}\u{24db}\u{24d6}\u{24d0}",
            "o\u{200b}lga",
            "olga\u{feff}",
            "\u{2066}olga\u{2069}",
            "ol\u{ad}ga",
            "\u{585}lga",
            "o\u{5d5}ga",
            "olg\u{251}",
        ],
    ),
    (
        "alice",
        &[
            "\u{430}lice",
            "al\u{456}ce",
            "alic\u{435}",
            "ａｌｉｃｅ",
            "alice\u{200d}",
            " alice",
            "\u{1d41a}lice",
        ],
    ),
    (
        "all",
        &[
            "\u{1d41a}\u{1d425}\u{1d425}",
            "\u{24d0}\u{24db}\u{24db}",
            "\u{1d43}\u{2e1}\u{2e1}",
            "ａｌｌ",
            "\u{430}ll",
            "a\u{200b}ll",
            "all ",
        ],
    ),
    (
        "ALL",
        &[
            "ＡＬＬ",
            "\u{1d2c}\u{1d38}\u{1d38}",
            "\u{1d400}\u{1d40b}\u{1d40b}",
            "\u{410}LL",
        ],
    ),
    (
        ".",
        &[
            "./",
            "./.",
            ".//",
            "./././",
            "．",
            " . ",
            "x/..",
            "a/b/../..",
        ],
    ),
    (
        "..",
        &["../", "..//", "./..", "．．", "../.", "x/../..", "../x/.."],
    ),
    ("~", &["~/", "~//", "～", "~/.", "~/x/.."]),
    ("desk", &["d\u{435}sk", "ｄｅｓｋ", "desk\u{200b}"]),
    ("prod", &["pr\u{585}d", "pr\u{5e1}d", "pr\u{43e}d"]),
    ("link", &["l\u{131}nk", "\u{5d5}ink", "l\u{456}nk"]),
    (
        "desk-a",
        &[
            "desk\u{2013}a",
            "desk\u{2010}a",
            "desk\u{2212}a",
            "desk\u{2d7}a",
        ],
    ),
    (
        "o'brien",
        &["o\u{2019}brien", "o\u{2bc}brien", "o\u{5f3}brien"],
    ),
    ("oca", &["\u{43e}\u{441}\u{430}"]),
    (
        "ops:alice",
        &["ops:\u{430}lice", "ｏｐｓ：ａｌｉｃｅ", "ops:alice "],
    ),
];

/// Names that read differently: no two of them are one name.
pub const DISTINCT: &[&str] = &[
    "olga",
    "Olga",
    "ravi",
    "alice",
    "bob",
    "desk",
    "ops",
    "olga-k",
    "fleet-a",
    "fleet-b",
    "writer-a",
    "i-0abc123",
    "org/repo",
    "org/repo2",
    "/",
    ".",
    "..",
    "~",
    "all",
    "any",
    "Ольга",
    "日本",
    "prod",
    "link",
    "desk-a",
    "o'brien",
    "oca",
];

/// Characters a reader cannot see, or that reorder text: put anywhere in a name, it reads the same.
pub const HIDDEN: &[&str] = &[
    "\u{200b}",
    "\u{200c}",
    "\u{200d}",
    "\u{2060}",
    "\u{feff}",
    "\u{ad}",
    "\u{202e}",
    "\u{202d}",
    "\u{2066}",
    "\u{2069}",
    "\u{200e}",
    "\u{e0041}",
    "\u{180e}",
];

/// Each plain character's look-alikes: fullwidth, mathematical bold and circled forms, the letters of
/// Cyrillic, Greek, Armenian and Hebrew that look the same, Latin's dotless `ı`, and dashes.
pub fn look_alikes_of(c: char) -> Vec<String> {
    let code = u32::from(c);
    let mut forms = Vec::new();
    if ('!'..='~').contains(&c) {
        forms.extend(char::from_u32(code + 0xFEE0));
    }
    if c.is_ascii_lowercase() {
        let at = code - u32::from('a');
        forms.extend(char::from_u32(0x1D41A + at));
        forms.extend(char::from_u32(0x24D0 + at));
    }
    if c.is_ascii_digit() {
        forms.extend(char::from_u32(0x1D7CE + code - u32::from('0')));
    }
    let other = match c {
        'a' => "\u{430}\u{251}",
        'c' => "\u{441}",
        'e' => "\u{435}",
        'g' => "\u{581}",
        'h' => "\u{570}",
        'i' => "\u{456}\u{131}",
        'j' => "\u{458}\u{575}",
        'l' => "\u{5d5}\u{5c0}",
        'n' => "\u{578}",
        'o' => "\u{43e}\u{3bf}\u{585}\u{5e1}",
        'p' => "\u{440}",
        'q' => "\u{563}",
        's' => "\u{455}",
        'u' => "\u{57d}",
        'x' => "\u{445}",
        'y' => "\u{443}",
        '-' => "\u{2010}\u{2013}\u{2212}",
        '_' => "\u{640}",
        _ => "",
    };
    forms.extend(other.chars());
    forms.into_iter().map(String::from).collect()
}
