//! A gated body is typed by the declared return type, as a plain function body is: `return` coerces.

use std::fmt::Display;
use toolgate::{Denied, Gate, Mode, tool};

#[tool(risk = "READ_ONLY")]
fn boxed(n: u8) -> Result<Box<dyn Display>, Denied> {
    if n == 0 {
        return Ok(Box::new(5));
    }
    Ok(Box::new("five"))
}

#[tool(risk = "READ_ONLY")]
async fn boxed_async(n: u8) -> Result<Box<dyn Display + Send>, Denied> {
    if n == 0 {
        return Ok(Box::new(5));
    }
    Ok(Box::new("five"))
}

#[tool(risk = "READ_ONLY")]
fn bytes(data: &[u8]) -> Result<&[u8], Denied> {
    if data.is_empty() {
        return Ok(&[]);
    }
    Ok(&data[1..])
}

#[tool(risk = "READ_ONLY")]
fn shown(n: u8) -> Result<impl Display, Denied> {
    Ok(n)
}

#[test]
fn typed() {
    let gate = Gate::new(Mode::Shadow).unwrap();
    gate.run(|| {
        assert_eq!(boxed(0).unwrap().to_string(), "5");
        assert_eq!(bytes(&[1, 2]).unwrap(), &[2]);
        assert_eq!(shown(3).unwrap().to_string(), "3");
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(
        rt.block_on(gate.scope(boxed_async(0))).unwrap().to_string(),
        "5"
    );
}

#[tool(risk = "READ_ONLY")]
async fn first_word(text: &str) -> Result<&str, Denied> {
    if text.is_empty() {
        return Ok("");
    }
    Ok(text.split(' ').next().unwrap_or(""))
}

#[test]
fn typed_async_borrowed() {
    let gate = Gate::new(Mode::Shadow).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let text = String::from("hello world");
    assert_eq!(rt.block_on(gate.scope(first_word(&text))).unwrap(), "hello");
}
