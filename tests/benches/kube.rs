//! The Kubernetes provider at scale (in-cluster issue): `isobar serve --kubeconfig` (the
//! release binary, its own process) against the test API server (`tests/integration/
//! apiserver.rs`, in this process) holding N HTTPProxies with TLS, N Services, N
//! EndpointSlices, N referenced Secrets and 2N unreferenced ones. Reports the time from the
//! last list page answered to `/readyz` 200, peak and steady RSS of the Isobar process, and
//! what the unreferenced Secrets cost (the same run without them).

use std::path::Path;
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
pub(crate) fn as_a_cluster_has_it(document: &str, i: usize) -> String {
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

pub(crate) fn rss_kib(pid: u32, field: &str) -> u64 {
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

/// The bench's own settings, which Isobar would take for configuration keys.
const BENCH_SETTINGS: [&str; 4] = [
    "ISOBAR_BENCH_PROFILES",
    "ISOBAR_BENCH_N",
    "ISOBAR_BENCH_RUNS",
    "ISOBAR_BENCH_CHANGES",
];

/// The `isobar` binary this bench was built with.
pub(crate) fn this_isobar() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_isobar"))
}

/// `binary serve`, its warnings to `log`: as it is, or under Callgrind writing what ran
/// to `callgrind` (see [`startup_symbols`]). The caller adds the provider and ports.
pub(crate) fn isobar(binary: &Path, callgrind: Option<&Path>, log: &Path) -> Command {
    let mut command = match callgrind {
        None => Command::new(binary),
        Some(out) => {
            let mut command = Command::new("valgrind");
            command
                .args(["--tool=callgrind", "--demangle=no", "--quiet"])
                .arg(format!("--callgrind-out-file={}", out.display()))
                .arg(binary);
            command
        }
    };
    command
        .args(["serve", "--insecure"])
        .env("ISOBAR_LOG", "warn");
    // The bench's own settings are not Isobar configuration.
    for setting in BENCH_SETTINGS {
        command.env_remove(setting);
    }
    command.stdout(Stdio::null()).stderr(
        std::fs::File::create(log)
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null()),
    );
    command
}

/// When `/readyz` on `health` first answers 200 (polled every 5 ms; fails after 120 s
/// with the log).
pub(crate) async fn ready(health: u16, log: &Path) -> Instant {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{health}/readyz");
    let started = Instant::now();
    loop {
        if let Ok(r) = client.get(&url).send().await
            && r.status().as_u16() == 200
        {
            return Instant::now();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "never ready: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Stops `isobar serve`: killed, or, under Callgrind, asked to shut down (Callgrind writes
/// its record as the process exits).
fn stop(mut child: std::process::Child, callgrind: bool) {
    if callgrind {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        panic!("isobar under Callgrind did not shut down within 60 s: no record");
    }
    let _ = child.kill();
    let _ = child.wait();
}

async fn run(
    n: usize,
    unreferenced_per_tenant: usize,
    binary: &Path,
    callgrind: Option<&Path>,
) -> Run {
    let server = ApiServer::start().await;
    load(&server, n, unreferenced_per_tenant);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = server.kubeconfig(dir.path());
    let ports = super::support::ServePorts::free();
    let (metrics, health) = (ports.metrics, ports.health);
    let started = Instant::now();
    let log = dir.path().join("isobar.log");
    let child = isobar(binary, callgrind, &log)
        .args(["--kubeconfig", &kubeconfig])
        .args(ports.args())
        .envs(ports.envs())
        .spawn()
        .unwrap_or_else(|e| panic!("isobar: {e}"));
    let pid = child.id();
    let ready_at = ready(health, &log).await;
    let client = reqwest::Client::new();
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
    stop(child, callgrind.is_some());
    run
}

pub fn report(n: usize) {
    let runtime = super::runtime();
    runtime.block_on(async {
        let with = run(n, 2, this_isobar(), None).await;
        let without = run(n, 0, this_isobar(), None).await;
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
        let idle = run(0, 0, this_isobar(), None).await;
        println!(
            "  idle (no objects, every watch listed, ready): RSS {:.1} MiB, peak {:.1} MiB",
            idle.steady_mib, idle.peak_mib
        );
    });
}

/// Records which of the binary's functions run while `isobar serve` starts and idles —
/// against the test API server with a few tenants, with none, and on the quick-start
/// manifests — under Callgrind (`valgrind` must be installed), and writes them, grouped
/// as Callgrind's records list them, to `build/startup-symbols.txt`. `build.rs` asks the linker to lay
/// them out together: the code a process touches at start then fills a few pages instead
/// of being spread over the whole 25 MB of `.text` (idle RSS; BENCHMARKS.md).
///
/// Symbol names carry a hash of the Cargo profile, so the binary `cargo build --release`
/// makes and the one this bench runs name the same function differently: both are
/// recorded (this one, then a release build made here), and the list holds both names.
/// The release build replaces this bench's `target/release/isobar`: profiles run after
/// this one in the same invocation would measure it.
pub fn startup_symbols() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let bench_binary = dir.path().join("isobar-bench");
    std::fs::copy(this_isobar(), &bench_binary).unwrap_or_else(|e| panic!("{e}"));
    let mut records = record_startup(&bench_binary, dir.path(), "bench");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--bin",
            "isobar",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cargo: {e}"));
    assert!(built.status.success(), "cargo build --release failed");
    // Where Cargo put it (its messages name the executable).
    let built_path = String::from_utf8_lossy(&built.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["target"]["name"] == "isobar")
        .find_map(|m| m["executable"].as_str().map(std::path::PathBuf::from))
        .unwrap_or_else(|| panic!("cargo named no isobar executable"));
    let release_binary = dir.path().join("isobar-release");
    std::fs::copy(&built_path, &release_binary)
        .unwrap_or_else(|e| panic!("{}: {e}", built_path.display()));
    records.extend(record_startup(&release_binary, dir.path(), "release"));
    let mut seen = std::collections::BTreeSet::new();
    let mut names = Vec::new();
    for record in &records {
        let text = std::fs::read_to_string(record)
            .unwrap_or_else(|e| panic!("{}: {e} (is valgrind installed?)", record.display()));
        for name in functions_of_the_binary(&text) {
            if seen.insert(name.to_string()) {
                names.push(name.to_string());
            }
        }
    }
    assert!(
        names.len() > 1000,
        "only {} functions recorded",
        names.len()
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("build/startup-symbols.txt");
    let header = "# The functions `isobar serve` runs as it starts and idles, grouped as Callgrind's\n\
                  # records list them: build.rs has the linker lay them out together, in this\n\
                  # order (see BENCHMARKS.md, idle RSS). Written by\n\
                  # `ISOBAR_BENCH_PROFILES=symbols cargo bench --bench build`. Each function is\n\
                  # named as in the release build and as in the bench build; names a binary does\n\
                  # not have are skipped by the linker.\n";
    let body: String = names.iter().map(|n| format!("{n}\n")).collect();
    std::fs::write(&path, format!("{header}{body}"))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    println!(
        "startup symbols: {} names written to {}",
        names.len(),
        path.display()
    );
}

/// `binary` under Callgrind: a start against the API server with a few tenants, an idle
/// start, a start on the quick-start manifests. Returns the three records.
fn record_startup(binary: &Path, dir: &Path, label: &str) -> Vec<std::path::PathBuf> {
    let records = vec![
        dir.join(format!("{label}-kube.out")),
        dir.join(format!("{label}-idle.out")),
        dir.join(format!("{label}-files.out")),
    ];
    super::runtime().block_on(async {
        run(10, 2, binary, Some(&records[0])).await;
        run(0, 0, binary, Some(&records[1])).await;
        serve_quickstart(binary, &records[2]).await;
    });
    records
}

/// The names of the functions a Callgrind record saw run in the program itself (not
/// in a shared library), in the order the record first names them.
fn functions_of_the_binary(record: &str) -> Vec<&str> {
    let mut objects: std::collections::BTreeMap<&str, &str> = Default::default();
    let mut object = "";
    let mut called_object: Option<&str> = None;
    let mut out = Vec::new();
    // `ob=(id) name` names an object once; later lines give `ob=(id)` alone. A `cob`
    // line says in which object the function of the next `cfn` line is.
    for line in record.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (id, name) = match value.split_once(") ") {
            Some((id, name)) => (id, Some(name)),
            None => (value.trim_end_matches(')'), None),
        };
        match key {
            "ob" | "cob" => {
                let name = match name {
                    Some(name) => {
                        objects.insert(id, name);
                        name
                    }
                    None => objects.get(id).copied().unwrap_or_default(),
                };
                if key == "ob" {
                    object = name;
                } else {
                    called_object = Some(name);
                }
            }
            "fn" | "cfn" => {
                let in_object = if key == "cfn" {
                    called_object.take().unwrap_or(object)
                } else {
                    object
                };
                // A recursive function's inner calls are told apart as `name'2`.
                if let Some(name) = name.map(|n| n.split('\'').next().unwrap_or(n))
                    && !in_object.contains(".so")
                    && !name.starts_with("0x")
                    && !name.starts_with('(')
                {
                    out.push(name);
                }
            }
            _ => {}
        }
    }
    out
}

/// `binary serve --manifests examples/quickstart` until ready, under Callgrind.
async fn serve_quickstart(binary: &Path, callgrind: &Path) {
    let ports = super::support::ServePorts::free();
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
    let log = callgrind.with_extension("log");
    let child = isobar(binary, Some(callgrind), &log)
        .arg("--manifests")
        .arg(&manifests)
        .args(ports.args())
        .envs(ports.envs())
        .spawn()
        .unwrap_or_else(|e| panic!("valgrind: {e}"));
    ready(ports.health, &log).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop(child, true);
}

/// Status at scale with Isobar's default settings (no client QPS limit, as Contour's
/// `kubernetesClientQPS` unset): `base` tenants on the test API server, then `burst`
/// tenants (an HTTPProxy, its Service and EndpointSlice each, in namespaces of their own)
/// created at once; the time from the last one created until every new HTTPProxy has
/// its status (`currentStatus: valid`) written.
pub fn statuses(base: usize, burst: usize) {
    let runtime = super::runtime();
    runtime.block_on(async {
        let server = ApiServer::start().await;
        let put = |i: usize| {
            for document in tenant(i).split("---\n").filter(|d| !d.trim().is_empty()) {
                server.put(&as_a_cluster_has_it(document, i));
            }
        };
        for i in 0..base {
            put(i);
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let kubeconfig = server.kubeconfig(dir.path());
        let ports = super::support::ServePorts::free();
        let log = dir.path().join("isobar.log");
        let child = isobar(this_isobar(), None, &log)
            .args(["--kubeconfig", &kubeconfig])
            .args(ports.args())
            .envs(ports.envs())
            .spawn()
            .unwrap_or_else(|e| panic!("isobar: {e}"));
        ready(ports.health, &log).await;
        let valid = |i: usize| {
            server
                .get("projectcontour.io/v1", "HTTPProxy", &format!("ns-{i}"), "site")
                .is_some_and(|p| p["status"]["currentStatus"] == "valid")
        };
        let settle = Instant::now();
        while base > 0 && !valid(base - 1) && settle.elapsed() < Duration::from_secs(300) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        for i in base..base + burst {
            put(i);
        }
        let created = Instant::now();
        // Checked one at a time, from the last created: asking for every pending one
        // every few milliseconds would hold the API server's lock (and a core) against
        // the status writes being timed.
        let mut pending: Vec<usize> = (base..base + burst).collect();
        while !pending.is_empty() && created.elapsed() < Duration::from_secs(120) {
            while pending.last().is_some_and(|i| valid(*i)) {
                pending.pop();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Those still pending when the time ran out, counted once.
        pending.retain(|i| !valid(*i));
        println!(
            "kube-status: {base} tenants on the Kubernetes API, then {burst} HTTPProxies (with their Services and EndpointSlices) created at once: every status written {:.0} ms after the last was created ({} missing); default settings, no client QPS limit",
            created.elapsed().as_secs_f64() * 1e3,
            pending.len()
        );
        // What the first few still pending say, and what Isobar logged of them.
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        for i in pending.iter().take(3) {
            let status = server
                .get("projectcontour.io/v1", "HTTPProxy", &format!("ns-{i}"), "site")
                .map(|p| p["status"].clone());
            println!("  ns-{i}/site: status {status:?}");
            let mentions = format!("ns=ns-{i} ");
            for line in logged.lines().filter(|l| l.contains(&mentions)).take(5) {
                println!("    {line}");
            }
        }
        if !pending.is_empty() {
            let lines: Vec<&str> = logged.lines().collect();
            println!("  the log's last lines:");
            for line in &lines[lines.len().saturating_sub(10)..] {
                println!("    {line}");
            }
        }
        stop(child, false);
    });
}
