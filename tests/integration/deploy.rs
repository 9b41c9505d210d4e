//! `deploy/`: the install is what the kustomize base lists, rendered into one file;
//! every manifest validates against Kubernetes' schemas (the `kubernetes-validate`
//! PyPI package); and every `isobar` command line in it is one Isobar takes.

use serde::Deserialize;

use crate::support::isobar;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// `deploy/render/isobar.yaml`: the resources of `deploy/kustomization.yaml`, in order.
fn rendered() -> String {
    let kustomization: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(format!("{REPO}/deploy/kustomization.yaml"))
            .unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut out = String::from(
        "# Isobar's install (namespace projectcontour), rendered from deploy/kustomization.yaml:\n\
         #   kubectl apply -f deploy/render/isobar.yaml\n\
         # Regenerate with UPDATE_RENDER=1 cargo test --test integration deploy.\n",
    );
    for resource in kustomization["resources"]
        .as_sequence()
        .into_iter()
        .flatten()
    {
        let file = resource.as_str().unwrap_or_default();
        let text = std::fs::read_to_string(format!("{REPO}/deploy/{file}"))
            .unwrap_or_else(|e| panic!("deploy/{file}: {e}"));
        out.push_str(&format!("---\n# deploy/{file}\n"));
        out.push_str(text.trim_start_matches("---\n"));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

#[test]
fn the_rendered_install_is_the_kustomize_base() {
    let path = format!("{REPO}/deploy/render/isobar.yaml");
    let want = rendered();
    if std::env::var_os("UPDATE_RENDER").is_some() {
        std::fs::write(&path, &want).unwrap_or_else(|e| panic!("{e}"));
    }
    let shipped = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        shipped == want,
        "deploy/render/isobar.yaml is not the kustomize base; run UPDATE_RENDER=1 cargo test --test integration deploy"
    );
}

#[test]
fn the_install_validates_against_kubernetes_schemas() {
    let run = std::process::Command::new("kubernetes-validate")
        .args(["--strict", "--quiet"])
        .arg(format!("{REPO}/deploy/render/isobar.yaml"))
        .output()
        .unwrap_or_else(|e| {
            panic!("kubernetes-validate: {e} (`python3 -m pip install kubernetes-validate`)")
        });
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// The `isobar` command lines of a set of manifests: every container (and every `preStop`)
/// that runs `isobar`, its arguments with the namespace variable filled in.
fn isobar_command_lines(text: &str) -> Vec<Vec<String>> {
    let mut lines = Vec::new();
    for doc in documents(text) {
        let pod = &doc["spec"]["template"]["spec"];
        let containers = pod["containers"].as_array().into_iter().flatten();
        let init = pod["initContainers"].as_array().into_iter().flatten();
        for c in containers.chain(init) {
            let strings = |v: &serde_json::Value| -> Vec<String> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str())
                    .map(|s| s.replace("$(CONTOUR_NAMESPACE)", "projectcontour"))
                    .collect()
            };
            let command = strings(&c["command"]);
            if command.first().map(String::as_str) == Some("isobar") {
                let mut line = command[1..].to_vec();
                line.extend(strings(&c["args"]));
                lines.push(line);
            }
            let hook = strings(&c["lifecycle"]["preStop"]["exec"]["command"]);
            if hook.first().map(String::as_str) == Some("isobar") {
                lines.push(hook[1..].to_vec());
            }
        }
    }
    lines
}

/// Each command line, with `--help` appended, parses.
fn assert_isobar_takes(lines: Vec<Vec<String>>) {
    for line in lines {
        let mut args: Vec<&str> = line.iter().map(String::as_str).collect();
        args.push("--help");
        let (ok, _, err) = isobar(&args, &[]);
        assert!(ok, "isobar {}: {err}", line.join(" "));
    }
}

/// Every container of the install that runs `isobar` (and every `preStop`) passes
/// arguments Isobar takes.
#[test]
fn every_isobar_command_line_in_the_install_parses() {
    let lines = isobar_command_lines(&rendered());
    assert_eq!(
        lines.len(),
        5,
        "serve, certgen, bootstrap, shutdown-manager, shutdown: {lines:?}"
    );
    assert_isobar_takes(lines);
}

/// The YAML documents of a multi-document text, as JSON values (empty ones dropped).
fn documents(text: &str) -> Vec<serde_json::Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| {
            let doc = serde_yaml::Value::deserialize(doc).unwrap_or_else(|e| panic!("{e}\n{text}"));
            serde_json::to_value(doc).unwrap_or_default()
        })
        .filter(|doc| !doc.is_null())
        .collect()
}

fn kubernetes_validate(text: &str) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("manifests.yaml");
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
    let run = std::process::Command::new("kubernetes-validate")
        .args(["--strict", "--quiet"])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| {
            panic!("kubernetes-validate: {e} (`python3 -m pip install kubernetes-validate`)")
        });
    assert!(
        run.status.success(),
        "{}{}\n{text}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// The Helm chart `deploy/helm/isobar`, rendered as `helm template --namespace` does:
/// `values.yaml` deep-merged with `overrides`, every template under `templates/` (with
/// the `_*.tpl` definitions) through the Go template engine, with the Helm functions the
/// chart uses. Returns the rendered manifests, or the first template error.
fn helm_template(namespace: &str, overrides: serde_json::Value) -> Result<String, String> {
    use gtmpl_ng::{FuncError, Template, Value};

    fn to_json(v: &Value) -> serde_json::Value {
        match v {
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Number(n) => n
                .as_i64()
                .map(serde_json::Value::from)
                .or_else(|| n.as_u64().map(serde_json::Value::from))
                .or_else(|| n.as_f64().map(serde_json::Value::from))
                .unwrap_or_default(),
            Value::Array(a) => a.iter().map(to_json).collect(),
            Value::Object(m) | Value::Map(m) => m
                .iter()
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect::<serde_json::Map<_, _>>()
                .into(),
            Value::NoValue | Value::Nil | Value::Function(_) => serde_json::Value::Null,
        }
    }
    fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => n
                .as_u64()
                .map(Value::from)
                .or_else(|| n.as_i64().map(Value::from))
                .unwrap_or_else(|| Value::from(n.as_f64().unwrap_or_default())),
            serde_json::Value::String(s) => Value::String(s.clone()),
            serde_json::Value::Array(a) => Value::Array(a.iter().map(from_json).collect()),
            serde_json::Value::Object(m) => {
                Value::Map(m.iter().map(|(k, v)| (k.clone(), from_json(v))).collect())
            }
        }
    }
    fn text(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
    fn args<const N: usize>(name: &str, args: &[Value]) -> Result<[Value; N], FuncError> {
        <[Value; N]>::try_from(args.to_vec()).map_err(|_| FuncError::ExactlyXArgs(name.into(), N))
    }
    fn to_yaml(a: &[Value]) -> Result<Value, FuncError> {
        let [v] = args("toYaml", a)?;
        let yaml =
            serde_yaml::to_string(&to_json(&v)).map_err(|e| FuncError::Generic(e.to_string()))?;
        Ok(Value::String(yaml.trim_end_matches('\n').to_string()))
    }
    fn indent_by(n: &Value, s: &Value) -> Result<String, FuncError> {
        let pad = " ".repeat(
            text(n)
                .parse::<usize>()
                .map_err(|e| FuncError::Generic(e.to_string()))?,
        );
        Ok(text(s)
            .split('\n')
            .map(|line| format!("{pad}{line}"))
            .collect::<Vec<_>>()
            .join("\n"))
    }
    fn indent(a: &[Value]) -> Result<Value, FuncError> {
        let [n, s] = args("indent", a)?;
        Ok(Value::String(indent_by(&n, &s)?))
    }
    fn nindent(a: &[Value]) -> Result<Value, FuncError> {
        let [n, s] = args("nindent", a)?;
        Ok(Value::String(format!("\n{}", indent_by(&n, &s)?)))
    }
    fn quote(a: &[Value]) -> Result<Value, FuncError> {
        let [v] = args("quote", a)?;
        Ok(Value::String(
            serde_json::Value::String(text(&v)).to_string(),
        ))
    }
    fn fail(a: &[Value]) -> Result<Value, FuncError> {
        let [v] = args("fail", a)?;
        Err(FuncError::Generic(text(&v)))
    }
    fn merge(base: &mut serde_json::Value, over: serde_json::Value) {
        match (base, over) {
            (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
                for (k, v) in o {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (b, o) => *b = o,
        }
    }

    let chart = format!("{REPO}/deploy/helm/isobar");
    let read = |path: &str| {
        std::fs::read_to_string(format!("{chart}/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let mut values: serde_json::Value =
        serde_yaml::from_str(&read("values.yaml")).unwrap_or_else(|e| panic!("values.yaml: {e}"));
    merge(&mut values, overrides);
    let meta: serde_json::Value =
        serde_yaml::from_str(&read("Chart.yaml")).unwrap_or_else(|e| panic!("Chart.yaml: {e}"));
    let context = serde_json::json!({
        "Values": values,
        "Release": {"Name": "isobar", "Namespace": namespace, "Service": "Helm"},
        "Chart": {"Name": meta["name"], "Version": meta["version"], "AppVersion": meta["appVersion"]},
    });
    let context = gtmpl_ng::Context::from(from_json(&context));

    let mut files: Vec<_> = std::fs::read_dir(format!("{chart}/templates"))
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|e| {
            e.unwrap_or_else(|e| panic!("{e}"))
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    let helpers: Vec<_> = files.iter().filter(|f| f.starts_with('_')).collect();
    let mut out = String::new();
    for file in files
        .iter()
        .filter(|f| f.ends_with(".yaml") && !f.starts_with('_'))
    {
        let mut template = Template::with_name(file.as_str());
        template.add_funcs(&[
            ("toYaml", to_yaml as gtmpl_ng::Func),
            ("indent", indent),
            ("nindent", nindent),
            ("quote", quote),
            ("fail", fail),
        ]);
        for helper in &helpers {
            template
                .add_template(helper.as_str(), read(&format!("templates/{helper}")))
                .map_err(|e| format!("{helper}: {e}"))?;
        }
        template
            .add_template(file.as_str(), read(&format!("templates/{file}")))
            .map_err(|e| format!("{file}: {e}"))?;
        let text = template
            .render(&context)
            .map_err(|e| format!("{file}: {e}"))?;
        if !text.trim().is_empty() {
            out.push_str(&format!("---\n# Source: isobar/templates/{file}\n{text}\n"));
        }
    }
    Ok(out)
}

fn render_chart(namespace: &str, overrides: serde_json::Value) -> String {
    helm_template(namespace, overrides).unwrap_or_else(|e| panic!("the chart does not render: {e}"))
}

/// One object of a rendered set by kind and name.
fn object<'a>(docs: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// At its default values the chart installs exactly the quickstart's objects
/// (`deploy/render/isobar.yaml` but the Namespace and the CRDs, which `helm install
/// --create-namespace` and the chart's `crds/` provide), and its CRDs are deploy's.
#[test]
fn the_helm_chart_at_its_defaults_installs_the_quickstart() {
    let chart = documents(&render_chart("projectcontour", serde_json::json!({})));
    let mut want: Vec<_> = documents(&rendered())
        .into_iter()
        .filter(|d| d["kind"] != "Namespace" && d["kind"] != "CustomResourceDefinition")
        .collect();
    let key = |d: &serde_json::Value| format!("{}/{}", d["kind"], d["metadata"]["name"]);
    want.sort_by_key(key);
    let mut got = chart.clone();
    got.sort_by_key(key);
    assert_eq!(
        got.iter().map(key).collect::<Vec<_>>(),
        want.iter().map(key).collect::<Vec<_>>()
    );
    for (got, want) in got.iter().zip(&want) {
        assert_eq!(got, want, "{} differs from deploy/", key(want));
    }
    assert_eq!(
        std::fs::read_to_string(format!("{REPO}/deploy/helm/isobar/crds/crds.yaml")).ok(),
        std::fs::read_to_string(format!("{REPO}/deploy/crds.yaml")).ok(),
        "deploy/helm/isobar/crds/crds.yaml is not deploy/crds.yaml: cp deploy/crds.yaml deploy/helm/isobar/crds/"
    );
}

/// The chart's values change what they say and the result is still a valid install:
/// Envoy as a Deployment on the host network behind a NodePort Service, the webhook on
/// (the controller serving it with cert-manager's certificate), certgen off, another
/// namespace; every manifest Kubernetes knows validates, and every command line parses.
#[test]
fn the_helm_chart_values_shape_the_install() {
    let text = render_chart(
        "ingress",
        serde_json::json!({
            "image": {"repository": "registry.example/isobar", "tag": "v1"},
            "imagePullSecrets": [{"name": "pull"}],
            "isobar": {"replicas": 3, "extraArgs": ["--ingress-class-name=isobar"],
                       "nodeSelector": {"pool": "system"},
                       "resources": {"limits": {"memory": "512Mi"}}},
            "configuration": "disablePermitInsecure: true\n",
            "envoy": {"kind": "Deployment", "replicas": 4, "hostNetwork": true,
                      "tolerations": [{"key": "edge", "operator": "Exists", "effect": "NoSchedule"}],
                      "service": {"type": "NodePort", "nodePorts": {"http": 30080, "https": ""}}},
            "certgen": {"enabled": false},
            "webhook": {"enabled": true, "failurePolicy": "Ignore"},
        }),
    );
    let docs = documents(&text);
    // cert-manager's kinds are not Kubernetes' own: the rest is validated as rendered.
    let core: Vec<&str> = text
        .split("---\n")
        .filter(|doc| !doc.contains("apiVersion: cert-manager.io/"))
        .collect();
    assert_eq!(
        core.iter().filter(|d| !d.trim().is_empty()).count(),
        docs.len() - 2
    );
    kubernetes_validate(&core.join("---\n"));

    let isobar = object(&docs, "Deployment", "isobar");
    assert_eq!(isobar["spec"]["replicas"], 3);
    assert_eq!(isobar["metadata"]["namespace"], "ingress");
    let pod = &isobar["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["image"], "registry.example/isobar:v1");
    assert_eq!(pod["imagePullSecrets"][0]["name"], "pull");
    assert_eq!(pod["nodeSelector"]["pool"], "system");
    assert_eq!(
        pod["containers"][0]["resources"]["limits"]["memory"],
        "512Mi"
    );
    let serve: Vec<&str> = pod["containers"][0]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str())
        .collect();
    for flag in [
        "--admission-webhook",
        "--admission-webhook-certificate-file=/webhook/tls.crt",
        "--ingress-class-name=isobar",
    ] {
        assert!(serve.contains(&flag), "{flag} not in {serve:?}");
    }
    let config = object(&docs, "ConfigMap", "isobar");
    assert_eq!(
        config["data"]["contour.yaml"],
        "disablePermitInsecure: true\n"
    );

    let envoy = object(&docs, "Deployment", "envoy");
    assert_eq!(envoy["spec"]["replicas"], 4);
    let pod = &envoy["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(pod["tolerations"][0]["key"], "edge");
    let ports = &pod["containers"][1]["ports"];
    assert!(
        ports[0]["hostPort"].is_null(),
        "host network, no host ports: {ports}"
    );
    let service = object(&docs, "Service", "envoy");
    assert_eq!(service["spec"]["type"], "NodePort");
    assert_eq!(service["spec"]["ports"][0]["nodePort"], 30080);
    assert!(service["spec"]["ports"][1]["nodePort"].is_null());

    assert!(!docs.iter().any(|d| d["kind"] == "Job"), "certgen off");
    assert!(!docs.iter().any(|d| d["kind"] == "DaemonSet"));
    let webhook = object(&docs, "ValidatingWebhookConfiguration", "isobar");
    assert_eq!(webhook["webhooks"][0]["failurePolicy"], "Ignore");
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["service"]["namespace"],
        "ingress"
    );
    let certificate = object(&docs, "Certificate", "isobar-webhook");
    assert_eq!(
        certificate["spec"]["dnsNames"][0],
        "isobar-webhook.ingress.svc"
    );

    let lines = isobar_command_lines(&text);
    assert_eq!(
        lines.len(),
        4,
        "serve, bootstrap, shutdown-manager, shutdown: {lines:?}"
    );
    assert_isobar_takes(lines);
}

/// A ClusterIP Envoy Service has no traffic policy (Kubernetes refuses one); the
/// DaemonSet's host ports follow the values; an Envoy kind the chart does not know is an
/// error naming the value.
#[test]
fn the_helm_chart_refuses_what_it_cannot_install() {
    let text = render_chart(
        "projectcontour",
        serde_json::json!({"envoy": {"service": {"type": "ClusterIP", "annotations": null},
                                     "hostPorts": {"http": 8080, "https": 8443}},
                           "certgen": {"certificateLifetime": 30}}),
    );
    kubernetes_validate(&text);
    let docs = documents(&text);
    let service = object(&docs, "Service", "envoy");
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert!(service["spec"]["externalTrafficPolicy"].is_null());
    assert!(service["metadata"]["annotations"].is_null());
    let ports =
        &object(&docs, "DaemonSet", "envoy")["spec"]["template"]["spec"]["containers"][1]["ports"];
    assert_eq!(ports[0]["hostPort"], 8080);
    let job = object(&docs, "Job", "isobar-certgen");
    assert!(
        job["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .is_some_and(|a| a.iter().any(|a| a == "--certificate-lifetime=30")),
        "{job}"
    );
    assert_isobar_takes(isobar_command_lines(&text));

    let Err(err) = helm_template(
        "projectcontour",
        serde_json::json!({"envoy": {"kind": "StatefulSet"}}),
    ) else {
        panic!("an unknown Envoy kind renders");
    };
    assert!(
        err.contains("envoy.kind is DaemonSet or Deployment"),
        "{err}"
    );
}

/// The NetworkPolicy lets in exactly the controller's served ports: xDS (8001) only from
/// the Envoy pods, metrics and health (8000) and the webhook's target port from
/// anywhere; it selects the controller's pods, and the chart leaves it out on request.
#[test]
fn the_network_policy_admits_only_the_controllers_served_ports() {
    let docs = documents(&rendered());
    let policy = object(&docs, "NetworkPolicy", "isobar");
    let controller = object(&docs, "Deployment", "isobar");
    let envoy = object(&docs, "DaemonSet", "envoy");
    let labels = &controller["spec"]["template"]["metadata"]["labels"];
    for (k, v) in policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
    {
        assert_eq!(&labels[k], v, "the policy does not select the controller");
    }
    let rules = policy["spec"]["ingress"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ports = |rule: &serde_json::Value| -> Vec<u64> {
        let list = rule["ports"].as_array().cloned().unwrap_or_default();
        list.iter().filter_map(|p| p["port"].as_u64()).collect()
    };
    let served: Vec<u64> = controller["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["containerPort"].as_u64())
        .collect();
    let xds = rules
        .iter()
        .find(|r| ports(r) == vec![8001])
        .unwrap_or_else(|| panic!("no rule for xDS: {policy}"));
    assert!(
        served.contains(&8001) && served.contains(&8000),
        "{served:?}"
    );
    let from = &xds["from"][0]["podSelector"]["matchLabels"];
    let envoy_labels = &envoy["spec"]["template"]["metadata"]["labels"];
    assert!(
        from.as_object()
            .into_iter()
            .flatten()
            .all(|(k, v)| &envoy_labels[k] == v)
            && xds["from"].as_array().map(Vec::len) == Some(1),
        "xDS is open to more than the Envoy pods: {xds}"
    );
    let webhook = std::fs::read_to_string(format!("{REPO}/deploy/webhook.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let webhook_port = documents(&webhook)
        .iter()
        .find(|d| d["kind"] == "Service")
        .and_then(|s| s["spec"]["ports"][0]["targetPort"].as_u64())
        .unwrap_or_default();
    let mut open: Vec<u64> = rules
        .iter()
        .filter(|r| r["from"].is_null())
        .flat_map(ports)
        .collect();
    open.sort_unstable();
    assert_eq!(open, vec![8000, webhook_port], "{policy}");
    let without = documents(&render_chart(
        "projectcontour",
        serde_json::json!({"networkPolicy": {"enabled": false}}),
    ));
    assert!(without.iter().all(|d| d["kind"] != "NetworkPolicy"));
}

/// The image the install runs is the one `deploy/Dockerfile` says to build: the tag of its
/// `docker build` line is every `isobar` image of the rendered install and the chart's
/// default; its build stage builds the binary its last stage copies, from a context that
/// `.dockerignore` keeps free of build output.
#[test]
fn the_dockerfile_builds_the_image_the_install_runs() {
    let dockerfile = std::fs::read_to_string(format!("{REPO}/deploy/Dockerfile"))
        .unwrap_or_else(|e| panic!("{e}"));
    let built = dockerfile
        .lines()
        .find_map(|l| {
            l.trim_start_matches('#')
                .trim()
                .strip_prefix("docker build ")
        })
        .and_then(|rest| {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "-t")?;
            words.get(at + 1).map(|s| s.to_string())
        })
        .unwrap_or_else(|| panic!("no `docker build … -t IMAGE` line in deploy/Dockerfile"));
    let install = rendered();
    let images: Vec<&str> = install
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .filter(|i| i.contains("isobar"))
        .collect();
    assert!(!images.is_empty(), "no isobar image in the install");
    for image in images {
        assert_eq!(
            image, built,
            "the install runs an image deploy/Dockerfile does not build"
        );
    }
    let values: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(format!("{REPO}/deploy/helm/isobar/values.yaml"))
            .unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let chart = format!(
        "{}:{}",
        values["image"]["repository"].as_str().unwrap_or_default(),
        values["image"]["tag"].as_str().unwrap_or_default()
    );
    assert_eq!(chart, built, "the chart's default image");
    assert!(
        dockerfile.contains("cargo build --release --locked --bin isobar")
            && dockerfile.contains("COPY --from=build /src/target/release/isobar /bin/isobar"),
        "the build stage must build what the last stage copies:\n{dockerfile}"
    );
    let ignored =
        std::fs::read_to_string(format!("{REPO}/.dockerignore")).unwrap_or_else(|e| panic!("{e}"));
    for path in ["target/", ".git/"] {
        assert!(
            ignored.lines().any(|l| l.trim() == path),
            ".dockerignore must keep {path} out of the build context"
        );
    }
}
