//! Full build at scale: N HTTPProxies (each with its own Service and EndpointSlice) →
//! pipeline (sources, conditions) → IR → encoded xDS resources → versioned snapshot.
//!
//! `cargo bench --bench build` (N defaults to 10,000; `ISOBAR_BENCH_N` overrides it,
//! `ISOBAR_BENCH_RUNS` the number of timed runs, `ISOBAR_BENCH_PROFILES` picks among
//! `build` (flat and inclusion), `tls`, `kube`, `kube-status` (1,000 HTTPProxies, or
//! `ISOBAR_BENCH_CHANGES`, created at once on the Kubernetes API: every status written; `perf`
//! takes `ISOBAR_BENCH_CHANGES` changes of each kind and `ISOBAR_BENCH_FANOUT` streams), `gateway` (Gateway API; `gateway-vhds` with
//! `xds-server.vhds`, `gateway-kube` on the Kubernetes API), `perf`, `vhds` (perf with `xds-server.vhds`),
//! `envoy`, `envoy-defaults` (with Isobar's default settings; `envoy-defaults-sotw` with an
//! Envoy on state of the world, `envoy-defaults-ingress` with Ingresses,
//! `envoy-defaults-gateway` with HTTPRoutes), `envoy-vhds` (the same over
//! VHDS), `envoy-gateway` and `envoy-gateway-vhds`
//! (the same with HTTPRoutes), `envoy-streams` (TCPRoute and UDPRoute edits beside
//! HTTPRoute ones, default settings), `webhook` and `wasm`; all by default;
//! the last two at 1,000 objects unless `ISOBAR_BENCH_N` says otherwise). Figures go in BENCHMARKS.md.
//! `symbols`, never by default, records which functions run at start (see `kube.rs`).

use std::path::Path;
use std::time::{Duration, Instant};

use isobar::cli::serve::envoy_settings;
use isobar::config::Config;
use isobar::provider::manifest::parse_file;
use isobar::runner::pipeline::Pipeline;
use isobar::xds::{Snapshot, XdsType, translate};
use isobar_sdk::Objects;

#[path = "../integration/apiserver.rs"]
#[allow(dead_code)]
mod apiserver;
mod envoy;
mod extend;
mod gateway;
mod kube;
mod perf;
mod streams;
#[path = "../integration/support.rs"]
#[allow(dead_code)]
mod support;
mod tls;
#[path = "../integration/webhook_client.rs"]
mod webhook_client;

/// The same allocator as the `isobar` binary.
#[global_allocator]
static GLOBAL: isobar::allocator::Allocator = isobar::allocator::Allocator;

/// The runtime the benches drive servers and clients on: two workers, like the machine.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(isobar::allocator::share_arena)
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

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

/// The flat tenant's Service and EndpointSlice, in namespace `team-{i}`.
fn team_service(i: usize) -> String {
    tenant(i)
        .replace(
            &format!("namespace: ns-{i}"),
            &format!("namespace: team-{i}"),
        )
        .split("---\napiVersion: projectcontour.io/v1")
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The inclusion profile's tenant: a root in `ns-{i}` with its own route, including two
/// children in `team-{i}` (another namespace, with its own Service).
fn tenant_with_includes(i: usize) -> String {
    let own = tenant(i).replace(
        "    - conditions: [{prefix: /api}]\n      services: [{name: app, port: 80, weight: 100}]\n",
        &format!(
            "  includes:\n    - {{name: child-a, namespace: team-{i}, conditions: [{{prefix: /a}}]}}\n    - {{name: child-b, namespace: team-{i}, conditions: [{{prefix: /b}}, {{header: {{name: x-b, present: true}}}}]}}\n"
        ),
    );
    let team = team_service(i);
    let child = |name: &str| {
        format!(
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: team-{i}}}\nspec:\n  routes:\n    - services: [{{name: app, port: 80}}]\n    - conditions: [{{prefix: /v2}}]\n      services: [{{name: app, port: 80}}]\n"
        )
    };
    format!(
        "{own}---\n{team}---\n{}---\n{}",
        child("child-a"),
        child("child-b")
    )
}

/// The equal-output inclusion tenant: the flat tenant's two routes, each moved into a child
/// in `team-{i}` (another namespace, which holds the Service) and included by a root that
/// has no routes of its own. The xDS is the flat profile's, so the difference is the cost
/// of following includes.
fn tenant_split(i: usize) -> String {
    let team = team_service(i);
    format!(
        "{team}---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: site, namespace: ns-{i}}}\nspec:\n  virtualhost: {{fqdn: site-{i}.example.com}}\n  includes:\n    - {{name: child-a, namespace: team-{i}}}\n    - {{name: child-b, namespace: team-{i}, conditions: [{{prefix: /api}}]}}\n---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: child-a, namespace: team-{i}}}\nspec:\n  routes:\n    - services: [{{name: app, port: 80}}]\n---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: child-b, namespace: team-{i}}}\nspec:\n  routes:\n    - services: [{{name: app, port: 80, weight: 100}}]\n"
    )
}

/// Decodes `text` and times `runs` full builds of it; returns (decode, pipeline, total,
/// vhosts, payload bytes, resources).
fn measure(
    text: &str,
    runs: usize,
) -> (Duration, Vec<Duration>, Vec<Duration>, usize, usize, usize) {
    let start = Instant::now();
    let parsed = parse_file(Path::new("bench.yaml"), text).unwrap_or_else(|e| panic!("{e}"));
    let decode = start.elapsed();
    let mut objects = Objects::default();
    for object in parsed {
        objects.apply(object);
    }
    let config = Config::default();
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
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
        if run >= 2 {
            build.push(built);
            total.push(all);
        }
        last = Some((
            output.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER).len(),
            snapshot,
        ));
    }
    let (vhosts, snapshot) = last.unwrap_or_else(|| panic!("no runs"));
    let bytes = XdsType::ORDER
        .iter()
        .flat_map(|t| snapshot.get(*t).resources.values())
        .map(|a| a.len())
        .sum();
    let resources = XdsType::ORDER
        .iter()
        .map(|t| snapshot.get(*t).resources.len())
        .sum();
    (decode, build, total, vhosts, bytes, resources)
}

fn report(title: &str, text: &str, runs: usize, vhosts_expected: usize) -> Duration {
    let (decode, build, total, vhosts, bytes, resources) = measure(text, runs);
    assert_eq!(vhosts, vhosts_expected, "every root becomes a vhost");
    let median = {
        let mut t = total.clone();
        t.sort();
        t[t.len() / 2]
    };
    println!("{title}");
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
        "  xDS payload: {:.1} MB in {resources} resources",
        bytes as f64 / 1e6
    );
    median
}

fn main() {
    isobar::allocator::tune();
    // `cargo test --benches` runs bench binaries with `--bench` absent: keep that quick.
    let benching = std::env::args().any(|a| a == "--bench");
    // The in-process runner's logs (e.g. each spliced build's phases) with `ISOBAR_LOG`.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("ISOBAR_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
    let n = env_usize("ISOBAR_BENCH_N", if benching { 10_000 } else { 100 });
    let runs = env_usize("ISOBAR_BENCH_RUNS", if benching { 15 } else { 1 });
    let profiles = std::env::var("ISOBAR_BENCH_PROFILES").unwrap_or_else(|_| {
        "build,translate,tls,kube,kube-status,gateway,gateway-vhds,gateway-kube,perf,vhds,envoy,envoy-defaults,envoy-defaults-sotw,envoy-defaults-ingress,envoy-defaults-gateway,envoy-vhds,envoy-gateway,envoy-gateway-vhds,envoy-kube,envoy-streams,webhook,wasm".into()
    });
    let profiles: Vec<&str> = profiles.split(',').map(str::trim).collect();
    if profiles.contains(&"build") {
        build_profiles(n, runs);
    }
    if profiles.contains(&"translate") {
        translate_dir(n, if benching { 5 } else { 1 });
    }
    if profiles.contains(&"tls") {
        tls::run(n, runs);
    }
    if profiles.contains(&"kube") {
        kube::report(n);
    }
    if profiles.contains(&"kube-status") {
        // 1,000 created at once when benching; `ISOBAR_BENCH_CHANGES` sets another count.
        let burst = std::env::var("ISOBAR_BENCH_CHANGES")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(if benching { 1000 } else { 20 });
        kube::statuses(n, burst);
    }
    // Not among the defaults: it needs valgrind, and it rewrites a source file.
    if profiles.contains(&"symbols") {
        kube::startup_symbols();
    }
    if profiles.contains(&"gateway") {
        gateway::run(n, if benching { 200 } else { 5 }, false);
    }
    if profiles.contains(&"gateway-kube") {
        gateway::kube(n, if benching { 1000 } else { 20 });
    }
    if profiles.contains(&"gateway-vhds") {
        gateway::run(n, if benching { 200 } else { 5 }, true);
    }
    if profiles.contains(&"perf") {
        perf::run(n, benching, false);
    }
    if profiles.contains(&"vhds") {
        perf::run(n, benching, true);
    }
    if profiles.contains(&"envoy") {
        envoy::run(
            n,
            if benching { 100 } else { 5 },
            false,
            envoy::Routes::Proxy,
            false,
        );
    }
    if profiles.contains(&"envoy-defaults") {
        envoy::run(
            n,
            if benching { 100 } else { 5 },
            true,
            envoy::Routes::Proxy,
            true,
        );
    }
    // The defaults with each tenant's host routed by an Ingress.
    if profiles.contains(&"envoy-defaults-ingress") {
        envoy::run(
            n,
            if benching { 100 } else { 5 },
            true,
            envoy::Routes::Ingress,
            true,
        );
    }
    // The defaults with each tenant's host routed by an HTTPRoute on one Gateway.
    if profiles.contains(&"envoy-defaults-gateway") {
        envoy::run(
            n,
            if benching { 100 } else { 5 },
            true,
            envoy::Routes::Gateway,
            true,
        );
    }
    // The defaults with an Envoy on Contour's bootstrap (state of the world).
    if profiles.contains(&"envoy-defaults-sotw") {
        envoy::run(
            n,
            if benching { 100 } else { 5 },
            false,
            envoy::Routes::Proxy,
            true,
        );
    }
    if profiles.contains(&"envoy-vhds") {
        envoy::run(
            n,
            if benching { 100 } else { 5 },
            true,
            envoy::Routes::Proxy,
            false,
        );
    }
    if profiles.contains(&"envoy-gateway") {
        envoy::run(
            n,
            if benching { 100 } else { 5 },
            false,
            envoy::Routes::Gateway,
            false,
        );
    }
    if profiles.contains(&"envoy-gateway-vhds") {
        envoy::run(
            n,
            if benching { 100 } else { 5 },
            true,
            envoy::Routes::Gateway,
            false,
        );
    }
    if profiles.contains(&"envoy-kube") {
        envoy::kube(n, if benching { 100 } else { 5 });
    }
    if profiles.contains(&"envoy-streams") {
        streams::run(n, if benching { 90 } else { 6 });
    }
    // The webhook and wasm figures are stated at 1,000 objects.
    let small = env_usize("ISOBAR_BENCH_N", if benching { 1_000 } else { 50 });
    if profiles.contains(&"webhook") {
        extend::webhook(small, if benching { 300 } else { 30 });
    }
    if profiles.contains(&"wasm") {
        extend::wasm(small, runs);
    }
}

/// `isobar translate DIR` as a user runs it: N tenant files (a Service, an EndpointSlice
/// and an HTTPProxy each), the optimised binary, its YAML output to /dev/null; the wall
/// time of the process, decoding, building, checking against Envoy's rules and printing.
fn translate_dir(n: usize, runs: usize) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let manifests = dir.path().join("manifests");
    for i in 0..n {
        support::write(
            &manifests,
            &format!("ns-{i}.yaml"),
            &envoy::tenant(i, 8080, None, envoy::Routes::Proxy),
        );
    }
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            let mut command = std::process::Command::new(support::ISOBAR);
            // The bench's own settings are not Isobar's (it refuses unknown ISOBAR_*).
            for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("ISOBAR_")) {
                command.env_remove(key);
            }
            let out = command
                .arg("translate")
                .arg(&manifests)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .output()
                .unwrap_or_else(|e| panic!("isobar translate: {e}"));
            assert!(
                out.status.success(),
                "isobar translate failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            start.elapsed()
        })
        .collect();
    times.sort();
    println!(
        "translate: {n} tenants in {n} files, `isobar translate DIR`: median {:.2} s, min {:.2} s ({runs} runs)",
        times[times.len() / 2].as_secs_f64(),
        times[0].as_secs_f64()
    );
}

/// The flat profile and the two inclusion profiles, with their ratios.
fn build_profiles(n: usize, runs: usize) {
    let flat: String = (0..n).map(tenant).collect::<Vec<_>>().join("---\n");
    let flat_median = report(
        &format!("flat: {n} HTTPProxies, {n} Services, {n} EndpointSlices"),
        &flat,
        runs,
        n,
    );
    let nested: String = (0..n)
        .map(tenant_with_includes)
        .collect::<Vec<_>>()
        .join("---\n");
    let nested_median = report(
        &format!(
            "inclusion: {n} roots each including 2 children in another namespace ({} HTTPProxies, {} Services)",
            3 * n,
            2 * n
        ),
        &nested,
        runs,
        n,
    );
    let split: String = (0..n).map(tenant_split).collect::<Vec<_>>().join("---\n");
    let split_median = report(
        &format!(
            "inclusion, same routes as flat: {n} roots each including 2 one-route children in another namespace ({} HTTPProxies, {n} Services)",
            3 * n
        ),
        &split,
        runs,
        n,
    );
    println!(
        "inclusion / flat (median, full build): {:.2}x",
        nested_median.as_secs_f64() / flat_median.as_secs_f64()
    );
    println!(
        "inclusion with flat's routes / flat (median, full build): {:.2}x",
        split_median.as_secs_f64() / flat_median.as_secs_f64()
    );
}
