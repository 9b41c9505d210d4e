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

/// Every container of the install that runs `isobar` (and every `preStop` that does)
/// passes arguments Isobar takes: each command line, with `--help` appended, parses.
#[test]
fn every_isobar_command_line_in_the_install_parses() {
    let text = rendered();
    let mut lines = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let doc = serde_yaml::Value::deserialize(doc).unwrap_or_else(|e| panic!("{e}"));
        let doc: serde_json::Value = serde_json::to_value(doc).unwrap_or_default();
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
    assert_eq!(
        lines.len(),
        5,
        "serve, certgen, bootstrap, shutdown-manager, shutdown: {lines:?}"
    );
    for line in lines {
        let mut args: Vec<&str> = line.iter().map(String::as_str).collect();
        args.push("--help");
        let (ok, _, err) = isobar(&args, &[]);
        assert!(ok, "isobar {}: {err}", line.join(" "));
    }
}
