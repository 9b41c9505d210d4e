//! The test functions of Contour's suite that create objects its API server refuses by
//! the CRDs' schema (OpenAPI and CEL rules) and assert the create fails. With Isobar the
//! refusal comes from its validating admission webhook, which rejects a create with the
//! errors the object's status would carry: each object is sent to the webhook as the API
//! server sends it (an AdmissionReview over HTTPS) and must be refused with a message
//! naming the field, and a valid object beside it is admitted. Without the webhook the
//! same objects are served as invalid with that message (the webhook's verdict is the
//! controller's).

use serde_json::{Value, json};

use crate::admission::{Hook, hook, review};

const NS: &str = "validation";

/// A controller whose store holds Service `validation/echo` (port 80), with its webhook.
async fn webhook() -> Hook {
    let service = crate::support::service_yaml(NS, "echo", 80);
    hook(&service, isobar::config::Config::default()).await
}

/// A root HTTPProxy `name` at `<name>.projectcontour.io` with one route: `route` plus a
/// service `echo:80` merged with `service`.
fn proxy(name: &str, route: Value, service: Value) -> Value {
    let mut backend = json!({"name": "echo", "port": 80});
    merge(&mut backend, service);
    let mut first = json!({"services": [backend]});
    merge(&mut first, route);
    json!({
        "apiVersion": "projectcontour.io/v1",
        "kind": "HTTPProxy",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "virtualhost": {"fqdn": format!("{name}.projectcontour.io")},
            "routes": [first],
        }
    })
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

impl Hook {
    /// `object` is refused on create, saying each of `said`.
    async fn refused(&self, object: &Value, said: &[&str]) {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let response = self.review(&review(name, "CREATE", object)).await;
        let message = response["status"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            response["allowed"], false,
            "{name} was admitted: {response}"
        );
        for text in said {
            assert!(message.contains(text), "{name}: {message:?} lacks {text:?}");
        }
    }

    /// `object` is admitted on create.
    async fn admitted(&self, object: &Value) {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let response = self.review(&review(name, "CREATE", object)).await;
        assert_eq!(response["allowed"], true, "{name}: {response}");
    }
}

/// Contour's `testCELValidation` (`httpproxy/cel_validation_test.go`): an upstream
/// validation whose `subjectNames[0]` is not its `subjectName` is refused with the CEL
/// rule's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cel_validation() {
    let hook = webhook().await;
    let validation = |names: Value| json!({"validation": {"caSecret": "namespace/name", "subjectName": "example.com", "subjectNames": names}});
    hook.refused(
        &proxy(
            "subjectname-no-match",
            json!({}),
            validation(json!(["wrong.com", "example.com"])),
        ),
        &["subjectNames[0] must equal subjectName if set"],
    )
    .await;
}

/// Contour's `testRequiredFieldValidation` (`httpproxy/required_field_validation_test.go`):
/// a header condition without a name, a virtual host without an FQDN, an include without
/// a name and a service port past 65535 are refused, each naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_field_validation() {
    let hook = webhook().await;
    let mut header = proxy(
        "missing-condition-header-name",
        json!({"conditions": [{"header": {"present": true}}]}),
        json!({}),
    );
    // Contour's is a root-less proxy; a root one is judged on its routes at once.
    hook.refused(&header, &["spec.routes[0]", "header"]).await;
    header["spec"]
        .as_object_mut()
        .map(|spec| spec.remove("virtualhost"));
    hook.refused(&header, &["header"]).await;
    let no_fqdn = json!({
        "apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
        "metadata": {"name": "missing-virtualhost-name", "namespace": NS},
        "spec": {"virtualhost": {"tls": {"passthrough": true}}},
    });
    hook.refused(&no_fqdn, &["Fqdn"]).await;
    let no_include_name = json!({
        "apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
        "metadata": {"name": "missing-includes-name", "namespace": NS},
        "spec": {"includes": [{"namespace": "foo"}]},
    });
    hook.refused(&no_include_name, &["spec.includes[0]", "name"])
        .await;
    hook.refused(
        &proxy("service-port-range", json!({}), json!({"port": 80000})),
        &["spec.routes[0].services[0]", "port", "80000"],
    )
    .await;
    hook.admitted(&proxy("valid", json!({}), json!({}))).await;
}

/// Contour's `testWildcardFQDN` (`httpproxy/fqdn_test.go`): an FQDN of `*` alone is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcard_fqdn() {
    let hook = webhook().await;
    let mut wildcard = proxy("wildcard-subdomain", json!({}), json!({}));
    wildcard["spec"]["virtualhost"]["fqdn"] = json!("*");
    hook.refused(&wildcard, &["Fqdn", "\"*\""]).await;
    wildcard["spec"]["virtualhost"]["fqdn"] = json!("*.domain.io");
    hook.admitted(&wildcard).await;
}

/// Contour's `testInternalRedirectValidation` (`httpproxy/internal_redirect_test.go`): an
/// `allowCrossSchemeRedirect` other than Always, Never or SafeOnly, and a redirect
/// response code other than 301, 302, 303, 307 or 308, are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_redirect_validation() {
    let hook = webhook().await;
    hook.refused(
        &proxy(
            "invalid-cross-scheme",
            json!({"internalRedirectPolicy": {"allowCrossSchemeRedirect": "MaybeSafe"}}),
            json!({}),
        ),
        &["allowCrossSchemeRedirect", "MaybeSafe"],
    )
    .await;
    hook.refused(
        &proxy(
            "invalid-redirect-code",
            json!({"internalRedirectPolicy": {"redirectResponseCodes": [301, 310]}}),
            json!({}),
        ),
        &["redirectResponseCodes", "310"],
    )
    .await;
    hook.admitted(&proxy(
        "valid-redirect",
        json!({"internalRedirectPolicy": {"allowCrossSchemeRedirect": "SafeOnly", "redirectResponseCodes": [301, 308]}}),
        json!({}),
    ))
    .await;
}

/// Contour's `testInvalidCookieRewriteFields` (`httpproxy/cookie_rewrite_test.go`): cookie
/// names with separators, whitespace, DEL or control characters, paths with `;`, DEL or
/// control characters, domains that are wildcards or not host names, and a SameSite
/// other than Strict, Lax or None are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_cookie_rewrite_fields() {
    let hook = webhook().await;
    let cookie = |name: String, policy: Value| {
        proxy(&name, json!({"cookieRewritePolicies": [policy]}), json!({}))
    };
    let controls = (0u32..32).chain([127]);
    let separators = "()<>@,;:\\\"/[]?={} \t".chars().map(u32::from);
    for c in separators.chain(controls.clone()) {
        let name = char::from_u32(c).map(|c| format!("invalid{c}char"));
        let policy = json!({"name": name, "pathRewrite": {"value": "/foo"}});
        hook.refused(
            &cookie(format!("invalid-cookie-name-{c}"), policy),
            &["name"],
        )
        .await;
    }
    for c in controls.chain([u32::from(';')]) {
        let path = char::from_u32(c).map(|c| format!("/invalid{c}path"));
        let policy = json!({"name": "invalidpath", "pathRewrite": {"value": path}});
        hook.refused(&cookie(format!("invalid-path-{c}"), policy), &["path"])
            .await;
    }
    for (i, domain) in ["*", "*.foo.com", "invalid.char&.com"].iter().enumerate() {
        let policy = json!({"name": "invaliddomain", "domainRewrite": {"value": domain}});
        hook.refused(&cookie(format!("invalid-domain-{i}"), policy), &["domain"])
            .await;
    }
    let policy = json!({"name": "invalid-samesite", "sameSite": "Invalid"});
    hook.refused(
        &cookie("invalid-samesite".to_string(), policy),
        &["sameSite"],
    )
    .await;
    let valid = json!({"name": "session", "pathRewrite": {"value": "/foo"}, "domainRewrite": {"value": "example.com"}, "sameSite": "Lax"});
    hook.admitted(&cookie("valid-cookie".to_string(), valid))
        .await;
}
