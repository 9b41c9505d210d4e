//! `isobar serve`: provider → runner → xDS server, plus the HTTP endpoints.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::{mpsc, watch};

use crate::cli::http::{self, HttpState};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::provider::Provider;
use crate::provider::files::FilesProvider;
use crate::provider::kube::{ApiVersions, KubeProvider, WatchHealth};
use crate::runner::leader::Elector;
use crate::runner::pipeline::Pipeline;
use crate::runner::status::StatusWriter;
use crate::runner::{Runner, StatusOutput};
use crate::xds::server::AdsService;
use crate::xds::{EnvoySettings, Snapshot};

pub fn envoy_settings(config: &Config) -> EnvoySettings {
    let client = &config.tls.envoy_client_certificate;
    EnvoySettings {
        client_certificate: (!client.name.is_empty())
            .then(|| (client.namespace.clone(), client.name.clone())),
        tls: crate::xds::TlsSettings {
            min_version: config.tls.min_version(),
            max_version: config.tls.max_version(),
            cipher_suites: config.tls.cipher_suites.clone(),
            ecdh_curves: dedup(&config.tls.ecdh_curves),
            ja3: config.tls.fingerprint.ja3,
            ja4: config.tls.fingerprint.ja4,
        },
        connect_timeout: config.timeouts.connect_timeout.0,
        access_log_path: config.envoy.access_log.clone(),
        http: http_settings(config),
        proxy_protocol: config.envoy.use_proxy_protocol,
        vhds: config.xds_server.vhds,
        route_shards_from: config.xds_server.route_shards_from,
        cluster: cluster_settings(config),
        listener: crate::xds::ListenerSettings {
            exact_balance: config.listener.connection_balancer == "exact",
            tos: u8::try_from(config.listener.socket_options.tos).unwrap_or(0),
            traffic_class: u8::try_from(config.listener.socket_options.traffic_class).unwrap_or(0),
            per_connection_buffer_limit: config
                .listener
                .per_connection_buffer_limit_bytes
                .unwrap_or(32768),
            max_accept_per_event: config.listener.max_connections_to_accept_per_socket_event,
        },
        runtime: crate::xds::RuntimeSettings {
            max_requests_per_io_cycle: config.listener.max_requests_per_io_cycle,
            max_connections_per_listener: config.listener.max_connections_per_listener,
            extra: config.runtime_settings.clone(),
        },
        metrics_tls: config.envoy_metrics_tls(),
    }
}

/// Contour's `cluster` section as every cluster gets it (checked at load).
fn cluster_settings(config: &Config) -> crate::xds::ClusterSettings {
    use isobar_sdk::ir::TlsVersion;
    let c = &config.cluster;
    let tls = &c.upstream_tls;
    let nonzero = |v: u32| (v > 0).then_some(v);
    crate::xds::ClusterSettings {
        max_requests_per_connection: c.max_requests_per_connection,
        per_connection_buffer_limit: c.per_connection_buffer_limit_bytes,
        circuit_breakers: c
            .circuit_breakers
            .as_ref()
            .map(|b| isobar_sdk::ir::CircuitBreakers {
                max_connections: nonzero(b.max_connections),
                max_pending_requests: nonzero(b.max_pending_requests),
                max_requests: nonzero(b.max_requests),
                max_retries: nonzero(b.max_retries),
                per_host_max_connections: nonzero(b.per_host_max_connections),
                retry_budget: None,
            }),
        dns_lookup_family: match c.dns_lookup_family {
            crate::config::sections::DnsLookupFamily::Auto => 0,
            crate::config::sections::DnsLookupFamily::V4 => 1,
            crate::config::sections::DnsLookupFamily::V6 => 2,
            crate::config::sections::DnsLookupFamily::All => 4,
        },
        upstream_tls: crate::xds::UpstreamTlsSettings {
            min_version: TlsVersion::parse(&tls.minimum_protocol_version)
                .unwrap_or(TlsVersion::V1_2),
            max_version: TlsVersion::parse(&tls.maximum_protocol_version)
                .unwrap_or(TlsVersion::V1_3),
            cipher_suites: tls.cipher_suites.clone(),
            ecdh_curves: dedup(&tls.ecdh_curves),
        },
    }
}

/// `curves` without repeats, in their order (as Contour's main reads them).
fn dedup(curves: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in curves {
        if !out.contains(c) {
            out.push(c.clone());
        }
    }
    out
}

/// Contour's keys that shape every HTTP connection manager (checked when the
/// configuration was loaded: a value that does not parse here was refused there).
fn http_settings(config: &Config) -> crate::xds::HttpSettings {
    use crate::config::contour::{self, AccessLogFormat, AccessLogLevel, ServerHeader};
    use crate::config::sections::CompressionAlgorithm;
    let t = &config.timeouts;
    let versions: Vec<String> = config
        .default_http_versions
        .iter()
        .map(|v| v.to_ascii_lowercase())
        .collect();
    let time = |text: &str| contour::timeout(text).ok().flatten();
    let access_log = crate::xds::AccessLogSettings {
        text: (config.accesslog_format == AccessLogFormat::Envoy
            && !config.accesslog_format_string.is_empty())
        .then(|| config.accesslog_format_string.clone()),
        json: match config.accesslog_format {
            AccessLogFormat::Json => contour::json_fields(&config.json_fields).unwrap_or_default(),
            AccessLogFormat::Envoy => Vec::new(),
        },
        min_status: match config.accesslog_level {
            AccessLogLevel::Info | AccessLogLevel::Disabled => 0,
            AccessLogLevel::Error => 300,
            AccessLogLevel::Critical => 500,
        },
        disabled: config.accesslog_level == AccessLogLevel::Disabled,
    };
    crate::xds::HttpSettings {
        merge_slashes: !config.disable_merge_slashes,
        allow_chunked_length: !config.disable_allow_chunked_length,
        num_trusted_hops: config.network.num_trusted_hops,
        strip_trailing_host_dot: config.network.strip_trailing_host_dot,
        server_header: match config.server_header_transformation {
            ServerHeader::Overwrite => 0,
            ServerHeader::AppendIfAbsent => 1,
            ServerHeader::PassThrough => 2,
        },
        request_timeout: time(&t.request_timeout),
        idle_timeout: time(&t.connection_idle_timeout),
        stream_idle_timeout: time(&t.stream_idle_timeout),
        max_connection_duration: time(&t.max_connection_duration),
        delayed_close_timeout: time(&t.delayed_close_timeout),
        drain_timeout: time(&t.connection_shutdown_grace_period),
        access_log,
        max_requests_per_connection: config.listener.max_requests_per_connection,
        http2_max_concurrent_streams: config.listener.http2_max_concurrent_streams,
        http1: versions.is_empty() || versions.contains(&"http/1.1".to_string()),
        http2: versions.is_empty() || versions.contains(&"http/2".to_string()),
        compression: match config.compression.algorithm {
            CompressionAlgorithm::Gzip => Some(crate::xds::Compressor::Gzip),
            CompressionAlgorithm::Brotli => Some(crate::xds::Compressor::Brotli),
            CompressionAlgorithm::Zstd => Some(crate::xds::Compressor::Zstd),
            CompressionAlgorithm::Disabled => None,
        },
    }
}

/// Where `serve` reads objects from.
#[derive(Debug, Clone)]
pub enum ProviderChoice {
    /// `--manifests DIR`, optionally `--watch-namespaces`.
    Files {
        dir: Option<PathBuf>,
        namespaces: Vec<String>,
    },
    /// `--kubeconfig PATH` or `--incluster`, optionally `--watch-namespaces`.
    Kubernetes {
        kubeconfig: Option<PathBuf>,
        namespaces: Vec<String>,
    },
}

pub fn run(config: Config, provider: ProviderChoice) -> anyhow::Result<()> {
    let pipeline = Pipeline::for_config(&config)?;
    if let ProviderChoice::Files { dir: None, .. } = provider {
        anyhow::bail!(
            "serve needs a source of objects: --manifests DIR, --kubeconfig PATH or --incluster"
        );
    }
    let xds = &config.xds_server;
    if !xds.insecure
        && [&xds.ca_file, &xds.cert_file, &xds.key_file]
            .iter()
            .any(|f| f.is_empty())
    {
        anyhow::bail!(
            "xDS is served over mutual TLS: pass --contour-cafile, --contour-cert-file and --contour-key-file (see `isobar certgen`), or --insecure for plain gRPC"
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
        .on_thread_start(crate::allocator::share_arena)
        .build()?
        .block_on(serve(config, pipeline, provider, xds_addr))
}

/// The running controller: provider → runner → snapshots, and with the Kubernetes
/// provider the elector and the status writer. Everything `serve` runs except the
/// servers in front of it.
pub struct Controller {
    pub snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<WatchHealth>,
    /// Whether this replica writes status (Kubernetes provider only).
    pub leader: Option<watch::Receiver<bool>>,
    /// Asks the runner for the IR of its current objects (the debug endpoint).
    pub debug: mpsc::Sender<crate::runner::inbox::IrRequest>,
    /// Hands AdmissionReviews to the runner (the admission webhook).
    pub admission: mpsc::Sender<crate::runner::inbox::AdmissionRequest>,
    /// Where the xDS server reports updates Envoy refused (`AdsService::reporting`).
    pub rejections: mpsc::UnboundedSender<crate::xds::Rejection>,
    /// Ends with the provider's error, if it fails.
    pub provider: tokio::task::JoinHandle<anyhow::Result<()>>,
    stop: watch::Sender<bool>,
    elector: Option<tokio::task::JoinHandle<()>>,
    background: tokio::task::JoinSet<()>,
    _leader_always: Option<watch::Sender<bool>>,
}

impl Controller {
    pub async fn start(
        config: &Config,
        pipeline: Pipeline,
        choice: ProviderChoice,
    ) -> anyhow::Result<Controller> {
        let metrics = Arc::new(Metrics::default());
        let (snapshot_tx, snapshots) = watch::channel(None);
        let (event_tx, event_rx) = mpsc::channel(1024);
        let (debug, debug_rx) = mpsc::channel(4);
        let (admission, admission_rx) = mpsc::channel(64);
        let (rejections, rejections_rx) = mpsc::unbounded_channel();
        let kinds = pipeline.kinds();
        let health = Arc::new(WatchHealth::default());
        // Set on shutdown: the elector releases its Lease.
        let (stop, stop_rx) = watch::channel(false);
        let mut background = tokio::task::JoinSet::new();
        let mut elector = None;
        let mut leader = None;
        let mut leader_always = None;
        let mut hydrate = None;
        let (provider, statuses): (Box<dyn Provider>, _) = match choice {
            ProviderChoice::Files { dir, namespaces } => (
                Box::new(FilesProvider::new(dir.unwrap_or_default()).watching(namespaces)),
                None,
            ),
            ProviderChoice::Kubernetes {
                kubeconfig,
                namespaces,
            } => {
                let rate = crate::provider::kube::RequestRate {
                    qps: config.kubernetes_client_qps,
                    burst: config.kubernetes_client_burst,
                };
                let client =
                    crate::provider::kube::client_limited(kubeconfig.as_deref(), rate).await?;
                let (desired_tx, desired_rx) = watch::channel(None);
                let (leader_tx, leader_rx) = watch::channel(false);
                if config.leader_election.disabled {
                    leader_tx.send_replace(true);
                    // Kept until shutdown: the writer stops when the sender goes away.
                    leader_always = Some(leader_tx);
                } else {
                    let lease = Elector::new(
                        client.clone(),
                        &config.leader_election,
                        crate::runner::leader::identity(),
                    );
                    elector = Some(tokio::spawn(lease.run(leader_tx, stop_rx)));
                }
                leader = Some(leader_rx.clone());
                let mut leading = leader_rx.clone();
                let gauge = metrics.clone();
                background.spawn(async move {
                    loop {
                        gauge.leader.set(i64::from(*leading.borrow_and_update()));
                        if leading.changed().await.is_err() {
                            return;
                        }
                    }
                });
                let versions = Arc::new(ApiVersions::default());
                let writer = StatusWriter {
                    client: client.clone(),
                    metrics: metrics.clone(),
                    concurrency: 8,
                    versions: versions.clone(),
                    controller: pipeline.controller_name().to_string(),
                };
                background.spawn(writer.run(desired_rx, leader_rx));
                let output = StatusOutput {
                    desired: desired_tx,
                    fixed_address: config.ingress_status_address.clone(),
                    envoy_service: (
                        config.envoy_service_namespace.clone(),
                        config.envoy_service_name.clone(),
                    ),
                };
                let (hydrate_tx, hydrate_rx) = mpsc::channel(16);
                hydrate = Some(hydrate_tx);
                let provider =
                    KubeProvider::new(client, namespaces, health.clone(), metrics.clone())
                        .with_hydration(hydrate_rx)
                        .with_versions(versions)
                        .without(&config.disabled_features);
                (Box::new(provider) as Box<dyn Provider>, Some(output))
            }
        };
        let runner = Runner {
            pipeline,
            settings: envoy_settings(config),
            holdoff: config.pipeline.holdoff_delay.0,
            holdoff_max: config.pipeline.holdoff_max_delay.0,
            metrics: metrics.clone(),
            snapshots: snapshot_tx,
            statuses,
            debug: Some(debug_rx),
            admission: Some(admission_rx),
            hydrate,
            rejections: Some(rejections_rx),
            withheld: Default::default(),
            sharded: Default::default(),
        };
        let provider = tokio::spawn(provider.run(kinds, event_tx));
        background.spawn(runner.run(event_rx));
        Ok(Controller {
            snapshots,
            metrics,
            health,
            leader,
            debug,
            admission,
            rejections,
            provider,
            stop,
            elector,
            background,
            _leader_always: leader_always,
        })
    }

    /// Stops everything; a leader releases its Lease first, so a successor takes over at
    /// once instead of after the lease duration.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.elector.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), task).await;
        }
        self.provider.abort();
        self.background.abort_all();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.provider.abort();
        if let Some(task) = &self.elector {
            task.abort();
        }
    }
}

async fn serve(
    config: Config,
    pipeline: Pipeline,
    choice: ProviderChoice,
    xds_addr: SocketAddr,
) -> anyhow::Result<()> {
    let mut controller = Controller::start(&config, pipeline, choice).await?;
    let metrics = controller.metrics.clone();
    let snapshot_rx = controller.snapshots.clone();
    let health = controller.health.clone();
    let state = HttpState {
        metrics: metrics.clone(),
        snapshots: snapshot_rx.clone(),
        health,
    };
    let mut servers = tokio::task::JoinSet::new();
    let debug_addr = format!("{}:{}", config.debug_http.address, config.debug_http.port);
    servers.spawn(http::serve(
        debug_addr,
        crate::cli::debug::routes().with_state(controller.debug.clone()),
    ));
    if config.admission_webhook.enabled {
        spawn_admission_webhook(&config, &controller, &mut servers).await?;
    }
    spawn_metrics(&config, state, &mut servers).await?;

    // SIGTERM/Ctrl-C: stop accepting, end every ADS stream cleanly, release the Lease.
    let (closing_tx, closing) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutdown signal received");
        closing_tx.send_replace(true);
    });
    let ads = AdsService::new(snapshot_rx, metrics)
        .reporting(controller.rejections.clone())
        .with_shutdown(closing.clone())
        .into_server();
    let listener = tokio::net::TcpListener::bind(xds_addr)
        .await
        .with_context(|| format!("binding xDS on {xds_addr}"))?;
    tracing::info!(address = %xds_addr, "serving xds");
    for refused in crate::allocator::refused() {
        tracing::warn!(%refused, "the allocator refused a setting: freed memory may stay resident longer");
    }
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(60)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(20)))
        .add_service(ads);
    let closed = async move {
        let mut closing = closing;
        let _ = closing.wait_for(|c| *c).await;
    };
    let xds = &config.xds_server;
    let grpc: std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), tonic::transport::Error>> + Send>,
    > =
        if xds.insecure {
            Box::pin(
                router.serve_with_incoming_shutdown(crate::xds::server::incoming(listener), closed),
            )
        } else {
            // Read once here so a bad file stops start-up with its name.
            let tls = crate::tls::mutual(&xds.ca_file, &xds.cert_file, &xds.key_file)?;
            tracing::info!("xds over mutual TLS: Envoys need a client certificate of the CA");
            Box::pin(router.serve_with_incoming_shutdown(
                crate::xds::server::incoming_tls(listener, tls),
                closed,
            ))
        };

    let result = tokio::select! {
        result = grpc => result.context("xds server"),
        result = &mut controller.provider => result.context("provider task").and_then(|r| r.context("provider")),
        Some(result) = servers.join_next() => result.context("http task").and_then(|r| r),
    };
    tracing::info!("shutting down");
    controller.shutdown().await;
    result
}

/// What `serve` runs beside the xDS server: each task ends only on an error.
type Servers = tokio::task::JoinSet<anyhow::Result<()>>;

/// The admission webhook, over HTTPS only (its certificate read once here, so a bad one
/// stops start-up with its file name).
async fn spawn_admission_webhook(
    config: &Config,
    controller: &Controller,
    servers: &mut Servers,
) -> anyhow::Result<()> {
    let hook = &config.admission_webhook;
    anyhow::ensure!(
        !hook.certificate_file.is_empty() && !hook.key_file.is_empty(),
        "admission-webhook: certificate-file and key-file must be set (the webhook serves HTTPS only)"
    );
    let addr = format!("{}:{}", hook.address, hook.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding the admission webhook on {addr}"))?;
    let router = crate::admission::routes()
        .with_state(crate::admission::Webhook::new(controller.admission.clone()));
    let (cert, key) = (hook.certificate_file.clone(), hook.key_file.clone());
    // Read once here so a bad certificate stops start-up with its file name.
    crate::admission::check_certificate(&cert, &key)?;
    let client_ca = Some(hook.client_ca_file.clone())
        .filter(|f| !f.is_empty())
        .map(Into::into);
    servers.spawn(crate::admission::serve(
        listener,
        (cert.into(), key.into(), client_ca),
        router,
    ));
    Ok(())
}

/// `/metrics` and the health endpoints.
async fn spawn_metrics(
    config: &Config,
    state: HttpState,
    servers: &mut Servers,
) -> anyhow::Result<()> {
    let metrics_addr = format!("{}:{}", config.metrics.address, config.metrics.port);
    let health_addr = format!("{}:{}", config.health.address, config.health.port);
    // `/metrics`, over HTTPS with `metrics.contour`'s certificate (clients of its CA
    // only, when it names one); the health endpoints beside it when on its address.
    let metrics_router = if metrics_addr == health_addr {
        http::metrics_routes()
            .merge(http::health_routes())
            .with_state(state.clone())
    } else {
        servers.spawn(http::serve(
            health_addr,
            http::health_routes().with_state(state.clone()),
        ));
        http::metrics_routes().with_state(state)
    };
    match config
        .metrics
        .contour
        .as_ref()
        .filter(|m| !m.server_certificate_path.is_empty())
    {
        Some(tls) => {
            let listener = tokio::net::TcpListener::bind(&metrics_addr)
                .await
                .with_context(|| format!("binding metrics on {metrics_addr}"))?;
            let ca = (!tls.ca_certificate_path.is_empty())
                .then(|| tls.ca_certificate_path.clone().into());
            let files = (
                tls.server_certificate_path.clone().into(),
                tls.server_key_path.clone().into(),
                ca,
            );
            // Read once here so a bad certificate stops start-up with its file name.
            crate::admission::check_certificate(
                &tls.server_certificate_path,
                &tls.server_key_path,
            )?;
            servers.spawn(crate::admission::serve_https(
                listener,
                files,
                metrics_router,
                "metrics",
            ));
        }
        None => {
            servers.spawn(http::serve(metrics_addr, metrics_router));
        }
    }
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
