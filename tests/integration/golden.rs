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

/// Every golden case's resources, and each of them broken in many ways (a field left
/// out, a string made a control character, a number made its type's largest or -1), are
/// checked against Envoy's annotations by walking their bytes: the walk finds what the
/// walk of the decoded resource finds, violation for violation, in the same order.
#[test]
fn the_walk_on_the_bytes_finds_what_the_decoded_walk_finds() {
    use isobar::xds::XdsType;
    use isobar::xds::validate::{annotations, annotations_decoded, pool};
    use prost::Message;
    use prost_reflect::{DynamicMessage, Kind, ReflectMessage, Value};

    /// `message` with one field changed, for every field set anywhere in it (down to
    /// `depth` levels): removed, and (a scalar) set to an awkward value.
    fn variants(message: &DynamicMessage, depth: usize, out: &mut Vec<DynamicMessage>) {
        if depth == 0 {
            return;
        }
        let set: Vec<_> = message.fields().map(|(f, v)| (f, v.clone())).collect();
        for (field, value) in set {
            let mut cleared = message.clone();
            cleared.clear_field(&field);
            out.push(cleared);
            let awkward = match (&value, field.kind()) {
                (Value::String(_), _) => Some(Value::String("\n".into())),
                (Value::U32(_), _) => Some(Value::U32(u32::MAX)),
                (Value::U64(_), _) => Some(Value::U64(u64::MAX)),
                (Value::I32(_), _) => Some(Value::I32(-1)),
                (Value::I64(_), _) => Some(Value::I64(-1)),
                (Value::EnumNumber(_), _) => Some(Value::EnumNumber(9999)),
                _ => None,
            };
            if let Some(awkward) = awkward {
                let mut changed = message.clone();
                changed.set_field(&field, awkward);
                out.push(changed);
            }
            // One level down: the field's message (or its first item) changed in turn.
            let inner = match &value {
                Value::Message(m) => Some((m.clone(), None)),
                Value::List(items) => match items.first() {
                    Some(Value::Message(m)) => Some((m.clone(), Some(items.clone()))),
                    _ => None,
                },
                _ => None,
            };
            if let (Some((inner, items)), Kind::Message(_)) = (inner, field.kind()) {
                let mut below = Vec::new();
                variants(&inner, depth - 1, &mut below);
                for changed in below {
                    let mut outer = message.clone();
                    let put = match &items {
                        None => Value::Message(changed),
                        Some(items) => {
                            let mut items = items.clone();
                            items[0] = Value::Message(changed);
                            Value::List(items)
                        }
                    };
                    outer.set_field(&field, put);
                    out.push(outer);
                }
            }
        }
    }

    let golden = Path::new(GOLDEN).join("contour.yaml");
    let config = isobar::config::load(Some(&golden), serde_json::json!({}))
        .unwrap_or_else(|e| panic!("golden contour.yaml: {e}"));
    let pipeline = isobar::runner::pipeline::Pipeline::for_config(&config)
        .unwrap_or_else(|e| panic!("pipeline: {e}"));
    let settings = isobar::cli::serve::envoy_settings(&config);
    let pool = pool().unwrap_or_else(|e| panic!("{e}"));
    let (mut compared, mut violations) = (0usize, 0usize);
    let mut differing = Vec::new();
    for (case, path) in cases() {
        let dir = manifests(&path, &[]);
        let (objects, _) = isobar::provider::files::load_dir(dir.path());
        let output = pipeline.build(&objects);
        let resources = isobar::xds::translate(&output.ir, &objects, &settings);
        for t in XdsType::ORDER {
            let name = t.type_url().rsplit('/').next().unwrap_or_default();
            let descriptor = pool
                .get_message_by_name(name)
                .unwrap_or_else(|| panic!("{name}"));
            // A few of each type per case: the variants of a large listener are many.
            for (resource, bytes) in resources.of(t).iter().take(3) {
                let decoded = DynamicMessage::decode(descriptor.clone(), &bytes[..])
                    .unwrap_or_else(|e| panic!("{case} {resource}: {e}"));
                let mut all = vec![decoded.clone()];
                variants(&decoded, 3, &mut all);
                for message in all {
                    let bytes = message.encode_to_vec();
                    let walked = annotations(t, &bytes);
                    let reference = annotations_decoded(t, &bytes);
                    compared += 1;
                    if let Ok(found) = &reference {
                        violations += found.len();
                    }
                    if walked != reference && differing.len() < 5 {
                        differing.push(format!(
                            "{case} {} {resource} ({}): walked {walked:?}, decoded {reference:?}",
                            t.short(),
                            message.descriptor().full_name()
                        ));
                    }
                }
            }
        }
    }
    assert!(differing.is_empty(), "{differing:#?}");
    // The corpus is large and breaks many rules (else it would prove little).
    assert!(
        compared > 10_000 && violations > 1_000,
        "{compared} resources, {violations} violations"
    );
    println!("{compared} resources compared, {violations} violations found by both walks");
}
