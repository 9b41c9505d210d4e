//! `docs/contour-e2e.md` says what the tests do: every test it names exists, and every
//! test of this module is named there.

use std::collections::BTreeSet;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The `#[tokio::test]` functions of each file of `tests/integration/contour_e2e`, as
/// `contour_e2e::<file>::<name>`.
fn tests_here() -> BTreeSet<String> {
    let dir = format!("{REPO}/tests/integration/contour_e2e");
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .flatten()
    {
        let path = entry.path();
        let module = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.starts_with("#[tokio::test")
                && let Some(name) = lines
                    .next()
                    .and_then(|l| l.strip_prefix("async fn "))
                    .and_then(|l| l.split('(').next())
            {
                out.insert(format!("contour_e2e::{module}::{name}"));
            }
        }
    }
    out
}

#[test]
fn the_table_of_contour_e2e_tests_names_exactly_the_tests() {
    let doc = std::fs::read_to_string(format!("{REPO}/docs/contour-e2e.md"))
        .unwrap_or_else(|e| panic!("docs/contour-e2e.md: {e}"));
    let named: BTreeSet<String> = doc
        .split('`')
        .filter(|s| s.starts_with("contour_e2e::"))
        .map(str::to_string)
        .collect();
    let here = tests_here();
    let missing: Vec<_> = named.difference(&here).collect();
    assert!(
        missing.is_empty(),
        "named in docs/contour-e2e.md, not tests: {missing:?}"
    );
    let unnamed: Vec<_> = here.difference(&named).collect();
    assert!(
        unnamed.is_empty(),
        "tests not in docs/contour-e2e.md: {unnamed:?}"
    );
}
