//! Certificates → Envoy SDS `Secret`s. Checked certificates are kept in this form from
//! the start (registered with the SDK as its `CertificateForm`): the bytes a snapshot
//! serves are the one copy of a certificate's chain and key.

use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use prost::Message;

use isobar_sdk::ir;
use isobar_sdk::secret::{CertificateForm, Kept};

use crate::xds::proto::{field_len, inline};
use crate::xds::resource::Encoded;

isobar_sdk::inventory::submit! {
    CertificateForm { keep: sds_secret }
}

/// Where prost puts a certificate's chain and key in its `Secret`: the name (field 1,
/// when set), then `tls_certificate` (2) holding `certificate_chain` (1) and
/// `private_key` (2), each a `DataSource` whose `inline_string` (3) is the text as is.
fn layout(name: &str, chain: &str, key: &str) -> (usize, usize, usize) {
    let name_len = if name.is_empty() {
        0
    } else {
        field_len(1, name.len())
    };
    let chain_source = field_len(3, chain.len());
    let key_source = field_len(3, key.len());
    let certificate = field_len(1, chain_source) + field_len(2, key_source);
    let header = |tag: u32, len: usize| field_len(tag, len) - len;
    let chain_at =
        name_len + header(2, certificate) + header(1, chain_source) + header(3, chain.len());
    let key_at = chain_at + chain.len() + header(2, key_source) + header(3, key.len());
    (chain_at, key_at, name_len + field_len(2, certificate))
}

/// Envoy's SDS `Secret` named `name` with this chain and key, and where in it they are.
fn sds_secret(name: &str, chain: &str, key: &str) -> Kept {
    let message = tls::Secret {
        name: name.to_string(),
        r#type: Some(tls::secret::Type::TlsCertificate(tls::TlsCertificate {
            certificate_chain: Some(inline(chain)),
            private_key: Some(inline(key)),
            ..Default::default()
        })),
    };
    let bytes = message.encode_to_vec();
    let (chain_at, key_at, len) = layout(name, chain, key);
    let chain_range = chain_at..chain_at + chain.len();
    let key_range = key_at..key_at + key.len();
    let found =
        |at: &std::ops::Range<usize>, text: &str| bytes.get(at.clone()) == Some(text.as_bytes());
    if bytes.len() != len || !found(&chain_range, chain) || !found(&key_range, key) {
        // Not where prost puts them: keep the texts as they are (served by encoding
        // them again), rather than point at the wrong bytes.
        tracing::error!(sds = %name, "an SDS secret is not laid out as expected");
        let plain: std::sync::Arc<[u8]> = [chain.as_bytes(), key.as_bytes()].concat().into();
        return Kept {
            bytes: plain,
            chain: 0..chain.len(),
            key: chain.len()..chain.len() + key.len(),
        };
    }
    Kept {
        bytes: bytes.into(),
        chain: chain_range,
        key: key_range,
    }
}

/// The SDS resource of a certificate and its key, named `name`: the bytes kept since
/// its Secret was checked, shared, when they are that resource (the SDS name of that
/// Secret, as every source names it); encoded again otherwise.
pub fn secret(name: &str, secret: &ir::ServedSecret) -> Encoded {
    let certificate = &secret.certificate;
    let (chain, key) = (certificate.chain_pem(), certificate.key_pem());
    let (chain_at, _, len) = layout(name, chain, key);
    let kept = certificate.kept();
    let named = kept.len() == len
        && kept.get(chain_at..chain_at + chain.len()) == Some(chain.as_bytes())
        && kept
            .get(..field_len(1, name.len()))
            .is_some_and(|head| head.ends_with(name.as_bytes()));
    if named {
        return Encoded::clone(kept);
    }
    Encoded::from(sds_secret(name, chain, key).bytes)
}

/// The SDS names of the stats listener's certificate and of the CA its clients must be
/// of (`metrics.envoy`), as Contour names them.
pub const METRICS_CERTIFICATE: &str = "metrics-tls-certificate";
pub const METRICS_CA: &str = "metrics-ca-certificate";

/// The stats listener's certificate (and client CA) as SDS secrets naming the files
/// Envoy reads them from (`metrics.envoy`'s paths, in Envoy's filesystem).
pub(in crate::xds) fn metrics_secrets(
    files: &(String, String, Option<String>),
) -> Vec<(String, Encoded)> {
    use envoy_types::pb::envoy::config::core::v3::{DataSource, data_source::Specifier};
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        CertificateValidationContext, Secret, TlsCertificate, secret,
    };
    let file = |path: &str| DataSource {
        specifier: Some(Specifier::Filename(path.to_string())),
        ..Default::default()
    };
    let (chain, key, ca) = files;
    let mut out = vec![(
        METRICS_CERTIFICATE.to_string(),
        crate::xds::resource::encoded(&Secret {
            name: METRICS_CERTIFICATE.to_string(),
            r#type: Some(secret::Type::TlsCertificate(TlsCertificate {
                certificate_chain: Some(file(chain)),
                private_key: Some(file(key)),
                ..Default::default()
            })),
        }),
    )];
    if let Some(ca) = ca {
        out.push((
            METRICS_CA.to_string(),
            crate::xds::resource::encoded(&Secret {
                name: METRICS_CA.to_string(),
                r#type: Some(secret::Type::ValidationContext(
                    CertificateValidationContext {
                        trusted_ca: Some(file(ca)),
                        ..Default::default()
                    },
                )),
            }),
        ));
    }
    out
}

#[cfg(test)]
mod tests;
