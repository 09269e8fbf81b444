//! Reports of the manifests (JSON, Markdown, CSV), the manifest digest, and the `clap` integration.

use toolgate::report::{self, Format};
use toolgate::{Mode, Risk, ToolManifest, tool};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Look a user up.
///
/// Only the first line goes into the Markdown table.
#[tool(risk = "READ_ONLY", domain = "users", idempotent)]
#[allow(dead_code, reason = "registered for its manifest, never called")]
fn get_user() -> Result<(), BoxError> {
    Ok(())
}

#[tool(
    risk = "HIGH_WRITE",
    modes = [FULL_AUTO],
    domain = "users",
    description = "Delete a user | for good."
)]
#[allow(dead_code, reason = "registered for its manifest, never called")]
fn delete_user() -> Result<(), BoxError> {
    Ok(())
}

#[tool(
    risk = "PROPOSE_ONLY",
    open_world,
    description = "Draft \"hello\", then\nwave."
)]
#[allow(dead_code, reason = "registered for its manifest, never called")]
fn draft_greeting() -> Result<(), BoxError> {
    Ok(())
}

fn line(id: &str) -> u32 {
    toolgate::registry()
        .manifest(id)
        .expect("tool is linked")
        .source
        .line
}

/// A manifest with every field set here, independent of where the test tools sit in this file.
fn fixed(id: &'static str) -> ToolManifest {
    let mut m = *toolgate::registry().manifest("users.get_user").unwrap();
    m.id = id;
    m.domain = Some("demo");
    m.description = "Say \"hi\", then\nwave é \u{1}/";
    m.risk_level = Risk::LowWrite;
    m.side_effects = true;
    m.allowed_modes = toolgate::policy::ModeSet::of(&[Mode::PartialAuto, Mode::FullAuto]);
    m.idempotent = false;
    m.open_world = true;
    m.source.file = "src/demo.rs";
    m.source.line = 42;
    m.source.module_path = "app::demo";
    m
}

#[test]
fn linked_tools_are_the_three_of_this_file_sorted_by_id() {
    let ids: Vec<&str> = toolgate::manifests().map(|m| m.id).collect();
    assert_eq!(
        ids,
        ["draft_greeting", "users.delete_user", "users.get_user"]
    );
}

#[test]
fn json_pretty_is_an_array_of_manifests() {
    let expected = format!(
        r#"[
  {{
    "id": "draft_greeting",
    "domain": null,
    "description": "Draft \"hello\", then\nwave.",
    "risk_level": "PROPOSE_ONLY",
    "side_effects": false,
    "allowed_modes": [
      "SHADOW",
      "ADVISORY",
      "PARTIAL_AUTO",
      "FULL_AUTO"
    ],
    "idempotent": false,
    "open_world": true,
    "source": {{
      "file": "tests/report.rs",
      "line": {draft},
      "module_path": "report"
    }}
  }},
  {{
    "id": "users.delete_user",
    "domain": "users",
    "description": "Delete a user | for good.",
    "risk_level": "HIGH_WRITE",
    "side_effects": true,
    "allowed_modes": [
      "FULL_AUTO"
    ],
    "idempotent": false,
    "open_world": false,
    "source": {{
      "file": "tests/report.rs",
      "line": {delete},
      "module_path": "report"
    }}
  }}
]"#,
        draft = line("draft_greeting"),
        delete = line("users.delete_user"),
    );
    let two = toolgate::manifests().take(2);
    assert_eq!(report::json_pretty(two.clone()), expected);
    assert_eq!(report::render_manifests(Format::Json, two), expected + "\n");
}

#[test]
fn json_compact_is_one_line_in_the_given_order() {
    let get = toolgate::registry().manifest("users.get_user").unwrap();
    let draft = toolgate::registry().manifest("draft_greeting").unwrap();
    let expected = format!(
        concat!(
            r#"[{{"id":"users.get_user","domain":"users","description":"Look a user up.\n\nOnly the "#,
            r#"first line goes into the Markdown table.","risk_level":"READ_ONLY","side_effects":false,"#,
            r#""allowed_modes":["SHADOW","ADVISORY","PARTIAL_AUTO","FULL_AUTO"],"idempotent":true,"#,
            r#""open_world":false,"source":{{"file":"tests/report.rs","line":{},"module_path":"report"}}}},"#,
            r#"{{"id":"draft_greeting","domain":null,"description":"Draft \"hello\", then\nwave.","#,
            r#""risk_level":"PROPOSE_ONLY","side_effects":false,"#,
            r#""allowed_modes":["SHADOW","ADVISORY","PARTIAL_AUTO","FULL_AUTO"],"idempotent":false,"#,
            r#""open_world":true,"source":{{"file":"tests/report.rs","line":{},"module_path":"report"}}}}]"#,
        ),
        get.source.line, draft.source.line
    );
    assert_eq!(report::json_compact([get, draft]), expected);
}

#[test]
fn markdown_is_a_table_with_first_lines_and_escaped_pipes() {
    let expected = format!(
        "| id | risk | side effects | allowed modes | idempotent | open world | effects | description | source |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n\
         | `draft_greeting` | PROPOSE_ONLY | no | SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO | no | yes | none | \
         Draft \"hello\", then | `tests/report.rs:{}` |\n\
         | `users.delete_user` | HIGH_WRITE | yes | FULL_AUTO | no | no | none | Delete a user \\| for good. | \
         `tests/report.rs:{}` |\n\
         | `users.get_user` | READ_ONLY | no | SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO | yes | no | none | \
         Look a user up. | `tests/report.rs:{}` |\n",
        line("draft_greeting"),
        line("users.delete_user"),
        line("users.get_user"),
    );
    assert_eq!(report::render(Format::Markdown), expected);
    assert_eq!(report::markdown(toolgate::manifests()), expected);
}

#[test]
fn markdown_of_no_tools_is_the_header() {
    assert_eq!(
        report::markdown(Vec::<ToolManifest>::new()),
        "| id | risk | side effects | allowed modes | idempotent | open world | effects | description | source |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    );
}

#[test]
fn markdown_code_spans_survive_backticks() {
    let mut m = fixed("demo.tool");
    m.source.file = "odd`dir/x.rs";
    m.allowed_modes = toolgate::policy::ModeSet::EMPTY;
    let table = report::markdown([m]);
    let row = table.lines().nth(2).unwrap();
    assert_eq!(
        row,
        "| `demo.tool` | LOW_WRITE | yes | none | no | yes | none | Say \"hi\", then | `` odd`dir/x.rs:42 `` |"
    );
}

#[test]
fn the_reports_say_what_an_irreversible_tool_declares() {
    let mut m = fixed("demo.tool");
    m.risk_level = toolgate::Risk::HighWrite;
    m.irreversible = true;
    m.target = Some("instance_id");
    m.evidence = true;
    m.rollback = true;
    let table = report::markdown([m]);
    let row = table.lines().nth(2).unwrap();
    assert!(
        row.contains("| irreversible, target `instance_id`, evidence, rollback |"),
        "{row}"
    );
    let csv = report::csv([m]);
    let record = csv.split("\r\n").nth(1).unwrap();
    assert!(record.ends_with(",true,instance_id,true,true"), "{record}");
    let mut stateful = fixed("demo.stop");
    stateful.rollback = true;
    let table = report::markdown([stateful]);
    assert!(
        table.lines().nth(2).unwrap().contains("| rollback |"),
        "{table}"
    );
}

#[test]
fn csv_quotes_commas_quotes_and_line_breaks() {
    let expected = format!(
        "id,domain,risk_level,side_effects,allowed_modes,idempotent,open_world,description,\
         source_file,source_line,source_module_path,irreversible,target,evidence,rollback\r\n\
         draft_greeting,,PROPOSE_ONLY,false,SHADOW ADVISORY PARTIAL_AUTO FULL_AUTO,false,true,\
         \"Draft \"\"hello\"\", then\nwave.\",tests/report.rs,{},report,false,,false,false\r\n\
         users.delete_user,users,HIGH_WRITE,true,FULL_AUTO,false,false,Delete a user | for good.,\
         tests/report.rs,{},report,false,,false,false\r\n\
         users.get_user,users,READ_ONLY,false,SHADOW ADVISORY PARTIAL_AUTO FULL_AUTO,true,false,\
         \"Look a user up.\n\nOnly the first line goes into the Markdown table.\",tests/report.rs,{},report,false,,false,false\r\n",
        line("draft_greeting"),
        line("users.delete_user"),
        line("users.get_user"),
    );
    assert_eq!(report::render(Format::Csv), expected);
}

#[test]
fn csv_quotes_a_carriage_return_and_leaves_plain_fields_bare() {
    let mut m = fixed("demo.tool");
    m.description = "one\rtwo";
    m.source.module_path = "a, b";
    m.allowed_modes = toolgate::policy::ModeSet::EMPTY;
    m.domain = None;
    let csv = report::csv([m]);
    let record = csv.split("\r\n").nth(1).unwrap();
    assert_eq!(
        record,
        "demo.tool,,LOW_WRITE,true,,false,true,\"one\rtwo\",src/demo.rs,42,\"a, b\",false,,false,false"
    );
}

#[test]
fn format_parses_its_names_in_any_case_and_displays_the_short_one() {
    let cases = [
        ("json", Format::Json),
        ("JSON", Format::Json),
        ("md", Format::Markdown),
        ("markdown", Format::Markdown),
        ("Markdown", Format::Markdown),
        ("csv", Format::Csv),
        ("CSV", Format::Csv),
    ];
    for (text, format) in cases {
        assert_eq!(text.parse::<Format>(), Ok(format), "{text}");
    }
    for format in Format::ALL {
        assert_eq!(format.to_string().parse::<Format>(), Ok(format));
    }
    assert_eq!(Format::Markdown.to_string(), "md");
    let error = "yaml".parse::<Format>().unwrap_err();
    assert_eq!(
        error.to_string(),
        "`yaml` is not a report format; expected one of json, md, csv"
    );
    assert!("".parse::<Format>().is_err());
    assert!("m".parse::<Format>().is_err());
}

#[test]
fn canonical_json_sorts_keys_and_manifests_without_whitespace() {
    let mut a = fixed("demo.a");
    a.domain = None;
    a.description = "A";
    let tool = fixed("demo.tool");
    let expected = concat!(
        r#"[{"allowed_modes":["PARTIAL_AUTO","FULL_AUTO"],"description":"A","domain":null,"#,
        r#""id":"demo.a","idempotent":false,"open_world":true,"risk_level":"LOW_WRITE","#,
        r#""side_effects":true,"source":{"file":"src/demo.rs","line":42,"module_path":"app::demo"}},"#,
        r#"{"allowed_modes":["PARTIAL_AUTO","FULL_AUTO"],"description":"Say \"hi\", then\nwave é \u0001/","#,
        r#""domain":"demo","id":"demo.tool","idempotent":false,"open_world":true,"#,
        r#""risk_level":"LOW_WRITE","side_effects":true,"#,
        r#""source":{"file":"src/demo.rs","line":42,"module_path":"app::demo"}}]"#,
    );
    assert_eq!(report::canonical_json([tool, a]), expected);
    assert_eq!(report::canonical_json([a, tool]), expected);
}

#[test]
fn digest_is_sha256_of_the_canonical_json() {
    // Known answers, computed outside Rust: sha256 of `[]`, and of the canonical text above as Python's
    // `json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)` writes it.
    assert_eq!(
        report::digest_of(Vec::<ToolManifest>::new()),
        "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
    );
    let mut a = fixed("demo.a");
    a.domain = None;
    a.description = "A";
    assert_eq!(
        report::digest_of([fixed("demo.tool"), a]),
        "609f9db3dda549e6675853df9cfe5a697c429e0618c92d75ff11e2d64e3d034e"
    );
}

#[test]
fn manifest_digest_is_stable_and_order_independent() {
    let digest = report::manifest_digest();
    assert_eq!(digest.len(), 64);
    assert!(
        digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert_eq!(report::manifest_digest(), digest);
    assert!(std::ptr::eq(report::manifest_digest(), digest), "cached");
    assert_eq!(report::digest_of(toolgate::manifests()), digest);
    assert_eq!(report::digest_of(toolgate::manifests().rev()), digest);
    let owned: Vec<ToolManifest> = toolgate::manifests().copied().collect();
    assert_eq!(report::digest_of(&owned), digest);
}

#[test]
fn digest_changes_with_any_field_of_any_manifest() {
    let base: Vec<ToolManifest> = toolgate::manifests().copied().collect();
    let digest = report::digest_of(&base);
    let edits: [fn(&mut ToolManifest); 10] = [
        |m| m.risk_level = Risk::HighWrite,
        |m| m.allowed_modes = m.allowed_modes.with(Mode::FullAuto).with(Mode::Shadow),
        |m| m.side_effects = !m.side_effects,
        |m| m.idempotent = !m.idempotent,
        |m| m.open_world = !m.open_world,
        |m| m.description = "Something else.",
        |m| m.domain = Some("elsewhere"),
        |m| m.id = "renamed",
        |m| m.source.line += 1,
        |m| m.source.module_path = "report::moved",
    ];
    for (i, edit) in edits.iter().enumerate() {
        for at in 0..base.len() {
            let mut changed = base.clone();
            edit(&mut changed[at]);
            if changed[at] == base[at] {
                continue;
            }
            assert_ne!(
                report::digest_of(&changed),
                digest,
                "edit {i} on {}",
                base[at].id
            );
        }
    }
    assert_ne!(report::digest_of(&base[..2]), digest, "a tool fewer");
    let mut doubled = base.clone();
    doubled.push(base[0]);
    assert_ne!(report::digest_of(&doubled), digest, "a duplicate");
}

#[cfg(feature = "clap")]
mod cli {
    use clap::{Parser, ValueEnum};
    use toolgate::cli::ListTools;
    use toolgate::report::Format;
    use toolgate::{Mode, Risk};

    #[derive(Debug, Parser)]
    struct Args {
        #[arg(long, value_enum, default_value_t = Mode::Shadow)]
        mode: Mode,
        #[arg(long, value_enum)]
        risk: Option<Risk>,
        #[command(flatten)]
        list_tools: ListTools,
        input: Option<String>,
    }

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("app").chain(args.iter().copied()))
    }

    /// Asserts that `flag TEXT` parses, for each `(TEXT, value)` of `cases`, to what `field` reads `value`.
    #[track_caller]
    fn assert_parses<T: PartialEq + std::fmt::Debug, const N: usize>(
        flag: &str,
        cases: [(&str, T); N],
        field: impl Fn(Args) -> T,
    ) {
        for (text, value) in cases {
            assert_eq!(field(parse(&[flag, text]).unwrap()), value, "{text}");
        }
    }

    /// The names `--help` shows for the values of `T`.
    fn names<T: ValueEnum>() -> Vec<String> {
        T::value_variants()
            .iter()
            .map(|v| v.to_possible_value().unwrap().get_name().to_owned())
            .collect()
    }

    #[test]
    fn mode_parses_exact_lower_and_dashed_names() {
        assert_parses(
            "--mode",
            [
                ("SHADOW", Mode::Shadow),
                ("shadow", Mode::Shadow),
                ("ADVISORY", Mode::Advisory),
                ("PARTIAL_AUTO", Mode::PartialAuto),
                ("partial-auto", Mode::PartialAuto),
                ("FULL_AUTO", Mode::FullAuto),
                ("full_auto", Mode::FullAuto),
                ("full-auto", Mode::FullAuto),
                ("FULL-AUTO", Mode::FullAuto),
            ],
            |args| args.mode,
        );
        assert_eq!(parse(&[]).unwrap().mode, Mode::Shadow);
        let error = parse(&["--mode", "turbo"]).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::InvalidValue);
        assert!(parse(&["--mode", "Full_Auto"]).is_err(), "no ignore_case");
        assert_eq!(Mode::from_str("Full_Auto", true), Ok(Mode::FullAuto));
    }

    #[test]
    fn help_lists_only_the_exact_names() {
        assert_eq!(
            names::<Mode>(),
            ["SHADOW", "ADVISORY", "PARTIAL_AUTO", "FULL_AUTO"]
        );
        assert_eq!(
            names::<Risk>(),
            ["READ_ONLY", "PROPOSE_ONLY", "LOW_WRITE", "HIGH_WRITE"]
        );
    }

    #[test]
    fn risk_parses_exact_lower_and_dashed_names() {
        assert_parses(
            "--risk",
            [
                ("READ_ONLY", Risk::ReadOnly),
                ("propose_only", Risk::ProposeOnly),
                ("low-write", Risk::LowWrite),
                ("HIGH-WRITE", Risk::HighWrite),
            ],
            |args| args.risk.expect("a risk"),
        );
    }

    #[test]
    fn list_tools_takes_an_optional_format() {
        assert_eq!(parse(&[]).unwrap().list_tools.format, None);
        for (args, format) in [
            (&["--list-tools"][..], Format::Markdown),
            (&["--list-tools", "csv"], Format::Csv),
            (&["--list-tools=json"], Format::Json),
            (&["--list-tools", "markdown"], Format::Markdown),
            (&["--list-tools=csv", "input.txt"], Format::Csv),
        ] {
            assert_eq!(
                parse(args).unwrap().list_tools.format,
                Some(format),
                "{args:?}"
            );
        }
        assert!(parse(&["--list-tools", "yaml"]).is_err());
    }

    #[test]
    fn list_tools_runs_only_when_given() {
        assert!(!ListTools::default().run());
        assert!(!ListTools::default().try_run().unwrap());
    }
}
