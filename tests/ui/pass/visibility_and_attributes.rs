use toolgate::{Denied, Gate, Mode, tool};

pub(crate) mod tools {
    use toolgate::{Denied, tool};

    #[tool(risk = "READ_ONLY", domain = "files")]
    pub(crate) fn size(path: &str) -> Result<usize, Denied> {
        Ok(path.len())
    }

    #[tool(risk = "READ_ONLY", domain = "files")]
    pub(super) fn exists(path: &str) -> Result<bool, Denied> {
        Ok(!path.is_empty())
    }
}

#[cfg(any())]
#[tool(risk = "HIGH_WRITE", domain = "files")]
fn wipe_disk() -> Result<(), Denied> {
    Ok(())
}

#[tool(risk = "HIGH_WRITE", domain = "files")]
#[cfg(any())]
fn format_disk() -> Result<(), Denied> {
    Ok(())
}

#[must_use = "the listing is the point"]
#[inline]
#[tool(risk = "READ_ONLY", domain = "files")]
fn list(dir: &str) -> Result<Vec<String>, Denied> {
    Ok(vec![format!("{dir}/a")])
}

#[tool(risk = "READ_ONLY", domain = "files")]
#[allow(clippy::needless_pass_by_value, unused_variables)]
#[inline(never)]
fn stat(path: String, unused: u8) -> Result<usize, Denied> {
    Ok(path.len())
}

#[deprecated = "use `list`"]
#[tool(risk = "READ_ONLY", domain = "files")]
fn ls(dir: &str) -> Result<Vec<String>, Denied> {
    Ok(vec![dir.to_owned()])
}

#[allow(deprecated)]
fn main() {
    let gate = Gate::new(Mode::Shadow).unwrap();
    gate.run(|| {
        assert_eq!(tools::size("abc").unwrap(), 3);
        assert!(tools::exists("abc").unwrap());
        assert_eq!(list("/tmp").unwrap(), ["/tmp/a"]);
        assert_eq!(stat("abcd".to_owned(), 0).unwrap(), 4);
        assert_eq!(ls("x").unwrap(), ["x"]);
    });
    let ids: Vec<&str> = toolgate::manifests().map(|m| m.id).collect();
    assert_eq!(
        ids,
        [
            "files.exists",
            "files.list",
            "files.ls",
            "files.size",
            "files.stat"
        ]
    );
    assert!(toolgate::registry().manifest("files.wipe_disk").is_none());
    assert!(toolgate::registry().manifest("files.format_disk").is_none());
}
