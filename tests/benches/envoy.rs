//! End to end at scale: the release `isobar serve` on a manifest directory of N tenants
//! (one file each: a Service with an EndpointSlice to a local backend, and an HTTPProxy),
//! a real Envoy started from `isobar bootstrap`, and one change at a time: a tenant's
//! file rewritten with a new route → the first request through Envoy that the new route
//! answers (polled every 2 ms). The hold-off is 0 (`pipeline.holdoff-delay: 0s`); the
//! file watcher's settle time (10 ms) is part of every figure. With `vhds`, Isobar runs
//! with `xds-server.vhds` and Envoy on delta xDS: a change reaches Envoy as one vhost;
//! without, `xds-server.vhds` is off and Envoy on state of the world. With `defaults`,
//! Isobar runs with its default settings instead, then takes a burst and route edits
//! under traffic.
//! With `gateway`, each tenant has an HTTPRoute instead of the HTTPProxy, on one Gateway
//! whose listener is the HTTP port.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::support::{Behaviour, ISOBAR, ServePorts, backend_with, envoy_on, spawn, write};

/// What routes each tenant's host: an HTTPProxy, an Ingress or an HTTPRoute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routes {
    Proxy,
    Ingress,
    Gateway,
}

pub fn tenant(i: usize, port: u16, extra: Option<&str>, routes: Routes) -> String {
    let service = super::support::service_yaml(&format!("ns-{i}"), "app", port);
    if routes == Routes::Ingress {
        let path = |p: &str| {
            format!(
                "          - {{path: {p}, pathType: Prefix, backend: {{service: {{name: app, port: {{number: 80}}}}}}}}\n"
            )
        };
        let extra = extra.map(path).unwrap_or_default();
        return format!(
            "{service}---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: site, namespace: ns-{i}}}\nspec:\n  rules:\n    - host: site-{i}.example.com\n      http:\n        paths:\n{}{extra}",
            path("/ok")
        );
    }
    if routes == Routes::Gateway {
        let extra = extra
            .map(|prefix| {
                format!("    - matches: [{{path: {{value: {prefix}}}}}]\n      backendRefs: [{{name: app, port: 80}}]\n")
            })
            .unwrap_or_default();
        return format!(
            "{service}---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: site, namespace: ns-{i}}}\nspec:\n  parentRefs: [{{name: gw, namespace: infra}}]\n  hostnames: [site-{i}.example.com]\n  rules:\n    - matches: [{{path: {{value: /ok}}}}]\n      backendRefs: [{{name: app, port: 80}}]\n{extra}"
        );
    }
    let extra = extra
        .map(|prefix| {
            format!("    - conditions: [{{prefix: {prefix}}}]\n      services: [{{name: app, port: 80}}]\n")
        })
        .unwrap_or_default();
    format!(
        "{service}---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: site, namespace: ns-{i}}}\nspec:\n  virtualhost: {{fqdn: site-{i}.example.com}}\n  routes:\n    - conditions: [{{prefix: /ok}}]\n      services: [{{name: app, port: 80}}]\n{extra}"
    )
}

async fn status(client: &reqwest::Client, port: u16, host: &str, path: &str) -> u16 {
    client
        .get(format!("http://127.0.0.1:{port}{path}"))
        .header("host", host)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// The GatewayClass and the Gateway the routes of the `gateway` variant attach to: its
/// listener port is Contour's for the HTTP port (P + 8000 = `http`).
fn gateway_manifest(http: u16) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: isobar}}\nspec: {{controllerName: projectcontour.io/gateway-controller}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: infra}}\nspec:\n  gatewayClassName: isobar\n  listeners: [{{name: http, protocol: HTTP, port: {}, allowedRoutes: {{namespaces: {{from: All}}}}}}]\n",
        http - 8000
    )
}

/// The release `isobar serve` on `manifests` with `config`, on `ports`, logging warnings
/// to `dir/isobar.log`.
pub fn serve(
    dir: &Path,
    config: &Path,
    manifests: &Path,
    ports: &ServePorts,
) -> super::support::Proc {
    let mut command = Command::new(ISOBAR);
    command
        .args([
            "serve",
            "-c",
            &config.to_string_lossy(),
            "--insecure",
            "--manifests",
            &manifests.to_string_lossy(),
        ])
        .args(ports.args())
        .envs(ports.envs())
        .env("ISOBAR_LOG", "warn");
    // The bench's own settings are not Isobar's (it refuses unknown ISOBAR_*); Isobar's
    // own (`ISOBAR_XDS_SERVER__…`) go through.
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("ISOBAR_BENCH_")) {
        command.env_remove(key);
    }
    spawn("isobar", &mut command, &dir.join("isobar.log"))
}

/// `defaults`: Isobar with its default settings (adaptive hold-off, VHDS to delta
/// Envoys), as a user meets it, instead of hold-off 0; then `vhds` says whether Envoy is
/// bootstrapped as `isobar bootstrap` does by default (delta) or as Contour's bootstrap
/// does (state of the world, served whole route tables).
pub fn run(n: usize, changes: usize, vhds: bool, routes: Routes, defaults: bool) {
    let gateway = routes == Routes::Gateway;
    let runtime = super::runtime();
    runtime.block_on(async {
        let (backend, _) = backend_with("ok", Behaviour::Echo).await;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let manifests = dir.path().join("manifests");
        for i in 0..n {
            write(&manifests, &format!("ns-{i}.yaml"), &tenant(i, backend, None, routes));
        }
        let config = dir.path().join("contour.yaml");
        let mut text = if defaults {
            String::new()
        } else {
            format!("pipeline:\n  holdoff-delay: 0s\nxds-server:\n  vhds: {vhds}\n")
        };
        let ports = ServePorts::free();
        if gateway {
            text.push_str("gateway:\n  controllerName: projectcontour.io/gateway-controller\n");
            write(&manifests, "gateway.yaml", &gateway_manifest(ports.http));
        }
        std::fs::write(&config, text).unwrap_or_else(|e| panic!("{e}"));
        let (xds, http) = (ports.xds, ports.http);
        let started = Instant::now();
        let _isobar = serve(dir.path(), &config, &manifests, &ports);
        let _envoy = envoy_on(dir.path(), xds, if vhds { "delta" } else { "sotw" });
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let ready = every_vhost_served(&client, &ports, n, started, &dir.path().join("envoy.log")).await;
        println!(
            "envoy{}{}{}: {n} tenants in {n} files, isobar serve + a real Envoy: every vhost served {:.1} s after start",
            match routes {
                Routes::Gateway => " (Gateway API)",
                Routes::Ingress => " (Ingress)",
                Routes::Proxy => "",
            },
            if defaults { " with default settings" } else { "" },
            if vhds { " over VHDS" } else { "" },
            started.elapsed().as_secs_f64()
        );
        if let Some(ready) = ready {
            println!("  isobar: /readyz 200 {:.1} s after start", ready.as_secs_f64());
        }
        let (isobar_pid, envoy_pid) = (_isobar.0.id(), _envoy.0.id());
        let mut samples = Vec::new();
        for k in 0..changes {
            let i = (k * 7919) % n;
            let host = format!("site-{i}.example.com");
            let path = format!("/v{k}");
            assert_eq!(status(&client, http, &host, &path).await, 404);
            if defaults {
                // One change as a user makes it, not the next of a burst: a change within
                // a quarter of the hold-off of the last build waits the hold-off out.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let since = Instant::now();
            write(Path::new(&manifests), &format!("ns-{i}.yaml"), &tenant(i, backend, Some(&path), routes));
            samples.push(served_since(&client, http, &host, &path, since).await);
        }
        print_latencies("file rewritten", &mut samples);
        // Envoy's own account of applying the route tables (its subscription's
        // `update_duration` histogram), to tell its share from Isobar's. Envoy merges its
        // histograms when its admin is asked (`isobar bootstrap`'s default): ask once
        // to merge them, then read.
        let _ = client
            .get(format!("http://127.0.0.1:{}/stats?filter=ingress_http", ports.stats))
            .send()
            .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stats = client
            .get(format!("http://127.0.0.1:{}/stats?filter=ingress_http", ports.stats))
            .send()
            .await
            .ok();
        let stats = match stats {
            Some(r) => r.text().await.unwrap_or_default(),
            None => String::new(),
        };
        for line in stats.lines().filter(|l| {
            ["update_duration", "update_success", "update_rejected"].iter().any(|s| {
                l.contains(&format!("rds.ingress_http.{s}"))
                    || l.contains(&format!("rds.vhds.ingress_http.{s}"))
            })
        }) {
            println!("  envoy: {line}");
        }
        // Routes split into shards: each shard's RouteConfiguration has its own.
        let shards: Vec<&str> = stats
            .lines()
            .filter(|l| l.contains("rds.ingress_http/shard-") && l.contains("update_duration"))
            .collect();
        for line in shards.iter().take(4) {
            println!("  envoy: {line}");
        }
        if shards.len() > 4 {
            println!("  envoy: ({} shards' update_duration in all)", shards.len());
        }
        // Isobar's own account: the change's event reaching the runner → the route
        // table handed to the stream (mean over the changes).
        let metrics = match client
            .get(format!("http://127.0.0.1:{}/metrics", ports.metrics))
            .send()
            .await
        {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        // Per xDS type that carried the changes (vhosts over VHDS; whole tables or a split
        // listener's shards over RDS): bucket bounds and cumulative counts.
        for t in ["vhds", "rds"] {
            let label = format!("type=\"{t}\"");
            let buckets: Vec<(f64, f64)> = metrics
                .lines()
                .filter(|l| l.starts_with("isobar_event_to_xds_seconds_bucket") && l.contains(&label))
                .filter_map(|l| {
                    let le = l.split("le=\"").nth(1)?.split('"').next()?;
                    let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
                    Some((le, l.rsplit(' ').next()?.parse().ok()?))
                })
                .collect();
            let total = buckets.last().map_or(0.0, |b| b.1);
            let within = |q: f64| {
                buckets
                    .iter()
                    .find(|(_, count)| *count >= (total * q).ceil())
                    .map_or(f64::NAN, |b| b.0 * 1e3)
            };
            if total > 0.0 {
                println!(
                    "  isobar: event → {t} sent ({total} responses, the first sync included): p50 ≤ {} ms, p99 ≤ {} ms (histogram bucket bounds)",
                    within(0.5),
                    within(0.99)
                );
            }
        }
        print_memory(isobar_pid, envoy_pid).await;
        if defaults {
            let ports = (http, ports.metrics);
            burst(&client, ports, _isobar.0.id(), &manifests, backend, n, routes).await;
            under_load(http, &manifests, backend, n, routes, changes * 10).await;
        }
    });
}

/// Waits until Envoy serves the last of `n` tenants' vhosts (polled every 50 ms; fails
/// after 10 minutes with `log`): how long after `started` Isobar first answered `/readyz`.
async fn every_vhost_served(
    client: &reqwest::Client,
    ports: &ServePorts,
    n: usize,
    started: Instant,
    log: &Path,
) -> Option<Duration> {
    let last = format!("site-{}.example.com", n - 1);
    let mut ready = None;
    while status(client, ports.http, &last, "/ok").await != 200 {
        if ready.is_none() && readyz(client, ports.health).await {
            ready = Some(started.elapsed());
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "Envoy never served {last}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ready
}

/// How long after `since` Envoy first answers `host``path` with 200 (polled every 2 ms;
/// fails after a minute).
async fn served_since(
    client: &reqwest::Client,
    http: u16,
    host: &str,
    path: &str,
    since: Instant,
) -> Duration {
    while status(client, http, host, path).await != 200 {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "{host}{path} never served"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    since.elapsed()
}

/// The changes' p50, p99 and max: `what` happened → first response from the new route.
fn print_latencies(what: &str, samples: &mut [Duration]) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let at = |q: f64| {
        ms(samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1])
    };
    println!(
        "  {what} → first response from the new route ({} changes): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        samples.len(),
        at(0.5),
        at(0.99),
        ms(samples[samples.len() - 1])
    );
}

/// Both processes' memory once the changes have settled: resident now, and the most it
/// ever was.
async fn print_memory(isobar: u32, envoy: u32) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (who, pid) in [("isobar", isobar), ("envoy", envoy)] {
        let (rss, peak) = (memory(pid, "VmRSS"), memory(pid, "VmHWM"));
        println!("  {who}: RSS {rss:.0} MiB, peak {peak:.0} MiB");
    }
}

/// Whether `isobar serve` answers `/readyz` with 200.
async fn readyz(client: &reqwest::Client, port: u16) -> bool {
    client
        .get(format!("http://127.0.0.1:{port}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// A `/proc/<pid>/status` memory figure (`VmRSS`, `VmHWM`), in MiB.
fn memory(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with(field))?.to_string();
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Route edits under traffic: 200 requests a second to each of 5 vhosts (their `/ok`
/// route, which every edit keeps) while `edits` rewrites of those vhosts' files land,
/// 50 a second, each adding or dropping another route. Every request must answer 2xx.
async fn under_load(
    http: u16,
    manifests: &Path,
    backend: u16,
    n: usize,
    routes: Routes,
    edits: usize,
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let hosts: Vec<usize> = (0..5).map(|j| (j * 2_003 + 11) % n).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, bad) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let statuses = Arc::new(std::sync::Mutex::new(
        std::collections::BTreeMap::<u16, u64>::new(),
    ));
    let mut load = Vec::new();
    for i in hosts.clone() {
        let (stop, sent, bad, statuses) =
            (stop.clone(), sent.clone(), bad.clone(), statuses.clone());
        load.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap_or_else(|e| panic!("{e}"));
            let host = format!("site-{i}.example.com");
            let mut ticker = tokio::time::interval(Duration::from_millis(5));
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                ticker.tick().await;
                let code = status(&client, http, &host, "/ok").await;
                sent.fetch_add(1, Ordering::Relaxed);
                if !(200..300).contains(&code) {
                    bad.fetch_add(1, Ordering::Relaxed);
                    *statuses
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(code)
                        .or_default() += 1;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_millis(20));
    for k in 0..edits {
        ticker.tick().await;
        let i = hosts[k % hosts.len()];
        let extra = (k % 2 == 0).then(|| format!("/edit{k}"));
        write(
            manifests,
            &format!("ns-{i}.yaml"),
            &tenant(i, backend, extra.as_deref(), routes),
        );
    }
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for task in load {
        let _ = task.await;
    }
    let (sent, bad) = (sent.load(Ordering::Relaxed), bad.load(Ordering::Relaxed));
    println!(
        "  under load: {edits} route edits to 5 vhosts in {:.1} s while each took 200 requests/s: {sent} requests, {bad} not 2xx {:?}",
        took.as_secs_f64(),
        statuses.lock().unwrap_or_else(|p| p.into_inner())
    );
    assert_eq!(bad, 0, "requests failed while routes changed");
}

/// A burst as a deploy pipeline makes one: 200 file rewrites a second for 2 s, each
/// adding a route to another tenant. What it cost Isobar: builds, CPU seconds, and the
/// time from the last write to Envoy serving its route.
async fn burst(
    client: &reqwest::Client,
    (http, metrics_port): (u16, u16),
    pid: u32,
    manifests: &Path,
    backend: u16,
    n: usize,
    routes: Routes,
) {
    let builds = || async {
        let text = client
            .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find(|l| l.starts_with("isobar_builds_total"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<u64>().ok())
    };
    // utime + stime of the process, in clock ticks (100 a second on Linux).
    let cpu = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let fields: Vec<&str> = s.rsplit(')').next()?.split_whitespace().collect();
                Some(fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?)
            })
            .map_or(0.0, |ticks| ticks / 100.0)
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (builds_before, cpu_before) = (builds().await.unwrap_or_default(), cpu());
    let started = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_millis(5));
    let count = 400;
    let mut last = (String::new(), String::new());
    for k in 0..count {
        ticker.tick().await;
        let i = (k * 104_729 + 17) % n;
        let path = format!("/burst{k}");
        write(
            manifests,
            &format!("ns-{i}.yaml"),
            &tenant(i, backend, Some(&path), routes),
        );
        last = (format!("site-{i}.example.com"), path);
    }
    let written = started.elapsed();
    let since = Instant::now();
    while status(client, http, &last.0, &last.1).await != 200 {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "the burst's last route never served"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let served = since.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let builds = builds().await.unwrap_or_default() - builds_before;
    println!(
        "  burst: {count} rewrites in {:.1} s ({:.0}/s): {builds} builds, {:.2} CPU seconds of isobar (burst and 1 s after), last write → its route served {:.0} ms",
        written.as_secs_f64(),
        count as f64 / written.as_secs_f64(),
        cpu() - cpu_before,
        served.as_secs_f64() * 1e3
    );
}

/// The Kubernetes provider through a real Envoy (`envoy-kube`): N HTTPProxy tenants on the
/// test API server (real HTTP, paged lists, watches; objects as a cluster holds them),
/// the release `isobar serve --kubeconfig` with its default settings and leader election
/// (so it writes statuses too), an Envoy from `isobar bootstrap`; each change an update
/// of one tenant's HTTPProxy adding a route, as `kubectl apply` makes it → the first
/// request through Envoy that the new route answers.
pub fn kube(n: usize, changes: usize) {
    use crate::apiserver::ApiServer;
    let runtime = super::runtime();
    runtime.block_on(async {
        let (backend, _) = backend_with("ok", Behaviour::Echo).await;
        let server = ApiServer::start().await;
        let put = |i: usize, extra: Option<&str>| {
            let text = tenant(i, backend, extra, Routes::Proxy);
            for document in text.split("---\n").filter(|d| !d.trim().is_empty()) {
                server.put(&super::kube::as_a_cluster_has_it(document, i));
            }
        };
        for i in 0..n {
            put(i, None);
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let kubeconfig = server.kubeconfig(dir.path());
        let ports = ServePorts::free();
        let log = dir.path().join("isobar.log");
        let started = Instant::now();
        let isobar = super::kube::isobar(super::kube::this_isobar(), None, &log)
            .args(["--kubeconfig", &kubeconfig])
            .args(ports.args())
            .envs(ports.envs())
            .spawn()
            .map(super::support::Proc)
            .unwrap_or_else(|e| panic!("isobar: {e}"));
        let envoy = envoy_on(dir.path(), ports.xds, "delta");
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let ready = every_vhost_served(&client, &ports, n, started, &log).await;
        println!(
            "envoy-kube: {n} HTTPProxy tenants on the Kubernetes API, isobar serve --kubeconfig (default settings) + a real Envoy: every vhost served {:.1} s after start",
            started.elapsed().as_secs_f64()
        );
        if let Some(ready) = ready {
            println!("  isobar: /readyz 200 {:.1} s after start", ready.as_secs_f64());
        }
        let mut samples = Vec::new();
        for k in 0..changes {
            let i = (k * 7919) % n;
            let host = format!("site-{i}.example.com");
            let path = format!("/v{k}");
            assert_eq!(status(&client, ports.http, &host, &path).await, 404);
            // One change as a user makes it, after a quiet moment (see `run`).
            tokio::time::sleep(Duration::from_millis(200)).await;
            let since = Instant::now();
            put(i, Some(&path));
            samples.push(served_since(&client, ports.http, &host, &path, since).await);
        }
        print_latencies("object updated on the API", &mut samples);
        print_memory(isobar.0.id(), envoy.0.id()).await;
    });
}
