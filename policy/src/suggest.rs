//! "Did you mean" for misspelt keys, risks, modes and tool ids: shared by the macros and the runtime.
//! Not a public API.

/// The candidate closest to `input`, if it is close enough to be what was meant.
pub fn closest<'a>(input: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let folded = input.to_ascii_lowercase().replace('-', "_");
    candidates
        .iter()
        .map(|&c| (distance(&folded, &c.to_ascii_lowercase()), c))
        .filter(|&(d, c)| d <= (c.len() / 3).max(2))
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over bytes (the names compared here are ASCII).
fn distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// `", did you mean `x`?"` or nothing.
pub fn did_you_mean(input: &str, candidates: &[&str]) -> String {
    match closest(input, candidates) {
        Some(c) => format!("; did you mean `{c}`?"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::{closest, distance};

    #[test]
    fn distances() {
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("risk", "risk"), 0);
        assert_eq!(distance("rsik", "risk"), 2);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggestions() {
        let risks = ["READ_ONLY", "PROPOSE_ONLY", "LOW_WRITE", "HIGH_WRITE"];
        assert_eq!(closest("high_write", &risks), Some("HIGH_WRITE"));
        assert_eq!(closest("HIGH-WRITE", &risks), Some("HIGH_WRITE"));
        assert_eq!(closest("HIGHWRITE", &risks), Some("HIGH_WRITE"));
        assert_eq!(closest("READONLY", &risks), Some("READ_ONLY"));
        assert_eq!(closest("DELETE", &risks), None);
        assert_eq!(
            closest("side_efects", &["side_effects", "risk"]),
            Some("side_effects")
        );
        assert_eq!(closest("zzz", &["side_effects", "risk"]), None);
    }
}
