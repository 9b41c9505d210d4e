//! The extension figures: the admission webhook's latency with 1,000 existing objects and
//! the shipped policies loaded (real HTTPS, real AdmissionReviews, a new TLS connection
//! per review, as the API server may open), and what a WebAssembly processor adds to a
//! build of 1,000 vhosts.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use isobar::config::Config;
use isobar::runner::pipeline::Pipeline;
use isobar_sdk::Objects;

use crate::webhook_client;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn policies_config() -> Config {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let mut config = Config::default();
    config.pipeline.processors.push("opa".into());
    let policies: Vec<String> = [
        "unique-fqdn.rego",
        "allowed-domains.rego",
        "no-wildcard-hosts.rego",
    ]
    .map(|p| root.join(p).display().to_string())
    .to_vec();
    config.plugins.insert(
        "opa".into(),
        json!({
            "policies": policies,
            "data": {"allowed-domains": {"*": ["example.com"]}},
        }),
    );
    config
}

fn proxy(ns: &str, name: &str, fqdn: &str) -> serde_json::Value {
    json!({
        "apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"virtualhost": {"fqdn": fqdn},
                 "routes": [{"services": [{"name": "app", "port": 80}]},
                            {"conditions": [{"prefix": "/api"}], "services": [{"name": "app", "port": 80}]}]}
    })
}

fn review(uid: usize, operation: &str, object: &serde_json::Value, dry_run: bool) -> String {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("bench-{uid}"),
            "kind": {"group": "projectcontour.io", "version": "v1", "kind": "HTTPProxy"},
            "resource": {"group": "projectcontour.io", "version": "v1", "resource": "httpproxies"},
            "namespace": object["metadata"]["namespace"], "name": object["metadata"]["name"],
            "operation": operation, "userInfo": {"username": "bench"},
            "object": object, "dryRun": dry_run,
        }
    })
    .to_string()
}

/// `n` tenants in a manifest directory, a controller with the shipped policies and its
/// webhook; `reviews` reviews, a third each: new sites (dry run), collisions (denied),
/// updates of 20 existing sites.
pub fn webhook(n: usize, reviews: usize) {
    let runtime = super::runtime();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let objects = dir.path().join("objects");
        std::fs::create_dir_all(&objects).unwrap_or_else(|e| panic!("{e}"));
        let text: String = (0..n).map(crate::tenant).collect::<Vec<_>>().join("---\n");
        std::fs::write(objects.join("all.yaml"), text).unwrap_or_else(|e| panic!("{e}"));
        let config = policies_config();
        let running = webhook_client::start(&config, objects, dir.path()).await;
        let (addr, ca) = (running.addr, running.ca.clone());
        let mut samples = Vec::new();
        let (mut allowed, mut denied) = (0, 0);
        for i in 0..reviews + 20 {
            let body = match i % 3 {
                0 => review(i, "CREATE", &proxy(&format!("ns-{}", i % n), &format!("n{i}"), &format!("new-{i}.example.com")), true),
                1 => review(i, "CREATE", &proxy("thief", &format!("t{i}"), &format!("site-{}.example.com", i % n)), false),
                _ => {
                    let j = i % 20;
                    review(i, "UPDATE", &proxy(&format!("ns-{j}"), "site", &format!("site-{j}.example.com")), false)
                }
            };
            let start = Instant::now();
            let (status, answer) = webhook_client::post(addr, &ca, &body).await;
            let took = start.elapsed();
            assert_eq!(status, 200, "{answer}");
            let want = i % 3 != 1;
            let got = answer.contains("\"allowed\":true");
            assert_eq!(got, want, "review {i}: {answer}");
            if i >= 20 {
                samples.push(took);
                if got { allowed += 1 } else { denied += 1 }
            }
        }
        let metric = |name: &str| -> f64 {
            let text = running.controller.metrics.encode();
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().split(' ').next()?.parse().ok())
                .unwrap_or(0.0)
        };
        let judged = metric("isobar_admission_review_seconds_sum") * 1e3
            / metric("isobar_admission_review_seconds_count").max(1.0);
        samples.sort();
        println!(
            "admission webhook: {n} HTTPProxies (+ {n} Services, {n} EndpointSlices), 3 Rego policies loaded (unique-fqdn, allowed-domains, no-wildcard-hosts), {} reviews ({allowed} allowed, {denied} denied), HTTPS with a new connection each",
            samples.len()
        );
        println!(
            "  review round trip: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            percentile(&samples, 0.5),
            percentile(&samples, 0.9),
            percentile(&samples, 0.99),
            percentile(&samples, 1.0)
        );
        println!("  of which judging (dry builds + policies, server side): {judged:.2} ms mean");
        flood(addr, &ca, n, reviews).await;
    });
}

/// One user floods the webhook (16 connections, each posting admitted creates back to
/// back, none dry: each leaves a reservation) while another posts `reviews` one after
/// another: the flood's reviews per second, the other user's round trips.
async fn flood(
    addr: std::net::SocketAddr,
    ca: &tokio_rustls::rustls::pki_types::CertificateDer<'static>,
    n: usize,
    reviews: usize,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let answered = std::sync::Arc::new(AtomicUsize::new(0));
    let mut flooders = Vec::new();
    for c in 0..16 {
        let (stop, answered, ca) = (stop.clone(), answered.clone(), ca.clone());
        flooders.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let object = proxy(
                    "flood",
                    &format!("f{c}-{i}"),
                    &format!("flood-{c}-{i}.example.com"),
                );
                let body = review(1_000_000 + c * 100_000 + i, "CREATE", &object, false)
                    .replace("\"username\":\"bench\"", "\"username\":\"flood\"");
                let (status, _) = webhook_client::post(addr, &ca, &body).await;
                assert_eq!(status, 200);
                answered.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (started, before) = (Instant::now(), answered.load(Ordering::Relaxed));
    let mut samples = Vec::new();
    for i in 0..reviews {
        let object = proxy(
            &format!("ns-{}", i % n),
            &format!("r{i}"),
            &format!("real-{i}.example.com"),
        );
        let body = review(2_000_000 + i, "CREATE", &object, true);
        let start = Instant::now();
        let (status, answer) = webhook_client::post(addr, ca, &body).await;
        samples.push(start.elapsed());
        assert!(
            status == 200 && answer.contains("\"allowed\":true"),
            "{answer}"
        );
    }
    let rate = (answered.load(Ordering::Relaxed) - before) as f64 / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        let _ = f.await;
    }
    samples.sort();
    println!(
        "  under a flood from one user (16 connections, admitted creates back to back): {rate:.0} flood reviews/s answered; another user's {} reviews p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        samples.len(),
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        percentile(&samples, 1.0)
    );
}

/// A build of `n` vhosts with and without the example WebAssembly processor.
pub fn wasm(n: usize, runs: usize) {
    let text: String = (0..n).map(crate::tenant).collect::<Vec<_>>().join("---\n");
    let mut objects = Objects::default();
    for o in isobar::provider::manifest::parse_file(Path::new("b.yaml"), &text)
        .unwrap_or_else(|e| panic!("{e}"))
    {
        objects.apply(o);
    }
    let plain = Config::default();
    let mut with = Config::default();
    with.pipeline.processors.push("wasm".into());
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("plugins/wasm-processors/response-header/processor.wat");
    with.plugins.insert(
        "wasm".into(),
        json!({"modules": [{"name": "response-header", "path": example.display().to_string(),
                            "config": {"fqdn-suffix": ".example.com", "name": "x-served-by", "value": "isobar"}}]}),
    );
    let time = |config: &Config| {
        let pipeline = Pipeline::for_config(config).unwrap_or_else(|e| panic!("{e}"));
        let mut samples = Vec::new();
        for run in 0..runs + 2 {
            let start = Instant::now();
            let out = pipeline.build(&objects);
            if run >= 2 {
                samples.push(start.elapsed());
            }
            assert_eq!(out.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER).len(), n);
        }
        samples.sort();
        samples[samples.len() / 2]
    };
    let base = time(&plain);
    let wasm = time(&with);
    println!("wasm processor: {n} vhosts, the example response-header module (WAT), {runs} runs");
    println!(
        "  build without: {:.2} ms median; with: {:.2} ms median; added: {:.2} ms per build",
        base.as_secs_f64() * 1e3,
        wasm.as_secs_f64() * 1e3,
        (wasm.as_secs_f64() - base.as_secs_f64()) * 1e3
    );
}
