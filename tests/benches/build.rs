//! Full build at scale: N HTTPProxies (each with its own Service and EndpointSlice) →
//! pipeline (sources, conditions) → IR → encoded xDS resources → versioned snapshot.
//!
//! `cargo bench --bench build` (N defaults to 10,000; `ISOBAR_BENCH_N` overrides it,
//! `ISOBAR_BENCH_RUNS` the number of timed runs). Figures go in BENCHMARKS.md.

use std::path::Path;
use std::time::{Duration, Instant};

use isobar::config::Config;
use isobar::pipeline::Pipeline;
use isobar::provider::manifest::parse_file;
use isobar::serve::envoy_settings;
use isobar::xds::{Snapshot, XdsType, translate};
use isobar_sdk::Objects;

/// The same allocator as the `isobar` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One tenant: a namespace with a Service, an EndpointSlice (3 ready endpoints) and an
/// HTTPProxy with two routes.
fn tenant(i: usize) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: app, namespace: ns-{i}}}
spec:
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: app-1
  namespace: ns-{i}
  labels: {{kubernetes.io/service-name: app}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints:
  - {{addresses: ["10.{a}.{b}.1"], conditions: {{ready: true}}}}
  - {{addresses: ["10.{a}.{b}.2"], conditions: {{ready: true}}}}
  - {{addresses: ["10.{a}.{b}.3"], conditions: {{ready: true}}}}
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: site, namespace: ns-{i}}}
spec:
  virtualhost: {{fqdn: site-{i}.example.com}}
  routes:
    - services: [{{name: app, port: 80}}]
    - conditions: [{{prefix: /api}}]
      services: [{{name: app, port: 80, weight: 100}}]
"#,
        a = i / 256 % 256,
        b = i % 256,
    )
}

fn stats(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let n = samples.len();
    format!(
        "min {:.1} ms, median {:.1} ms, p90 {:.1} ms, max {:.1} ms ({n} runs)",
        ms(samples[0]),
        ms(samples[n / 2]),
        ms(samples[n * 9 / 10]),
        ms(samples[n - 1])
    )
}

fn main() {
    // `cargo test --benches` runs bench binaries with `--bench` absent: keep that quick.
    let benching = std::env::args().any(|a| a == "--bench");
    let n = env_usize("ISOBAR_BENCH_N", if benching { 10_000 } else { 100 });
    let runs = env_usize("ISOBAR_BENCH_RUNS", if benching { 15 } else { 1 });

    let text: String = (0..n).map(tenant).collect::<Vec<_>>().join("---\n");
    let start = Instant::now();
    let parsed = parse_file(Path::new("bench.yaml"), &text).unwrap_or_else(|e| panic!("{e}"));
    let decode = start.elapsed();
    let mut objects = Objects::default();
    for object in parsed {
        objects.apply(object);
    }

    let config = Config::default();
    let pipeline =
        Pipeline::from_config(&config.pipeline, &config.plugins).unwrap_or_else(|e| panic!("{e}"));
    let settings = envoy_settings(&config);

    let mut build = Vec::new();
    let mut total = Vec::new();
    let mut last = None;
    for run in 0..runs + 2 {
        let start = Instant::now();
        let output = pipeline.build(&objects);
        let built = start.elapsed();
        let snapshot = Snapshot::new(translate(&output.ir, &objects, &settings));
        let all = start.elapsed();
        assert_eq!(
            output.ir.virtual_hosts.len(),
            n,
            "every proxy becomes a vhost"
        );
        if run >= 2 {
            build.push(built);
            total.push(all);
        }
        last = Some(snapshot);
    }
    let snapshot = last.unwrap_or_else(|| panic!("no runs"));
    let bytes: usize = XdsType::ORDER
        .iter()
        .flat_map(|t| snapshot.get(*t).resources.values())
        .map(|a| a.value.len())
        .sum();

    println!("isobar build benchmark: {n} HTTPProxies, {n} Services, {n} EndpointSlices");
    println!(
        "  decode YAML (once, not part of the build): {:.1} ms",
        decode.as_secs_f64() * 1e3
    );
    println!(
        "  objects → IR (pipeline):                   {}",
        stats(build)
    );
    println!(
        "  objects → IR → encoded, versioned xDS:     {}",
        stats(total)
    );
    println!(
        "  xDS payload: {:.1} MB in {} resources",
        bytes as f64 / 1e6,
        XdsType::ORDER
            .iter()
            .map(|t| snapshot.get(*t).resources.len())
            .sum::<usize>()
    );
}
