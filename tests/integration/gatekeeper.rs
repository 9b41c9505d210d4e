//! OPA Gatekeeper's ConstraintTemplates and Constraints, and policies in Gatekeeper's and
//! kube-mgmt's shapes, enforced by the `opa` processor without Gatekeeper: the shipped
//! library-shaped templates (`policies/gatekeeper/`) through the pipeline, and from the
//! Kubernetes API with the Constraint's status and the admission webhook.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use isobar::config::Config;
use isobar::provider::manifest::parse_file;
use isobar::runner::pipeline::Pipeline;
use isobar_plugin_opa::gatekeeper::CONSTRAINT_TEMPLATE;
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::{Kind, ObjectKey, Objects, StatusReport};

use crate::apiserver::ApiServer;
use crate::support::{eventually, service_yaml};

pub(crate) fn repo(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(path)
        .display()
        .to_string()
}

fn library() -> String {
    [
        "https-only",
        "unique-ingress-host",
        "block-wildcard-ingress",
        "allowed-host-suffixes",
    ]
    .iter()
    .map(|name| {
        std::fs::read_to_string(repo(&format!("policies/gatekeeper/{name}.yaml")))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    })
    .collect::<Vec<_>>()
    .join("\n---\n")
}

pub(crate) fn objects(yaml: &str) -> Objects {
    let mut objects = Objects::default();
    for o in parse_file(Path::new("t.yaml"), yaml).unwrap_or_else(|e| panic!("{e}")) {
        objects.apply(o);
    }
    objects
}

/// An Ingress for `host` (`None`: a rule without a host); with `https`, TLS and the
/// annotation that turns plain HTTP off.
pub(crate) fn ingress(ns: &str, name: &str, host: Option<&str>, https: bool) -> String {
    let (tls, annotations) = if https {
        (
            format!(
                "  tls: [{{hosts: ['{}'], secretName: cert}}]\n",
                host.unwrap_or("x")
            ),
            "\n  annotations: {kubernetes.io/ingress.allow-http: 'false'}".to_string(),
        )
    } else {
        (String::new(), String::new())
    };
    let host = host.map(|h| format!("host: '{h}', ")).unwrap_or_default();
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: {ns}{annotations}\nspec:\n{tls}  rules: [{{{host}http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}}}]\n"
    )
}

fn proxy(ns: &str, name: &str, fqdn: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: '{fqdn}'}}\n  routes: [{{services: [{{name: web, port: 80}}]}}]\n"
    )
}

pub(crate) fn pipeline(policies: &[String]) -> Pipeline {
    let mut config = Config::default();
    config.pipeline.processors.push("opa".into());
    config
        .plugins
        .insert("opa".into(), json!({ "policies": policies }));
    Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"))
}

/// `(reason, message)` of each policy error and warning of an object (the test
/// Ingresses name a TLS Secret that does not exist: those conditions are left out).
pub(crate) fn conditions(
    status: &StatusReport,
    kind: Kind,
    ns: &str,
    name: &str,
) -> Vec<(Reason, String)> {
    status
        .get(&ObjectKey::new(kind, ns, name))
        .map(|s| {
            s.errors
                .iter()
                .chain(&s.warnings)
                .filter(|c| c.type_ == ConditionType::PolicyError)
                .map(|c| (c.reason, c.message.clone()))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn constraint_status(status: &StatusReport, kind: &str, name: &str) -> Value {
    let key = ObjectKey::new(isobar_plugin_opa::gatekeeper::CONSTRAINT, kind, name);
    status
        .get(&key)
        .and_then(|s| s.fields.as_deref())
        .map(|f| Value::Object(f.clone()))
        .unwrap_or_default()
}

/// The four ingress policies of Gatekeeper's library, as that library writes them (HTTPS
/// only, unique ingress host, no wildcard hosts, allowed host suffixes with a lib), read
/// from manifests as templates and constraints: each denies what it should, `match`
/// (kinds, excluded namespaces) and `enforcementAction` (deny, warn, dryrun) hold, the
/// constraints' statuses list their violations and the templates' say they compiled.
#[test]
fn the_library_ingress_policies_are_enforced_as_gatekeeper_enforces_them() {
    let extra = "apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sHttpsOnly\nmetadata: {name: https-warn}\nspec:\n  enforcementAction: warn\n  match:\n    namespaces: [w]\n    kinds: [{apiGroups: [networking.k8s.io], kinds: [Ingress]}]\n  parameters: {tlsOptional: true}\n---\napiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sBlockWildcardIngress\nmetadata: {name: wildcards-counted}\nspec:\n  enforcementAction: dryrun\n";
    let store = objects(
        &[
            library(),
            extra.to_string(),
            service_yaml("a", "web", 8080),
            service_yaml("b", "web", 8080),
            service_yaml("w", "web", 8080),
            service_yaml("kube-system", "web", 8080),
            ingress("a", "good", Some("good.example.com"), true),
            ingress("a", "plain", Some("plain.example.com"), false),
            ingress("b", "wild", Some("*.wild.example.com"), true),
            ingress("b", "nohost", None, true),
            ingress("kube-system", "internal", Some("internal.local"), true),
            ingress("w", "soft", Some("soft.example.com"), true),
            proxy("a", "elsewhere", "elsewhere.org"),
            proxy("a", "fine", "fine.example.com"),
        ]
        .join("\n---\n"),
    );
    let out = pipeline(&[]).build(&store);
    let s = &out.status;
    let ing = |ns, name| conditions(s, Kind::Ingress, ns, name);

    assert!(ing("a", "good").is_empty(), "{:?}", ing("a", "good"));
    assert_eq!(
        ing("a", "plain"),
        [(
            Reason::PolicyDenied,
            "[ingress-https-only] Ingress plain must be HTTPS only: TLS, and the annotation kubernetes.io/ingress.allow-http set to \"false\"".to_string()
        )]
    );
    assert_eq!(
        ing("b", "wild"),
        [(
            Reason::PolicyDenied,
            "[block-wildcard-ingress] host \"*.wild.example.com\" is a wildcard: it could take traffic meant for other applications".to_string()
        )]
    );
    let nohost = ing("b", "nohost");
    assert!(
        nohost.iter().any(|(r, m)| *r == Reason::PolicyDenied
            && m == "[block-wildcard-ingress] a rule without a host matches every host"),
        "{nohost:?}"
    );
    // Excluded from the suffix constraint; HTTPS; its own host.
    assert!(
        ing("kube-system", "internal").is_empty(),
        "{:?}",
        ing("kube-system", "internal")
    );
    // Only the warn constraint of namespace w applies there (tlsOptional): HTTPS, so
    // nothing; the deny constraint applies everywhere and is met.
    assert!(ing("w", "soft").is_empty(), "{:?}", ing("w", "soft"));
    assert_eq!(
        conditions(s, isobar_contour::HTTP_PROXY, "a", "elsewhere"),
        [(
            Reason::PolicyDenied,
            "[hosts-under-example-com] host elsewhere.org does not end in an allowed suffix [\".example.com\"]".to_string()
        )]
    );
    assert!(conditions(s, isobar_contour::HTTP_PROXY, "a", "fine").is_empty());

    // Denied objects are not served; the others are.
    let hosts = out.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER);
    assert!(hosts.contains_key("fine.example.com"));
    assert!(!hosts.contains_key("elsewhere.org"));
    assert!(!hosts.contains_key("plain.example.com"));

    // The constraints' statuses, as Gatekeeper's audit writes them.
    let https = constraint_status(s, "K8sHttpsOnly", "ingress-https-only");
    assert_eq!(https["totalViolations"], 1, "{https}");
    assert_eq!(
        https["violations"][0],
        json!({"enforcementAction": "deny", "group": "networking.k8s.io", "version": "v1",
               "kind": "Ingress", "namespace": "a", "name": "plain",
               "message": "Ingress plain must be HTTPS only: TLS, and the annotation kubernetes.io/ingress.allow-http set to \"false\""})
    );
    assert_eq!(https["byPod"][0]["enforced"], true);
    // dryrun counts (every namespace: both wildcard Ingresses) but changes nothing.
    let counted = constraint_status(s, "K8sBlockWildcardIngress", "wildcards-counted");
    assert_eq!(counted["totalViolations"], 2, "{counted}");
    assert_eq!(counted["violations"][0]["enforcementAction"], "dryrun");
    let unique = constraint_status(s, "K8sUniqueIngressHost", "unique-ingress-host");
    assert_eq!(unique["totalViolations"], 0, "{unique}");
    let template = s
        .get(&ObjectKey::new(
            CONSTRAINT_TEMPLATE,
            "",
            "k8sallowedhostsuffixes",
        ))
        .and_then(|t| t.fields.as_deref())
        .cloned()
        .unwrap_or_default();
    assert_eq!(template.get("created"), Some(&json!(true)));
}

/// Unique ingress host reads the other Ingresses from `data.inventory`: a second
/// Ingress on a host is a violation, for both in the controller (as Gatekeeper's audit
/// reports both), and the warn action leaves objects served with a warning.
#[test]
fn unique_ingress_host_reads_the_inventory_and_warn_only_warns() {
    let template = std::fs::read_to_string(repo("policies/gatekeeper/unique-ingress-host.yaml"))
        .unwrap_or_else(|e| panic!("{e}"))
        .replace(
            "name: unique-ingress-host\nspec:\n",
            "name: unique-ingress-host\nspec:\n  enforcementAction: warn\n",
        );
    let store = objects(
        &[
            template,
            service_yaml("a", "web", 8080),
            service_yaml("b", "web", 8080),
            ingress("a", "first", Some("shared.example.com"), false),
            ingress("b", "second", Some("shared.example.com"), false),
            ingress("b", "alone", Some("alone.example.com"), false),
        ]
        .join("\n---\n"),
    );
    let out = pipeline(&[]).build(&store);
    let second = conditions(&out.status, Kind::Ingress, "b", "second");
    assert_eq!(
        second,
        [(
            Reason::PolicyWarning,
            "[unique-ingress-host] ingress host shared.example.com is already used by ingress a/first".to_string()
        )]
    );
    assert!(conditions(&out.status, Kind::Ingress, "b", "alone").is_empty());
    let status = constraint_status(&out.status, "K8sUniqueIngressHost", "unique-ingress-host");
    assert_eq!(status["totalViolations"], 2, "{status}");
    assert!(
        out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("shared.example.com")
    );
}

/// A template whose Rego does not compile says so in its status and in its
/// constraints' (not enforced); a constraint of a kind no template declares, and one
/// with an unknown action or a namespaceSelector, say why they are not enforced. The
/// objects are served.
#[test]
fn broken_templates_and_constraints_say_why_in_their_status() {
    let yaml = "apiVersion: templates.gatekeeper.sh/v1\nkind: ConstraintTemplate\nmetadata: {name: k8sbroken}\nspec:\n  crd: {spec: {names: {kind: K8sBroken}}}\n  targets:\n  - target: admission.k8s.gatekeeper.sh\n    rego: |\n      package k8sbroken\n      violation[{\"msg\": msg}] {\n        msg := \n      }\n---\napiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sBroken\nmetadata: {name: b}\n---\napiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sNoTemplate\nmetadata: {name: orphan}\n---\napiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sHttpsOnly\nmetadata: {name: odd-action}\nspec: {enforcementAction: audit}\n---\napiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sHttpsOnly\nmetadata: {name: by-namespace-labels}\nspec:\n  match: {namespaceSelector: {matchLabels: {team: a}}}\n";
    let https = std::fs::read_to_string(repo("policies/gatekeeper/https-only.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let https = https
        .split("\n---\n")
        .next()
        .unwrap_or_default()
        .to_string();
    let store = objects(
        &[
            yaml.to_string(),
            https,
            service_yaml("a", "web", 8080),
            ingress("a", "plain", Some("plain.example.com"), false),
        ]
        .join("\n---\n"),
    );
    let out = pipeline(&[]).build(&store);
    let template = out
        .status
        .get(&ObjectKey::new(CONSTRAINT_TEMPLATE, "", "k8sbroken"))
        .and_then(|t| t.fields.as_deref())
        .map(|f| Value::Object(f.clone()))
        .unwrap_or_default();
    assert_eq!(template["created"], false, "{template}");
    let error = template["byPod"][0]["errors"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(error.contains("k8sbroken.rego:"), "{template}");
    let why = |kind: &str, name: &str| -> String {
        let status = constraint_status(&out.status, kind, name);
        assert_eq!(status["byPod"][0]["enforced"], false, "{status}");
        status["byPod"][0]["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(why("K8sBroken", "b").contains("does not compile"));
    assert_eq!(
        why("K8sNoTemplate", "orphan"),
        "no ConstraintTemplate declares kind K8sNoTemplate"
    );
    assert!(why("K8sHttpsOnly", "odd-action").contains("\"audit\" is not supported"));
    assert!(why("K8sHttpsOnly", "by-namespace-labels").contains("namespaceSelector"));
    // Each Constraint that could not judge says so on the Ingress it may select, which
    // is served (the default failure policy, Ignore, as Gatekeeper's webhook).
    let said = conditions(&out.status, Kind::Ingress, "a", "plain");
    assert_eq!(said.len(), 4, "{said:?}");
    assert!(
        said.iter()
            .all(|(reason, message)| *reason == Reason::PolicyNotEvaluated
                && message.contains("failure policy Ignore")),
        "{said:?}"
    );
    assert!(
        out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("plain.example.com")
    );
}

/// What becomes of an object a Constraint cannot judge (its selector cannot be read,
/// its template does not compile, its evaluation fails): served with a warning under
/// `Ignore` (the default), not served under `Fail`, set for every Constraint
/// (`plugins.opa.gatekeeper-failure-policy`) or by one Constraint's annotation; a dry
/// run refuses nothing; an annotation that is not a failure policy is the Constraint's
/// error. Either way the Ingress's condition is `PolicyNotEvaluated`.
#[test]
fn failure_policies_decide_what_becomes_of_objects_a_constraint_cannot_judge() {
    // Whether the Ingress is served, and its policy errors and warnings.
    type Outcome = (bool, Vec<(Reason, String)>, Vec<(Reason, String)>);
    let https = std::fs::read_to_string(repo("policies/gatekeeper/https-only.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let template = https
        .split("\n---\n")
        .next()
        .unwrap_or_default()
        .to_string();
    // Loops for millions of steps on every Ingress: past the 100 ms evaluation limit.
    let slow = "apiVersion: templates.gatekeeper.sh/v1\nkind: ConstraintTemplate\nmetadata: {name: k8sslow}\nspec:\n  crd: {spec: {names: {kind: K8sSlow}}}\n  targets:\n  - target: admission.k8s.gatekeeper.sh\n    rego: |\n      package k8sslow\n      violation[{\"msg\": msg}] {\n        some i, j\n        numbers.range(1, 6000)[i]\n        numbers.range(1, 6000)[j]\n        i == j + 100000\n        msg := \"unreachable\"\n      }\n";
    let constraint = |kind: &str, annotation: Option<&str>, spec: &str| {
        let annotations = annotation
            .map(|a| format!(", annotations: {{isobar.projectcontour.io/failure-policy: '{a}'}}"))
            .unwrap_or_default();
        format!(
            "apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: {kind}\nmetadata: {{name: c{annotations}}}\nspec: {spec}\n"
        )
    };
    let unreadable = "{match: {namespaceSelector: {matchLabels: {team: a}}}}";
    let build = |policy: serde_json::Value, constraint: String| {
        let mut config = Config::default();
        config.pipeline.processors.push("opa".into());
        config.plugins.insert("opa".into(), policy);
        let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
        let store = objects(
            &[
                template.clone(),
                slow.to_string(),
                constraint,
                service_yaml("a", "web", 8080),
                ingress("a", "plain", Some("plain.example.com"), false),
            ]
            .join("\n---\n"),
        );
        let out = pipeline.build(&store);
        let status = out
            .status
            .get(&ObjectKey::new(Kind::Ingress, "a", "plain"))
            .cloned()
            .unwrap_or_default();
        let reasons = |c: &[isobar_sdk::condition::SubCondition]| {
            c.iter()
                .filter(|c| c.type_ == ConditionType::PolicyError)
                .map(|c| (c.reason, c.message.clone()))
                .collect::<Vec<_>>()
        };
        let served = out
            .ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("plain.example.com");
        (served, reasons(&status.errors), reasons(&status.warnings))
    };
    let open = |(served, errors, warnings): Outcome| {
        assert!(served && errors.is_empty(), "{errors:?}");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(warnings[0].0, Reason::PolicyNotEvaluated, "{warnings:?}");
        warnings[0].1.clone()
    };
    let closed = |(served, errors, _): Outcome| {
        assert!(!served, "an unjudged Ingress is not served under Fail");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].0, Reason::PolicyNotEvaluated, "{errors:?}");
        assert!(errors[0].1.contains("failure policy Fail"), "{errors:?}");
        errors[0].1.clone()
    };

    let message = open(build(
        json!({}),
        constraint("K8sHttpsOnly", None, unreadable),
    ));
    assert!(
        message.contains("constraint K8sHttpsOnly/c: match.namespaceSelector"),
        "{message}"
    );
    closed(build(
        json!({"gatekeeper-failure-policy": "Fail"}),
        constraint("K8sHttpsOnly", None, unreadable),
    ));
    closed(build(
        json!({}),
        constraint("K8sHttpsOnly", Some("Fail"), unreadable),
    ));
    // The Constraint's own word wins over the setting.
    open(build(
        json!({"gatekeeper-failure-policy": "Fail"}),
        constraint("K8sHttpsOnly", Some("Ignore"), unreadable),
    ));
    open(build(
        json!({}),
        constraint(
            "K8sHttpsOnly",
            Some("Fail"),
            "{enforcementAction: dryrun, match: {namespaceSelector: {matchLabels: {team: a}}}}",
        ),
    ));
    // Without a template, and with an evaluation that runs out of time.
    closed(build(
        json!({}),
        constraint("K8sMissing", Some("Fail"), "{}"),
    ));
    let message = closed(build(json!({}), constraint("K8sSlow", Some("Fail"), "{}")));
    assert!(message.contains("constraint K8sSlow/c:"), "{message}");
    let message = open(build(json!({}), constraint("K8sSlow", None, "{}")));
    assert!(message.contains("failure policy Ignore"), "{message}");

    // An annotation that is not a failure policy: the Constraint's error, and the
    // setting decides.
    let mut config = Config::default();
    config.pipeline.processors.push("opa".into());
    config.plugins.insert("opa".into(), json!({}));
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let store = objects(
        &[
            template.clone(),
            constraint("K8sHttpsOnly", Some("Sometimes"), "{}"),
            service_yaml("a", "web", 8080),
            ingress("a", "plain", Some("plain.example.com"), false),
        ]
        .join("\n---\n"),
    );
    let out = pipeline.build(&store);
    let status = constraint_status(&out.status, "K8sHttpsOnly", "c");
    assert_eq!(status["byPod"][0]["enforced"], false, "{status}");
    assert!(
        status["byPod"][0]["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("isobar.projectcontour.io/failure-policy: failure policy \"Sometimes\""),
        "{status}"
    );
}

/// Policy files in the two shapes policies from the wild come in: OPA kube-mgmt's
/// (`deny` over `input.request`, Rego v0) and Gatekeeper's (`violation` over
/// `input.review`), given to `plugins.opa.policies`.
#[test]
fn kube_mgmt_and_gatekeeper_shaped_policy_files_deny() {
    let pipeline = pipeline(&[
        repo("tests/fixtures/gatekeeper/kube-mgmt-host-suffix.rego"),
        repo("tests/fixtures/gatekeeper/violation-shape.rego"),
    ]);
    let store = objects(
        &[
            service_yaml("shop", "web", 8080),
            service_yaml("default", "web", 8080),
            ingress("shop", "front", Some("front.shop.example.com"), false),
            ingress("shop", "stray", Some("stray.example.com"), false),
            proxy("default", "p", "p.example.com"),
        ]
        .join("\n---\n"),
    );
    let out = pipeline.build(&store);
    assert!(conditions(&out.status, Kind::Ingress, "shop", "front").is_empty());
    assert_eq!(
        conditions(&out.status, Kind::Ingress, "shop", "stray"),
        [(
            Reason::PolicyDenied,
            "ingress stray: host stray.example.com is not under shop.example.com".to_string()
        )]
    );
    assert_eq!(
        conditions(&out.status, isobar_contour::HTTP_PROXY, "default", "p"),
        [(
            Reason::PolicyDenied,
            "HTTPProxy p is in the default namespace".to_string()
        )]
    );
}

/// From the Kubernetes API, without Gatekeeper: the templates are read, each
/// Constraint kind they declare is watched, the Constraint's status gets its
/// violations, and the admission webhook refuses a violating Ingress with Gatekeeper's
/// message; fixing the Ingress clears the violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constraints_from_the_cluster_are_enforced_and_their_status_written() {
    let server = ApiServer::start().await;
    for document in library().split("\n---\n") {
        server.put(document);
    }
    for document in service_yaml("a", "web", 18080).split("\n---\n") {
        server.put(document);
    }
    server.put(&ingress("a", "plain", Some("plain.example.com"), false));
    let mut config = Config::default();
    config.pipeline.processors.push("opa".into());
    config.plugins.insert("opa".into(), json!({}));
    config.leader_election.disabled = true;
    config.pipeline.holdoff_delay.0 = Duration::ZERO;
    config.pipeline.holdoff_max_delay.0 = Duration::ZERO;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let controller = server.controller(&config, dir.path()).await;
    let wait = Duration::from_secs(30);
    let status = |server: &ApiServer| {
        server
            .get(
                "constraints.gatekeeper.sh/v1beta1",
                "K8sHttpsOnly",
                "",
                "ingress-https-only",
            )
            .map(|o| o["status"].clone())
            .unwrap_or_default()
    };
    let written = eventually(wait, || async {
        let s = status(&server);
        (s["totalViolations"] == 1).then_some(s)
    })
    .await
    .unwrap_or_else(|| panic!("no violations written: {}", status(&server)));
    assert_eq!(written["violations"][0]["name"], "plain", "{written}");
    let created = eventually(wait, || async {
        let t = server.get(
            "templates.gatekeeper.sh/v1",
            "ConstraintTemplate",
            "",
            "k8shttpsonly",
        )?;
        (t["status"]["created"] == true).then_some(())
    })
    .await;
    assert!(created.is_some(), "the template's status says nothing");

    // The webhook refuses another violating Ingress with Gatekeeper's message.
    let candidate = parse_file(
        Path::new("c.yaml"),
        &ingress("a", "second", Some("second.example.com"), false),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .remove(0);
    let (reply, answer) = tokio::sync::oneshot::channel();
    let sent = controller
        .admission
        .send(isobar::runner::inbox::AdmissionRequest {
            candidate: isobar::runner::inbox::Candidate {
                operation: isobar::runner::inbox::Operation::Create,
                key: candidate.key(),
                object: Some(candidate),
                dry_run: true,
            },
            reply,
        })
        .await;
    assert!(sent.is_ok());
    let verdict = answer.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!verdict.allowed);
    assert!(
        verdict
            .message
            .contains("[ingress-https-only] Ingress second must be HTTPS only"),
        "{}",
        verdict.message
    );

    server.put(&ingress("a", "plain", Some("plain.example.com"), true));
    let cleared = eventually(wait, || async {
        let s = status(&server);
        (s["totalViolations"] == 0).then_some(s)
    })
    .await;
    assert!(cleared.is_some(), "{}", status(&server));
    controller.shutdown().await;
}

/// A Constraint walking the whole `data.inventory` (a count per namespace, which no
/// index answers) that runs out of a build's time (`inventory-budget`, here 1 ms)
/// leaves objects for later builds, which follow by themselves, with no change to the
/// objects, until every object is judged: the Constraint's status then says it is
/// enforced, with no violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_left_unjudged_are_judged_by_the_next_builds_without_a_change() {
    let server = ApiServer::start().await;
    for document in INGRESSES_PER_NAMESPACE.split("\n---\n") {
        server.put(document);
    }
    for document in service_yaml("a", "web", 18080).split("\n---\n") {
        server.put(document);
    }
    for i in 0..40 {
        server.put(&ingress(
            "a",
            &format!("i{i}"),
            Some(&format!("h{i}.example.com")),
            false,
        ));
    }
    let mut config = Config::default();
    config.pipeline.processors.push("opa".into());
    config.plugins.insert(
        "opa".into(),
        json!({"inventory-budget": "1ms", "gatekeeper-failure-policy": "Fail"}),
    );
    config.leader_election.disabled = true;
    config.pipeline.holdoff_delay.0 = Duration::from_millis(10);
    config.pipeline.holdoff_max_delay.0 = Duration::from_millis(10);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let controller = server.controller(&config, dir.path()).await;
    let status = |server: &ApiServer| {
        server
            .get(
                "constraints.gatekeeper.sh/v1beta1",
                "K8sIngressesPerNamespace",
                "",
                "at-most-100",
            )
            .map(|o| o["status"].clone())
            .unwrap_or_default()
    };
    let deferred = eventually(Duration::from_secs(30), || async {
        let s = status(&server);
        let message = s["byPod"][0]["errors"][0]["message"].as_str()?.to_string();
        message.contains("not judged yet").then_some(message)
    })
    .await;
    assert!(
        deferred.is_some(),
        "a 1 ms budget judged 40 Ingresses at once: {}",
        status(&server)
    );
    let done = eventually(Duration::from_secs(60), || async {
        let s = status(&server);
        (s["byPod"][0]["enforced"] == true && s["totalViolations"] == 0).then_some(s)
    })
    .await;
    assert!(done.is_some(), "still unjudged: {}", status(&server));
    controller.shutdown().await;
}

/// At most `max` Ingresses per namespace: a count over the inventory.
const INGRESSES_PER_NAMESPACE: &str = r#"apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: k8singressespernamespace
spec:
  crd:
    spec:
      names:
        kind: K8sIngressesPerNamespace
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8singressespernamespace

        violation[{"msg": msg}] {
          ns := input.review.object.metadata.namespace
          count([o | o := data.inventory.namespace[ns][_]["Ingress"][_]]) > input.parameters.max
          msg := sprintf("namespace %v has more than %v Ingresses", [ns, input.parameters.max])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sIngressesPerNamespace
metadata:
  name: at-most-100
spec:
  match:
    kinds:
      - apiGroups: [networking.k8s.io]
        kinds: [Ingress]
  parameters:
    max: 100
"#;

/// `isobar gatekeeper-crds` prints the ConstraintTemplate CRD and each template's
/// Constraint CRD, as Gatekeeper names them, valid against Kubernetes' schemas.
#[test]
fn gatekeeper_crds_are_printed_for_a_cluster_without_gatekeeper() {
    let (ok, out, err) = crate::support::isobar(&["gatekeeper-crds", "policies/gatekeeper"], &[]);
    assert!(ok, "{err}");
    let names: Vec<String> = serde_yaml::Deserializer::from_str(&out)
        .filter_map(|doc| {
            let v = <serde_yaml::Value as serde::Deserialize>::deserialize(doc).ok()?;
            v["metadata"]["name"].as_str().map(str::to_string)
        })
        .collect();
    assert_eq!(
        names,
        [
            "constrainttemplates.templates.gatekeeper.sh",
            "k8sallowedhostsuffixes.constraints.gatekeeper.sh",
            "k8sblockwildcardingress.constraints.gatekeeper.sh",
            "k8shttpsonly.constraints.gatekeeper.sh",
            "k8suniqueingresshost.constraints.gatekeeper.sh",
        ]
    );
    assert!(
        out.contains("suffixes:\n"),
        "the parameters schema is the template's: {out}"
    );
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("crds.yaml");
    std::fs::write(&file, &out).unwrap_or_else(|e| panic!("{e}"));
    let run = std::process::Command::new("kubernetes-validate")
        .args(["--strict", "--quiet"])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("kubernetes-validate: {e}"));
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
}
