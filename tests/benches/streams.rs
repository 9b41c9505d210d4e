//! TCPRoute and UDPRoute edits through a real Envoy beside N HTTPRoutes, with Isobar's
//! default settings: the release `isobar serve` on a manifest directory (N tenants, each
//! a Service and an HTTPRoute, on one Gateway that also has a TCP and a UDP listener,
//! each with its route), Envoy from `isobar bootstrap`'s defaults (delta xDS). Each change
//! rewrites one route's file, as a user does, one at a time: an HTTPRoute gains a path
//! (→ the first request the new path answers), the TCPRoute or the UDPRoute moves to the
//! other of two backends (→ the first new connection, or datagram from a new socket,
//! the other backend answers). Polled every 2 ms.

use std::path::Path;
use std::time::{Duration, Instant};

use super::support::{Behaviour, ServePorts, backend_with, envoy_on, write};

/// A TCP backend that writes its name on every connection.
async fn tcp_backend(name: &'static str) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = tcp.write_all(format!("{name}\n").as_bytes()).await;
                let _ = tcp.shutdown().await;
            });
        }
    });
    port
}

/// A UDP backend that answers every datagram with its name.
async fn udp_backend(name: &'static str) -> u16 {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = socket.local_addr().map(|a| a.port()).unwrap_or_default();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((_, from)) = socket.recv_from(&mut buf).await {
            let _ = socket.send_to(name.as_bytes(), from).await;
        }
    });
    port
}

/// A Service `infra/name` of `protocol` on port 80 to a backend on `target`.
fn service(name: &str, protocol: &str, target: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: infra}}\nspec:\n  ports: [{{name: p, protocol: {protocol}, port: 80, targetPort: {target}}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}-1, namespace: infra, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nports: [{{name: p, port: {target}, protocol: {protocol}}}]\nendpoints: [{{addresses: [127.0.0.1]}}]\n"
    )
}

/// The TCPRoute or UDPRoute (`kind`) on the listener of that protocol, to `backend`.
fn stream_route(kind: &str, listener: &str, backend: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: stream, namespace: infra}}\nspec:\n  parentRefs: [{{name: gw, sectionName: {listener}}}]\n  rules: [{{backendRefs: [{{name: {backend}, port: 80}}]}}]\n"
    )
}

/// A port free now (TCP or UDP), for a listener Envoy binds later.
fn free_port(udp: bool) -> u16 {
    if udp {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .map(|a| a.port())
            .unwrap_or_default()
    } else {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .map(|a| a.port())
            .unwrap_or_default()
    }
}

/// Which backend answers a new TCP connection to `port` ("" when none does).
async fn tcp_answer(port: u16) -> String {
    use tokio::io::AsyncReadExt;
    let Ok(Ok(mut tcp)) = tokio::time::timeout(
        Duration::from_millis(200),
        tokio::net::TcpStream::connect(("127.0.0.1", port)),
    )
    .await
    else {
        return String::new();
    };
    let mut out = String::new();
    let _ = tokio::time::timeout(Duration::from_millis(200), tcp.read_to_string(&mut out)).await;
    out.trim().to_string()
}

/// Which backend answers a datagram from a new socket to `port` ("" when none does).
async fn udp_answer(port: u16) -> String {
    let Ok(socket) = tokio::net::UdpSocket::bind("127.0.0.1:0").await else {
        return String::new();
    };
    if socket.send_to(b"which", ("127.0.0.1", port)).await.is_err() {
        return String::new();
    }
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_millis(50), socket.recv_from(&mut buf)).await {
        Ok(Ok((n, _))) => String::from_utf8_lossy(&buf[..n]).to_string(),
        _ => String::new(),
    }
}

pub fn run(n: usize, changes: usize) {
    let runtime = super::runtime();
    runtime.block_on(async {
        let (backend, _) = backend_with("ok", Behaviour::Echo).await;
        let tcp = [("tcp-a", tcp_backend("a").await), ("tcp-b", tcp_backend("b").await)];
        let udp = [("udp-a", udp_backend("a").await), ("udp-b", udp_backend("b").await)];
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let manifests = dir.path().join("manifests");
        for i in 0..n {
            write(&manifests, &format!("ns-{i}.yaml"), &super::envoy::tenant(i, backend, None, super::envoy::Routes::Gateway));
        }
        let ports = ServePorts::free();
        let (tcp_port, udp_port) = (free_port(false), free_port(true));
        // Listener ports are Contour's container ports less 8000 (the Gateway's own
        // port P is served on P + 8000).
        let gateway = format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: isobar}}\nspec: {{controllerName: projectcontour.io/gateway-controller}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: infra}}\nspec:\n  gatewayClassName: isobar\n  listeners:\n    - {{name: http, protocol: HTTP, port: {}, allowedRoutes: {{namespaces: {{from: All}}}}}}\n    - {{name: tcp, protocol: TCP, port: {}}}\n    - {{name: udp, protocol: UDP, port: {}}}\n",
            ports.http - 8000,
            tcp_port - 8000,
            udp_port - 8000
        );
        let mut backends = String::new();
        for (name, port) in tcp {
            backends.push_str(&service(name, "TCP", port));
            backends.push_str("---\n");
        }
        for (name, port) in udp {
            backends.push_str(&service(name, "UDP", port));
            backends.push_str("---\n");
        }
        write(&manifests, "gateway.yaml", &gateway);
        write(&manifests, "backends.yaml", &backends);
        write(&manifests, "tcproute.yaml", &stream_route("TCPRoute", "tcp", "tcp-a"));
        write(&manifests, "udproute.yaml", &stream_route("UDPRoute", "udp", "udp-a"));
        let config = dir.path().join("contour.yaml");
        std::fs::write(&config, "gateway:\n  controllerName: projectcontour.io/gateway-controller\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let started = Instant::now();
        let _isobar = super::envoy::serve(dir.path(), &config, &manifests, &ports);
        let _envoy = envoy_on(dir.path(), ports.xds, "delta");
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let status = |host: String, path: String| {
            let client = client.clone();
            async move {
                client
                    .get(format!("http://127.0.0.1:{}{path}", ports.http))
                    .header("host", host)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            }
        };
        let last = format!("site-{}.example.com", n - 1);
        while status(last.clone(), "/ok".to_string()).await != 200
            || tcp_answer(tcp_port).await != "a"
            || udp_answer(udp_port).await != "a"
        {
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "Envoy never served everything: {}",
                std::fs::read_to_string(dir.path().join("envoy.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!(
            "envoy-streams: {n} HTTPRoutes, a TCPRoute and a UDPRoute on one Gateway, default settings: all served {:.1} s after start",
            started.elapsed().as_secs_f64()
        );
        let (mut http, mut tcps, mut udps) = (Vec::new(), Vec::new(), Vec::new());
        for k in 0..changes {
            // One change as a user makes it, not the next of a burst.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let since = Instant::now();
            match k % 3 {
                0 => {
                    let i = (k * 7919) % n;
                    let (host, path) = (format!("site-{i}.example.com"), format!("/v{k}"));
                    write(
                        Path::new(&manifests),
                        &format!("ns-{i}.yaml"),
                        &super::envoy::tenant(i, backend, Some(&path), super::envoy::Routes::Gateway),
                    );
                    while status(host.clone(), path.clone()).await != 200 {
                        assert!(since.elapsed() < Duration::from_secs(60), "{host}{path} never served");
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    http.push(since.elapsed());
                }
                1 => {
                    let to = if (k / 3) % 2 == 0 { ("tcp-b", "b") } else { ("tcp-a", "a") };
                    write(&manifests, "tcproute.yaml", &stream_route("TCPRoute", "tcp", to.0));
                    while tcp_answer(tcp_port).await != to.1 {
                        assert!(since.elapsed() < Duration::from_secs(60), "TCP never moved to {}", to.0);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    tcps.push(since.elapsed());
                }
                _ => {
                    let to = if (k / 3) % 2 == 0 { ("udp-b", "b") } else { ("udp-a", "a") };
                    write(&manifests, "udproute.yaml", &stream_route("UDPRoute", "udp", to.0));
                    while udp_answer(udp_port).await != to.1 {
                        assert!(since.elapsed() < Duration::from_secs(60), "UDP never moved to {}", to.0);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    udps.push(since.elapsed());
                }
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        for (what, samples) in [("HTTPRoute", &mut http), ("TCPRoute", &mut tcps), ("UDPRoute", &mut udps)] {
            samples.sort();
            let at = |q: f64| ms(samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1]);
            println!(
                "  {what} edit → first answer from what it now says ({} edits): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
                samples.len(),
                at(0.5),
                at(0.99),
                ms(samples[samples.len() - 1])
            );
        }
        // Envoy's share: its listener and route subscriptions' update durations.
        let stats = client
            .get(format!("http://127.0.0.1:{}/stats", ports.stats))
            .send()
            .await
            .ok();
        let stats = match stats {
            Some(r) => r.text().await.unwrap_or_default(),
            None => String::new(),
        };
        for line in stats.lines().filter(|l| {
            (l.starts_with("listener_manager.lds.") || l.contains("vhds.ingress_http."))
                && ["update_duration", "update_rejected"].iter().any(|s| l.contains(s))
        }) {
            println!("  envoy: {line}");
        }
    });
}
