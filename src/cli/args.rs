//! The flags of `serve` and `translate` that feed the configuration: each a key of
//! contour.yaml (the `-c` file and `ISOBAR_*` settings below them, the flags above).

use std::path::PathBuf;

use serde_json::{Map, Value, json};

use crate::config::{self, Config};

/// Flags shared by `serve` and `translate` that feed the configuration.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// Path to contour.yaml.
    #[arg(short = 'c', long = "config-path")]
    pub config_path: Option<PathBuf>,
    /// Address of Envoy's HTTP listener.
    #[arg(long)]
    pub envoy_service_http_address: Option<String>,
    /// Port of Envoy's HTTP listener.
    #[arg(long)]
    pub envoy_service_http_port: Option<u16>,
    /// Address of Envoy's HTTPS listener.
    #[arg(long)]
    pub envoy_service_https_address: Option<String>,
    /// Port of Envoy's HTTPS listener.
    #[arg(long)]
    pub envoy_service_https_port: Option<u16>,
    /// Address of Envoy's stats-health listener.
    #[arg(long)]
    pub stats_address: Option<String>,
    /// Port of Envoy's stats-health listener.
    #[arg(long)]
    pub stats_port: Option<u16>,
    /// Ingress class names to serve, comma-separated (default: `contour` and no class).
    #[arg(long)]
    pub ingress_class_name: Option<String>,
    /// Namespaces where root HTTPProxies may be defined, comma-separated (default: all).
    #[arg(long)]
    pub root_namespaces: Option<String>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Directory of manifests to serve (the files provider), watched for changes.
    #[arg(long, conflicts_with_all = ["kubeconfig", "incluster"])]
    pub manifests: Option<PathBuf>,
    /// Watch the Kubernetes API of this kubeconfig's current context.
    #[arg(long, conflicts_with = "incluster")]
    pub kubeconfig: Option<PathBuf>,
    /// Watch the Kubernetes API of the cluster Isobar runs in (its service account).
    #[arg(long)]
    pub incluster: bool,
    /// Watch only these namespaces, comma-separated (default: all).
    #[arg(long)]
    pub watch_namespaces: Option<String>,
    /// Fixed addresses for status.loadBalancer, comma-separated IPs or hostnames.
    #[arg(long)]
    pub ingress_status_address: Option<String>,
    /// The Envoy Service whose load balancer addresses go to status.loadBalancer.
    #[arg(long)]
    pub envoy_service_name: Option<String>,
    /// The Envoy Service's namespace.
    #[arg(long)]
    pub envoy_service_namespace: Option<String>,
    /// Address of the debug endpoint (/debug/ir, /debug/dag).
    #[arg(long)]
    pub debug_http_address: Option<String>,
    /// Port of the debug endpoint.
    #[arg(long)]
    pub debug_http_port: Option<u16>,
    /// Serve the validating admission webhook (HTTPS).
    #[arg(long)]
    pub admission_webhook: bool,
    /// Address of the admission webhook.
    #[arg(long)]
    pub admission_webhook_address: Option<String>,
    /// Port of the admission webhook.
    #[arg(long)]
    pub admission_webhook_port: Option<u16>,
    /// PEM certificate chain the admission webhook serves.
    #[arg(long)]
    pub admission_webhook_certificate_file: Option<String>,
    /// PEM private key of that certificate.
    #[arg(long)]
    pub admission_webhook_key_file: Option<String>,
    /// PEM CA bundle: only clients with a certificate it issued (the API server) are
    /// answered by the admission webhook.
    #[arg(long)]
    pub admission_webhook_client_ca: Option<String>,
    /// Every replica writes status (no Lease).
    #[arg(long)]
    pub disable_leader_election: bool,
    /// How long an unrenewed Lease holds (e.g. 15s).
    #[arg(long)]
    pub leader_election_lease_duration: Option<String>,
    /// How long the leader keeps writing without renewing (e.g. 10s).
    #[arg(long)]
    pub leader_election_renew_deadline: Option<String>,
    /// How often the Lease is tried or renewed (e.g. 2s).
    #[arg(long)]
    pub leader_election_retry_period: Option<String>,
    /// The Lease's name.
    #[arg(long)]
    pub leader_election_resource_name: Option<String>,
    /// The Lease's namespace.
    #[arg(long)]
    pub leader_election_resource_namespace: Option<String>,
    /// Address Isobar serves xDS on.
    #[arg(long)]
    pub xds_address: Option<String>,
    /// Port Isobar serves xDS on.
    #[arg(long)]
    pub xds_port: Option<u16>,
    /// Serve xDS over plain gRPC, without TLS.
    #[arg(long)]
    pub insecure: bool,
    /// CA bundle that signs Envoys' client certificates (xDS over mutual TLS).
    #[arg(long, env = "CONTOUR_CAFILE")]
    pub contour_cafile: Option<String>,
    /// Isobar's xDS server certificate chain.
    #[arg(long, env = "CONTOUR_CERT_FILE")]
    pub contour_cert_file: Option<String>,
    /// Its private key.
    #[arg(long, env = "CONTOUR_KEY_FILE")]
    pub contour_key_file: Option<String>,
    /// Contour's access log format flag: `envoy` or `json` (the `accesslog-format` key).
    #[arg(long, value_parser = ["envoy", "json"])]
    pub accesslog_format: Option<String>,
    /// Envoy's access log path (Contour's; the `envoy.access-log` key, which both
    /// listeners share: the two flags must agree).
    #[arg(long)]
    pub envoy_http_access_log: Option<String>,
    /// Envoy's HTTPS access log path (see `--envoy-http-access-log`).
    #[arg(long)]
    pub envoy_https_access_log: Option<String>,
    /// Address of Isobar's /metrics.
    #[arg(long)]
    pub http_address: Option<String>,
    /// Port of Isobar's /metrics.
    #[arg(long)]
    pub http_port: Option<u16>,
    /// Address of Isobar's /healthz.
    #[arg(long)]
    pub health_address: Option<String>,
    /// Port of Isobar's /healthz.
    #[arg(long)]
    pub health_port: Option<u16>,
    /// Read the configuration from this ContourConfiguration (`projectcontour.io/v1alpha1`,
    /// in `$CONTOUR_NAMESPACE`, default `projectcontour`) instead of a file.
    #[arg(long, conflicts_with = "config_path")]
    pub contour_config_name: Option<String>,
    /// Every Envoy listener expects a PROXY protocol header (`envoy.use-proxy-protocol`).
    #[arg(long)]
    pub use_proxy_protocol: bool,
    /// The Kubernetes client's requests per second (`kubernetesClientQPS`).
    #[arg(long)]
    pub kubernetes_client_qps: Option<f32>,
    /// The Kubernetes client's burst (`kubernetesClientBurst`).
    #[arg(long)]
    pub kubernetes_client_burst: Option<u32>,
    /// Log the Kubernetes client's requests: a klog level, 1 and above debug, 6 and
    /// above trace (Contour's).
    #[arg(long, value_name = "LOG LEVEL")]
    pub kubernetes_debug: Option<u32>,
    /// Watch none of these kinds, as if their CRDs were not installed (Contour's;
    /// repeatable): the plural of any kind a CustomResourceDefinition serves.
    #[arg(long, value_parser = disableable_kinds())]
    pub disable_feature: Vec<String>,
    /// Debug logging.
    #[arg(short = 'd', long)]
    pub debug: bool,
}

/// Puts `value` at the dotted `path` of a JSON object.
fn set(root: &mut Map<String, Value>, path: &str, value: Value) {
    let mut parts = path.split('.').peekable();
    let mut node = root;
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            node.insert(part.to_string(), value);
            return;
        }
        let next = node.entry(part.to_string()).or_insert_with(|| json!({}));
        let Some(map) = next.as_object_mut() else {
            return;
        };
        node = map;
    }
}

/// `a,b` → `["a", "b"]`.
fn comma_list(text: &str) -> Value {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Value::from)
        .collect()
}

impl ConfigArgs {
    fn flags(&self, out: &mut Map<String, Value>) {
        let pairs: [(&str, Option<Value>); 10] = [
            (
                "envoy.http.address",
                self.envoy_service_http_address.clone().map(Value::from),
            ),
            (
                "envoy.http.port",
                self.envoy_service_http_port.map(Value::from),
            ),
            (
                "envoy.https.address",
                self.envoy_service_https_address.clone().map(Value::from),
            ),
            (
                "envoy.https.port",
                self.envoy_service_https_port.map(Value::from),
            ),
            (
                "envoy.metrics.address",
                self.stats_address.clone().map(Value::from),
            ),
            ("envoy.metrics.port", self.stats_port.map(Value::from)),
            // Envoy's readiness goes where its stats go (Contour's stats flags).
            (
                "envoy.health.address",
                self.stats_address.clone().map(Value::from),
            ),
            ("envoy.health.port", self.stats_port.map(Value::from)),
            (
                "plugins.ingress-class.names",
                self.ingress_class_name.as_deref().map(comma_list),
            ),
            (
                "plugins.root-namespaces.namespaces",
                self.root_namespaces.as_deref().map(comma_list),
            ),
        ];
        for (path, value) in pairs {
            if let Some(value) = value {
                set(out, path, value);
            }
        }
    }

    pub fn load(&self, extra: Map<String, Value>) -> Result<Config, config::ConfigError> {
        self.load_with(extra, None)
    }

    /// [`ConfigArgs::load`] with a ContourConfiguration's settings in place of a file.
    pub fn load_with(
        &self,
        extra: Map<String, Value>,
        resource: Option<Value>,
    ) -> Result<Config, config::ConfigError> {
        let mut flags = extra;
        self.flags(&mut flags);
        config::load_with(self.config_path.as_deref(), resource, Value::Object(flags))
    }
}

impl ServeArgs {
    /// Where objects come from: a manifest directory or the Kubernetes API (the flags,
    /// else Contour's `incluster` / `kubeconfig` keys of `config`).
    pub fn provider(&self, config: &Config) -> crate::cli::serve::ProviderChoice {
        use crate::cli::serve::ProviderChoice;
        let from_config = self.manifests.is_none() && !self.incluster && self.kubeconfig.is_none();
        let kubeconfig = match &self.kubeconfig {
            Some(path) => Some(path.clone()),
            None if from_config && !config.incluster && !config.kubeconfig.is_empty() => {
                Some(PathBuf::from(&config.kubeconfig))
            }
            None => None,
        };
        let incluster = self.incluster || (from_config && config.incluster);
        let namespaces: Vec<String> = self
            .watch_namespaces
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if kubeconfig.is_some() || incluster {
            ProviderChoice::Kubernetes {
                kubeconfig,
                namespaces,
            }
        } else {
            ProviderChoice::Files {
                dir: self.manifests.clone(),
                namespaces,
            }
        }
    }

    /// The configuration, from `--contour-config-name`'s ContourConfiguration (read
    /// through the API `--kubeconfig`/`--incluster` names) when given, else as
    /// [`ServeArgs::load_config`].
    pub fn load_config_resource(&self) -> anyhow::Result<Config> {
        let Some(name) = &self.contour_config_name else {
            return Ok(self.load_config()?);
        };
        anyhow::ensure!(
            self.kubeconfig.is_some() || self.incluster,
            "--contour-config-name reads the Kubernetes API: pass --kubeconfig or --incluster"
        );
        let namespace =
            std::env::var("CONTOUR_NAMESPACE").unwrap_or_else(|_| "projectcontour".to_string());
        let kubeconfig = if self.incluster {
            None
        } else {
            self.kubeconfig.clone()
        };
        let resource = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(async {
                let client = crate::provider::kube::client(kubeconfig.as_deref()).await?;
                config::contour_configuration::fetch(client, &namespace, name).await
            })?;
        Ok(self.load_config_from(Some(resource))?)
    }

    pub fn load_config(&self) -> Result<Config, config::ConfigError> {
        self.load_config_from(None)
    }

    fn load_config_from(&self, resource: Option<Value>) -> Result<Config, config::ConfigError> {
        if let (Some(http), Some(https)) =
            (&self.envoy_http_access_log, &self.envoy_https_access_log)
            && http != https
        {
            return Err(config::ConfigError::Setting(format!(
                "--envoy-http-access-log {http:?} and --envoy-https-access-log {https:?} differ: Isobar's listeners share one access log"
            )));
        }
        let mut flags = Map::new();
        for (path, value) in self.flag_settings() {
            if let Some(value) = value {
                set(&mut flags, path, value);
            }
        }
        let mut config = self.config.load_with(flags, resource)?;
        config.disabled_features = self.disable_feature.clone();
        Ok(config)
    }

    /// The contour.yaml keys the flags set, each with its flag's value (`None`: unset).
    fn flag_settings(&self) -> [(&'static str, Option<Value>); 33] {
        let text = |v: &Option<String>| v.clone().map(Value::from);
        [
            (
                "admission-webhook.enabled",
                self.admission_webhook.then_some(Value::Bool(true)),
            ),
            (
                "admission-webhook.address",
                text(&self.admission_webhook_address),
            ),
            (
                "admission-webhook.port",
                self.admission_webhook_port.map(Value::from),
            ),
            (
                "admission-webhook.certificate-file",
                text(&self.admission_webhook_certificate_file),
            ),
            (
                "admission-webhook.key-file",
                text(&self.admission_webhook_key_file),
            ),
            (
                "admission-webhook.client-ca-file",
                text(&self.admission_webhook_client_ca),
            ),
            ("debug-http.address", text(&self.debug_http_address)),
            ("debug-http.port", self.debug_http_port.map(Value::from)),
            ("ingress-status-address", text(&self.ingress_status_address)),
            ("envoy-service-name", text(&self.envoy_service_name)),
            (
                "envoy-service-namespace",
                text(&self.envoy_service_namespace),
            ),
            (
                "leader-election.disabled",
                self.disable_leader_election.then_some(Value::Bool(true)),
            ),
            (
                "leader-election.lease-duration",
                text(&self.leader_election_lease_duration),
            ),
            (
                "leader-election.renew-deadline",
                text(&self.leader_election_renew_deadline),
            ),
            (
                "leader-election.retry-period",
                text(&self.leader_election_retry_period),
            ),
            (
                "leader-election.resource-name",
                text(&self.leader_election_resource_name),
            ),
            (
                "leader-election.resource-namespace",
                text(&self.leader_election_resource_namespace),
            ),
            (
                "xds-server.address",
                self.xds_address.clone().map(Value::from),
            ),
            ("xds-server.port", self.xds_port.map(Value::from)),
            (
                "xds-server.insecure",
                self.insecure.then_some(Value::Bool(true)),
            ),
            (
                "xds-server.ca-file",
                self.contour_cafile.clone().map(Value::from),
            ),
            (
                "accesslog-format",
                self.accesslog_format.clone().map(Value::from),
            ),
            (
                "envoy.use-proxy-protocol",
                self.use_proxy_protocol.then_some(Value::Bool(true)),
            ),
            (
                "envoy.access-log",
                self.envoy_http_access_log
                    .clone()
                    .or_else(|| self.envoy_https_access_log.clone())
                    .map(Value::from),
            ),
            (
                "xds-server.cert-file",
                self.contour_cert_file.clone().map(Value::from),
            ),
            (
                "xds-server.key-file",
                self.contour_key_file.clone().map(Value::from),
            ),
            (
                "metrics.address",
                self.http_address.clone().map(Value::from),
            ),
            ("metrics.port", self.http_port.map(Value::from)),
            (
                "health.address",
                self.health_address.clone().map(Value::from),
            ),
            ("health.port", self.health_port.map(Value::from)),
            ("debug", self.debug.then_some(Value::Bool(true))),
            (
                "kubernetesClientQPS",
                self.kubernetes_client_qps.map(Value::from),
            ),
            (
                "kubernetesClientBurst",
                self.kubernetes_client_burst.map(Value::from),
            ),
        ]
    }
}

/// `--disable-feature`'s values: the plurals of the kinds in the table of kinds (every
/// linked plugin's) that Kubernetes does not serve itself.
fn disableable_kinds() -> clap::builder::PossibleValuesParser {
    let mut plurals: Vec<&'static str> = isobar_sdk::Kind::all()
        .filter(|info| !info.kind.is_built_in())
        // A group of kinds defined at run time (Gatekeeper's constraints) is stored as
        // one kind no API serves.
        .filter(|info| !isobar_sdk::DynamicKinds::all().any(|d| d.kind == info.kind))
        .map(|info| info.plural)
        .collect();
    plurals.sort_unstable();
    plurals.dedup();
    clap::builder::PossibleValuesParser::new(plurals)
}

/// `serve`'s flags that set one contour.yaml key, by argument id: `--help` shows the
/// key's default beside each (a flag left out takes the file's value, else the default).
pub(super) const SERVE_FLAG_KEYS: &[(&str, &str)] = &[
    ("envoy_service_http_address", "envoy.http.address"),
    ("envoy_service_http_port", "envoy.http.port"),
    ("envoy_service_https_address", "envoy.https.address"),
    ("envoy_service_https_port", "envoy.https.port"),
    ("stats_address", "envoy.metrics.address"),
    ("stats_port", "envoy.metrics.port"),
    ("admission_webhook_address", "admission-webhook.address"),
    ("admission_webhook_port", "admission-webhook.port"),
    ("debug_http_address", "debug-http.address"),
    ("debug_http_port", "debug-http.port"),
    ("envoy_service_name", "envoy-service-name"),
    ("envoy_service_namespace", "envoy-service-namespace"),
    (
        "leader_election_lease_duration",
        "leader-election.lease-duration",
    ),
    (
        "leader_election_renew_deadline",
        "leader-election.renew-deadline",
    ),
    (
        "leader_election_retry_period",
        "leader-election.retry-period",
    ),
    (
        "leader_election_resource_name",
        "leader-election.resource-name",
    ),
    (
        "leader_election_resource_namespace",
        "leader-election.resource-namespace",
    ),
    ("xds_address", "xds-server.address"),
    ("xds_port", "xds-server.port"),
    ("accesslog_format", "accesslog-format"),
    ("envoy_http_access_log", "envoy.access-log"),
    ("envoy_https_access_log", "envoy.access-log"),
    ("http_address", "metrics.address"),
    ("http_port", "metrics.port"),
    ("health_address", "health.address"),
    ("health_port", "health.port"),
    ("kubernetes_client_qps", "kubernetesClientQPS"),
    ("kubernetes_client_burst", "kubernetesClientBurst"),
];
