//! `docs/gateway-api.md` against the code: each conformance test it says passes is a test
//! here, each test here is on it, and the features Isobar claims are exactly those of the
//! tests that pass.

use std::collections::BTreeSet;

const DOC: &str = include_str!("../../../docs/gateway-api.md");

/// The table's rows: suite test, Isobar test (`module::function`, or `—`), features,
/// result.
fn rows() -> Vec<(String, String, Vec<String>, String)> {
    DOC.lines()
        .filter(|l| {
            l.starts_with("| ") && !l.starts_with("| ---") && !l.starts_with("| Suite test")
        })
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (cells.len() == 5).then(|| {
                (
                    cells[0].to_string(),
                    cells[1].trim_matches('`').to_string(),
                    cells[2].split(", ").map(str::to_string).collect(),
                    cells[4].to_string(),
                )
            })
        })
        .collect()
}

/// The conformance tests here, as `module::function`.
fn tests_here() -> BTreeSet<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/integration/conformance");
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let module = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        if module == "docs" {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap_or_default();
        let mut lines = source.lines().peekable();
        while let Some(line) = lines.next() {
            if line.starts_with("#[tokio::test")
                && let Some(next) = lines.peek()
                && let Some(name) = next.strip_prefix("async fn ")
            {
                let name = name.split('(').next().unwrap_or_default();
                out.insert(format!("{module}::{name}"));
            }
        }
    }
    out
}

#[test]
fn the_conformance_table_matches_the_tests_and_the_claimed_features() {
    let rows = rows();
    assert!(rows.len() > 100, "the table has {} rows", rows.len());
    let here = tests_here();
    let mut listed = BTreeSet::new();
    let mut features = BTreeSet::new();
    for (suite, ours, needs, result) in &rows {
        match result.as_str() {
            "pass" => {
                assert!(here.contains(ours), "{suite}: no test {ours} here");
                listed.insert(ours.clone());
                features.extend(needs.iter().cloned());
            }
            "not applicable" => assert_eq!(ours, "—", "{suite}"),
            other => panic!("{suite}: result {other:?}"),
        }
    }
    let unlisted: Vec<&String> = here.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "tests not on docs/gateway-api.md: {unlisted:?}"
    );
    let claimed: BTreeSet<String> = isobar_plugin_gateway_api::SUPPORTED_FEATURES
        .iter()
        .map(|f| f.to_string())
        .collect();
    assert_eq!(
        claimed, features,
        "claimed features against the passing tests' features"
    );
    let paragraph = DOC
        .split("**Features claimed**")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap_or_default();
    for feature in &claimed {
        assert!(
            paragraph.contains(&format!(" {feature},"))
                || paragraph.contains(&format!(" {feature} "))
                || paragraph.contains(&format!("\n{feature},")),
            "{feature} is not in the claimed features' paragraph"
        );
    }
}
