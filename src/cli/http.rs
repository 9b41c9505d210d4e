//! Isobar's own HTTP endpoints: `/metrics` (Prometheus), `/healthz` and `/readyz`.
//! Ready means the first complete snapshot has been built and no Kubernetes watch is
//! failing (the last good snapshot is still served meanwhile).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::provider::kube::WatchHealth;
use crate::xds::Snapshot;

#[derive(Clone)]
pub struct HttpState {
    pub metrics: Arc<Metrics>,
    pub snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    pub health: Arc<WatchHealth>,
}

pub fn metrics_routes() -> Router<HttpState> {
    Router::new().route("/metrics", get(metrics))
}

pub fn health_routes() -> Router<HttpState> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/health", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
}

async fn metrics(State(state): State<HttpState>) -> ([(&'static str, &'static str); 1], String) {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

async fn ready(State(state): State<HttpState>) -> (StatusCode, &'static str) {
    if state.snapshots.borrow().is_none() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: first build pending\n",
        )
    } else if !state.health.healthy() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: a Kubernetes watch is failing; serving the last good configuration\n",
        )
    } else {
        (StatusCode::OK, "ready\n")
    }
}

/// Serves `router` on `address` until the process ends.
pub async fn serve(address: String, router: Router) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .map_err(|e| anyhow::anyhow!("binding {address}: {e}"))?;
    axum::serve(listener, router).await?;
    Ok(())
}
