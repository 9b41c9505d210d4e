//! `isobar serve`: provider → runner → xDS server, plus the HTTP endpoints.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::{mpsc, watch};

use crate::config::Config;
use crate::http::{self, HttpState};
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;
use crate::provider::Provider;
use crate::provider::files::FilesProvider;
use crate::provider::kube::{KubeProvider, WatchHealth};
use crate::runner::Runner;
use crate::xds::EnvoySettings;
use crate::xds::server::AdsService;

pub fn envoy_settings(config: &Config) -> EnvoySettings {
    let client = &config.tls.envoy_client_certificate;
    EnvoySettings {
        client_certificate: (!client.name.is_empty())
            .then(|| (client.namespace.clone(), client.name.clone())),
        http_address: config.envoy.http.address.clone(),
        http_port: config.envoy.http.port,
        https_address: config.envoy.https.address.clone(),
        https_port: config.envoy.https.port,
        tls: crate::xds::translate::TlsSettings {
            min_version: config.tls.min_version(),
            max_version: config.tls.max_version(),
            cipher_suites: config.tls.cipher_suites.clone(),
            ecdh_curves: config.tls.ecdh_curves.clone(),
        },
        stats_address: config.envoy.metrics.address.clone(),
        stats_port: config.envoy.metrics.port,
        connect_timeout: config.timeouts.connect_timeout.0,
        access_log_path: config.envoy.access_log.clone(),
    }
}

/// Where `serve` reads objects from.
#[derive(Debug, Clone)]
pub enum ProviderChoice {
    /// `--manifests DIR`.
    Files(Option<PathBuf>),
    /// `--kubeconfig PATH` or `--incluster`, optionally `--watch-namespaces`.
    Kubernetes {
        kubeconfig: Option<PathBuf>,
        namespaces: Vec<String>,
    },
}

pub fn run(config: Config, provider: ProviderChoice) -> anyhow::Result<()> {
    let pipeline = Pipeline::from_config(&config.pipeline, &config.plugins)?
        .with_fallback_certificate(config.tls.fallback());
    if let ProviderChoice::Files(None) = provider {
        anyhow::bail!(
            "serve needs a source of objects: --manifests DIR, --kubeconfig PATH or --incluster"
        );
    }
    if !config.xds_server.insecure {
        anyhow::bail!(
            "xDS over TLS is not available yet: pass --insecure (or set xds-server.insecure) to serve plain gRPC"
        );
    }
    let xds_addr: SocketAddr = format!("{}:{}", config.xds_server.address, config.xds_server.port)
        .parse()
        .with_context(|| {
            format!(
                "xds-server address {}:{}",
                config.xds_server.address, config.xds_server.port
            )
        })?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(config, pipeline, provider, xds_addr))
}

async fn serve(
    config: Config,
    pipeline: Pipeline,
    choice: ProviderChoice,
    xds_addr: SocketAddr,
) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::default());
    let (snapshot_tx, snapshot_rx) = watch::channel(None);
    let (event_tx, event_rx) = mpsc::channel(1024);
    let kinds = pipeline.kinds();

    let runner = Runner {
        pipeline,
        settings: envoy_settings(&config),
        holdoff: config.pipeline.holdoff_delay.0,
        holdoff_max: config.pipeline.holdoff_max_delay.0,
        metrics: metrics.clone(),
        snapshots: snapshot_tx,
    };
    let health = Arc::new(WatchHealth::default());
    let provider: Box<dyn Provider> = match choice {
        ProviderChoice::Files(dir) => Box::new(FilesProvider::new(dir.unwrap_or_default())),
        ProviderChoice::Kubernetes {
            kubeconfig,
            namespaces,
        } => {
            let client = crate::provider::kube::client(kubeconfig.as_deref()).await?;
            Box::new(KubeProvider::new(
                client,
                namespaces,
                health.clone(),
                metrics.clone(),
            ))
        }
    };
    let provider = tokio::spawn(provider.run(kinds, event_tx));
    tokio::spawn(runner.run(event_rx));

    let state = HttpState {
        metrics: metrics.clone(),
        snapshots: snapshot_rx.clone(),
        health,
    };
    let metrics_addr = format!("{}:{}", config.metrics.address, config.metrics.port);
    let health_addr = format!("{}:{}", config.health.address, config.health.port);
    let mut servers = tokio::task::JoinSet::new();
    if metrics_addr == health_addr {
        let router = http::metrics_routes()
            .merge(http::health_routes())
            .with_state(state);
        servers.spawn(http::serve(metrics_addr, router));
    } else {
        servers.spawn(http::serve(
            metrics_addr,
            http::metrics_routes().with_state(state.clone()),
        ));
        servers.spawn(http::serve(
            health_addr,
            http::health_routes().with_state(state),
        ));
    }

    let ads = AdsService::new(snapshot_rx, metrics).into_server();
    let listener = tokio::net::TcpListener::bind(xds_addr)
        .await
        .with_context(|| format!("binding xDS on {xds_addr}"))?;
    tracing::info!(address = %xds_addr, "serving xds");
    let grpc = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(60)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(20)))
        .add_service(ads)
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            shutdown_signal(),
        );

    tokio::select! {
        result = grpc => result.context("xds server")?,
        result = provider => result.context("provider task")?.context("provider")?,
        Some(result) = servers.join_next() => result.context("http task")??,
    }
    tracing::info!("shutting down");
    Ok(())
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
