//! `isobar envoy shutdown-manager` and `isobar envoy shutdown`: Contour's graceful Envoy
//! shutdown. The DaemonSet's Envoy container has `preStop: GET :8090/shutdown`, which
//! the shutdown-manager sidecar holds until a ready file exists; the sidecar's own
//! `preStop` runs `envoy shutdown`, which fails Envoy's health checks (load balancers
//! stop sending new connections), waits for the open HTTP connections to fall to
//! `--min-open-connections`, and writes the ready file. Kubernetes then stops Envoy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, clap::Subcommand)]
pub enum EnvoyCommand {
    /// Serve `/healthz` and `/shutdown` (which answers once the ready file exists).
    ShutdownManager(ShutdownManagerArgs),
    /// Drain Envoy: fail its health checks, wait for connections to close, write the
    /// ready file.
    Shutdown(ShutdownArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct ShutdownManagerArgs {
    /// The file `envoy shutdown` writes when Envoy has drained.
    #[arg(long, default_value = "/admin/ok")]
    pub ready_file: PathBuf,
    /// Port of `/healthz` and `/shutdown`.
    #[arg(long, default_value_t = 8090)]
    pub serve_port: u16,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ShutdownArgs {
    /// Envoy's admin interface: its unix socket.
    #[arg(long, default_value = "/admin/admin.sock")]
    pub admin_address: PathBuf,
    /// Contour's deprecated admin port: accepted, not used (the admin is the socket).
    #[arg(long)]
    pub admin_port: Option<u16>,
    /// Wait this long after failing the health checks before counting connections.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub check_delay: Duration,
    /// How often open connections are counted.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub check_interval: Duration,
    /// Wait this long before failing the health checks.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub drain_delay: Duration,
    /// Envoy has drained when at most this many HTTP connections are open.
    #[arg(long, default_value_t = 0)]
    pub min_open_connections: u64,
    /// The file written when Envoy has drained.
    #[arg(long, default_value = "/admin/ok")]
    pub ready_file: PathBuf,
}

pub fn run(command: &EnvoyCommand) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match command {
        EnvoyCommand::ShutdownManager(args) => runtime.block_on(shutdown_manager(args)),
        EnvoyCommand::Shutdown(args) => {
            runtime.block_on(shutdown(args));
            Ok(())
        }
    }
}

async fn shutdown_manager(args: &ShutdownManagerArgs) -> anyhow::Result<()> {
    use axum::routing::any;
    let ready = args.ready_file.clone();
    let router = axum::Router::new()
        .route("/healthz", any(|| async { "OK" }))
        .route(
            "/shutdown",
            any(move || {
                let ready = ready.clone();
                async move {
                    while !ready.exists() {
                        tracing::info!(file = %ready.display(), "not there yet; checking again in 1s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    "OK"
                }
            }),
        );
    let address = format!("0.0.0.0:{}", args.serve_port);
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| format!("binding the shutdown manager on {address}"))?;
    tracing::info!(%address, "serving the shutdown manager");
    axum::serve(listener, router)
        .await
        .context("shutdown manager")
}

/// One HTTP/1.1 request (then closed) to Envoy's admin on its unix socket: the status
/// and the body (chunked bodies are left as sent; the stats parser skips the sizes).
async fn admin(socket: &Path, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = tokio::net::UnixStream::connect(socket)
        .await
        .with_context(|| format!("connecting to Envoy's admin at {}", socket.display()))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: unix\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .context("Envoy's admin did not answer within 10s")??;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("Envoy's admin answered without a status")?;
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().replace(' ', "") == "transfer-encoding:chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

/// A chunked HTTP/1.1 body, joined.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = size.split(';').next().unwrap_or_default().trim();
        let Ok(n) = usize::from_str_radix(size, 16) else {
            break;
        };
        let (Some(chunk), Some(after)) = (rest.get(..n), rest.get(n..)) else {
            break;
        };
        if n == 0 {
            break;
        }
        out.push_str(chunk);
        body = after.strip_prefix("\r\n").unwrap_or(after);
    }
    out
}

/// The HTTP connections open on Envoy's listeners: `envoy_http_downstream_cx_active`
/// summed over every connection manager but the admin's and the stats listener's.
pub fn open_connections(prometheus: &str) -> Option<u64> {
    const SKIPPED: [&str; 5] = ["admin", "envoy-admin", "stats", "health", "stats-health"];
    let mut found = false;
    let mut open = 0u64;
    for line in prometheus.lines() {
        let Some(rest) = line.strip_prefix("envoy_http_downstream_cx_active") else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => r.split_once('}').unwrap_or((r, "")),
            None => ("", rest),
        };
        if !value.starts_with(' ') && !value.is_empty() {
            continue;
        }
        found = true;
        let skipped = labels.split(',').any(|label| {
            let value = label
                .split_once('=')
                .map_or("", |(_, v)| v.trim_matches('"'));
            SKIPPED.contains(&value)
        });
        if !skipped {
            let n: f64 = value.trim().parse().unwrap_or(0.0);
            open += n.max(0.0) as u64;
        }
    }
    found.then_some(open)
}

async fn shutdown(args: &ShutdownArgs) {
    if !args.drain_delay.is_zero() {
        tracing::info!(delay = ?args.drain_delay, "waiting before draining connections");
        tokio::time::sleep(args.drain_delay).await;
    }
    tracing::info!("failing envoy healthchecks");
    let mut failed = false;
    for (attempt, backoff) in [200u64, 1_000, 5_000, 0].into_iter().enumerate() {
        match admin(&args.admin_address, "POST", "/healthcheck/fail").await {
            Ok((200, _)) => {
                failed = true;
                break;
            }
            Ok((status, _)) => tracing::warn!(attempt, status, "POST /healthcheck/fail"),
            Err(e) => tracing::warn!(attempt, error = %format!("{e:#}"), "POST /healthcheck/fail"),
        }
        tokio::time::sleep(Duration::from_millis(backoff)).await;
    }
    if !failed {
        tracing::error!("could not fail Envoy's health checks after 4 attempts; draining anyway");
    }
    tokio::time::sleep(args.check_delay).await;
    let stats = "/stats/prometheus?filter=%5Ehttp%5C..%2A%5C.downstream_cx_active%24";
    loop {
        match admin(&args.admin_address, "GET", stats).await {
            Ok((200, body)) => match open_connections(&body) {
                Some(open) if open <= args.min_open_connections => {
                    tracing::info!(
                        open_connections = open,
                        min_connections = args.min_open_connections,
                        "min number of open connections found, shutting down"
                    );
                    if let Err(e) = std::fs::File::create(&args.ready_file) {
                        tracing::error!(file = %args.ready_file.display(), error = %e, "writing the ready file");
                    }
                    return;
                }
                Some(open) => tracing::info!(open_connections = open, "polled open connections"),
                None => tracing::warn!("no envoy_http_downstream_cx_active in Envoy's stats"),
            },
            Ok((status, _)) => tracing::warn!(status, "GET /stats/prometheus"),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "GET /stats/prometheus"),
        }
        tokio::time::sleep(args.check_interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::open_connections;

    #[test]
    fn open_connections_sums_listeners_but_admin_and_stats() {
        let text = "# TYPE envoy_http_downstream_cx_active gauge\n\
            envoy_http_downstream_cx_active{envoy_http_conn_manager_prefix=\"ingress_http\"} 2\n\
            envoy_http_downstream_cx_active{envoy_http_conn_manager_prefix=\"ingress_https\"} 3\n\
            envoy_http_downstream_cx_active{envoy_http_conn_manager_prefix=\"stats\"} 1\n\
            envoy_http_downstream_cx_active{envoy_http_conn_manager_prefix=\"admin\"} 1\n";
        assert_eq!(open_connections(text), Some(5));
        assert_eq!(open_connections("# nothing\n"), None);
    }

    #[test]
    fn chunked_bodies_are_joined() {
        let body = "5\r\nenvoy\r\n7\r\n_http 2\r\n0\r\n\r\n";
        assert_eq!(super::dechunk(body), "envoy_http 2");
    }
}
