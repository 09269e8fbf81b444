use std::fmt::Display;

use toolgate::{Denied, Gate, Mode, tool};

#[tool(risk = "READ_ONLY")]
fn describe<T: Display>(value: T) -> Result<String, Denied> {
    Ok(format!("<{value}>"))
}

#[tool(risk = "READ_ONLY")]
fn largest<T>(values: &[T]) -> Result<Option<&T>, Denied>
where
    T: Ord,
{
    Ok(values.iter().max())
}

#[tool(risk = "READ_ONLY")]
fn first_word<'a>(text: &'a str) -> Result<&'a str, Denied> {
    Ok(text.split_whitespace().next().unwrap_or(""))
}

#[tool(risk = "READ_ONLY")]
fn longest<'a, 'b: 'a>(a: &'a str, b: &'b str) -> Result<&'a str, Denied> {
    Ok(if a.len() >= b.len() { a } else { b })
}

#[tool(risk = "READ_ONLY")]
fn total(values: impl IntoIterator<Item = u32>) -> Result<u32, Denied> {
    Ok(values.into_iter().sum())
}

#[tool(risk = "READ_ONLY")]
fn apply<F>(f: F, x: u32) -> Result<u32, Denied>
where
    F: Fn(u32) -> u32,
{
    Ok(f(x))
}

#[tool(risk = "PROPOSE_ONLY")]
async fn summarize<'a, I>(items: I) -> Result<usize, Denied>
where
    I: IntoIterator<Item = &'a str> + Send,
{
    Ok(items.into_iter().count())
}

fn main() {
    let gate = Gate::new(Mode::Advisory).unwrap();
    gate.run(|| {
        assert_eq!(describe(3).unwrap(), "<3>");
        assert_eq!(describe("x").unwrap(), "<x>");
        assert_eq!(largest(&[3, 9, 4]).unwrap(), Some(&9));
        assert_eq!(first_word("hello world").unwrap(), "hello");
        assert_eq!(longest("ab", "abc").unwrap(), "abc");
        assert_eq!(total(vec![1, 2, 3]).unwrap(), 6);
        assert_eq!(apply(|x| x * 10, 4).unwrap(), 40);
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let counted = rt.block_on(gate.scope(summarize(["a", "b"])));
    assert_eq!(counted.unwrap(), 2);
    for id in [
        "describe",
        "largest",
        "first_word",
        "longest",
        "total",
        "apply",
        "summarize",
    ] {
        assert!(toolgate::registry().manifest(id).is_some(), "{id} is registered");
    }
}
