//! Golden cases: `tests/golden/<case>/input/*.yaml` (plus the shared
//! `tests/golden/services.yaml` and `secrets.yaml`, made by `fixtures/make.sh`, and the
//! configuration `tests/golden/contour.yaml`) → `isobar translate` → `tests/golden/<case>/expected.yaml`
//! (the Envoy resources and every object's conditions).
//!
//! `UPDATE_GOLDEN=1 cargo test --test integration golden` rewrites the expected
//! files; review the diff. Every case is also served to one real Envoy, which must
//! accept all of it (`update_rejected` stays 0), and every `error-*` case is added next
//! to valid sites whose resources must not change.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::support::{eventually, isobar, write};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");

pub(crate) fn cases() -> Vec<(String, PathBuf)> {
    let mut cases: Vec<(String, PathBuf)> = std::fs::read_dir(GOLDEN)
        .unwrap_or_else(|e| panic!("{GOLDEN}: {e}"))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("input").is_dir())
        .map(|p| {
            (
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
                p,
            )
        })
        .collect();
    cases.sort();
    assert!(cases.len() >= 30, "golden cases missing: {}", cases.len());
    cases
}

/// The case's input files with the shared Services, in a fresh directory.
pub(crate) fn manifests(case: &Path, extra: &[&Path]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let copy = |from: &Path, to: &str| {
        let text =
            std::fs::read_to_string(from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        write(dir.path(), to, &text);
    };
    copy(&Path::new(GOLDEN).join("services.yaml"), "services.yaml");
    copy(&Path::new(GOLDEN).join("secrets.yaml"), "secrets.yaml");
    for (i, source) in std::iter::once(case)
        .chain(extra.iter().copied())
        .enumerate()
    {
        for entry in std::fs::read_dir(source.join("input"))
            .into_iter()
            .flatten()
            .flatten()
        {
            copy(
                &entry.path(),
                &format!("{i}-{}", entry.file_name().to_string_lossy()),
            );
        }
    }
    dir
}

fn translate(dir: &Path, format: &str) -> String {
    let (ok, out, err) = isobar(
        &[
            "translate",
            "-c",
            &format!("{GOLDEN}/contour.yaml"),
            "--manifests",
            &dir.to_string_lossy(),
            "-o",
            format,
        ],
        &[],
    );
    assert!(ok, "translate failed: {err}");
    out
}

#[test]
fn golden_cases_match_their_expected_output() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut mismatched = Vec::new();
    for (name, path) in cases() {
        let dir = manifests(&path, &[]);
        let got = translate(dir.path(), "yaml");
        let expected_path = path.join("expected.yaml");
        if update {
            std::fs::write(&expected_path, &got).unwrap_or_else(|e| panic!("{e}"));
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if expected != got {
            mismatched.push(name);
        }
    }
    assert!(
        mismatched.is_empty(),
        "golden output differs for {mismatched:?}; run UPDATE_GOLDEN=1 cargo test --test integration golden and review the diff"
    );
}

/// Every error case's expected output carries an error condition, and every feature
/// case none: the corpus says what it claims.
#[test]
fn error_cases_fail_and_feature_cases_do_not() {
    for (name, path) in cases() {
        let dir = manifests(&path, &[]);
        let doc: Value = serde_json::from_str(&translate(dir.path(), "json")).unwrap_or_default();
        let text = doc["status"].to_string();
        let has_error = text.contains("\"errors\"") || text.contains("orphaned");
        assert_eq!(has_error, name.starts_with("error-"), "{name}: {text}");
    }
}

/// The resources of the valid sites in `doc`: their virtual hosts and clusters.
fn valid_sites(doc: &Value) -> (Vec<Value>, Vec<Value>) {
    let hosts = [
        "basic.example.com",
        "shop.example.com",
        "*.shop.example.com",
    ];
    let vhosts: Vec<Value> = doc["resources"]["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["virtual_hosts"].as_array().cloned().unwrap_or_default())
        .filter(|v| {
            v["domains"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|d| hosts.contains(&d.as_str().unwrap_or_default()))
        })
        .collect();
    let used = serde_json::to_string(&vhosts).unwrap_or_default();
    let clusters = doc["resources"]["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| used.contains(&format!("\"{}\"", c["name"].as_str().unwrap_or_default())))
        .cloned()
        .collect();
    (vhosts, clusters)
}

#[test]
fn invalid_objects_leave_other_sites_unchanged() {
    let good: Vec<PathBuf> = ["httpproxy-basic", "ingress-basic"]
        .iter()
        .map(|c| Path::new(GOLDEN).join(c))
        .collect();
    let base_dir = manifests(&good[0], &[&good[1]]);
    let base: Value = serde_json::from_str(&translate(base_dir.path(), "json")).unwrap_or_default();
    let before = valid_sites(&base);
    assert_eq!(before.0.len(), 3, "the valid sites are served");
    for (name, path) in cases().into_iter().filter(|(n, _)| n.starts_with("error-")) {
        let dir = manifests(&path, &[&good[0], &good[1]]);
        let doc: Value = serde_json::from_str(&translate(dir.path(), "json")).unwrap_or_default();
        assert_eq!(
            valid_sites(&doc),
            before,
            "{name} changed another site's resources"
        );
    }
}

/// The virtual host domains a case's expected output serves.
fn domains(case: &Path) -> Vec<String> {
    let dir = manifests(case, &[]);
    let doc: Value = serde_json::from_str(&translate(dir.path(), "json")).unwrap_or_default();
    doc["resources"]["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["virtual_hosts"].as_array().cloned().unwrap_or_default())
        .flat_map(|v| v["domains"].as_array().cloned().unwrap_or_default())
        .filter_map(|d| d.as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_accepts_every_golden_case() {
    let services =
        std::fs::read_to_string(Path::new(GOLDEN).join("services.yaml")).unwrap_or_default();
    let ready = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: ready, namespace: default}\nspec:\n  virtualhost: {fqdn: ready.example.com}\n  routes: [{services: [{name: echo-a, port: 80}]}]\n";
    let secrets =
        std::fs::read_to_string(Path::new(GOLDEN).join("secrets.yaml")).unwrap_or_default();
    let config =
        std::fs::read_to_string(Path::new(GOLDEN).join("contour.yaml")).unwrap_or_default();
    let stack = crate::e2e::start_with(
        Some(&config),
        &[
            ("golden-services.yaml", &services),
            ("golden-secrets.yaml", &secrets),
            ("ready.yaml", ready),
        ],
        ("ready.example.com", "/", "a"),
    )
    .await;
    let manifests = stack.manifests();
    for (name, path) in cases() {
        let before = stack.builds().await.unwrap_or_default();
        let mut text = String::new();
        for entry in std::fs::read_dir(path.join("input"))
            .into_iter()
            .flatten()
            .flatten()
        {
            text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
            text.push_str("\n---\n");
        }
        write(&manifests, "case.yaml", &text);
        let built = eventually(Duration::from_secs(10), || async {
            stack.builds().await.filter(|b| *b > before)
        })
        .await;
        assert!(
            built.is_some(),
            "{name}: isobar did not rebuild\n{}",
            stack.logs()
        );
        // Envoy must end up running the case's virtual hosts (through CDS, EDS, LDS, RDS).
        let wanted = domains(&path);
        let applied = eventually(Duration::from_secs(10), || async {
            let running = stack.envoy_domains().await;
            wanted.iter().all(|d| running.contains(d)).then_some(())
        })
        .await;
        assert!(
            applied.is_some(),
            "{name}: Envoy never ran {wanted:?} (has {:?})\n{}",
            stack.envoy_domains().await,
            stack.logs()
        );
        let rejected = stack.rejected_updates().await;
        assert!(
            rejected.is_empty(),
            "{name}: Envoy rejected an update: {rejected:?}\n{}",
            stack.logs()
        );
    }
    stack.assert_nothing_rejected().await;
}
