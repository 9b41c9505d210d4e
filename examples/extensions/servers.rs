//! The extension servers of `examples/extensions/run.sh`, on loopback until stopped: an
//! external authorization server (Envoy's ext_authz gRPC API; requests carrying
//! `x-allow: yes` are allowed, others denied with 401) and a rate limit service (Envoy's
//! rate limit gRPC API; each descriptor may be hit 5 times a minute). They are the servers
//! the end-to-end tests run Envoy against. Ports: `AUTHZ_PORT` (18091) and
//! `RATELIMIT_PORT` (18092).

#[allow(dead_code)]
#[path = "../../tests/integration/extension_servers.rs"]
mod extension_servers;

fn port(var: &str, default: u16) -> u16 {
    std::env::var(var)
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let authz = extension_servers::authorization_server_at(port("AUTHZ_PORT", 18091));
    let limits = extension_servers::rate_limit_server_at(
        port("RATELIMIT_PORT", 18092),
        5,
        Some(std::time::Duration::from_secs(60)),
    );
    eprintln!(
        "==> authorization server on 127.0.0.1:{}, rate limit service on 127.0.0.1:{}",
        authz.port, limits.port
    );
    loop {
        std::thread::park();
    }
}
