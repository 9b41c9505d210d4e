//! xDS over mutual TLS as Contour's install runs it: `isobar certgen`, `isobar bootstrap`
//! with Envoy's certificate and a resources directory, `isobar serve` with Contour's
//! `--contour-*` flags, a real Envoy; a client without a certificate gets nothing, and a
//! rotation (certgen again) is taken by both sides without restarting Envoy.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

use crate::support::{ISOBAR, ServePorts, eventually, isobar, spawn, write};

const WAIT: Duration = Duration::from_secs(30);

fn proxy(body: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: mtls, namespace: default}}\nspec:\n  virtualhost: {{fqdn: mtls.example.com}}\n  routes: [{{directResponsePolicy: {{statusCode: 200, body: {body}}}}}]\n"
    )
}

fn certgen(dir: &Path, overwrite: bool) {
    let out = dir.display().to_string();
    let mut args = vec!["certgen", "--pem", "--output-dir", &out];
    if overwrite {
        args.push("--overwrite");
    }
    let (ok, _, err) = isobar(&args, &[]);
    assert!(ok, "certgen: {err}");
}

/// What the xDS server says first to a TLS client with `client` (certificate and key
/// files) or none: the bytes of its HTTP/2 settings, or the error it ends with.
async fn first_bytes(
    port: u16,
    certs: &Path,
    client: Option<(&str, &str)>,
) -> Result<usize, String> {
    let mut roots = RootCertStore::empty();
    let ca = std::fs::read(certs.join("cacert.pem")).map_err(|e| e.to_string())?;
    for cert in CertificateDer::pem_slice_iter(&ca) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(certs.join(cert))
                .map_err(|e| e.to_string())?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_file(certs.join(key)).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from("contour").map_err(|e| e.to_string())?;
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf)).await;
    match read {
        Ok(Ok(0)) => Err("closed".to_string()),
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer".to_string()),
    }
}

/// The first response `isobar cli KIND` prints, as Envoy's certificate holder (over
/// plain gRPC when `certs` is `None`); empty if none came.
async fn cli(port: u16, certs: Option<&Path>, kind: &[&str]) -> String {
    let mut tls = Vec::new();
    if let Some(certs) = certs {
        let file = |name: &str| certs.join(name).display().to_string();
        tls = vec![
            "--cafile".to_string(),
            file("cacert.pem"),
            "--cert-file".to_string(),
            file("envoycert.pem"),
            "--key-file".to_string(),
            file("envoykey.pem"),
        ];
    }
    let mut child = tokio::process::Command::new(ISOBAR)
        .arg("cli")
        .args(kind)
        .args(["--contour", &format!("127.0.0.1:{port}")])
        .args(tls)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("isobar cli: {e}"));
    let mut stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    // A response is a JSON document ending in a closing brace on its own line.
    let read = tokio::time::timeout(WAIT, async {
        loop {
            let n = stdout.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if out.ends_with(b"\n}\n") {
                break;
            }
        }
    })
    .await;
    let _ = child.kill().await;
    if read.is_err() {
        return String::new();
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn serve(dir: &Path, certs: &Path, ports: &ServePorts, log: &str) -> crate::support::Proc {
    let file = |name: &str| certs.join(name).display().to_string();
    spawn(
        "isobar",
        Command::new(ISOBAR)
            .args([
                "serve",
                "--manifests",
                &dir.join("manifests").display().to_string(),
                "--contour-cafile",
                &file("cacert.pem"),
                "--contour-cert-file",
                &file("contourcert.pem"),
                "--contour-key-file",
                &file("contourkey.pem"),
            ])
            .args(ports.args())
            .envs(ports.envs()),
        &dir.join(log),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_over_mutual_tls_with_certgen_bootstrap_and_rotation() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let certs = dir.path().join("certs");
    certgen(&certs, false);
    let (ok, _, err) = isobar(
        &[
            "certgen",
            "--pem",
            "--output-dir",
            &certs.display().to_string(),
        ],
        &[],
    );
    assert!(!ok && err.contains("exists (pass --overwrite"), "{err}");
    write(
        &dir.path().join("manifests"),
        "proxy.yaml",
        &proxy("before"),
    );
    let ports = ServePorts::free();
    let isobar_proc = serve(dir.path(), &certs, &ports, "isobar.log");

    // Envoy with its client certificate, through SDS files it watches.
    let bootstrap = dir.path().join("bootstrap.json");
    let file = |name: &str| certs.join(name).display().to_string();
    let (ok, _, err) = isobar(
        &[
            "bootstrap",
            &bootstrap.display().to_string(),
            "--xds-address",
            "127.0.0.1",
            "--xds-port",
            &ports.xds.to_string(),
            "--admin-address",
            &dir.path().join("admin.sock").display().to_string(),
            "--envoy-cafile",
            &file("cacert.pem"),
            "--envoy-cert-file",
            &file("envoycert.pem"),
            "--envoy-key-file",
            &file("envoykey.pem"),
            "--resources-dir",
            &dir.path().join("resources").display().to_string(),
        ],
        &[],
    );
    assert!(ok, "bootstrap: {err}");
    assert!(
        dir.path()
            .join("resources/sds/xds-tls-certificate.json")
            .exists()
    );
    let _envoy = spawn(
        "envoy",
        Command::new(crate::support::envoy_bin()).args([
            "-c",
            &bootstrap.display().to_string(),
            "--use-dynamic-base-id",
            "--log-level",
            "warn",
        ]),
        &dir.path().join("envoy.log"),
    );
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let answer = |want: &'static str| {
        let client = client.clone();
        let url = format!("http://127.0.0.1:{}/", ports.http);
        async move {
            eventually(WAIT, || async {
                let response = client
                    .get(&url)
                    .header("host", "mtls.example.com")
                    .send()
                    .await
                    .ok()?;
                let body = response.text().await.ok()?;
                (body == want).then_some(())
            })
            .await
            .is_some()
        }
    };
    let logs = |dir: &Path| {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        format!(
            "isobar:\n{}\nenvoy:\n{}",
            read("isobar.log"),
            read("envoy.log")
        )
    };
    assert!(
        answer("before").await,
        "Envoy never got its routes over mTLS\n{}",
        logs(dir.path())
    );

    // A client of the CA gets the server's HTTP/2 settings; one without a certificate
    // gets nothing.
    let with = first_bytes(ports.xds, &certs, Some(("envoycert.pem", "envoykey.pem"))).await;
    assert!(with.is_ok(), "{with:?}");
    let without = first_bytes(ports.xds, &certs, None).await;
    assert!(
        without.is_err(),
        "a client without a certificate was answered: {without:?}"
    );

    // Contour's debug client, over mutual TLS: the listeners as Envoy gets them.
    let lds = cli(ports.xds, Some(&certs), &["lds"]).await;
    assert!(lds.contains("\"name\": \"ingress_http\""), "{lds}");
    let rds = cli(ports.xds, Some(&certs), &["rds", "ingress_http"]).await;
    assert!(rds.contains("mtls.example.com"), "{rds}");
    // The same over incremental xDS: resources with their versions; there
    // `ingress_http` is a shell whose vhosts come over VHDS (`xds-server.vhds`).
    let delta = cli(ports.xds, Some(&certs), &["--delta", "rds", "ingress_http"]).await;
    assert!(
        delta.contains("\"vhds\"") && delta.contains("\"version\""),
        "{delta}"
    );
    // --nack refuses what it is sent: the server counts the refusal.
    let nacks = || async {
        let url = format!("http://127.0.0.1:{}/metrics", ports.metrics);
        reqwest::get(url)
            .await
            .ok()?
            .text()
            .await
            .ok()?
            .lines()
            .filter(|l| l.starts_with("isobar_xds_nacks_total"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .reduce(|a, b| a + b)
    };
    let before = nacks().await.unwrap_or(0);
    let file = |name: &str| certs.join(name).display().to_string();
    let _nacking = tokio::process::Command::new(ISOBAR)
        .args(["cli", "--nack", "cds", "--contour"])
        .arg(format!("127.0.0.1:{}", ports.xds))
        .env("CLI_CAFILE", file("cacert.pem"))
        .env("CLI_CERT_FILE", file("envoycert.pem"))
        .env("CLI_KEY_FILE", file("envoykey.pem"))
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("isobar cli: {e}"));
    let counted = eventually(WAIT, || async {
        (nacks().await.unwrap_or(0) > before).then_some(())
    })
    .await;
    assert!(counted.is_some(), "the NACK was not counted");

    // Rotation: a new CA and certificates. The running server takes them (a client of the
    // new CA is answered, none of the old is needed); Envoy takes its own without a
    // restart: after Isobar restarts on the new files, Envoy reconnects and follows an edit.
    let old = dir.path().join("old-certs");
    std::fs::create_dir_all(&old).unwrap_or_else(|e| panic!("{e}"));
    for f in ["cacert.pem", "envoycert.pem", "envoykey.pem"] {
        std::fs::copy(certs.join(f), old.join(f)).unwrap_or_else(|e| panic!("{e}"));
    }
    certgen(&certs, true);
    let rotated = eventually(WAIT, || async {
        first_bytes(ports.xds, &certs, Some(("envoycert.pem", "envoykey.pem")))
            .await
            .ok()
    })
    .await;
    assert!(
        rotated.is_some(),
        "the server never took the new certificate and CA\n{}",
        logs(dir.path())
    );
    let stale = first_bytes(ports.xds, &old, Some(("envoycert.pem", "envoykey.pem"))).await;
    assert!(
        stale.is_err(),
        "a client of the old CA is still answered: {stale:?}"
    );
    drop(isobar_proc);
    write(&dir.path().join("manifests"), "proxy.yaml", &proxy("after"));
    let _isobar2 = serve(dir.path(), &certs, &ports, "isobar-2.log");
    assert!(
        answer("after").await,
        "Envoy did not reconnect with its rotated certificate\n{}",
        logs(dir.path())
    );
}

/// `certgen --kube` writes Contour's Secrets through an API server: `contourcert` and
/// `envoycert` (`kubernetes.io/tls`; the CA in `cacert`, or with `--secrets-format
/// compact` as `ca.crt` of each), kept unless `--overwrite`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certgen_writes_its_secrets_through_the_api() {
    let api = crate::apiserver::ApiServer::start().await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = api.kubeconfig(dir.path());
    let run = |extra: &[&str]| {
        let mut args = vec![
            "certgen",
            "--kube",
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            "projectcontour",
        ];
        args.extend_from_slice(extra);
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        async move {
            tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                isobar(&args, &[])
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let (ok, _, err) = run(&[]).await;
    assert!(ok, "{err}");
    let secret = |name: &str| {
        api.get("v1", "Secret", "projectcontour", name)
            .unwrap_or_else(|| panic!("no Secret {name}"))
    };
    // Contour's default format, legacy: the CA in a Secret of its own.
    let first = secret("contourcert");
    assert_eq!(first["type"], "kubernetes.io/tls");
    for key in ["tls.crt", "tls.key"] {
        assert!(
            first["data"][key].as_str().is_some_and(|v| !v.is_empty()),
            "{key}: {first}"
        );
    }
    assert!(first["data"].get("ca.crt").is_none(), "{first}");
    assert!(secret("cacert")["data"]["cacert.pem"].is_string());
    let (ok, _, err) = run(&[]).await;
    assert!(!ok && err.contains("exists (pass --overwrite"), "{err}");
    assert_eq!(secret("contourcert")["data"], first["data"]);
    // Compact (what deploy/certgen.yaml asks for): each Secret carries `ca.crt`.
    let (ok, _, err) = run(&["--overwrite", "--secrets-format=compact"]).await;
    assert!(ok, "{err}");
    let compact = secret("contourcert");
    assert!(compact["data"]["ca.crt"].is_string(), "{compact}");
    assert_ne!(compact["data"]["tls.crt"], first["data"]["tls.crt"]);
    assert_eq!(
        secret("envoycert")["data"]["ca.crt"],
        compact["data"]["ca.crt"]
    );
}

/// `serve --contour-config-name`: Contour's ContourConfiguration read from the API is the
/// configuration (here: plain xDS, Envoy's HTTP port, a JSON access log, trusted hops).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_its_configuration_from_a_contourconfiguration() {
    let api = crate::apiserver::ApiServer::start().await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ports = ServePorts::free();
    api.put(&format!(
        r#"apiVersion: projectcontour.io/v1alpha1
kind: ContourConfiguration
metadata: {{name: contour, namespace: projectcontour}}
spec:
  xdsServer: {{address: 127.0.0.1, port: {xds}, tls: {{insecure: true}}}}
  envoy:
    http: {{address: 127.0.0.1, port: 18765}}
    logging: {{accessLogFormat: json}}
    network: {{numTrustedHops: 2}}
"#,
        xds = ports.xds
    ));
    api.put(&proxy("from-crd"));
    for document in crate::support::service_yaml("default", "web", 18080).split("\n---\n") {
        api.put(document);
    }
    let _isobar = spawn(
        "isobar",
        Command::new(ISOBAR).args([
            "serve",
            "--kubeconfig",
            &api.kubeconfig(dir.path()),
            "--contour-config-name",
            "contour",
            "--http-port",
            &ports.metrics.to_string(),
            "--health-port",
            &ports.health.to_string(),
            "--debug-http-port",
            &ports.debug.to_string(),
        ]),
        &dir.path().join("isobar.log"),
    );
    let lds = eventually(WAIT, || async {
        let text = tokio::time::timeout(Duration::from_secs(5), cli(ports.xds, None, &["lds"]))
            .await
            .ok()?;
        text.contains("18765").then_some(text)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "no ingress_http on the port of the ContourConfiguration\n{}",
            std::fs::read_to_string(dir.path().join("isobar.log")).unwrap_or_default()
        )
    });
    assert!(lds.contains("\"json_format\""), "{lds}");
    assert!(lds.contains("\"xff_num_trusted_hops\": 2"), "{lds}");
}
