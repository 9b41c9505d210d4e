//! Secrets checked before anything in them reaches Envoy.
//!
//! Envoy rejects a listener whose certificate it cannot load, and a rejected listener
//! blocks every later update (a NACK). So a Secret is parsed here the way Envoy will:
//! PEM blocks of the right type that decode, a first certificate naming a host, exactly
//! one unencrypted RSA (≥ 2048 bits) or ECDSA private key, and — what Contour misses —
//! the key matching the certificate. What Envoy is sent is re-encoded from the decoded
//! blocks, so text around the PEM never reaches it.
//!
//! Secret material never appears in messages, logs or `Debug` output: only names and
//! SHA-256 fingerprints. A certificate's chain and key are kept once, in the form the
//! host serves them in (see [`CertificateForm`]).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};
use x509_parser::prelude::{FromDer, X509Certificate};

mod certs;

pub use certs::{ca_bundle_of, fingerprint};
use certs::{
    certificates_bundle, crl_bundle, parse_certificate, pem_blocks, secret_data, tls_certificate,
};

pub const TLS_CERT_KEY: &str = "tls.crt";
pub const TLS_PRIVATE_KEY: &str = "tls.key";
pub const CA_KEY: &str = "ca.crt";
pub const CRL_KEY: &str = "crl.pem";
/// The data keys Isobar reads as certificates, CA bundles and CRLs; of a
/// `kubernetes.io/tls` Secret a provider may drop the others on arrival.
pub const READ_KEYS: [&str; 4] = [TLS_CERT_KEY, TLS_PRIVATE_KEY, CA_KEY, CRL_KEY];

const TYPE_TLS: &str = "kubernetes.io/tls";
const TYPE_OPAQUE: &str = "Opaque";

/// A certificate chain and its private key, checked to load in Envoy.
#[derive(Clone)]
pub struct TlsCertificate {
    /// The bytes the certificate is kept in: the [`CertificateForm`] the host
    /// registered, holding the chain and key at `chain` and `key`.
    kept: Arc<[u8]>,
    chain: Range<usize>,
    key: Range<usize>,
    /// SHA-256 of the leaf certificate's DER, hex.
    pub fingerprint: String,
    /// The leaf's DNS names and IP addresses (SAN), or its CN when it has none.
    pub names: Vec<String>,
}

/// How the host keeps checked certificates. The chain and key of a certificate are the
/// largest thing Isobar holds per TLS vhost; kept once, in the form they are served in
/// (Isobar's xds registers Envoy's SDS `Secret`), every snapshot serving the
/// certificate shares that one copy. The SDK knows nothing of the form beyond where in
/// it the chain and key are. Registered with `inventory`, once per binary; without one
/// (the SDK's own tests) the chain and key are kept one after the other.
pub struct CertificateForm {
    /// The bytes to keep for the certificate of SDS name `sds_name` with this chain
    /// and key (PEM), and where in them the chain and the key are.
    pub keep: fn(sds_name: &str, chain_pem: &str, key_pem: &str) -> Kept,
}

inventory::collect!(CertificateForm);

/// A certificate in the form the host keeps it.
pub struct Kept {
    pub bytes: Arc<[u8]>,
    pub chain: Range<usize>,
    pub key: Range<usize>,
}

fn keep(sds_name: &str, chain_pem: &str, key_pem: &str) -> Kept {
    if let Some(form) = inventory::iter::<CertificateForm>.into_iter().next() {
        return (form.keep)(sds_name, chain_pem, key_pem);
    }
    let bytes: Arc<[u8]> = [chain_pem.as_bytes(), key_pem.as_bytes()].concat().into();
    Kept {
        bytes,
        chain: 0..chain_pem.len(),
        key: chain_pem.len()..chain_pem.len() + key_pem.len(),
    }
}

impl TlsCertificate {
    /// The bytes the certificate is kept in (see [`CertificateForm`]).
    pub fn kept(&self) -> &Arc<[u8]> {
        &self.kept
    }

    /// The chain (leaf first) as PEM, re-encoded from the decoded blocks.
    pub fn chain_pem(&self) -> &str {
        self.text(&self.chain)
    }

    /// The private key as PEM, re-encoded from the decoded block.
    pub fn key_pem(&self) -> &str {
        self.text(&self.key)
    }

    fn text(&self, at: &Range<usize>) -> &str {
        let bytes = self.kept.get(at.clone()).unwrap_or_default();
        std::str::from_utf8(bytes).unwrap_or_default()
    }
}

/// Equal when they hold the same certificate, whatever form they are kept in.
impl PartialEq for TlsCertificate {
    fn eq(&self, other: &TlsCertificate) -> bool {
        self.fingerprint == other.fingerprint
            && self.names == other.names
            && self.chain_pem() == other.chain_pem()
            && self.key_pem() == other.key_pem()
    }
}

impl Eq for TlsCertificate {}

impl std::fmt::Debug for TlsCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsCertificate")
            .field("fingerprint", &self.fingerprint)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

/// Certificates (a CA bundle) and, optionally, revocation lists; public material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemBundle {
    pub pem: String,
    /// SHA-256 of the concatenated DER blocks, hex.
    pub fingerprint: String,
}

/// Whether a secret can serve as a certificate, a CA bundle, a CRL or a JWKS; computed
/// once per stored version of the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretCheck {
    /// Shared with every build that serves it (a build's IR holds the same copy).
    pub certificate: Result<std::sync::Arc<TlsCertificate>, String>,
    pub ca: Result<PemBundle, String>,
    pub crl: Result<PemBundle, String>,
    /// Of an `Opaque` Secret, each data key other than [`READ_KEYS`] read as a JWKS (a
    /// JWT provider's `localJWKS` names the key); `Err` for a Secret of another type.
    pub jwks: Result<BTreeMap<String, Result<Arc<str>, String>>, String>,
}

/// A data value other than [`READ_KEYS`] as the store keeps it: whole when it may be a
/// JWKS (a JSON object) or is empty, else only the fact that it is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OtherValue {
    Text(Vec<u8>),
    NotAnObject,
}

impl OtherValue {
    /// What of `value` is kept.
    pub fn of(value: &[u8]) -> OtherValue {
        if value.is_empty() || value.trim_ascii_start().starts_with(b"{") {
            OtherValue::Text(value.to_vec())
        } else {
            OtherValue::NotAnObject
        }
    }
}

/// A JWKS (RFC 7517) as Contour's main checks one — a JSON object with a `keys` array —
/// re-encoded compactly, so nothing around the JSON reaches Envoy.
fn jwks_of(value: &OtherValue) -> Result<Arc<str>, String> {
    let text = match value {
        OtherValue::NotAnObject => return Err("JWKS must be a JSON object".to_string()),
        OtherValue::Text(text) => text,
    };
    let parsed: serde_json::Value =
        serde_json::from_slice(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let Some(object) = parsed.as_object() else {
        return Err("JWKS must be a JSON object".to_string());
    };
    match object.get("keys") {
        Some(serde_json::Value::Array(_)) => Ok(parsed.to_string().into()),
        Some(_) => Err("JWKS \"keys\" must be an array".to_string()),
        None => Err("JWKS must contain a \"keys\" array".to_string()),
    }
}

impl SecretCheck {
    /// The JWKS under data key `key` (a JWT provider's `localJWKS`).
    pub fn jwks(&self, key: &str) -> Result<Arc<str>, String> {
        let keys = self.jwks.as_ref().map_err(Clone::clone)?;
        match keys.get(key) {
            Some(found) => found.clone(),
            None => Err(format!("missing {key:?} key or empty value")),
        }
    }
}

impl SecretCheck {
    pub fn of(secret: &Secret) -> SecretCheck {
        let namespace = secret.metadata.namespace.as_deref().unwrap_or("default");
        let name = secret.metadata.name.as_deref().unwrap_or_default();
        let data = secret_data(secret);
        let other = data
            .iter()
            .filter(|(key, _)| !READ_KEYS.contains(&key.as_str()))
            .map(|(key, value)| (key.clone(), OtherValue::of(value)))
            .collect();
        SecretCheck::of_data(
            &sds_name(namespace, name),
            secret.type_.as_deref(),
            &data,
            &other,
        )
    }

    /// The check of a Secret of type `type_` (`None`: unset) with `data` (`data` merged
    /// with `stringData`; of it [`READ_KEYS`] are read) and `other` (its other keys, as
    /// kept), whose certificate is served under the SDS name `sds_name` (see
    /// [`sds_name`]).
    pub fn of_data(
        sds_name: &str,
        type_: Option<&str>,
        data: &BTreeMap<String, Vec<u8>>,
        other: &BTreeMap<String, OtherValue>,
    ) -> SecretCheck {
        // The API server writes a Secret without a type as `Opaque`.
        let jwks = match type_ {
            Some(TYPE_OPAQUE) | None => Ok(other
                .iter()
                .filter(|(_, value)| **value != OtherValue::Text(Vec::new()))
                .map(|(key, value)| (key.clone(), jwks_of(value)))
                .collect()),
            Some(_) => Err(format!("secret type is not {TYPE_OPAQUE:?}")),
        };
        let type_ok = match type_ {
            Some(TYPE_TLS) | Some(TYPE_OPAQUE) | None => Ok(()),
            Some(other) => Err(format!(
                "secret type is \"{other}\", not \"{TYPE_TLS}\" or \"{TYPE_OPAQUE}\""
            )),
        };
        SecretCheck {
            certificate: type_ok
                .clone()
                .and_then(|()| tls_certificate(sds_name, type_, data))
                .map(std::sync::Arc::new),
            ca: type_ok
                .clone()
                .and_then(|()| certificates_bundle(data, CA_KEY)),
            crl: type_ok.and_then(|()| crl_bundle(data)),
            jwks,
        }
    }
}

/// What Envoy refuses of a TLS certificate it is sent (a certificate chain that does not
/// parse, a private key that does not match the first certificate), checked as narrowly
/// as Envoy checks it: a key Isobar cannot read is left to Envoy (`Ok`).
pub fn check_key_pair(chain: &[u8], key: &[u8]) -> Result<(), String> {
    let data = BTreeMap::from([
        (TLS_CERT_KEY.to_string(), chain.to_vec()),
        (TLS_PRIVATE_KEY.to_string(), key.to_vec()),
    ]);
    certificates_bundle(&data, TLS_CERT_KEY)
        .map_err(|e| format!("failed to load certificate chain: {e}"))?;
    let blocks = pem_blocks(&data, TLS_CERT_KEY)?;
    let leaf = parse_certificate(TLS_CERT_KEY, 0, blocks[0].contents())?;
    let keys = pem::parse_many(key).unwrap_or_default();
    let Some(block) = keys.iter().find(|b| b.tag().ends_with("PRIVATE KEY")) else {
        return Err("failed to load private key: no PEM private key".to_string());
    };
    let der = block.contents().to_vec();
    let key = match block.tag() {
        "PRIVATE KEY" => PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der)),
        "RSA PRIVATE KEY" => PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(der)),
        "EC PRIVATE KEY" => PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(der)),
        _ => return Ok(()),
    };
    let Ok(signing) = rustls::crypto::ring::sign::any_supported_type(&key) else {
        return Ok(());
    };
    match signing.public_key() {
        Some(spki) if spki.as_ref() != leaf.public_key().raw => Err(
            "failed to load private key: it does not match the first certificate of the chain"
                .to_string(),
        ),
        _ => Ok(()),
    }
}

/// Whether PEM text holds at least one certificate that parses (what Envoy needs of a
/// trusted CA bundle).
pub fn has_certificate(text: &[u8]) -> bool {
    pem::parse_many(text)
        .unwrap_or_default()
        .iter()
        .any(|b| b.tag() == "CERTIFICATE" && X509Certificate::from_der(b.contents()).is_ok())
}

/// A secret reference as objects write it: `name` (the object's own namespace) or
/// `namespace/name`.
pub fn split_reference<'a>(
    reference: &'a str,
    own_namespace: &'a str,
) -> Option<(&'a str, &'a str)> {
    match reference.split_once('/') {
        None if !reference.is_empty() => Some((own_namespace, reference)),
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Some((ns, name))
        }
        _ => None,
    }
}

/// The SDS name of a secret: `namespace/name/<10 hex>`, the hash of the secret's identity
/// rather than (as Contour) of its certificate, so a rotation keeps the name and reaches
/// Envoy over SDS alone, without a listener update.
pub fn sds_name(namespace: &str, name: &str) -> String {
    let digest = fingerprint(format!("{namespace}/{name}").as_bytes());
    crate::names::hashname(60, &[namespace, name, &digest[..10]])
}

#[cfg(test)]
mod tests;
