//! `isobar certgen`: Contour's certgen — a CA and the certificates Isobar (`contour`)
//! and Envoy (`envoy`) present to each other for xDS over mutual TLS, written as PEM
//! files, as Secret manifests, or as Secrets through the Kubernetes API. File and
//! Secret names are Contour's, so its Deployment and DaemonSet mount them unchanged.

use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use serde_json::{Value, json};

#[derive(Debug, Clone, clap::Args)]
pub struct CertgenArgs {
    /// Write the Secrets through the Kubernetes API (`--kubeconfig`, or `--incluster`).
    #[arg(long)]
    pub kube: bool,
    /// With `--kube`: the kubeconfig to use (default: the usual places).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// With `--kube`: the cluster Isobar runs in (its service account).
    #[arg(long)]
    pub incluster: bool,
    /// The namespace of the Secrets and of the services named in the certificates.
    #[arg(long, env = "CONTOUR_NAMESPACE", default_value = "projectcontour")]
    pub namespace: String,
    /// Where `--pem` and `--yaml` write their files (Contour's positional `outputdir`).
    #[arg(default_value = "certs")]
    pub outputdir: PathBuf,
    /// The same, as a flag (overrides the positional one).
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
    /// Write PEM files (`cacert.pem`, `contourcert.pem`, `contourkey.pem`,
    /// `envoycert.pem`, `envoykey.pem`).
    #[arg(long)]
    pub pem: bool,
    /// Write Secret manifests (`contourcert.yaml`, `envoycert.yaml`).
    #[arg(long)]
    pub yaml: bool,
    /// Replace files or Secrets that exist (otherwise they are kept and it is an error).
    #[arg(long)]
    pub overwrite: bool,
    /// Days the certificates are valid.
    #[arg(long, default_value_t = 365)]
    pub certificate_lifetime: u32,
    /// `compact`: two `kubernetes.io/tls` Secrets, each with `ca.crt`; `legacy`: those
    /// without `ca.crt`, and the CA in Secret `cacert` (`cacert.pem`).
    #[arg(long, value_enum, default_value_t = SecretsFormat::Legacy)]
    pub secrets_format: SecretsFormat,
    /// Appended to the Secrets' names (`contourcert-SUFFIX`).
    #[arg(long, default_value = "")]
    pub secrets_name_suffix: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SecretsFormat {
    Legacy,
    Compact,
}

/// A certificate and its key, PEM.
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: String,
    pub key: String,
}

/// What certgen makes.
#[derive(Debug, Clone)]
pub struct Generated {
    pub ca: String,
    pub contour: Pair,
    pub envoy: Pair,
}

/// The DNS names of a service's certificate: `name`, and the names it has in `namespace`.
fn names(name: &str, namespace: &str) -> Vec<String> {
    vec![
        name.to_string(),
        format!("{name}.{namespace}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.cluster.local"),
    ]
}

/// The longest lifetime taken: a hundred years (a certificate's end date must stay
/// within the year 9999 X.509 and the date library can write).
const MAX_LIFETIME_DAYS: u32 = 36_500;

/// Valid from five minutes ago (clocks differ) for `days`.
fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(i64::from(days));
}

/// A new CA and the two leaf certificates it signs.
pub fn generate(namespace: &str, days: u32) -> anyhow::Result<Generated> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "Isobar xDS CA (certgen)");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut params, days);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
    let leaf = |name: &str| -> anyhow::Result<Pair> {
        let mut params = CertificateParams::new(names(name, namespace))?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        validity(&mut params, days);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        Ok(Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    };
    Ok(Generated {
        ca: ca.pem(),
        contour: leaf("contour")?,
        envoy: leaf("envoy")?,
    })
}

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The Secrets, as Contour's certgen names and shapes them.
pub fn secrets(generated: &Generated, args: &CertgenArgs) -> Vec<Value> {
    let suffix = if args.secrets_name_suffix.is_empty() {
        String::new()
    } else {
        format!("-{}", args.secrets_name_suffix)
    };
    let tls = |name: &str, pair: &Pair| {
        let mut data = json!({"tls.crt": b64(&pair.cert), "tls.key": b64(&pair.key)});
        if args.secrets_format == SecretsFormat::Compact {
            data["ca.crt"] = json!(b64(&generated.ca));
        }
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": format!("{name}{suffix}"), "namespace": args.namespace,
                         "labels": {"app": "contour"}},
            "data": data,
        })
    };
    let mut out = vec![
        tls("contourcert", &generated.contour),
        tls("envoycert", &generated.envoy),
    ];
    if args.secrets_format == SecretsFormat::Legacy {
        out.push(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": format!("cacert{suffix}"), "namespace": args.namespace,
                         "labels": {"app": "contour"}},
            "data": {"cacert.pem": b64(&generated.ca)},
        }));
    }
    out
}

fn write_file(dir: &Path, name: &str, text: &str, overwrite: bool) -> anyhow::Result<()> {
    let path = dir.join(name);
    if path.exists() && !overwrite {
        anyhow::bail!("{} exists (pass --overwrite to replace it)", path.display());
    }
    // Written beside and moved into place: a reader sees the old file or the new one.
    let partial = dir.join(format!(".{name}.partial"));
    std::fs::write(&partial, text).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

pub fn run(args: &CertgenArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.pem || args.yaml || args.kube,
        "certgen writes nothing: pass --pem, --yaml and/or --kube"
    );
    anyhow::ensure!(
        (1..=MAX_LIFETIME_DAYS).contains(&args.certificate_lifetime),
        "--certificate-lifetime must be from 1 to {MAX_LIFETIME_DAYS} days, not {}",
        args.certificate_lifetime
    );
    let generated = generate(&args.namespace, args.certificate_lifetime)?;
    let secrets = secrets(&generated, args);
    let dir = args.output_dir.as_ref().unwrap_or(&args.outputdir);
    if args.pem || args.yaml {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if args.pem {
        write_file(dir, "cacert.pem", &generated.ca, args.overwrite)?;
        write_file(
            dir,
            "contourcert.pem",
            &generated.contour.cert,
            args.overwrite,
        )?;
        write_file(
            dir,
            "contourkey.pem",
            &generated.contour.key,
            args.overwrite,
        )?;
        write_file(dir, "envoycert.pem", &generated.envoy.cert, args.overwrite)?;
        write_file(dir, "envoykey.pem", &generated.envoy.key, args.overwrite)?;
    }
    if args.yaml {
        for secret in &secrets {
            let name = secret["metadata"]["name"].as_str().unwrap_or("secret");
            let file = format!(
                "{}.yaml",
                name.trim_end_matches(&format!("-{}", args.secrets_name_suffix))
            );
            write_file(dir, &file, &serde_yaml::to_string(secret)?, args.overwrite)?;
        }
    }
    if args.kube {
        let kubeconfig = if args.incluster {
            None
        } else {
            args.kubeconfig.clone()
        };
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(write_secrets(kubeconfig.as_deref(), args, &secrets))?;
    }
    Ok(())
}

/// Creates the Secrets (replacing those that exist with `--overwrite`).
async fn write_secrets(
    kubeconfig: Option<&Path>,
    args: &CertgenArgs,
    secrets: &[Value],
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    let client = crate::provider::kube::client(kubeconfig).await?;
    let api: kube::Api<Secret> = kube::Api::namespaced(client, &args.namespace);
    for value in secrets {
        let secret: Secret = serde_json::from_value(value.clone())?;
        let name = secret.metadata.name.clone().unwrap_or_default();
        match api.create(&kube::api::PostParams::default(), &secret).await {
            Ok(_) => tracing::info!(%name, "Secret created"),
            Err(kube::Error::Api(e)) if e.code == 409 && args.overwrite => {
                api.replace(&name, &kube::api::PostParams::default(), &secret)
                    .await
                    .with_context(|| format!("replacing Secret {}/{name}", args.namespace))?;
                tracing::info!(%name, "Secret replaced");
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                anyhow::bail!(
                    "Secret {}/{name} exists (pass --overwrite to replace it)",
                    args.namespace
                )
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("creating Secret {}/{name}", args.namespace));
            }
        }
    }
    Ok(())
}
