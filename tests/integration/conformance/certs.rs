//! The certificates the suite makes at set-up, made here with rcgen: Secrets and CA
//! ConfigMaps of the same names and uses. Server certificates are signed by CAs the
//! tests' clients trust (the suite trusts its leaves themselves, which rustls does not
//! allow) and name the hosts the tests connect to.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use tokio_rustls::rustls::{self, pki_types};

/// A certificate with its key.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: pki_types::CertificateDer<'static>,
}

impl Leaf {
    /// A `kubernetes.io/tls` Secret holding it.
    pub fn secret(&self, namespace: &str, name: &str) -> String {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {namespace}}}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n",
            b64(&self.cert_pem),
            b64(&self.key_pem)
        )
    }

    /// A rustls server configuration serving it (ALPN h2 and http/1.1).
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        use pki_types::pem::PemObject;
        let key = pki_types::PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|e| panic!("{e}"))
        .with_client_cert_verifier(Arc::new(AnyClientCert))
        .with_single_cert(vec![self.der.clone()], key)
        .unwrap_or_else(|e| panic!("{e}"));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// A CA: its certificate (for a ConfigMap's `ca.crt`) and what it signs with.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        params.distinguished_name.push(DnType::CommonName, name);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Kubernetes Gateway API");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::CrlSign,
        ];
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).unwrap_or_else(|e| panic!("{e}")),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    pub fn der(&self) -> pki_types::CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A ConfigMap holding it as `ca.crt`.
    pub fn config_map(&self, namespace: &str, name: &str) -> String {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {namespace}}}\ndata:\n  ca.crt: |\n{}",
            self.pem()
                .lines()
                .map(|l| format!("    {l}\n"))
                .collect::<String>()
        )
    }

    /// A server certificate for `hosts` (DNS names, or URIs with `://`).
    pub fn server(&self, hosts: &[&str]) -> Leaf {
        self.leaf(hosts, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate (no names).
    pub fn client(&self) -> Leaf {
        self.leaf(&[], ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn leaf(&self, hosts: &[&str], usage: ExtendedKeyUsagePurpose) -> Leaf {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        params
            .distinguished_name
            .push(DnType::CommonName, "default");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Acme Co");
        params.subject_alt_names = hosts
            .iter()
            .map(|h| {
                if h.contains("://") {
                    SanType::URI(h.to_string().try_into().unwrap_or_else(|e| panic!("{e}")))
                } else {
                    SanType::DnsName(h.to_string().try_into().unwrap_or_else(|e| panic!("{e}")))
                }
            })
            .collect();
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let cert = params
            .signed_by(&key, &self.issuer)
            .unwrap_or_else(|e| panic!("{e}"));
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }
}

/// Every certificate of the suite's set-up.
pub struct Certs {
    /// Signs the HTTPS listeners' certificate (`tls-validity-checks-certificate`) and
    /// `web/certificate`: what the tests' clients trust.
    pub validity: Ca,
    pub validity_cert: Leaf,
    pub web_cert: Leaf,
    /// `web/web-backend-cm`.
    pub web_backend: Ca,
    /// `tls-validity-checks-ca-certificate` and its client.
    pub frontend: Ca,
    pub frontend_client: Leaf,
    /// `tls-validity-checks-per-port-ca-certificate` and its client.
    pub per_port: Ca,
    pub per_port_client: Leaf,
    /// `tls-checks-ca-certificate`: the backends' CA, its server and client certificates.
    pub checks: Ca,
    pub checks_cert: Leaf,
    pub checks_client: Leaf,
    pub passthrough_infra: Leaf,
    pub passthrough_app: Leaf,
    pub terminate: Leaf,
    /// `mismatch-ca-certificate`: a CA that signed nothing.
    pub mismatch: Ca,
}

impl Certs {
    pub fn new() -> Certs {
        let validity = Ca::new("gatewayapi validity");
        let checks = Ca::new("gatewayapi checks");
        let frontend = Ca::new("gatewayapi frontend");
        let per_port = Ca::new("gatewayapi per port");
        Certs {
            validity_cert: validity.server(&[
                "example.org",
                "first-example.org",
                "second-example.org",
                "fourth-example.org",
                "unknown-example.org",
                "*.wildcard.org",
                "https-listener.org",
            ]),
            web_cert: validity.server(&["web.example.org"]),
            validity,
            web_backend: Ca::new("gatewayapi web"),
            frontend_client: frontend.client(),
            frontend,
            per_port_client: per_port.client(),
            per_port,
            checks_cert: checks.server(&[
                "abc.example.com",
                "other.example.com",
                "spiffe://abc.example.com/test-identity",
            ]),
            checks_client: checks.client(),
            passthrough_infra: checks.server(&["abc.example.com"]),
            passthrough_app: checks.server(&["abc.example.com"]),
            terminate: checks.server(&["tls.example.com"]),
            checks,
            mismatch: Ca::new("gatewayapi mismatch"),
        }
    }

    /// The Secrets and ConfigMaps of the set-up.
    pub fn objects(&self) -> Vec<String> {
        use crate::conformance::suite::{APP, INFRA, WEB};
        vec![
            self.web_cert.secret(WEB, "certificate"),
            self.validity_cert
                .secret(INFRA, "tls-validity-checks-certificate"),
            self.web_backend.config_map(WEB, "web-backend-cm"),
            self.frontend
                .config_map(INFRA, "tls-validity-checks-ca-certificate"),
            self.frontend_client
                .secret(INFRA, "tls-validity-checks-client-certificate"),
            self.per_port
                .config_map(INFRA, "tls-validity-checks-per-port-ca-certificate"),
            self.per_port_client
                .secret(INFRA, "tls-validity-checks-per-port-client-certificate"),
            self.checks.config_map(INFRA, "tls-checks-ca-certificate"),
            self.checks_cert.secret(INFRA, "tls-checks-certificate"),
            self.checks_client
                .secret(INFRA, "tls-checks-client-certificate"),
            self.passthrough_infra
                .secret(INFRA, "tls-passthrough-checks-certificate"),
            self.passthrough_app
                .secret(APP, "tls-passthrough-checks-certificate"),
            self.terminate
                .secret(INFRA, "tls-terminate-checks-certificate"),
            self.mismatch.config_map(INFRA, "mismatch-ca-certificate"),
        ]
    }
}

/// A backend's client certificate check: any certificate is taken (it is reported, not
/// judged), and none is needed.
#[derive(Debug)]
struct AnyClientCert;

impl rustls::server::danger::ClientCertVerifier for AnyClientCert {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn verify_client_cert(
        &self,
        _end_entity: &pki_types::CertificateDer<'_>,
        _intermediates: &[pki_types::CertificateDer<'_>],
        _now: pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
