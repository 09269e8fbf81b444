use std::fmt;

use toolgate::{Denied, Gate, Mode, tool};

#[tool(risk = "READ_ONLY")]
fn with_anyhow(n: u32) -> anyhow::Result<u32> {
    anyhow::ensure!(n > 0, "n must be positive");
    Ok(n)
}

#[tool(risk = "READ_ONLY")]
fn with_io(n: u32) -> std::io::Result<u32> {
    Ok(n + 1)
}

#[tool(risk = "READ_ONLY")]
fn with_box(n: u32) -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
    Ok(n + 2)
}

#[tool(risk = "READ_ONLY")]
fn with_std_path(n: u32) -> std::result::Result<u32, Denied> {
    Ok(n + 3)
}

#[derive(Debug)]
enum AppError {
    Refused(Denied),
    Invalid(String),
}

impl From<Denied> for AppError {
    fn from(denied: Denied) -> Self {
        AppError::Refused(denied)
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Refused(denied) => write!(f, "refused: {denied}"),
            AppError::Invalid(why) => write!(f, "invalid: {why}"),
        }
    }
}

mod app {
    pub type Result<T> = std::result::Result<T, super::AppError>;
}

#[tool(risk = "READ_ONLY")]
fn with_custom(n: u32) -> Result<u32, AppError> {
    if n == 0 {
        return Err(AppError::Invalid("zero".to_owned()));
    }
    Ok(n + 4)
}

#[tool(risk = "READ_ONLY")]
fn with_alias(n: u32) -> app::Result<u32> {
    Ok(n + 5)
}

fn main() {
    let gate = Gate::new(Mode::Shadow).unwrap();
    gate.run(|| {
        assert_eq!(with_anyhow(1).unwrap(), 1);
        assert!(with_anyhow(0).is_err());
        assert_eq!(with_io(1).unwrap(), 2);
        assert_eq!(with_box(1).unwrap(), 3);
        assert_eq!(with_std_path(1).unwrap(), 4);
        assert_eq!(with_custom(1).unwrap(), 5);
        assert!(matches!(with_custom(0), Err(AppError::Invalid(_))));
        assert_eq!(with_alias(1).unwrap(), 6);
    });

    // Outside a gate, each error type carries the refusal.
    let denied = with_anyhow(1).unwrap_err().downcast::<Denied>().unwrap();
    assert_eq!(denied.code(), "NO_GATE");
    let io = with_io(1).unwrap_err();
    assert!(io.to_string().contains("with_io"), "{io}");
    let boxed = with_box(1).unwrap_err();
    assert_eq!(boxed.downcast_ref::<Denied>().unwrap().code(), "NO_GATE");
    assert_eq!(with_std_path(1).unwrap_err().code(), "NO_GATE");
    match with_custom(1).unwrap_err() {
        AppError::Refused(denied) => assert_eq!(denied.code(), "NO_GATE"),
        other => panic!("unexpected {other}"),
    }
    assert!(matches!(with_alias(1), Err(AppError::Refused(_))));
}
