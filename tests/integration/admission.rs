//! The admission webhook over real HTTPS, with real AdmissionReview JSON, against a
//! controller reading a manifest directory.

use std::path::Path;

use serde_json::{Value, json};

use isobar::config::Config;
use isobar::runner::pipeline::Pipeline;

use crate::support::{service_yaml, write};

/// A controller on a manifest directory with its webhook on a loopback port.
pub(crate) struct Hook {
    running: crate::webhook_client::Running,
    _dir: tempfile::TempDir,
}

pub(crate) async fn hook(manifests: &str, config: Config) -> Hook {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let objects = dir.path().join("objects");
    write(&objects, "objects.yaml", manifests);
    let running = crate::webhook_client::start(&config, objects, dir.path()).await;
    Hook { running, _dir: dir }
}

impl Hook {
    async fn post(&self, body: &str) -> (u16, String) {
        crate::webhook_client::post(self.running.addr, &self.running.ca, body).await
    }

    /// Sends a review and returns its `response`.
    pub(crate) async fn review(&self, review: &Value) -> Value {
        let (status, body) = self.post(&review.to_string()).await;
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer["kind"], "AdmissionReview");
        answer["response"].clone()
    }
}

pub(crate) fn review(uid: &str, operation: &str, object: &Value) -> Value {
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = match kind {
        "Ingress" => ("networking.k8s.io", "v1"),
        "HTTPRoute" | "GRPCRoute" | "TLSRoute" | "Gateway" => ("gateway.networking.k8s.io", "v1"),
        "TCPRoute" => ("gateway.networking.k8s.io", "v1alpha2"),
        _ => ("projectcontour.io", "v1"),
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "namespace": object["metadata"]["namespace"],
            "name": object["metadata"]["name"],
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": if operation == "DELETE" { Value::Null } else { object.clone() },
            "oldObject": if operation == "CREATE" { Value::Null } else { object.clone() },
            "dryRun": false,
        }
    })
}

fn proxy(ns: &str, name: &str, fqdn: &str) -> Value {
    json!({
        "apiVersion": "projectcontour.io/v1",
        "kind": "HTTPProxy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "virtualhost": {"fqdn": fqdn},
            "routes": [{"conditions": [{"prefix": "/"}], "services": [{"name": "web", "port": 80}]}],
        }
    })
}

fn yaml(value: &Value) -> String {
    serde_yaml::to_string(value).unwrap_or_else(|e| panic!("{e}"))
}

fn existing() -> String {
    let mut out = service_yaml("team-a", "web", 8080);
    out += "---\n";
    out += &service_yaml("team-b", "web", 8080);
    out += "---\n";
    out += &yaml(&proxy("team-a", "site", "site.example.com"));
    out
}

/// What the controller's status says about `key` once `extra` is added to the objects.
fn status_errors(manifests: &str, extra: &Value, key: &isobar_sdk::ObjectKey) -> Vec<String> {
    let config = Config::default();
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let mut objects = isobar_sdk::Objects::default();
    let text = format!("{manifests}---\n{}", yaml(extra));
    for o in isobar::provider::manifest::parse_file(Path::new("x.yaml"), &text)
        .unwrap_or_else(|e| panic!("{e}"))
    {
        objects.apply(o);
    }
    let out = pipeline.build(&objects);
    out.status
        .get(key)
        .map(|s| s.errors.iter().map(|e| e.message.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allows_denies_and_warns_with_the_controllers_messages() {
    let manifests = existing();
    let hook = hook(&manifests, Config::default()).await;

    // A new site: allowed, uid echoed, no warnings.
    let fresh = proxy("team-b", "shop", "shop.example.com");
    let answer = hook.review(&review("uid-1", "CREATE", &fresh)).await;
    assert_eq!(answer["uid"], "uid-1");
    assert_eq!(answer["allowed"], true, "{answer}");
    assert!(answer.get("warnings").is_none(), "{answer}");

    // The same FQDN in another case and with a trailing dot: denied with the message the
    // controller would put in the status.
    let clash = proxy("team-b", "copy", "SITE.example.com.");
    let answer = hook.review(&review("uid-2", "CREATE", &clash)).await;
    assert_eq!(answer["uid"], "uid-2");
    assert_eq!(answer["allowed"], false, "{answer}");
    let expected = status_errors(
        &manifests,
        &clash,
        &isobar_sdk::ObjectKey::new(isobar_contour::HTTP_PROXY, "team-b", "copy"),
    );
    assert!(!expected.is_empty());
    let message = answer["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&expected[0]), "{message} vs {expected:?}");
    assert_eq!(answer["status"]["code"], 403);

    // An Ingress with the host of an HTTPProxy is fine for the Ingress (it keeps its
    // host); an HTTPProxy taking an Ingress's host is not.
    let ingress = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "legacy", "namespace": "team-b"},
        "spec": {"rules": [{"host": "legacy.example.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}
    });
    let answer = hook.review(&review("uid-3", "CREATE", &ingress)).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    // (The Ingress is not in the store yet: the webhook remembers what it admitted.)
    let taker = proxy("team-a", "taker", "Legacy.example.com");
    let answer = hook.review(&review("uid-3b", "CREATE", &taker)).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    let message = answer["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"legacy.example.com\" is also used by Ingress team-b/legacy"),
        "{message}"
    );

    // Warnings: a field Isobar does not act on.
    let mut odd = proxy("team-b", "odd", "odd.example.com");
    odd["spec"]["somethingNew"] = json!({"x": 1});
    let answer = hook.review(&review("uid-4", "CREATE", &odd)).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    let warnings = answer["warnings"].as_array().cloned().unwrap_or_default();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap_or_default().contains("somethingNew")),
        "{answer}"
    );

    // An include cycle is an error the controller raises: denied.
    let looping = json!({
        "apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
        "metadata": {"name": "loop", "namespace": "team-b"},
        "spec": {"virtualhost": {"fqdn": "loop.example.com"},
                 "includes": [{"name": "loop", "namespace": "team-b"}]}
    });
    let answer = hook.review(&review("uid-5", "CREATE", &looping)).await;
    assert_eq!(answer["allowed"], false, "{answer}");

    // An object that does not decode is rejected with why.
    let mut broken = proxy("team-b", "broken", "broken.example.com");
    broken["spec"]["routes"] = json!("not a list");
    let answer = hook.review(&review("uid-6", "CREATE", &broken)).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    let message = answer["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("could not be read"), "{message}");

    // Not JSON, or JSON without a request: 400.
    let (status, _) = hook.post("{not json").await;
    assert_eq!(status, 400);
    let (status, _) = hook.post(r#"{"kind":"AdmissionReview"}"#).await;
    assert_eq!(status, 400);

    // Deletes are allowed.
    let site = proxy("team-a", "site", "site.example.com");
    let answer = hook.review(&review("uid-7", "DELETE", &site)).await;
    assert_eq!(answer["allowed"], true, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_colliding_creates_racing_only_one_is_admitted() {
    let hook = hook(&existing(), Config::default()).await;
    let first = review(
        "race-1",
        "CREATE",
        &proxy("team-a", "one", "race.example.com"),
    );
    let second = review(
        "race-2",
        "CREATE",
        &proxy("team-b", "two", "race.example.com"),
    );
    let (a, b) = tokio::join!(hook.review(&first), hook.review(&second));
    let allowed = [&a, &b].iter().filter(|r| r["allowed"] == true).count();
    assert_eq!(allowed, 1, "{a}\n{b}");

    // A dry run leaves nothing behind: after a dry-run create, a real one is admitted.
    let mut dry = review(
        "dry-1",
        "CREATE",
        &proxy("team-a", "dry", "dry.example.com"),
    );
    dry["request"]["dryRun"] = json!(true);
    assert_eq!(hook.review(&dry).await["allowed"], true);
    let real = review(
        "dry-2",
        "CREATE",
        &proxy("team-b", "real", "dry.example.com"),
    );
    assert_eq!(hook.review(&real).await["allowed"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_denial_is_rejected_with_the_policy_message() {
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let mut config = Config::default();
    config.pipeline.processors.push("opa".to_string());
    config.plugins.insert(
        "opa".to_string(),
        json!({
            "policies": [policies.join("no-wildcard-hosts.rego").display().to_string(),
                         policies.join("allowed-domains.rego").display().to_string()],
            "data": {"allowed-domains": {"team-a": ["example.com"], "team-b": ["team-b.example.com"]}},
        }),
    );
    let hook = hook(&existing(), config).await;

    let wild = proxy("team-a", "wild", "*.example.com");
    let answer = hook.review(&review("p-1", "CREATE", &wild)).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    let message = answer["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("wildcard host \"*.example.com\" is not allowed"),
        "{message}"
    );

    let outside = proxy("team-b", "outside", "shop.example.com");
    let answer = hook.review(&review("p-2", "CREATE", &outside)).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    let message = answer["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("not in a domain namespace \"team-b\" may use"),
        "{message}"
    );

    let inside = proxy("team-b", "inside", "shop.team-b.example.com");
    let answer = hook.review(&review("p-3", "CREATE", &inside)).await;
    assert_eq!(answer["allowed"], true, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_to_included_proxies_are_judged_with_their_roots() {
    let child = json!({
        "apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
        "metadata": {"name": "blog", "namespace": "team-b"},
        "spec": {"routes": [{"services": [{"name": "web", "port": 80}]}]}
    });
    let root = json!({
        "apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
        "metadata": {"name": "portal", "namespace": "team-a"},
        "spec": {"virtualhost": {"fqdn": "portal.example.com"},
                 "includes": [{"name": "blog", "namespace": "team-b", "conditions": [{"prefix": "/blog"}]}]}
    });
    let manifests = format!("{}---\n{}---\n{}", existing(), yaml(&child), yaml(&root));
    let hook = hook(&manifests, Config::default()).await;

    // The child including its root back makes a cycle: denied, though the child has no
    // virtual host of its own (the verdict needs the root, found through the include).
    let mut looping = child.clone();
    looping["spec"]["includes"] = json!([{"name": "portal", "namespace": "team-a"}]);
    let answer = hook.review(&review("i-1", "UPDATE", &looping)).await;
    assert_eq!(answer["allowed"], false, "{answer}");

    // A harmless update of the child is allowed.
    let mut tweaked = child.clone();
    tweaked["spec"]["routes"][0]["timeoutPolicy"] = json!({"response": "5s"});
    let answer = hook.review(&review("i-2", "UPDATE", &tweaked)).await;
    assert_eq!(answer["allowed"], true, "{answer}");

    // Deleting the child is allowed, with a warning that the root loses its include.
    let answer = hook.review(&review("i-3", "DELETE", &child)).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    let warnings = answer["warnings"].to_string();
    assert!(warnings.contains("HTTPProxy team-a/portal"), "{answer}");
}

/// What an object names may land after it (kubectl apply order, cert-manager's Secret):
/// a missing Service or Secret is a warning, not a refusal. An update is judged on what
/// it changes: an object already invalid for another reason can still be edited (to
/// remove a finalizer, say), while a new error is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_references_warn_and_updates_are_judged_on_what_they_change() {
    let mut early = proxy("team-b", "early", "early.example.com");
    early["spec"]["routes"][0]["services"][0]["name"] = json!("not-yet");
    early["spec"]["virtualhost"]["tls"] = json!({"secretName": "cert-not-yet"});
    let answer = {
        let hook = hook(&existing(), Config::default()).await;
        hook.review(&review("r-1", "CREATE", &early)).await
    };
    assert_eq!(answer["allowed"], true, "{answer}");
    let warnings = answer["warnings"].to_string();
    assert!(warnings.contains("not-yet"), "{answer}");
    assert!(warnings.contains("cert-not-yet"), "{answer}");

    // Stored already broken (a bad timeout): a label change is allowed, with the
    // error as a warning; an edit adding another error is refused.
    let mut broken = proxy("team-b", "broken", "broken.example.com");
    broken["spec"]["routes"][0]["timeoutPolicy"] = json!({"response": "soon"});
    let manifests = format!("{}---\n{}", existing(), yaml(&broken));
    let hook = hook(&manifests, Config::default()).await;
    let mut labelled = broken.clone();
    labelled["metadata"]["labels"] = json!({"team": "b"});
    let answer = hook.review(&review("r-2", "UPDATE", &labelled)).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    assert!(answer["warnings"].to_string().contains("soon"), "{answer}");
    let mut worse = broken.clone();
    worse["spec"]["routes"][0]["retryPolicy"] = json!({"count": -3});
    let answer = hook.review(&review("r-3", "UPDATE", &worse)).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    // The same broken object as a create is refused.
    let mut copy = broken.clone();
    copy["metadata"]["name"] = json!("copy");
    copy["spec"]["virtualhost"]["fqdn"] = json!("copy.example.com");
    let answer = hook.review(&review("r-4", "CREATE", &copy)).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    let message = answer["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("soon"), "{answer}");
}

fn http_route(name: &str, rules: Value) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "hostnames": [format!("{name}.example.com")],
            "rules": rules,
        }
    })
}

/// HTTPRoutes are judged as the controller would: a rule it would leave out (here a bad
/// regex) rejects the route with the message its parent's status would carry, alone or
/// beside good rules; a backend Service that does not exist yet is only a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproutes_the_controller_would_not_accept_are_refused() {
    let gateway = "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: isobar}\nspec: {controllerName: projectcontour.io/gateway-controller}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: team-a}\nspec:\n  gatewayClassName: isobar\n  listeners: [{name: http, protocol: HTTP, port: 80}]\n";
    let manifests = format!("{}---\n{gateway}", existing());
    let config = Config {
        gateway: Some(json!({"controllerName": "projectcontour.io/gateway-controller"})),
        ..Config::default()
    };
    let hook = hook(&manifests, config).await;
    let good = json!({"backendRefs": [{"name": "web", "port": 80}]});
    let bad = json!({
        "matches": [{"path": {"type": "RegularExpression", "value": "/(["}}],
        "backendRefs": [{"name": "web", "port": 80}],
    });

    let ok = hook
        .review(&review("1", "CREATE", &http_route("fine", json!([good]))))
        .await;
    assert_eq!(ok["allowed"], true, "{ok}");

    for (uid, rules) in [("2", json!([bad])), ("3", json!([good, bad]))] {
        let refused = hook
            .review(&review(uid, "CREATE", &http_route("broken", rules)))
            .await;
        assert_eq!(refused["allowed"], false, "{refused}");
        let message = refused["status"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("path regex"), "{refused}");
    }

    let missing = json!([{"backendRefs": [{"name": "not-yet", "port": 80}]}]);
    let warned = hook
        .review(&review("4", "CREATE", &http_route("early", missing)))
        .await;
    assert_eq!(warned["allowed"], true, "{warned}");
    assert!(
        warned["warnings"].to_string().contains("not-yet"),
        "{warned}"
    );
}

/// TLSRoutes, TCPRoutes and GRPCRoutes are judged as HTTPRoutes are: a host name the
/// controller would not accept, a backend that is not a Service, a method match that
/// does not decode are refused; a good one is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_and_grpc_routes_the_controller_would_not_accept_are_refused() {
    let gateway = "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: isobar}\nspec: {controllerName: projectcontour.io/gateway-controller}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: team-a}\nspec:\n  gatewayClassName: isobar\n  listeners:\n    - {name: http, protocol: HTTP, port: 80}\n    - {name: tls, protocol: TLS, port: 443, tls: {mode: Passthrough}}\n    - {name: tcp, protocol: TCP, port: 5432}\n";
    let manifests = format!("{}---\n{gateway}", existing());
    let config = Config {
        gateway: Some(json!({"controllerName": "projectcontour.io/gateway-controller"})),
        ..Config::default()
    };
    let hook = hook(&manifests, config).await;
    let route = |kind: &str, version: &str, name: &str, spec: Value| {
        json!({
            "apiVersion": format!("gateway.networking.k8s.io/{version}"),
            "kind": kind,
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": spec,
        })
    };
    let web = json!([{"backendRefs": [{"name": "web", "port": 80}]}]);
    let cases = [
        (
            route(
                "TLSRoute",
                "v1",
                "fine",
                json!({"parentRefs": [{"name": "gw", "sectionName": "tls"}], "hostnames": ["db.example.com"], "rules": web}),
            ),
            None,
        ),
        (
            route(
                "TLSRoute",
                "v1",
                "bad-host",
                json!({"parentRefs": [{"name": "gw", "sectionName": "tls"}], "hostnames": ["Bad_Host.example.com"], "rules": web}),
            ),
            Some("not a valid host name"),
        ),
        (
            route(
                "TCPRoute",
                "v1alpha2",
                "not-a-service",
                json!({"parentRefs": [{"name": "gw", "sectionName": "tcp"}], "rules": [{"backendRefs": [{"group": "example.com", "kind": "Database", "name": "db", "port": 5432}]}]}),
            ),
            Some("is not a Service"),
        ),
        (
            route(
                "GRPCRoute",
                "v1",
                "fine-grpc",
                json!({"parentRefs": [{"name": "gw", "sectionName": "http"}], "hostnames": ["grpc.example.com"], "rules": [{"matches": [{"method": {"service": "a.B", "method": "C"}}], "backendRefs": [{"name": "web", "port": 80}]}]}),
            ),
            None,
        ),
        (
            route(
                "GRPCRoute",
                "v1",
                "bad-grpc",
                json!({"parentRefs": [{"name": "gw", "sectionName": "http"}], "hostnames": ["grpc2.example.com"], "rules": [{"matches": [{"method": {"type": "RegularExpression", "service": "(["}}], "backendRefs": [{"name": "web", "port": 80}]}]}),
            ),
            Some(""),
        ),
    ];
    for (uid, (object, refused)) in cases.iter().enumerate() {
        let answer = hook
            .review(&review(&uid.to_string(), "CREATE", object))
            .await;
        match refused {
            None => assert_eq!(answer["allowed"], true, "{object}: {answer}"),
            Some(says) => {
                assert_eq!(answer["allowed"], false, "{object}: {answer}");
                let message = answer["status"]["message"].as_str().unwrap_or_default();
                assert!(message.contains(says), "{object}: {answer}");
            }
        }
    }
}

/// 50 reviews at once are all answered, each well within the webhook's 5 s timeout; a
/// body over the size limit is refused with 413, and the webhook keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_reviews_are_answered_in_time_and_big_bodies_refused() {
    let hook = std::sync::Arc::new(hook(&existing(), Config::default()).await);
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..50 {
        let hook = hook.clone();
        tasks.push(tokio::spawn(async move {
            let sent = std::time::Instant::now();
            let candidate = proxy("team-a", &format!("c{i}"), &format!("c{i}.example.com"));
            let answer = hook
                .review(&review(&format!("uid-{i}"), "CREATE", &candidate))
                .await;
            (answer, sent.elapsed())
        }));
    }
    for task in tasks {
        let (answer, took) = task.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer["allowed"], true, "{answer}");
        assert!(
            took < std::time::Duration::from_secs(4),
            "a review took {took:?}"
        );
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let mut big = review(
        "uid-big",
        "CREATE",
        &proxy("team-a", "big", "big.example.com"),
    );
    big["request"]["object"]["metadata"]["annotations"] =
        json!({"note": "n".repeat(isobar::admission::MAX_REVIEW_BYTES)});
    let (status, _) = hook.post(&big.to_string()).await;
    assert_eq!(status, 413);
    let after = review(
        "uid-after",
        "CREATE",
        &proxy("team-a", "after", "after.example.com"),
    );
    assert_eq!(hook.review(&after).await["allowed"], true);
}

/// `--admission-webhook-client-ca`: only clients presenting a certificate of that CA
/// (the API server) are answered; a client without one, or with another CA's, is
/// refused in the handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_its_clients_are_answered() {
    use crate::conformance::certs::Ca;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let api_server = Ca::new("api-server-clients");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, api_server.pem()).unwrap_or_else(|e| panic!("{e}"));
    let mut config = Config::default();
    config.admission_webhook.client_ca_file = ca_file.to_string_lossy().into_owned();
    let hook = hook(&existing(), config).await;
    let body = review("ca-1", "CREATE", &proxy("team-a", "ca", "ca.example.com")).to_string();
    let post = |identity: Option<&crate::conformance::certs::Leaf>| {
        let identity = identity.map(|l| (l.der.clone(), l.key_pem.clone()));
        crate::webhook_client::try_post(hook.running.addr, &hook.running.ca, identity, &body)
    };
    let (status, answer) = post(Some(&api_server.client()))
        .await
        .unwrap_or_else(|e| panic!("the API server's client was refused: {e}"));
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"allowed\":true"), "{answer}");
    let anonymous = post(None).await;
    assert!(
        anonymous.is_err(),
        "answered without a certificate: {anonymous:?}"
    );
    let stranger = post(Some(&Ca::new("someone-else").client())).await;
    assert!(
        stranger.is_err(),
        "answered another CA's client: {stranger:?}"
    );
}

/// Admitted changes are remembered (to refuse a racing duplicate) at most 64 per
/// namespace: a flood of admitted creates in one namespace forgets its own oldest, not
/// another namespace's, and keeps its most recent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_are_bounded_per_namespace() {
    let hook = hook(&existing(), Config::default()).await;
    let create = |ns: &str, name: &str, host: &str| {
        review(&format!("{ns}-{name}"), "CREATE", &proxy(ns, name, host))
    };
    let admitted = |answer: Value| answer["allowed"] == true;
    assert!(admitted(
        hook.review(&create("team-a", "kept", "kept.example.com"))
            .await
    ));
    let flood = isobar::runner::review::PENDING_PER_NAMESPACE + 6;
    for i in 0..flood {
        let host = format!("f{i}.example.com");
        assert!(admitted(
            hook.review(&create("flood", &format!("f{i}"), &host)).await
        ));
    }
    // The other namespace's reservation holds: a duplicate of its host is refused.
    let answer = hook
        .review(&create("team-b", "dup-kept", "kept.example.com"))
        .await;
    assert!(!admitted(answer.clone()), "{answer}");
    // The flood's most recent reservation holds.
    let last = format!("f{}.example.com", flood - 1);
    let answer = hook.review(&create("team-b", "dup-last", &last)).await;
    assert!(!admitted(answer.clone()), "{answer}");
    // Its oldest was forgotten: the duplicate is judged on the store alone.
    let answer = hook
        .review(&create("team-b", "dup-first", "f0.example.com"))
        .await;
    assert!(admitted(answer.clone()), "{answer}");
}

/// One user's flood of reviews does not queue in front of another's: at most four of a
/// user's reviews reach the runner at once, so another user's review is next in line.
/// (A runner of the test's own holds the reviews it is handed, so what reached it can be
/// counted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_users_flood_does_not_hold_up_another() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ca = crate::webhook_client::certificate(dir.path());
    let (runner, mut handed) = tokio::sync::mpsc::channel(1024);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let router = isobar::admission::routes().with_state(isobar::admission::Webhook::new(runner));
    let files = (dir.path().join("tls.crt"), dir.path().join("tls.key"), None);
    let server = tokio::spawn(isobar::admission::serve(listener, files, router));
    let as_user = |user: &str, i: usize| {
        let mut r = review(
            &format!("{user}-{i}"),
            "CREATE",
            &proxy(
                "team-a",
                &format!("{user}{i}"),
                &format!("{user}{i}.example.com"),
            ),
        );
        r["request"]["userInfo"]["username"] = json!(user);
        r.to_string()
    };
    let mut tasks = Vec::new();
    for body in (0..40)
        .map(|i| as_user("flood", i))
        .chain([as_user("bob", 0)])
    {
        let ca = ca.clone();
        tasks.push(tokio::spawn(async move {
            crate::webhook_client::try_post(addr, &ca, None, &body).await
        }));
    }
    // What reaches the runner while it answers nothing.
    let mut names = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut replies = Vec::new();
    while let Ok(Some(request)) = tokio::time::timeout_at(deadline, handed.recv()).await {
        let isobar::runner::inbox::AdmissionRequest { candidate, reply } = request;
        names.push(candidate.key.name.clone());
        replies.push(reply);
    }
    let flood = names.iter().filter(|n| n.starts_with("flood")).count();
    assert_eq!(flood, isobar::admission::REVIEWS_PER_USER, "{names:?}");
    assert!(names.contains(&"bob0".to_string()), "{names:?}");
    // Answered, the rest of the flood comes through.
    for reply in replies {
        let _ = reply.send(isobar::runner::inbox::Verdict::allow(Vec::new()));
    }
    let more = tokio::time::timeout(std::time::Duration::from_secs(2), handed.recv()).await;
    assert!(matches!(more, Ok(Some(_))), "the flood stopped");
    drop(handed);
    for task in tasks {
        let _ = task.await;
    }
    server.abort();
}
