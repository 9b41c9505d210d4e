//! The Kubernetes provider at scale (in-cluster issue): `isobar serve --kubeconfig` (the
//! release binary, its own process) against the test API server (`tests/integration/
//! apiserver.rs`, in this process) holding N HTTPProxies with TLS, N Services, N
//! EndpointSlices, N referenced Secrets and 2N unreferenced ones. Reports the time from the
//! last list page answered to `/readyz` 200, peak and steady RSS of the Isobar process, and
//! what the unreferenced Secrets cost (the same run without them).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::tenant;
use crate::apiserver::ApiServer;

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

/// One certificate for every referenced secret (the content does not change what is
/// measured: each Secret is its own object, parsed and validated on its own).
fn certificate() -> (String, String) {
    let params = rcgen::CertificateParams::new(vec!["site.example.com".to_string()])
        .unwrap_or_else(|e| panic!("{e}"));
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
    (cert.pem(), key.serialize_pem())
}

/// An object as a real cluster holds it: what `kubectl apply` created carries its
/// last-applied copy; an EndpointSlice, as its controller writes it, names each
/// endpoint's pod, node and zone, its owner and when it last changed.
fn as_a_cluster_has_it(document: &str, i: usize) -> String {
    if !document.contains("kind: EndpointSlice") {
        let Some((head, rest)) = document.split_once("metadata: {") else {
            return document.to_string();
        };
        let applied = serde_json::to_string(
            &serde_yaml::from_str::<serde_json::Value>(document).unwrap_or_default(),
        )
        .unwrap_or_default();
        let annotation = serde_json::to_string(&applied).unwrap_or_default();
        return format!(
            "{head}metadata: {{annotations: {{kubectl.kubernetes.io/last-applied-configuration: {annotation}}}, {rest}"
        );
    }
    let mut out = document.replace(
        "  labels: {kubernetes.io/service-name: app}\n",
        &format!(
            "  labels: {{kubernetes.io/service-name: app, endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io}}\n  annotations: {{endpoints.kubernetes.io/last-change-trigger-time: \"2026-11-24T00:00:00Z\"}}\n  ownerReferences: [{{apiVersion: v1, kind: Service, name: app, uid: 00000000-0000-4000-8000-{i:012}, controller: true, blockOwnerDeletion: true}}]\n"
        ),
    );
    for k in 0.. {
        let endpoint = format!(
            "conditions: {{ready: true, serving: true, terminating: false}}, nodeName: node-{n}, zone: zone-{z}, targetRef: {{kind: Pod, name: app-7d9f8b6c5-{i}x{k}, namespace: ns-{i}, uid: 00000000-0000-4000-9000-{i:08}{k:04}}}}}",
            n = (i + k) % 50,
            z = k % 3
        );
        let next = out.replacen("conditions: {ready: true}}", &endpoint, 1);
        if next == out {
            break;
        }
        out = next;
    }
    out
}

fn load(server: &ApiServer, n: usize, unreferenced_per_tenant: usize) {
    let (cert, key) = certificate();
    for i in 0..n {
        let text = tenant(i).replace(
            &format!("virtualhost: {{fqdn: site-{i}.example.com}}"),
            &format!("virtualhost: {{fqdn: site-{i}.example.com, tls: {{secretName: cert}}}}"),
        );
        for document in text.split("---\n").filter(|d| !d.trim().is_empty()) {
            server.put(&as_a_cluster_has_it(document, i));
        }
        server.put(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: cert, namespace: ns-{i}}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indent(&cert),
            indent(&key)
        ));
        // Unreferenced: application secrets of about a certificate's size.
        for j in 0..unreferenced_per_tenant {
            server.put(&format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: app-{j}, namespace: ns-{i}}}\ntype: Opaque\nstringData:\n  config: |\n{}",
                indent(&cert)
            ));
        }
    }
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

struct Run {
    ready_after_lists: Duration,
    ready_after_start: Duration,
    peak_mib: f64,
    steady_mib: f64,
}

async fn run(n: usize, unreferenced_per_tenant: usize) -> Run {
    let server = ApiServer::start().await;
    load(&server, n, unreferenced_per_tenant);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = server.kubeconfig(dir.path());
    let ports = super::support::ServePorts::free();
    let (metrics, health) = (ports.metrics, ports.health);
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_isobar"))
        .args(["serve", "--insecure", "--kubeconfig", &kubeconfig])
        .args(ports.args())
        .env("ISOBAR_LOG", "warn")
        // The bench's own settings are not Isobar configuration.
        .env_remove("ISOBAR_BENCH_PROFILES")
        .env_remove("ISOBAR_BENCH_N")
        .env_remove("ISOBAR_BENCH_RUNS")
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(dir.path().join("isobar.log"))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
        )
        .spawn()
        .unwrap_or_else(|e| panic!("isobar: {e}"));
    let pid = child.id();
    let client = reqwest::Client::new();
    let ready_url = format!("http://127.0.0.1:{health}/readyz");
    let ready_at = loop {
        if let Ok(r) = client.get(&ready_url).send().await
            && r.status().as_u16() == 200
        {
            break Instant::now();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "never ready: {}",
            std::fs::read_to_string(dir.path().join("isobar.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let lists_done = server.last_list().unwrap_or(started);
    // Steady state: after the leader's status writes have settled.
    let metrics_url = format!("http://127.0.0.1:{metrics}/metrics");
    let mut last = String::new();
    // With no objects there is nothing to write: idle.
    let rounds = if n == 0 { 0 } else { 120 };
    for _ in 0..rounds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let text = match client.get(&metrics_url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let writes: String = text
            .lines()
            .filter(|l| l.starts_with("isobar_status_writes_total"))
            .collect();
        if writes == last && !writes.is_empty() {
            break;
        }
        last = writes;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let run = Run {
        ready_after_lists: ready_at.saturating_duration_since(lists_done),
        ready_after_start: ready_at - started,
        peak_mib: rss_kib(pid, "VmHWM:") as f64 / 1024.0,
        steady_mib: rss_kib(pid, "VmRSS:") as f64 / 1024.0,
    };
    let _ = child.kill();
    let _ = child.wait();
    run
}

pub fn report(n: usize) {
    let runtime = super::runtime();
    runtime.block_on(async {
        let with = run(n, 2).await;
        let without = run(n, 0).await;
        println!(
            "kube: {n} HTTPProxies (TLS), {n} Services, {n} EndpointSlices, {n} referenced + {} unreferenced Secrets, over HTTP from the test API server",
            2 * n
        );
        println!(
            "  ready after the last list page: {:.0} ms (after process start: {:.0} ms)",
            with.ready_after_lists.as_secs_f64() * 1e3,
            with.ready_after_start.as_secs_f64() * 1e3
        );
        println!(
            "  RSS of isobar: peak {:.0} MiB, steady {:.0} MiB (status written)",
            with.peak_mib, with.steady_mib
        );
        println!(
            "  without the {} unreferenced Secrets: ready after lists {:.0} ms, peak {:.0} MiB, steady {:.0} MiB",
            2 * n,
            without.ready_after_lists.as_secs_f64() * 1e3,
            without.peak_mib,
            without.steady_mib
        );
        let per_thousand = (with.steady_mib - without.steady_mib) / (2 * n) as f64 * 1000.0;
        println!("  unreferenced Secrets cost {per_thousand:.2} MiB per 1,000 (steady RSS difference)");
        let idle = run(0, 0).await;
        println!(
            "  idle (no objects, every watch listed, ready): RSS {:.1} MiB, peak {:.1} MiB",
            idle.steady_mib, idle.peak_mib
        );
    });
}
