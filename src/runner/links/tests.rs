use super::*;

const OBJECTS: &str = "\
apiVersion: v1
kind: Service
metadata: {name: authz, namespace: ext}
spec: {ports: [{name: grpc, port: 9091}]}
---
apiVersion: projectcontour.io/v1alpha1
kind: ExtensionService
metadata: {name: authz, namespace: ext}
spec:
  protocol: h2c
  services: [{name: authz, port: 9091}]
  timeoutPolicy: {response: 500ms}
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: guarded, namespace: default}
spec:
  virtualhost:
    fqdn: guarded.example.com
    tls: {secretName: cert}
    authorization: {extensionRef: {namespace: ext, name: authz}}
  routes: [{services: [{name: web, port: 80}]}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: open, namespace: default}
spec:
  virtualhost: {fqdn: open.example.com}
  routes: [{services: [{name: web, port: 80}]}]
";

fn apply(objects: &mut Objects, yaml: &str) {
    let path = std::path::Path::new("objects.yaml");
    let parsed = crate::provider::manifest::parse_file(path, yaml);
    for object in parsed.unwrap_or_else(|e| panic!("{e}")) {
        objects.apply(object);
    }
}

/// The proxies an edit of `ext/authz` to `spec` reaches, with the links of
/// `OBJECTS` (and `spec`'s Service, when given).
fn reached(spec: &str, service: Option<&str>) -> Vec<String> {
    let config = crate::config::load(None, serde_json::json!({})).unwrap_or_else(|e| panic!("{e}"));
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let mut objects = Objects::default();
    apply(&mut objects, OBJECTS);
    let mut links = Links::of(&objects, &pipeline);
    let head = "apiVersion: projectcontour.io/v1alpha1\nkind: ExtensionService\nmetadata: {name: authz, namespace: ext}\n";
    apply(&mut objects, &format!("{head}spec:\n{spec}"));
    if let Some(ports) = service {
        apply(
            &mut objects,
            &format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: authz, namespace: ext}}\nspec: {{ports: {ports}}}\n"
            ),
        );
    }
    let key = ObjectKey::new(isobar_contour::EXTENSION_SERVICE, "ext", "authz");
    let reach = links.update(&objects, &pipeline, &BTreeSet::from([key.clone()]));
    assert!(reach.objects.contains(&key), "{:?}", reach.objects);
    let proxies = reach
        .objects
        .into_iter()
        .filter(|k| k.kind == isobar_contour::HTTP_PROXY);
    proxies.map(|k| k.name).collect()
}

#[test]
fn an_extension_service_edit_reaches_its_callers_only_when_what_they_read_changes() {
    let base = "  protocol: h2c\n  services: [{name: authz, port: 9091}]\n";
    let timeout = "  timeoutPolicy: {response: 500ms}\n";
    // Its balancing and circuit breakers go into its cluster alone.
    let balanced = format!(
        "{base}{timeout}  loadBalancerPolicy: {{strategy: Random}}\n  circuitBreakerPolicy: {{maxConnections: 7}}\n"
    );
    assert_eq!(reached(&balanced, None), Vec::<String>::new());
    // Its response timeout is the default of every check the proxy makes.
    let slower = format!("{base}  timeoutPolicy: {{response: 2s}}\n");
    assert_eq!(reached(&slower, None), ["guarded"]);
    // Its protocol decides whether it is valid.
    let h3 = format!("  protocol: h3\n  services: [{{name: authz, port: 9091}}]\n{timeout}");
    assert_eq!(reached(&h3, None), ["guarded"]);
    // So does the Service it names: the port it calls moved away.
    let same = format!("{base}{timeout}");
    assert_eq!(
        reached(&same, Some("[{name: grpc, port: 9092}]")),
        ["guarded"]
    );
    assert_eq!(
        reached(&same, Some("[{name: grpc, port: 9091}]")),
        Vec::<String>::new()
    );
}
