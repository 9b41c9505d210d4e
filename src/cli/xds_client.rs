//! `isobar cli lds|rds|cds|eds|sds`: Contour's xDS debug client. It subscribes to one
//! resource type as an Envoy would (state of the world over ADS, or incremental with
//! `--delta`), prints every response as it arrives (Envoy's JSON, one document per
//! response; secrets' certificates as fingerprints and keys withheld) and acknowledges
//! it (or refuses it, with `--nack`), until interrupted.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::xds::XdsType;

#[derive(Debug, clap::Args)]
pub struct CliArgs {
    #[command(subcommand)]
    pub kind: Kind,
    /// Isobar's xDS address (`host:port`).
    #[arg(long, global = true, default_value = "127.0.0.1:8001")]
    pub contour: String,
    /// CA that signed Isobar's xDS certificate (mutual TLS, with the two below).
    #[arg(long, global = true, env = "CLI_CAFILE")]
    pub cafile: Option<PathBuf>,
    /// A client certificate of the CA Isobar checks (certgen's `envoycert.pem`).
    #[arg(long, global = true, env = "CLI_CERT_FILE")]
    pub cert_file: Option<PathBuf>,
    /// Its private key.
    #[arg(long, global = true, env = "CLI_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// The node id sent with every request.
    #[arg(long, global = true, env = "CLI_NODE_ID", default_value = "ContourCLI")]
    pub node_id: String,
    /// Incremental (delta) xDS instead of state of the world.
    #[arg(long, global = true)]
    pub delta: bool,
    /// Refuse (NACK) every response, to see what the server does then.
    #[arg(long, global = true)]
    pub nack: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum Kind {
    /// Listeners.
    Lds { names: Vec<String> },
    /// Route configurations, by name (`ingress_http`, `https/<host>`): RDS, EDS and SDS
    /// answer only the names asked for, as to Envoy.
    Rds { names: Vec<String> },
    /// Clusters.
    Cds { names: Vec<String> },
    /// Cluster load assignments (by cluster name).
    Eds { names: Vec<String> },
    /// Secrets (by name).
    Sds { names: Vec<String> },
    /// Compares what the xDS server at `--contour` serves (Contour's, or another Isobar's)
    /// with what Isobar would serve for `--manifests` (and `-c`), resource by resource:
    /// listeners, routes, clusters and endpoints missing on either side or differing,
    /// with the differing fields. Exits non-zero when anything differs.
    Diff {
        #[command(flatten)]
        config: crate::cli::ConfigArgs,
        /// The objects (as the running controller has them) to translate.
        #[arg(long)]
        manifests: PathBuf,
    },
}

impl Kind {
    fn of(&self) -> (XdsType, &[String]) {
        match self {
            Kind::Lds { names } => (XdsType::Listener, names),
            Kind::Rds { names } => (XdsType::Route, names),
            Kind::Cds { names } => (XdsType::Cluster, names),
            Kind::Eds { names } => (XdsType::Endpoint, names),
            Kind::Sds { names } => (XdsType::Secret, names),
            Kind::Diff { .. } => (XdsType::Listener, &[]),
        }
    }
}

pub fn run(args: &CliArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match &args.kind {
        Kind::Diff { config, manifests } => runtime.block_on(diff(args, config, manifests)),
        _ => runtime.block_on(watch(args)),
    }
}

/// The TLS client configuration of `--cafile`/`--cert-file`/`--key-file`, if given.
fn tls(args: &CliArgs) -> anyhow::Result<Option<rustls::ClientConfig>> {
    let (ca, cert, key) = match (&args.cafile, &args.cert_file, &args.key_file) {
        (None, None, None) => return Ok(None),
        (Some(ca), Some(cert), Some(key)) => (ca, cert, key),
        _ => anyhow::bail!("--cafile, --cert-file and --key-file go together"),
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).with_context(|| ca.display().to_string())? {
        roots.add(c.with_context(|| ca.display().to_string())?)?;
    }
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| cert.display().to_string())?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| cert.display().to_string())?;
    let key = PrivateKeyDer::from_pem_file(key).with_context(|| key.display().to_string())?;
    let mut config = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Some(config))
}

/// The gRPC channel to `--contour`, over TLS when the certificate flags are given.
async fn connect(args: &CliArgs) -> anyhow::Result<tonic::transport::Channel> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", args.contour))?;
    Ok(match tls(args)? {
        None => endpoint
            .connect()
            .await
            .with_context(|| format!("connecting to {}", args.contour))?,
        Some(config) => {
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let address = args.contour.clone();
            let connect = tower::service_fn(move |_: tonic::transport::Uri| {
                let (connector, address) = (connector.clone(), address.clone());
                async move {
                    let tcp = tokio::net::TcpStream::connect(&address).await?;
                    // certgen's server certificate names `contour`.
                    let name = ServerName::try_from("contour").map_err(std::io::Error::other)?;
                    let tls = connector.connect(name, tcp).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
                }
            });
            endpoint
                .connect_with_connector(connect)
                .await
                .with_context(|| format!("connecting to {} over TLS", args.contour))?
        }
    })
}

async fn watch(args: &CliArgs) -> anyhow::Result<()> {
    let channel = connect(args).await?;
    if args.delta {
        return watch_delta(args, channel).await;
    }
    let (kind, names) = args.kind.of();
    let node = Node {
        id: args.node_id.clone(),
        cluster: "isobar-cli".to_string(),
        ..Default::default()
    };
    let first = DiscoveryRequest {
        node: Some(node.clone()),
        type_url: kind.type_url().to_string(),
        resource_names: names.to_vec(),
        ..Default::default()
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(first.clone()).await?;
    let mut client =
        AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(usize::MAX);
    let mut responses = client
        .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .context("opening the ADS stream")?
        .into_inner();
    while let Some(response) = responses
        .message()
        .await
        .context("reading the ADS stream")?
    {
        let resources: Vec<serde_json::Value> = response
            .resources
            .iter()
            .map(|any| {
                let value = crate::cli::output::resource_json(kind, &any.value)
                    .unwrap_or_else(|e| serde_json::json!({"undecodable": e}));
                crate::cli::output::redact(value)
            })
            .collect();
        let doc = serde_json::json!({
            "version_info": response.version_info,
            "type_url": response.type_url,
            "nonce": response.nonce,
            "resources": resources,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        tx.send(DiscoveryRequest {
            // A NACK names the version held before and says why.
            version_info: if args.nack {
                String::new()
            } else {
                response.version_info.clone()
            },
            response_nonce: response.nonce.clone(),
            error_detail: args.nack.then(refused),
            ..first.clone()
        })
        .await?;
    }
    Ok(())
}

/// The error a `--nack` sends back.
fn refused() -> envoy_types::pb::google::rpc::Status {
    envoy_types::pb::google::rpc::Status {
        code: 3,
        message: "refused by isobar cli --nack".to_string(),
        ..Default::default()
    }
}

/// `--delta`: the same over incremental xDS: responses carry the resources that
/// changed (with their versions) and the names removed.
async fn watch_delta(args: &CliArgs, channel: tonic::transport::Channel) -> anyhow::Result<()> {
    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
    let (kind, names) = args.kind.of();
    let first = DeltaDiscoveryRequest {
        node: Some(Node {
            id: args.node_id.clone(),
            cluster: "isobar-cli".to_string(),
            ..Default::default()
        }),
        type_url: kind.type_url().to_string(),
        resource_names_subscribe: if names.is_empty() && !kind.is_wildcard() {
            vec!["*".to_string()]
        } else {
            names.to_vec()
        },
        ..Default::default()
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(first).await?;
    let mut client =
        AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(usize::MAX);
    let mut responses = client
        .delta_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .context("opening the delta ADS stream")?
        .into_inner();
    while let Some(response) = responses
        .message()
        .await
        .context("reading the delta ADS stream")?
    {
        let resources: Vec<serde_json::Value> = response
            .resources
            .iter()
            .map(|r| {
                let value = r
                    .resource
                    .as_ref()
                    .map(|any| {
                        crate::cli::output::resource_json(kind, &any.value)
                            .unwrap_or_else(|e| serde_json::json!({"undecodable": e}))
                    })
                    .unwrap_or_default();
                serde_json::json!({
                    "name": r.name,
                    "version": r.version,
                    "resource": crate::cli::output::redact(value),
                })
            })
            .collect();
        let doc = serde_json::json!({
            "type_url": response.type_url,
            "nonce": response.nonce,
            "resources": resources,
            "removed_resources": response.removed_resources,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        tx.send(DeltaDiscoveryRequest {
            type_url: response.type_url.clone(),
            response_nonce: response.nonce.clone(),
            error_detail: args.nack.then(refused),
            ..Default::default()
        })
        .await?;
    }
    Ok(())
}

/// Resources of one type by name, as Envoy's JSON (secrets redacted).
type ByName = std::collections::BTreeMap<String, serde_json::Value>;

/// One ADS stream asking for one type after another, as an Envoy does (clusters and
/// their endpoints before listeners and their routes), acknowledging each answer.
struct Session {
    first: DiscoveryRequest,
    tx: tokio::sync::mpsc::Sender<DiscoveryRequest>,
    responses: tonic::Streaming<envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse>,
}

impl Session {
    async fn open(args: &CliArgs, channel: tonic::transport::Channel) -> anyhow::Result<Session> {
        let first = DiscoveryRequest {
            node: Some(Node {
                id: args.node_id.clone(),
                cluster: "isobar-cli".to_string(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut client =
            AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(usize::MAX);
        let responses = client
            .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .context("opening the ADS stream")?
            .into_inner();
        Ok(Session {
            first,
            tx,
            responses,
        })
    }

    /// The server's answer to a request for `names` of `kind` (all of a wildcard type
    /// when empty), by resource name; the answer is acknowledged.
    async fn fetch(&mut self, kind: XdsType, names: Vec<String>) -> anyhow::Result<ByName> {
        let request = DiscoveryRequest {
            type_url: kind.type_url().to_string(),
            resource_names: names,
            ..self.first.clone()
        };
        self.tx.send(request.clone()).await?;
        let response = loop {
            let next =
                tokio::time::timeout(std::time::Duration::from_secs(30), self.responses.message())
                    .await
                    .with_context(|| format!("no {} answer within 30 s", kind.short()))?
                    .context("reading the ADS stream")?
                    .with_context(|| {
                        format!(
                            "the server closed the stream before answering {}",
                            kind.short()
                        )
                    })?;
            if next.type_url == request.type_url {
                break next;
            }
        };
        self.tx
            .send(DiscoveryRequest {
                version_info: response.version_info.clone(),
                response_nonce: response.nonce.clone(),
                ..request
            })
            .await?;
        let mut out = ByName::new();
        for any in &response.resources {
            let value = crate::cli::output::resource_json(kind, &any.value)
                .map_err(|e| anyhow::anyhow!(e))?;
            out.insert(resource_name(&value), crate::cli::output::redact(value));
        }
        Ok(out)
    }
}

/// A resource's name: `name`, or a load assignment's `cluster_name`.
fn resource_name(value: &serde_json::Value) -> String {
    value
        .get("name")
        .or_else(|| value.get("cluster_name"))
        .and_then(|n| n.as_str())
        .unwrap_or_default()
        .to_string()
}

/// The paths (JSON pointers) where `a` and `b` differ, each with both values; at most
/// `limit`.
fn differences(
    a: &serde_json::Value,
    b: &serde_json::Value,
    at: String,
    out: &mut Vec<String>,
    limit: usize,
) {
    use serde_json::Value;
    if out.len() >= limit || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                differences(va, vb, format!("{at}/{k}"), out, limit);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                differences(va, vb, format!("{at}/{i}"), out, limit);
            }
        }
        _ => out.push(format!(
            "{}: served {a}, Isobar {b}",
            if at.is_empty() { "/" } else { &at }
        )),
    }
}

/// `isobar cli diff`: the server's resources beside Isobar's translation of `manifests`.
async fn diff(
    args: &CliArgs,
    config: &crate::cli::ConfigArgs,
    manifests: &std::path::Path,
) -> anyhow::Result<()> {
    let config = config.load(serde_json::Map::new())?;
    let pipeline = crate::runner::pipeline::Pipeline::for_config(&config)?;
    anyhow::ensure!(
        manifests.is_dir(),
        "manifest directory {} does not exist",
        manifests.display()
    );
    let (objects, errors) = crate::provider::files::load_dir(manifests);
    for e in &errors {
        eprintln!("isobar: {e}");
    }
    let output = pipeline.build(&objects);
    let resources = crate::xds::translate(
        &output.ir,
        &objects,
        &crate::cli::serve::envoy_settings(&config),
    );
    let mut session = Session::open(args, connect(args).await?).await?;
    let (mut compared, mut differing) = (0, 0);
    for kind in [
        XdsType::Cluster,
        XdsType::Endpoint,
        XdsType::Listener,
        XdsType::Route,
    ] {
        let mut local = ByName::new();
        for (name, bytes) in resources.of(kind) {
            let value =
                crate::cli::output::resource_json(kind, bytes).map_err(|e| anyhow::anyhow!(e))?;
            local.insert(name.clone(), crate::cli::output::redact(value));
        }
        // Route configurations and load assignments are answered by name only.
        let names = if kind.is_wildcard() {
            Vec::new()
        } else {
            local.keys().cloned().collect()
        };
        let served = session.fetch(kind, names).await?;
        let all: std::collections::BTreeSet<&String> = local.keys().chain(served.keys()).collect();
        for name in all {
            compared += 1;
            let t = kind.short();
            match (served.get(name), local.get(name)) {
                (Some(_), None) => {
                    differing += 1;
                    println!("{t} {name}: served, not by Isobar");
                }
                (None, Some(_)) => {
                    differing += 1;
                    println!("{t} {name}: Isobar's, not served");
                }
                (Some(a), Some(b)) if a != b => {
                    differing += 1;
                    let mut paths = Vec::new();
                    differences(a, b, String::new(), &mut paths, 10);
                    println!("{t} {name}: differs");
                    for p in paths {
                        println!("  {p}");
                    }
                }
                _ => {}
            }
        }
    }
    println!("{compared} resources compared, {differing} differ");
    anyhow::ensure!(differing == 0, "{differing} of {compared} resources differ");
    Ok(())
}
