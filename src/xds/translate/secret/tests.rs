use std::collections::BTreeMap;

use isobar_sdk::secret::{SecretCheck, sds_name};

use envoy_types::pb::envoy::config::core::v3::{self as core, DataSource};

use crate::xds::resource::encoded;

use super::*;

fn pem_der(pem_text: &str) -> Vec<u8> {
    pem::parse(pem_text)
        .map(|p| p.contents().to_vec())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The SDS resource made when a Secret is checked is what prost encodes for the same
/// message, is served without a copy, and keeps its certificate when renamed.
#[test]
fn a_checked_certificate_is_served_as_prost_encodes_it() {
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let cert = rcgen::CertificateParams::new(vec!["a.example.com".to_string()])
        .and_then(|params| params.self_signed(&key))
        .unwrap_or_else(|e| panic!("{e}"));
    let data = |copies: usize| {
        BTreeMap::from([
            (
                "tls.crt".to_string(),
                cert.pem().repeat(copies).into_bytes(),
            ),
            ("tls.key".to_string(), key.serialize_pem().into_bytes()),
        ])
    };
    // Lengths written in one, two and (a chain over 16 KiB) three bytes.
    for (name, copies) in [(sds_name("ns", "cert"), 1), ("n".repeat(300), 40)] {
        let check = SecretCheck::of_data(
            &name,
            Some("kubernetes.io/tls"),
            &data(copies),
            &BTreeMap::new(),
        );
        let certificate = check.certificate.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            certificate.chain_pem().matches("BEGIN CERTIFICATE").count(),
            copies
        );
        let served = ir::ServedSecret {
            namespace: "ns".to_string(),
            name: "cert".to_string(),
            certificate: certificate.clone(),
        };
        let bytes = secret(&name, &served);
        assert!(Encoded::ptr_eq(&bytes, certificate.kept()));
        let decoded = tls::Secret::decode(&bytes[..]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(encoded(&decoded), bytes, "prost encodes the same bytes");
        assert_eq!(decoded.name, name);
        let Some(tls::secret::Type::TlsCertificate(tls_certificate)) = &decoded.r#type else {
            panic!("not a certificate: {decoded:?}");
        };
        let text = |source: &Option<DataSource>| match source
            .as_ref()
            .and_then(|s| s.specifier.as_ref())
        {
            Some(core::data_source::Specifier::InlineString(text)) => text.clone(),
            other => panic!("not an inline string: {other:?}"),
        };
        let chain = text(&tls_certificate.certificate_chain);
        assert!(chain.len() > 16 * 1024 || copies == 1);
        assert_eq!(pem_der(&chain), cert.der().to_vec());
        assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), copies);
        assert_eq!(
            pem_der(&text(&tls_certificate.private_key)),
            key.serialize_der()
        );

        let renamed = secret("other", &served);
        let renamed = tls::Secret::decode(&renamed[..]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(renamed.name, "other");
        assert_eq!(renamed.r#type, decoded.r#type);
    }
}
