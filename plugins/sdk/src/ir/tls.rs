//! The TLS side of the IR: vhosts served by SNI on an HTTPS listener, how TLS is
//! terminated for them, and the certificates Envoy gets over SDS.

use std::collections::BTreeMap;

use serde::Serialize;

use super::VirtualHost;
use super::WeightedCluster;
use crate::object::ObjectKey;

/// A vhost on the HTTPS listener: TLS terminated with a certificate, or passed through.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SecureVirtualHost {
    pub fqdn: String,
    /// `None`: TLS passthrough; Envoy only reads the SNI and forwards the bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<DownstreamTls>,
    /// TCP forwarding instead of HTTP routing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_proxy: Option<TcpProxy>,
    /// The HTTP routes and vhost policies (unused with `tcp_proxy`).
    pub http: VirtualHost,
    /// Other hosts routed on this filter chain, by domain (a Gateway HTTPS listener's
    /// route hosts besides its own hostname): virtual hosts of its RouteConfiguration
    /// beside `http`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, VirtualHost>,
    /// Which requests the chain answers 421 (Misdirected Request): a Host that another
    /// filter chain of the listener serves.
    #[serde(skip_serializing_if = "Misdirected::is_default")]
    pub misdirected: Misdirected,
    /// Also served to clients without SNI, with the fallback certificate.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fallback: bool,
}

/// The requests a filter chain answers 421, because their Host is not one it serves but
/// one another chain (chosen by another SNI) does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Misdirected {
    /// These domains (exact, or `*.suffix`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<String>,
    /// Every Host none of the chain's virtual hosts serves. Without it such a request
    /// answers 404.
    pub rest: bool,
    /// The Host must be the SNI name itself (as Contour has it): on a wildcard vhost's
    /// chain, another name the wildcard covers answers 421 too.
    pub host_is_sni: bool,
}

impl Default for Misdirected {
    /// A chain serving one host: any other Host is another chain's.
    fn default() -> Self {
        Misdirected {
            domains: Vec::new(),
            rest: true,
            host_is_sni: true,
        }
    }
}

impl Misdirected {
    pub fn is_default(&self) -> bool {
        *self == Misdirected::default()
    }
}

impl SecureVirtualHost {
    /// The clusters this vhost sends to: its routes' (of every host), or its TCP
    /// proxy's.
    pub fn cluster_names(&self) -> impl Iterator<Item = &str> {
        let hosts = self.hosts.values().flat_map(VirtualHost::cluster_names);
        self.http.cluster_names().chain(hosts).chain(
            self.tcp_proxy
                .iter()
                .flat_map(|t| t.clusters.iter().map(|c| c.cluster.as_str())),
        )
    }

    /// Its HTTP virtual hosts: its own, then the other hosts'.
    pub fn http_hosts(&self) -> impl Iterator<Item = &VirtualHost> {
        std::iter::once(&self.http).chain(self.hosts.values())
    }

    pub fn new(fqdn: &str, tls: Option<DownstreamTls>) -> SecureVirtualHost {
        SecureVirtualHost {
            fqdn: fqdn.to_string(),
            tls,
            tcp_proxy: None,
            http: VirtualHost::new(fqdn),
            hosts: BTreeMap::new(),
            misdirected: Misdirected::default(),
            fallback: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum TlsVersion {
    #[serde(rename = "1.2")]
    V1_2,
    #[serde(rename = "1.3")]
    V1_3,
}

impl TlsVersion {
    /// `"1.2"` or `"1.3"`; anything else is `None`.
    pub fn parse(s: &str) -> Option<TlsVersion> {
        match s.trim() {
            "1.2" => Some(TlsVersion::V1_2),
            "1.3" => Some(TlsVersion::V1_3),
            _ => None,
        }
    }
}

/// How the HTTPS listener terminates TLS for one vhost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DownstreamTls {
    /// The SDS name of the certificate (a key of `Ir::secrets`).
    pub secret: String,
    /// Versions the vhost asks for; the global settings bound them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_version: Option<TlsVersion>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_version: Option<TlsVersion>,
    /// HTTP/2 and HTTP/1.1 are offered over ALPN (not for TCP proxying).
    pub alpn_http: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_validation: Option<Box<ClientValidation>>,
}

/// Downstream client certificates (mTLS).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientValidation {
    /// Trusted CAs; `None` only when verification is skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PemBundle>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crl: Option<PemBundle>,
    pub crl_only_verify_leaf: bool,
    /// Ask for a certificate but accept any (or none, with `optional`).
    pub skip_verification: bool,
    /// Accept clients without a certificate.
    pub optional: bool,
    /// Parts of the client certificate forwarded in `X-Forwarded-Client-Cert`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward: Option<ForwardClientCertificate>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ForwardClientCertificate {
    pub subject: bool,
    pub cert: bool,
    pub chain: bool,
    pub dns: bool,
    pub uri: bool,
}

/// Public PEM (CA certificates, CRLs); serialized as its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemBundle {
    pub pem: String,
    pub fingerprint: String,
}

impl Serialize for PemBundle {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("sha256:{}", self.fingerprint))
    }
}

impl From<crate::secret::PemBundle> for PemBundle {
    fn from(b: crate::secret::PemBundle) -> PemBundle {
        PemBundle {
            pem: b.pem,
            fingerprint: b.fingerprint,
        }
    }
}

/// TCP forwarding: of a secure vhost, or of a whole TCP listener.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TcpProxy {
    pub clusters: Vec<WeightedCluster>,
    pub source: ObjectKey,
}

/// A certificate and key Envoy gets over SDS.
#[derive(Clone, PartialEq, Eq)]
pub struct ServedSecret {
    pub namespace: String,
    pub name: String,
    pub certificate: std::sync::Arc<crate::secret::TlsCertificate>,
}

impl std::fmt::Debug for ServedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedSecret")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("certificate", &self.certificate)
            .finish()
    }
}

impl Serialize for ServedSecret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("ServedSecret", 4)?;
        st.serialize_field("namespace", &self.namespace)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field(
            "fingerprint",
            &format!("sha256:{}", self.certificate.fingerprint),
        )?;
        st.serialize_field("names", &self.certificate.names)?;
        st.end()
    }
}
