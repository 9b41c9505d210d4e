//! Structure-aware fuzzing of the operator's configuration: `config/contour.yaml` (every
//! key Isobar reads, at its default) with a few leaves replaced by edge values — empty,
//! huge, negative, out of range, of the wrong type, durations past any clock — loaded as
//! `serve` loads it. Invariants: loading either fails with an error naming a key, or the
//! configuration builds and translates a fixed object set without a panic and without
//! anything Envoy's rules refuse; a rate or hold-off it accepts is one the runner can
//! use. `CONFIG_FUZZ_CASES` sets the number of configurations (300 by default),
//! `CONFIG_FUZZ_SEED` a seed (0 by default; `random` for a new one each run). (Not
//! `ISOBAR_` variables: the loader reads those as settings and refuses unknown ones —
//! with one set, every configuration would be refused, which the test reports.)

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use isobar::runner::pipeline::Pipeline;

/// The path of every leaf of `value` (a sequence counts as one leaf).
fn leaves(value: &serde_yaml::Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        serde_yaml::Value::Mapping(map) if !map.is_empty() => {
            for (key, child) in map {
                path.push(key.as_str().unwrap_or_default().to_string());
                leaves(child, path, out);
                path.pop();
            }
        }
        _ => out.push(path.clone()),
    }
}

/// Values to put in place of a leaf: good-looking, edge and wrong-typed ones.
fn edge_value() -> impl Strategy<Value = serde_yaml::Value> {
    use serde_yaml::Value;
    let texts = [
        "",
        " ",
        "0",
        "-1",
        "0s",
        "-1s",
        "1ns",
        "999999999999h",
        "300000000000y",
        "1e-30",
        "1e30",
        "NaN",
        "inf",
        "*",
        "a b",
        "x=y",
        "\u{0}",
        "%REQ(:path)%",
        "0.0.0.0",
        "::",
        "256.1.1.1",
        "65536",
        "1.1",
        "1.3",
        "TLSv9",
        "P-256",
        "X25519",
        "info",
        "auto",
        "v7",
        "true",
        "null",
    ];
    prop_oneof![
        proptest::sample::select(texts.to_vec()).prop_map(|t| Value::String(t.to_string())),
        (1usize..4000).prop_map(|n| Value::String("x".repeat(n))),
        proptest::sample::select(vec![
            0i64,
            -1,
            1,
            65535,
            65536,
            i64::from(u32::MAX),
            i64::from(u32::MAX) + 1,
            i64::MAX,
            i64::MIN,
        ])
        .prop_map(|n| Value::Number(n.into())),
        proptest::sample::select(vec![0.0f64, -0.5, 1e-30, 1e30, f64::MAX, 0.1])
            .prop_map(|f| Value::Number(f.into())),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
        Just(Value::Sequence(Vec::new())),
        Just(Value::Sequence(vec![Value::String(String::new())])),
        Just(Value::Mapping(serde_yaml::Mapping::new())),
    ]
}

fn set(root: &mut serde_yaml::Value, path: &[String], value: serde_yaml::Value) {
    let mut at = root;
    for key in path {
        let Some(next) = at
            .as_mapping_mut()
            .and_then(|m| m.get_mut(serde_yaml::Value::String(key.clone())))
        else {
            return;
        };
        at = next;
    }
    *at = value;
}

fn get<'a>(root: &'a serde_yaml::Value, path: &[String]) -> Option<&'a serde_yaml::Value> {
    path.iter().try_fold(root, |at, key| {
        at.as_mapping()?.get(serde_yaml::Value::String(key.clone()))
    })
}

/// An edge value of the same type as `original` (so that most pass the loader and what
/// they configure is built): numbers at their type's ends, strings empty, huge or
/// durations past any clock, sequences empty or with an odd entry.
fn same_type(original: &serde_yaml::Value, pick: usize) -> serde_yaml::Value {
    use serde_yaml::Value;
    match original {
        Value::Bool(b) => Value::Bool(!b),
        Value::Number(n) if n.is_f64() => {
            let all = [0.0, 1e-30, 1e30, 0.5, 100.0, f64::MAX];
            Value::Number(all[pick % all.len()].into())
        }
        Value::Number(_) => {
            let all = [0u64, 1, 2, 1023, 65535, u64::from(u32::MAX), 1 << 40];
            Value::Number(all[pick % all.len()].into())
        }
        Value::String(_) => {
            let all = [
                String::new(),
                "1ns".to_string(),
                "0s".to_string(),
                "8760h".to_string(),
                "x".repeat(3000),
                "example.com".to_string(),
                "a_b".to_string(),
            ];
            Value::String(all[pick % all.len()].clone())
        }
        Value::Sequence(_) => {
            let all = [
                Value::Sequence(Vec::new()),
                Value::Sequence(vec![Value::String("x".repeat(300))]),
                Value::Sequence(vec![
                    Value::String("P-256".into()),
                    Value::String("P-256".into()),
                ]),
            ];
            all[pick % all.len()].clone()
        }
        other => other.clone(),
    }
}

/// The shipped contour.yaml with one to three leaves replaced: its text.
fn configuration(
    shipped: serde_yaml::Value,
    paths: Vec<Vec<String>>,
) -> impl Strategy<Value = String> {
    let count = paths.len();
    let change = (
        0..count,
        0usize..64,
        prop::option::weighted(0.15, edge_value()),
    );
    proptest::collection::vec(change, 1..=3).prop_map(move |changes| {
        let mut doc = shipped.clone();
        for (index, pick, wild) in changes {
            let path = &paths[index];
            let value = match wild {
                Some(wild) => wild,
                None => same_type(
                    get(&shipped, path).unwrap_or(&serde_yaml::Value::Null),
                    pick,
                ),
            };
            set(&mut doc, path, value);
        }
        serde_yaml::to_string(&doc).unwrap_or_default()
    })
}

fn runner(cases: u32) -> proptest::test_runner::TestRunner {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let seed = std::env::var("CONFIG_FUZZ_SEED").unwrap_or_else(|_| "0".to_string());
    if seed == "random" {
        return TestRunner::new(config);
    }
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.parse::<u64>().unwrap_or(0).to_le_bytes());
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// How many configurations loaded.
static ACCEPTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// What one configuration does: `Err` only for a panic or a broken invariant.
fn case(dir: &Path, text: &str, objects: &str) -> Result<(), String> {
    let path = dir.join("contour.yaml");
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    let config = match isobar::config::load(Some(&path), serde_json::json!({})) {
        Ok(config) => {
            ACCEPTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            config
        }
        Err(e) => {
            let said = e.to_string();
            return if said.trim().is_empty() {
                Err("refused without saying why".to_string())
            } else {
                Ok(())
            };
        }
    };
    let rate = isobar::provider::kube::RequestRate {
        qps: config.kubernetes_client_qps,
        burst: config.kubernetes_client_burst,
    };
    if let Ok(Some((_, window))) = rate.window()
        && window.is_zero()
    {
        return Err("an accepted client rate has a zero window".to_string());
    }
    for delay in [
        config.pipeline.holdoff_delay.0,
        config.pipeline.holdoff_max_delay.0,
    ] {
        if std::time::Instant::now().checked_add(delay).is_none() {
            return Err(format!(
                "an accepted hold-off of {delay:?} overflows the clock"
            ));
        }
    }
    let Ok(pipeline) = Pipeline::for_config(&config) else {
        return Ok(());
    };
    let broken = crate::fuzz::violations(&pipeline, &config, objects)?;
    if broken.is_empty() {
        Ok(())
    } else {
        Err(format!("Envoy would refuse: {broken:#?}"))
    }
}

/// No configuration `serve` accepts makes Isobar panic or build anything Envoy's rules
/// refuse, and every one it refuses is refused with a message.
#[test]
fn random_configurations_are_refused_or_serve_without_a_panic() {
    let shipped_text = std::fs::read_to_string("config/contour.yaml")
        .unwrap_or_else(|e| panic!("config/contour.yaml: {e}"));
    let shipped: serde_yaml::Value =
        serde_yaml::from_str(&shipped_text).unwrap_or_else(|e| panic!("{e}"));
    let mut paths = Vec::new();
    leaves(&shipped, &mut Vec::new(), &mut paths);
    assert!(paths.len() > 100, "only {} keys", paths.len());
    // A fixed set touching what the sections configure: a TLS proxy with every policy
    // kind the sections shape, an Ingress, a Gateway route.
    let objects = concat!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: site, namespace: default}\n",
        "spec:\n  virtualhost: {fqdn: site.example.com, tls: {secretName: secure-cert}}\n",
        "  routes:\n    - conditions: [{prefix: /}]\n      services: [{name: web, port: 80}]\n",
        "      retryPolicy: {count: 2}\n      timeoutPolicy: {response: 5s}\n",
        "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: shop, namespace: default}\n",
        "spec:\n  rules:\n    - host: shop.example.com\n      http:\n        paths:\n",
        "          - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}\n",
        "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: default}\n",
        "spec:\n  parentRefs: [{name: gw}]\n  hostnames: [r.gateway.example.com]\n",
        "  rules: [{backendRefs: [{name: web, port: 80}]}]\n",
    );
    let cases = std::env::var("CONFIG_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(300, |n| n.min(5000));
    let done = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let mut runner = runner(cases);
            runner.run(&configuration(shipped, paths), |text| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    case(dir.path(), &text, objects)
                }))
                .map_err(|_| TestCaseError::fail(format!("panicked on:\n{text}")))?
                .map_err(|e| TestCaseError::fail(format!("{e}\nconfiguration:\n{text}")))
            })
        })
        .unwrap_or_else(|e| panic!("{e}"))
        .join();
    match done {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{e}"),
        Err(_) => panic!("the fuzz run panicked outside a case"),
    }
    // Most changes are to a value the loader takes, so most configurations go on to
    // build: otherwise the run tested nothing past the loader.
    let accepted = ACCEPTED.load(std::sync::atomic::Ordering::Relaxed);
    let settings: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("ISOBAR_"))
        .collect();
    assert!(
        accepted * 5 >= cases,
        "only {accepted} of {cases} configurations loaded (ISOBAR_ variables set: {settings:?})"
    );
    eprintln!("config fuzz: {accepted} of {cases} configurations loaded and built");
}
