//! Contour's `tls` section: protocol versions, cipher suites, curves, fingerprints and
//! the certificates Envoy presents.

use serde::{Deserialize, Deserializer, Serialize};

/// Contour's `tls` section: bounds and parameters of every TLS vhost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct TlsConfig {
    /// `"1.2"` or `"1.3"`; a vhost may ask for more, never for less.
    pub minimum_protocol_version: String,
    /// `"1.2"` or `"1.3"`; a vhost may ask for less, never for more.
    pub maximum_protocol_version: String,
    /// TLS 1.2 cipher suites, BoringSSL names; `[A|B]` is an equal-preference group.
    pub cipher_suites: Vec<String>,
    /// Key exchange groups; empty: Envoy's defaults.
    pub ecdh_curves: Vec<String>,
    /// JA3/JA4 fingerprints of TLS clients, computed by the HTTPS listeners' TLS
    /// inspector (`%TLS_JA3_FINGERPRINT%`, `%TLS_JA4_FINGERPRINT%`; Contour's main).
    pub fingerprint: Fingerprint,
    /// The secret Envoy presents to upstreams spoken to over TLS; empty name: none.
    #[serde(deserialize_with = "null_as_default")]
    pub envoy_client_certificate: NamespacedName,
    /// The certificate for clients without SNI, on vhosts that enable it; empty: none.
    #[serde(deserialize_with = "null_as_default")]
    pub fallback_certificate: NamespacedName,
}

/// TLS 1.2 cipher suites by BoringSSL name, `[A|B]` an equal-preference group: an
/// unknown name is an error naming `key` and the index.
pub(super) fn check_ciphers(key: &str, suites: &[String]) -> Result<(), String> {
    for (i, suite) in suites.iter().enumerate() {
        let inner = suite
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .unwrap_or(suite);
        for name in inner.split('|') {
            if !KNOWN_CIPHERS.contains(&name) {
                return Err(format!(
                    "{key}[{i}]: unknown cipher suite {name:?}; valid: {}",
                    KNOWN_CIPHERS.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// A key written with no value (`fallback-certificate:`, as Contour's example has it)
/// reads as its default.
fn null_as_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A secret named by namespace and name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct NamespacedName {
    pub name: String,
    pub namespace: String,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            minimum_protocol_version: "1.2".to_string(),
            maximum_protocol_version: "1.3".to_string(),
            cipher_suites: [
                "[ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305]",
                "[ECDHE-RSA-AES128-GCM-SHA256|ECDHE-RSA-CHACHA20-POLY1305]",
                "ECDHE-ECDSA-AES256-GCM-SHA384",
                "ECDHE-RSA-AES256-GCM-SHA384",
            ]
            .map(str::to_string)
            .to_vec(),
            ecdh_curves: Vec::new(),
            fingerprint: Fingerprint::default(),
            envoy_client_certificate: NamespacedName::default(),
            fallback_certificate: NamespacedName::default(),
        }
    }
}

/// Cipher suites Envoy (BoringSSL) accepts by name for TLS 1.2.
const KNOWN_CIPHERS: &[&str] = &[
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
    "ECDHE-PSK-CHACHA20-POLY1305",
    "ECDHE-ECDSA-AES128-SHA",
    "ECDHE-RSA-AES128-SHA",
    "ECDHE-PSK-AES128-CBC-SHA",
    "ECDHE-ECDSA-AES256-SHA",
    "ECDHE-RSA-AES256-SHA",
    "ECDHE-PSK-AES256-CBC-SHA",
    "AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "AES128-SHA",
    "AES256-SHA",
    "PSK-AES128-CBC-SHA",
    "PSK-AES256-CBC-SHA",
    "DES-CBC3-SHA",
];

const KNOWN_CURVES: &[&str] = &[
    "X25519",
    "P-256",
    "P-384",
    "P-521",
    "X25519MLKEM768",
    "MLKEM1024",
];

/// `tls.fingerprint`: which TLS client fingerprints the TLS inspector computes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Fingerprint {
    pub ja3: bool,
    pub ja4: bool,
}

/// Key exchange groups Envoy knows, by name; the error names `key` and the index.
pub fn check_curves(key: &str, curves: &[String]) -> Result<(), String> {
    for (i, curve) in curves.iter().enumerate() {
        if !KNOWN_CURVES.contains(&curve.as_str()) {
            return Err(format!(
                "{key}[{i}]: unknown curve {curve:?}; valid: {}",
                KNOWN_CURVES.join(", ")
            ));
        }
    }
    Ok(())
}

impl TlsConfig {
    /// Settings Envoy would reject are refused at start-up, never sent.
    pub(super) fn validate(&self) -> Result<(), String> {
        for (key, value) in [
            (
                "tls.minimum-protocol-version",
                &self.minimum_protocol_version,
            ),
            (
                "tls.maximum-protocol-version",
                &self.maximum_protocol_version,
            ),
        ] {
            if isobar_sdk::ir::TlsVersion::parse(value).is_none() {
                return Err(format!("{key}: {value:?} is not \"1.2\" or \"1.3\""));
            }
        }
        if self.min_version() > self.max_version() {
            return Err(format!(
                "tls: minimum-protocol-version {:?} is above maximum-protocol-version {:?}",
                self.minimum_protocol_version, self.maximum_protocol_version
            ));
        }
        check_ciphers("tls.cipher-suites", &self.cipher_suites)?;
        for (key, secret) in [
            (
                "tls.envoy-client-certificate",
                &self.envoy_client_certificate,
            ),
            ("tls.fallback-certificate", &self.fallback_certificate),
        ] {
            if secret.name.is_empty() != secret.namespace.is_empty() {
                return Err(format!("{key}: set both name and namespace, or neither"));
            }
        }
        check_curves("tls.ecdh-curves", &self.ecdh_curves)
    }

    /// `fallback-certificate` as (namespace, name), when set.
    pub fn fallback(&self) -> Option<(String, String)> {
        let f = &self.fallback_certificate;
        (!f.name.is_empty()).then(|| (f.namespace.clone(), f.name.clone()))
    }

    pub fn min_version(&self) -> isobar_sdk::ir::TlsVersion {
        isobar_sdk::ir::TlsVersion::parse(&self.minimum_protocol_version)
            .unwrap_or(isobar_sdk::ir::TlsVersion::V1_2)
    }

    pub fn max_version(&self) -> isobar_sdk::ir::TlsVersion {
        isobar_sdk::ir::TlsVersion::parse(&self.maximum_protocol_version)
            .unwrap_or(isobar_sdk::ir::TlsVersion::V1_3)
    }
}
