//! A Secret's PEM blocks read and checked: certificates, keys, CA bundles, CRLs, and
//! the names a certificate is for.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use rustls::SignatureAlgorithm;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};
use sha2::{Digest, Sha256};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
use x509_parser::revocation_list::CertificateRevocationList;

use super::*;

pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// SHA-256 of `bytes`, hex.
pub fn fingerprint(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `data` merged with `stringData` (as the API server does on write; manifests on disk
/// may carry either).
pub(super) fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in secret.string_data.iter().flatten() {
        out.insert(k.clone(), v.as_bytes().to_vec());
    }
    out
}

pub(super) fn pem_blocks(
    data: &BTreeMap<String, Vec<u8>>,
    key: &str,
) -> Result<Vec<pem::Pem>, String> {
    let raw = data
        .get(key)
        .filter(|v| !v.iter().all(u8::is_ascii_whitespace))
        .ok_or_else(|| format!("missing or empty \"{key}\""))?;
    let blocks = pem::parse_many(raw).map_err(|e| format!("\"{key}\" is not valid PEM: {e}"))?;
    if blocks.is_empty() {
        let begins = raw.windows(10).any(|w| w == b"-----BEGIN");
        return Err(if begins {
            format!("\"{key}\" holds a truncated or malformed PEM block")
        } else {
            format!("\"{key}\" holds no PEM block")
        });
    }
    Ok(blocks)
}

pub(super) fn encode(tag: &str, der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new(tag, der.to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

pub(super) fn parse_certificate<'a>(
    key: &str,
    index: usize,
    der: &'a [u8],
) -> Result<X509Certificate<'a>, String> {
    match X509Certificate::from_der(der) {
        Ok(([], cert)) => Ok(cert),
        Ok(_) => Err(format!(
            "\"{key}\" certificate {index}: trailing data after the certificate"
        )),
        Err(e) => Err(format!("\"{key}\" certificate {index} does not parse: {e}")),
    }
}

/// The CA bundle PEM text `text` holds (under the key `key`, as errors name it): every
/// block a certificate, at least one, each decodes.
pub fn ca_bundle_of(key: &str, text: &str) -> Result<PemBundle, String> {
    certificates_bundle(
        &BTreeMap::from([(key.to_string(), text.as_bytes().to_vec())]),
        key,
    )
}

/// Every block a certificate; at least one; each decodes.
pub(super) fn certificates_bundle(
    data: &BTreeMap<String, Vec<u8>>,
    key: &str,
) -> Result<PemBundle, String> {
    let blocks = pem_blocks(data, key)?;
    let mut pem = String::new();
    let mut all = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        if block.tag() != "CERTIFICATE" {
            return Err(format!(
                "\"{key}\" block {index} is a \"{}\", not a CERTIFICATE",
                block.tag()
            ));
        }
        parse_certificate(key, index, block.contents())?;
        pem.push_str(&encode("CERTIFICATE", block.contents()));
        all.extend_from_slice(block.contents());
    }
    Ok(PemBundle {
        pem,
        fingerprint: fingerprint(&all),
    })
}

pub(super) fn crl_bundle(data: &BTreeMap<String, Vec<u8>>) -> Result<PemBundle, String> {
    let blocks = pem_blocks(data, CRL_KEY)?;
    let mut pem = String::new();
    let mut all = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        if block.tag() != "X509 CRL" {
            return Err(format!(
                "\"{CRL_KEY}\" block {index} is a \"{}\", not an X509 CRL",
                block.tag()
            ));
        }
        match CertificateRevocationList::from_der(block.contents()) {
            Ok(([], _)) => {}
            Ok(_) => return Err(format!("\"{CRL_KEY}\" CRL {index}: trailing data")),
            Err(e) => return Err(format!("\"{CRL_KEY}\" CRL {index} does not parse: {e}")),
        }
        pem.push_str(&encode("X509 CRL", block.contents()));
        all.extend_from_slice(block.contents());
    }
    Ok(PemBundle {
        pem,
        fingerprint: fingerprint(&all),
    })
}

pub(super) fn host_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(dns) => names.push((*dns).to_string()),
                GeneralName::IPAddress(ip) => match ip.len() {
                    4 => names.push(
                        std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).unwrap_or_default())
                            .to_string(),
                    ),
                    16 => names.push(
                        std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).unwrap_or_default())
                            .to_string(),
                    ),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    if names.is_empty() {
        names.extend(
            cert.subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .filter(|cn| !cn.is_empty())
                .map(str::to_string),
        );
    }
    names
}

pub(super) fn tls_certificate(
    sds_name: &str,
    type_: Option<&str>,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<TlsCertificate, String> {
    if type_ == Some(TYPE_OPAQUE) && !data.contains_key(TLS_CERT_KEY) {
        return Err(format!("missing or empty \"{TLS_CERT_KEY}\""));
    }
    let chain = certificates_bundle(data, TLS_CERT_KEY)?;
    let cert_blocks = pem_blocks(data, TLS_CERT_KEY)?;
    let leaf_der = cert_blocks[0].contents();
    let leaf = parse_certificate(TLS_CERT_KEY, 0, leaf_der)?;
    let names = host_names(&leaf);
    if names.is_empty() {
        return Err(
            "the first certificate has neither a CommonName nor a SubjectAltName".to_string(),
        );
    }

    let key_blocks = pem_blocks(data, TLS_PRIVATE_KEY)?;
    let mut keys = Vec::new();
    for (index, block) in key_blocks.iter().enumerate() {
        let der = block.contents().to_vec();
        match block.tag() {
            "PRIVATE KEY" => keys.push(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der))),
            "RSA PRIVATE KEY" => keys.push(PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(der))),
            "EC PRIVATE KEY" => keys.push(PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(der))),
            // OpenSSL writes the curve's parameters before an EC key; they say nothing new.
            "EC PARAMETERS" => {}
            "ENCRYPTED PRIVATE KEY" => {
                return Err(format!(
                    "\"{TLS_PRIVATE_KEY}\" holds an encrypted private key, which Envoy cannot use"
                ));
            }
            other => {
                return Err(format!(
                    "\"{TLS_PRIVATE_KEY}\" block {index} is a \"{other}\", not a private key"
                ));
            }
        }
    }
    let key = match keys.as_slice() {
        [key] => key,
        [] => return Err(format!("\"{TLS_PRIVATE_KEY}\" holds no private key")),
        _ => {
            return Err(format!(
                "\"{TLS_PRIVATE_KEY}\" holds {} private keys; exactly one is allowed",
                keys.len()
            ));
        }
    };
    let signing = rustls::crypto::ring::sign::any_supported_type(key).map_err(|_| {
        format!(
            "\"{TLS_PRIVATE_KEY}\" is not a usable private key (Envoy takes RSA of 2048 bits or more, or ECDSA P-256/P-384)"
        )
    })?;
    match signing.algorithm() {
        SignatureAlgorithm::RSA | SignatureAlgorithm::ECDSA => {}
        _ => {
            return Err(format!(
                "\"{TLS_PRIVATE_KEY}\" is not an RSA or ECDSA key; Envoy serves only those"
            ));
        }
    }
    let matches = signing
        .public_key()
        .is_some_and(|spki| spki.as_ref() == leaf.public_key().raw);
    if !matches {
        return Err(format!(
            "the private key in \"{TLS_PRIVATE_KEY}\" does not match the first certificate in \"{TLS_CERT_KEY}\""
        ));
    }
    let key_tag = match key {
        PrivateKeyDer::Pkcs1(_) => "RSA PRIVATE KEY",
        PrivateKeyDer::Sec1(_) => "EC PRIVATE KEY",
        _ => "PRIVATE KEY",
    };
    let kept = keep(sds_name, &chain.pem, &encode(key_tag, key.secret_der()));
    Ok(TlsCertificate {
        kept: kept.bytes,
        chain: kept.chain,
        key: kept.key,
        fingerprint: fingerprint(leaf_der),
        names,
    })
}
