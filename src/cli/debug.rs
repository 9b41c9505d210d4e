//! The debug endpoint (Contour's `--debug-http-address/-port`, 127.0.0.1:6060 by default):
//! `/debug/ir` returns the IR of the current objects as JSON (secrets as names and
//! fingerprints), `/debug/dag` the same as a Graphviz DOT graph: virtual hosts → routes →
//! clusters. The IR is built on request from the runner's objects, so nothing is kept in
//! memory for it between requests.

use std::fmt::Write;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use isobar_sdk::ir::{Ir, PathMatch, RouteAction, VirtualHost};
use tokio::sync::{mpsc, oneshot};

use crate::runner::inbox::IrRequest;

pub fn routes() -> Router<mpsc::Sender<IrRequest>> {
    Router::new()
        .route("/debug/ir", get(ir_json))
        .route("/debug/dag", get(ir_dot))
}

async fn current(runner: &mpsc::Sender<IrRequest>) -> Result<Arc<Ir>, (StatusCode, String)> {
    let (tx, rx) = oneshot::channel();
    let unavailable = |_| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the pipeline is not running\n".to_string(),
        )
    };
    runner
        .send(tx)
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    rx.await.map_err(|e| unavailable(e.to_string()))
}

async fn ir_json(
    State(runner): State<mpsc::Sender<IrRequest>>,
) -> Result<([(&'static str, &'static str); 1], String), (StatusCode, String)> {
    let ir = current(&runner).await?;
    let text = serde_json::to_string_pretty(ir.as_ref())
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(([("content-type", "application/json")], text))
}

async fn ir_dot(
    State(runner): State<mpsc::Sender<IrRequest>>,
) -> Result<([(&'static str, &'static str); 1], String), (StatusCode, String)> {
    let ir = current(&runner).await?;
    Ok(([("content-type", "text/vnd.graphviz")], dot(&ir)))
}

/// The IR as a DOT graph: one node per vhost, route and cluster.
pub fn dot(ir: &Ir) -> String {
    let mut out = String::from("digraph isobar {\n  rankdir=LR;\n  node [shape=box];\n");
    let vhost = |out: &mut String, id: &str, label: &str, host: &VirtualHost| {
        let _ = writeln!(
            out,
            "  {} [label={}, shape=ellipse];",
            quote(id),
            quote(label)
        );
        for (i, route) in host.routes.values().enumerate() {
            let route_id = format!("{id}#{i}");
            let path = match &route.matcher.path {
                PathMatch::Prefix(p) => format!("prefix {p}"),
                PathMatch::SegmentPrefix(p) => format!("segment prefix {p}"),
                PathMatch::Exact(p) => format!("exact {p}"),
                PathMatch::Regex(p) => format!("regex {p}"),
            };
            let extra = route.matcher.headers.len() + route.matcher.query.len();
            let label = if extra > 0 {
                format!("{path} (+{extra} conditions)")
            } else {
                path
            };
            let _ = writeln!(out, "  {} [label={}];", quote(&route_id), quote(&label));
            let _ = writeln!(out, "  {} -> {};", quote(id), quote(&route_id));
            match &route.action {
                RouteAction::Forward(clusters) => {
                    for w in clusters {
                        let _ = writeln!(
                            out,
                            "  {} -> {} [label={}];",
                            quote(&route_id),
                            quote(&w.cluster),
                            quote(&format!("weight {}", w.weight))
                        );
                    }
                }
                RouteAction::DirectResponse { status, .. } => {
                    let _ = writeln!(
                        out,
                        "  {} -> {};",
                        quote(&route_id),
                        quote(&format!("direct {status}"))
                    );
                }
                RouteAction::Redirect(_) => {
                    let _ = writeln!(out, "  {} -> \"redirect\";", quote(&route_id));
                }
            }
        }
    };
    for (name, listener) in &ir.listeners {
        for (fqdn, host) in &listener.virtual_hosts {
            vhost(
                &mut out,
                &format!("{name}/{fqdn}"),
                &format!("http {fqdn}"),
                host,
            );
        }
        for (fqdn, secure) in &listener.secure_virtual_hosts {
            let label = match (&secure.tls, &secure.tcp_proxy) {
                (None, _) => format!("https {fqdn} (passthrough)"),
                (Some(_), Some(_)) => format!("https {fqdn} (tcp proxy)"),
                (Some(_), None) => format!("https {fqdn}"),
            };
            vhost(&mut out, &format!("{name}/{fqdn}"), &label, &secure.http);
            for (host, http) in &secure.hosts {
                let label = format!("https {fqdn} host {host}");
                vhost(&mut out, &format!("{name}/{fqdn}/{host}"), &label, http);
            }
        }
    }
    for (name, cluster) in &ir.clusters {
        let label = format!("{}/{}:{}", cluster.namespace, cluster.service, cluster.port);
        let _ = writeln!(
            out,
            "  {} [label={}, shape=cylinder];",
            quote(name),
            quote(&label)
        );
    }
    out.push_str("}\n");
    out
}

/// A DOT string literal: quotes and backslashes escaped, so no name can break the graph.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}
