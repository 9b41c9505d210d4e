//! The HTTPProxy, TLSCertificateDelegation and ExtensionService CustomResourceDefinitions,
//! generated from
//! the Rust types Isobar decodes them with (`isobar crds`; `deploy/crds.yaml` is its
//! output, and a test fails when the two drift apart).
//!
//! The schemas follow the types: every field Isobar reads is typed. Objects also accept
//! fields Isobar does not know (`x-kubernetes-preserve-unknown-fields`), as Isobar reads
//! them into `unsupported` and reports them (`IgnoredField`, or invalid when a field that
//! secures traffic is not implemented) — so every HTTPProxy Contour accepts is accepted.

use isobar_contour::api::{ExtensionServiceSpec, HTTPProxySpec, TLSCertificateDelegationSpec};
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

/// `isobar gatekeeper-crds`: the CRDs Gatekeeper would install, for a cluster without
/// it: the ConstraintTemplate CRD, and one Constraint CRD per template found under
/// `paths` (files or directories of manifests), as Gatekeeper makes them (plural and
/// singular the kind in lower case, cluster-scoped, `v1beta1` stored, `v1alpha1` and `v1`
/// served, `spec.parameters` with the template's schema).
pub fn gatekeeper_yaml(paths: &[std::path::PathBuf]) -> anyhow::Result<String> {
    use isobar_plugin_opa::gatekeeper::{CONSTRAINT_TEMPLATE, ConstraintTemplate};
    let mut templates = Vec::new();
    for path in paths {
        let objects = if path.is_dir() {
            let (objects, errors) = crate::provider::files::load_dir(path);
            if let Some(error) = errors.first() {
                anyhow::bail!("{error}");
            }
            objects
        } else {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            let mut objects = isobar_sdk::Objects::default();
            for object in crate::provider::manifest::parse_file(path, &text)? {
                objects.apply(object);
            }
            objects
        };
        for object in objects.of_kind(CONSTRAINT_TEMPLATE).values() {
            if let Some(t) = object.arc::<ConstraintTemplate>() {
                templates.push(t);
            }
        }
    }
    let open = || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let version = |name: &str, served_schema: &Value, storage: bool| {
        json!({
            "name": name,
            "served": true,
            "storage": storage,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": served_schema},
        })
    };
    let template_schema = json!({
        "type": "object",
        "properties": {"spec": open(), "status": open()},
    });
    let mut crds = vec![json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "constrainttemplates.templates.gatekeeper.sh"},
        "spec": {
            "group": "templates.gatekeeper.sh",
            "names": {"kind": "ConstraintTemplate", "listKind": "ConstraintTemplateList",
                      "plural": "constrainttemplates", "singular": "constrainttemplate"},
            "scope": "Cluster",
            "versions": [
                version("v1", &template_schema, true),
                version("v1beta1", &template_schema, false),
            ],
        },
    })];
    for template in templates {
        let Some(kind) = template
            .spec
            .pointer("/crd/spec/names/kind")
            .and_then(Value::as_str)
        else {
            continue;
        };
        let plural = kind.to_ascii_lowercase();
        let parameters = template
            .spec
            .pointer("/crd/spec/validation/openAPIV3Schema")
            .cloned()
            .unwrap_or_else(open);
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "enforcementAction": {"type": "string"},
                        "match": open(),
                        "parameters": parameters,
                    },
                },
                "status": open(),
            },
        });
        crds.push(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.constraints.gatekeeper.sh")},
            "spec": {
                "group": "constraints.gatekeeper.sh",
                "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                          "singular": plural, "categories": ["constraint", "constraints"]},
                "scope": "Cluster",
                "versions": [
                    version("v1beta1", &schema, true),
                    version("v1alpha1", &schema, false),
                    version("v1", &schema, false),
                ],
            },
        }));
    }
    let mut out = String::from(
        "# Generated by `isobar gatekeeper-crds`: what Gatekeeper would install for these templates.\n",
    );
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}
