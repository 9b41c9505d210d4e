//! The HTTPProxy, TLSCertificateDelegation and ExtensionService CustomResourceDefinitions,
//! generated from
//! the Rust types Isobar decodes them with (`isobar crds`; `deploy/crds.yaml` is its
//! output, and a test fails when the two drift apart).
//!
//! The schemas follow the types: every field Isobar reads is typed. Objects also accept
//! fields Isobar does not know (`x-kubernetes-preserve-unknown-fields`), as Isobar reads
//! them into `unsupported` and reports them (`IgnoredField`, or invalid when a field that
//! secures traffic is not implemented) — so every HTTPProxy Contour accepts is accepted.

use isobar_sdk::api::{ExtensionServiceSpec, HTTPProxySpec, TLSCertificateDelegationSpec};
use schemars::JsonSchema;
use serde_json::{Value, json};

/// A structural OpenAPI v3 schema for `T`, as Kubernetes requires: everything inline, no
/// `$schema`/`title`/`default`, and objects that carry unknown fields marked as such
/// instead of `additionalProperties: true`.
fn schema_for<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    structural(&mut schema);
    schema
}

fn structural(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in [
                "$schema",
                "title",
                "default",
                "definitions",
                "$defs",
                "examples",
            ] {
                map.remove(key);
            }
            if map.get("additionalProperties") == Some(&Value::Bool(true)) {
                map.remove("additionalProperties");
                if map.contains_key("properties") {
                    map.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
                }
            }
            // An untyped value (`serde_json::Value`) may be anything.
            if map.is_empty() {
                map.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
            }
            for child in map.values_mut() {
                structural(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(structural),
        _ => {}
    }
}

fn crd(
    kind: &str,
    version: &str,
    plural: &str,
    short_names: &[&str],
    spec: Value,
    columns: Value,
) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.projectcontour.io")},
        "spec": {
            "group": "projectcontour.io",
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
                "shortNames": short_names,
            },
            "scope": "Namespaced",
            "versions": [{
                "name": version,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "required": ["metadata", "spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                        },
                    },
                }},
            }],
        },
    })
}

/// Every CRD.
pub fn crds() -> Vec<Value> {
    let column = |name: &str, path: &str, description: &str| json!({"name": name, "type": "string", "jsonPath": path, "description": description});
    vec![
        crd(
            "HTTPProxy",
            "v1",
            "httpproxies",
            &["proxy", "proxies"],
            schema_for::<HTTPProxySpec>(),
            json!([
                column(
                    "FQDN",
                    ".spec.virtualhost.fqdn",
                    "Fully qualified domain name"
                ),
                column(
                    "TLS Secret",
                    ".spec.virtualhost.tls.secretName",
                    "Secret with TLS credentials"
                ),
                column(
                    "Status",
                    ".status.currentStatus",
                    "The current status of the HTTPProxy"
                ),
                column(
                    "Status Description",
                    ".status.description",
                    "Description of the current status"
                ),
            ]),
        ),
        crd(
            "TLSCertificateDelegation",
            "v1",
            "tlscertificatedelegations",
            &["tlscerts"],
            schema_for::<TLSCertificateDelegationSpec>(),
            json!([]),
        ),
        crd(
            "ExtensionService",
            "v1alpha1",
            "extensionservices",
            &["extensionservice", "extensionservices"],
            schema_for::<ExtensionServiceSpec>(),
            json!([]),
        ),
    ]
}

/// The CRDs as one multi-document YAML file (what `deploy/crds.yaml` holds).
pub fn yaml() -> String {
    let mut out = String::from(
        "# Generated by `isobar crds` from the Rust types Isobar decodes these kinds with.\n# Do not edit: a test fails when this file and the types differ.\n",
    );
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd).unwrap_or_default());
    }
    out
}
