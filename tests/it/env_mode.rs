//! `Mode::from_env`: unset means SHADOW; a set value must name a mode.
//!
//! Environment variables are process-wide: the test runs again in a child process of this binary, alone
//! there, and only the child sets them.

use toolgate::policy::MODE_ENV_VAR;
use toolgate::{Denied, Gate, GateError, Mode, tool};

/// Relabels an issue.
#[tool(risk = "LOW_WRITE", domain = "issues")]
pub fn relabel(issue: u64) -> Result<u64, Denied> {
    Ok(issue)
}

/// The child role of [`modes_come_from_the_environment`].
const ROLE: &str = "env_mode";

const VAR: &str = "TOOLGATE_TEST_ENV_MODE_3F9C1A";

fn set(name: &str, value: impl AsRef<std::ffi::OsStr>) {
    // SAFETY: only the child run sets variables, where this test is the process's only one (one test
    // thread), so no other thread reads or writes the environment meanwhile.
    unsafe { std::env::set_var(name, value) }
}

fn unset(name: &str) {
    // SAFETY: as in `set`.
    unsafe { std::env::remove_var(name) }
}

#[test]
fn modes_come_from_the_environment() {
    if !crate::common::is_child(ROLE) {
        crate::common::rerun(module_path!(), "modes_come_from_the_environment", ROLE);
        return;
    }
    assert_eq!(MODE_ENV_VAR, "TOOLGATE_MODE");
    let saved = std::env::var_os(MODE_ENV_VAR);

    // Unset: the most restrictive mode.
    unset(VAR);
    assert_eq!(Mode::from_env_var(VAR), Ok(Mode::Shadow));

    let valid = [
        ("SHADOW", Mode::Shadow),
        ("ADVISORY", Mode::Advisory),
        ("PARTIAL_AUTO", Mode::PartialAuto),
        ("FULL_AUTO", Mode::FullAuto),
        ("shadow", Mode::Shadow),
        ("advisory", Mode::Advisory),
        ("partial_auto", Mode::PartialAuto),
        ("full_auto", Mode::FullAuto),
        ("partial-auto", Mode::PartialAuto),
        ("full-auto", Mode::FullAuto),
        ("FULL-AUTO", Mode::FullAuto),
        ("Partial_Auto", Mode::PartialAuto),
    ];
    for (value, mode) in valid {
        set(VAR, value);
        assert_eq!(Mode::from_env_var(VAR), Ok(mode), "{value}");
    }

    let invalid = [
        "",
        " ",
        "FULL AUTO",
        "fullauto",
        "auto",
        "SHADOW ",
        " shadow",
        "HIGH_WRITE",
        "2",
    ];
    for value in invalid {
        set(VAR, value);
        let error = Mode::from_env_var(VAR).unwrap_err();
        let text = error.to_string();
        assert!(
            text.starts_with(&format!("environment variable {VAR}: ")),
            "{text}"
        );
        assert!(text.contains(&format!("`{value}` is not a mode")), "{text}");
        assert!(
            text.contains("SHADOW, ADVISORY, PARTIAL_AUTO, FULL_AUTO"),
            "{text}"
        );
        // What `main() -> Result<_, Box<dyn Error>>` prints: the sentence, not the structure.
        assert_eq!(format!("{error:?}"), text);
        assert_eq!(
            format!("{:?}", Box::<dyn std::error::Error>::from(error.clone())),
            text
        );
        assert!(format!("{error:#?}").starts_with("ModeEnvError {"));
        let source = std::error::Error::source(&error).expect("the parse error");
        assert_eq!(format!("{source:?}"), source.to_string());
        assert_eq!(
            source.to_string(),
            value.parse::<Mode>().unwrap_err().to_string()
        );
    }

    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        set(VAR, std::ffi::OsStr::from_bytes(b"FULL_AUTO\xff"));
        assert!(
            Mode::from_env_var(VAR).is_err(),
            "a value that is not Unicode is an error"
        );
    }
    unset(VAR);
    assert_eq!(Mode::from_env_var(VAR), Ok(Mode::Shadow));

    // `from_env` and `Gate::from_env` read TOOLGATE_MODE.
    unset(MODE_ENV_VAR);
    assert_eq!(Mode::from_env(), Ok(Mode::Shadow));
    let gate = Gate::from_env().unwrap();
    assert_eq!(gate.mode(), Mode::Shadow);
    assert_eq!(
        gate.run(|| relabel(1)).unwrap_err().code(),
        "MODE_NOT_ALLOWED"
    );

    set(MODE_ENV_VAR, "partial-auto");
    assert_eq!(Mode::from_env(), Ok(Mode::PartialAuto));
    let gate = Gate::from_env().unwrap();
    assert_eq!(gate.mode(), Mode::PartialAuto);
    assert_eq!(gate.run(|| relabel(2)).unwrap(), 2);

    set(MODE_ENV_VAR, "full_autox");
    assert!(Mode::from_env().is_err());
    match Gate::from_env() {
        Err(GateError::Mode(error)) => {
            let gate_error = GateError::Mode(error.clone());
            assert_eq!(format!("{gate_error:?}"), gate_error.to_string());
            assert!(error.to_string().contains(MODE_ENV_VAR), "{error}");
            assert!(error.to_string().contains("`full_autox`"), "{error}");
        }
        other => panic!("expected a mode error, got {other:?}"),
    }
    set(MODE_ENV_VAR, "");
    assert!(matches!(Gate::from_env(), Err(GateError::Mode(_))));

    // The clap argument reads the same variable, after `--mode`; an invalid value is a usage error.
    #[cfg(feature = "clap")]
    {
        use clap::Parser;
        use toolgate::cli::ModeArg;

        #[derive(Parser)]
        struct Args {
            #[command(flatten)]
            mode: ModeArg,
            #[command(subcommand)]
            run: Option<Run>,
        }
        #[derive(clap::Subcommand)]
        enum Run {
            Go,
        }
        let parse = |argv: &[&str]| Args::try_parse_from(argv).map(|args| args.mode.mode);
        unset(MODE_ENV_VAR);
        assert_eq!(parse(&["app"]).unwrap(), Mode::Shadow);
        set(MODE_ENV_VAR, "advisory");
        assert_eq!(parse(&["app"]).unwrap(), Mode::Advisory);
        assert_eq!(
            parse(&["app", "--mode", "FULL_AUTO"]).unwrap(),
            Mode::FullAuto
        );
        assert_eq!(
            parse(&["app", "go", "--mode", "partial-auto"]).unwrap(),
            Mode::PartialAuto
        );
        set(MODE_ENV_VAR, "yolo");
        assert!(
            parse(&["app"]).is_err(),
            "an invalid environment value is no default"
        );
        assert!(parse(&["app", "--mode", "yolo"]).is_err());
    }

    match saved {
        Some(value) => set(MODE_ENV_VAR, value),
        None => unset(MODE_ENV_VAR),
    }
}
