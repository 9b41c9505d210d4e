//! A small Kubernetes API server for tests: real HTTP, real JSON, the parts of the API
//! protocol Isobar's client uses — paged lists with a resourceVersion, watch streams from a
//! resourceVersion (with bookmarks), 410 Gone for a compacted resourceVersion, field
//! selectors on Secrets — so kube-rs's real client and watcher run against it unchanged.
//!
//! Tests change objects through [`ApiServer::put`] / [`ApiServer::delete`] (each gets the
//! next resourceVersion and a watch event), end every open watch with
//! [`ApiServer::expire_watches`] (optionally compacting the history, so resuming gets 410),
//! and make it unreachable with [`ApiServer::set_down`].

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

/// (resource path `group/version/plural`, namespace, name)
type Key = (String, String, String);

#[derive(Clone, Debug)]
struct Change {
    rv: u64,
    resource: String,
    namespace: String,
    kind: &'static str,
    object: Value,
}

#[derive(Default)]
struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: Vec<Change>,
    /// Watches from a resourceVersion below this get 410 Gone.
    oldest: u64,
    /// Bumped to end every open watch.
    generation: u64,
    down: bool,
    /// Every request's method, path and query, for assertions.
    requests: Vec<String>,
    /// When the last list page was answered.
    last_list: Option<std::time::Instant>,
    /// Status updates to answer with 409 Conflict before accepting one.
    conflicts: u32,
    /// Accepted status writes, by "namespace/name".
    status_writes: BTreeMap<String, u32>,
    /// Resources answered 404, as an API server without their CRD answers: by plural
    /// (every version) or by `group/version/plural`.
    unserved: Vec<String>,
}

#[derive(Clone)]
pub struct ApiServer {
    store: Arc<Mutex<Store>>,
    changes: broadcast::Sender<Change>,
    pub addr: std::net::SocketAddr,
}

/// The plural, and the `kind` objects of it carry.
const RESOURCES: &[(&str, &str, &str)] = &[
    ("", "v1", "services"),
    ("", "v1", "secrets"),
    ("discovery.k8s.io", "v1", "endpointslices"),
    ("networking.k8s.io", "v1", "ingresses"),
    ("projectcontour.io", "v1", "httpproxies"),
    ("projectcontour.io", "v1", "tlscertificatedelegations"),
    ("projectcontour.io", "v1alpha1", "extensionservices"),
    ("coordination.k8s.io", "v1", "leases"),
    // The test plugin's kind (tests/plugin).
    ("test.isobar.dev", "v1", "mappings"),
    ("", "v1", "namespaces"),
    ("gateway.networking.k8s.io", "v1", "gatewayclasses"),
    ("gateway.networking.k8s.io", "v1", "gateways"),
    ("gateway.networking.k8s.io", "v1", "httproutes"),
    ("gateway.networking.k8s.io", "v1", "referencegrants"),
    ("gateway.networking.k8s.io", "v1", "tlsroutes"),
    // What Gateway API installs before v1.5 serve (and Contour reads).
    ("gateway.networking.k8s.io", "v1alpha2", "tlsroutes"),
    ("gateway.networking.k8s.io", "v1beta1", "referencegrants"),
    ("gateway.networking.k8s.io", "v1", "grpcroutes"),
    ("gateway.networking.k8s.io", "v1alpha2", "tcproutes"),
    ("gateway.networking.k8s.io", "v1", "tcproutes"),
    ("gateway.networking.k8s.io", "v1", "udproutes"),
    ("gateway.networking.k8s.io", "v1alpha2", "udproutes"),
    ("gateway.networking.k8s.io", "v1", "listenersets"),
    ("gateway.networking.k8s.io", "v1", "backendtlspolicies"),
    (
        "gateway.networking.x-k8s.io",
        "v1alpha1",
        "xbackendtrafficpolicies",
    ),
    ("", "v1", "configmaps"),
    ("projectcontour.io", "v1alpha1", "contourconfigurations"),
    // Gatekeeper's templates, and the constraint kinds of the policies shipped in
    // policies/gatekeeper (Gatekeeper makes one CRD per template).
    ("templates.gatekeeper.sh", "v1", "constrainttemplates"),
    ("constraints.gatekeeper.sh", "v1beta1", "k8shttpsonly"),
    (
        "constraints.gatekeeper.sh",
        "v1beta1",
        "k8suniqueingresshost",
    ),
    (
        "constraints.gatekeeper.sh",
        "v1beta1",
        "k8sblockwildcardingress",
    ),
    (
        "constraints.gatekeeper.sh",
        "v1beta1",
        "k8sallowedhostsuffixes",
    ),
    (
        "constraints.gatekeeper.sh",
        "v1beta1",
        "k8singressespernamespace",
    ),
];

/// The resources whose objects live in no namespace.
const CLUSTER_SCOPED: &[&str] = &[
    "namespaces",
    "gatewayclasses",
    "constrainttemplates",
    "k8shttpsonly",
    "k8suniqueingresshost",
    "k8sblockwildcardingress",
    "k8sallowedhostsuffixes",
    "k8singressespernamespace",
];

fn kind_of(plural: &str) -> &'static str {
    match plural {
        "services" => "Service",
        "secrets" => "Secret",
        "endpointslices" => "EndpointSlice",
        "ingresses" => "Ingress",
        "httpproxies" => "HTTPProxy",
        "tlscertificatedelegations" => "TLSCertificateDelegation",
        "extensionservices" => "ExtensionService",
        "leases" => "Lease",
        "mappings" => "Mapping",
        "namespaces" => "Namespace",
        "gatewayclasses" => "GatewayClass",
        "gateways" => "Gateway",
        "httproutes" => "HTTPRoute",
        "referencegrants" => "ReferenceGrant",
        "tlsroutes" => "TLSRoute",
        "grpcroutes" => "GRPCRoute",
        "tcproutes" => "TCPRoute",
        "udproutes" => "UDPRoute",
        "listenersets" => "ListenerSet",
        "backendtlspolicies" => "BackendTLSPolicy",
        "xbackendtrafficpolicies" => "XBackendTrafficPolicy",
        "configmaps" => "ConfigMap",
        "contourconfigurations" => "ContourConfiguration",
        "constrainttemplates" => "ConstraintTemplate",
        "k8shttpsonly" => "K8sHttpsOnly",
        "k8suniqueingresshost" => "K8sUniqueIngressHost",
        "k8sblockwildcardingress" => "K8sBlockWildcardIngress",
        "k8sallowedhostsuffixes" => "K8sAllowedHostSuffixes",
        "k8singressespernamespace" => "K8sIngressesPerNamespace",
        _ => "Unknown",
    }
}

fn resource_of(api_version: &str, kind: &str) -> Option<String> {
    RESOURCES.iter().find_map(|(group, version, plural)| {
        let av = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        (av == api_version && kind_of(plural) == kind)
            .then(|| format!("{group}/{version}/{plural}"))
    })
}

impl ApiServer {
    pub async fn start() -> ApiServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let (changes, _) = broadcast::channel(4096);
        let server = ApiServer {
            store: Arc::new(Mutex::new(Store {
                rv: 100,
                ..Default::default()
            })),
            changes,
            addr,
        };
        let handler = server.clone();
        let app = axum::Router::new().fallback(move |request: Request<Body>| {
            let server = handler.clone();
            async move { server.handle(request).await }
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        server
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes a kubeconfig for this server into `dir`; returns its path.
    pub fn kubeconfig(&self, dir: &Path) -> String {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster: {{server: \"http://{}\"}}\ncontexts:\n- name: test\n  context: {{cluster: test, user: test}}\ncurrent-context: test\nusers:\n- name: test\n  user: {{}}\n",
            self.addr
        );
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        path.display().to_string()
    }

    /// `isobar serve`'s controller with `config` on this server (its kubeconfig written
    /// into `dir`), reading every namespace.
    pub async fn controller(
        &self,
        config: &isobar::config::Config,
        dir: &Path,
    ) -> isobar::cli::serve::Controller {
        self.controller_watching(config, dir, Vec::new()).await
    }

    /// [`ApiServer::controller`] watching only `namespaces` (`--watch-namespaces`).
    pub async fn controller_watching(
        &self,
        config: &isobar::config::Config,
        dir: &Path,
        namespaces: Vec<String>,
    ) -> isobar::cli::serve::Controller {
        let pipeline = isobar::runner::pipeline::Pipeline::for_config(config)
            .unwrap_or_else(|e| panic!("{e}"));
        let choice = isobar::cli::serve::ProviderChoice::Kubernetes {
            kubeconfig: Some(self.kubeconfig(dir).into()),
            namespaces,
        };
        isobar::cli::serve::Controller::start(config, pipeline, choice)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Creates or replaces the object given as YAML or JSON (one document).
    pub fn put(&self, text: &str) {
        let mut object: Value = serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
        let api_version = object["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let resource = resource_of(&api_version, &kind)
            .unwrap_or_else(|| panic!("the test API server does not serve {api_version} {kind}"));
        let cluster_scoped = CLUSTER_SCOPED
            .iter()
            .any(|plural| resource.ends_with(&format!("/{plural}")));
        let namespace = if cluster_scoped {
            String::new()
        } else {
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string()
        };
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut store = self.lock();
        store.rv += 1;
        let rv = store.rv;
        if !cluster_scoped {
            object["metadata"]["namespace"] = json!(namespace);
        }
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        object["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Apply"}]);
        let key = (resource.clone(), namespace.clone(), name);
        // metadata.generation moves when the spec does, as on a real API server.
        let generation = match store.objects.get(&key) {
            Some(old) if old["spec"] == object["spec"] => old["metadata"]["generation"].clone(),
            Some(old) => json!(old["metadata"]["generation"].as_i64().unwrap_or(0) + 1),
            None => json!(1),
        };
        object["metadata"]["generation"] = generation;
        // metadata.creationTimestamp is set once, when the object is created (seconds).
        if object["metadata"]["creationTimestamp"].is_null() {
            object["metadata"]["creationTimestamp"] = match store.objects.get(&key) {
                Some(old) if !old["metadata"]["creationTimestamp"].is_null() => {
                    old["metadata"]["creationTimestamp"].clone()
                }
                _ => json!(
                    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
                ),
            };
        }
        // The status subresource survives updates of the object, as on a real API server.
        if object.get("status").is_none()
            && let Some(old) = store.objects.get(&key)
            && !old["status"].is_null()
        {
            object["status"] = old["status"].clone();
        }
        let existed = store.objects.insert(key, object.clone()).is_some();
        let change = Change {
            rv,
            resource,
            namespace,
            kind: if existed { "MODIFIED" } else { "ADDED" },
            object,
        };
        store.history.push(change.clone());
        // Sent while the store is held: every watcher gets changes in resourceVersion
        // order (one sent after the lock went could overtake an earlier one, which a
        // watcher then skips as already seen).
        let _ = self.changes.send(change);
        drop(store);
    }

    /// Deletes an object by apiVersion, kind, namespace and name.
    pub fn delete(&self, api_version: &str, kind: &str, namespace: &str, name: &str) {
        let resource = resource_of(api_version, kind)
            .unwrap_or_else(|| panic!("the test API server does not serve {api_version} {kind}"));
        let mut store = self.lock();
        let key = (resource.clone(), namespace.to_string(), name.to_string());
        let Some(mut object) = store.objects.remove(&key) else {
            return;
        };
        store.rv += 1;
        let rv = store.rv;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let change = Change {
            rv,
            resource,
            namespace: namespace.to_string(),
            kind: "DELETED",
            object,
        };
        store.history.push(change.clone());
        // Sent while the store is held (see `put`).
        let _ = self.changes.send(change);
        drop(store);
    }

    /// Ends every open watch. With `compact`, the history so far is forgotten: a watch
    /// resuming from an older resourceVersion gets 410 Gone and the client must relist.
    pub fn expire_watches(&self, compact: bool) {
        let mut store = self.lock();
        store.generation += 1;
        if compact {
            store.oldest = store.rv + 1;
            store.history.clear();
        }
    }

    /// While down, every request answers 503 and open watches end.
    /// Answers every request for `plural` 404 (its CRD is not installed).
    pub fn unserve(&self, plural: &str) {
        self.lock().unserved.push(plural.to_string());
    }

    /// Answers requests for one version of a resource (`group/version/plural`) 404, as
    /// an API server whose CRD does not serve that version.
    pub fn unserve_version(&self, resource: &str) {
        self.lock().unserved.push(resource.to_string());
    }

    /// API discovery for `/apis/GROUP/VERSION`: the resources served there.
    fn discovery(&self, path: &str) -> Option<Response<Body>> {
        let group_version = path.strip_prefix("/apis/")?.trim_end_matches('/');
        let (group, version) = group_version.split_once('/')?;
        if version.contains('/') {
            return None;
        }
        let store = self.lock();
        let resources: Vec<Value> = RESOURCES
            .iter()
            .filter(|(g, v, plural)| {
                *g == group
                    && *v == version
                    && !store
                        .unserved
                        .iter()
                        .any(|u| u == plural || *u == format!("{g}/{v}/{plural}"))
            })
            .map(|(_, _, plural)| {
                json!({
                    "name": plural,
                    "singularName": "",
                    "namespaced": !CLUSTER_SCOPED.contains(plural),
                    "kind": kind_of(plural),
                    "verbs": ["get", "list", "watch", "update"],
                })
            })
            .collect();
        Some(if resources.is_empty() {
            status(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
            )
        } else {
            json_response(
                StatusCode::OK,
                &json!({
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": group_version,
                    "resources": resources,
                }),
            )
        })
    }

    pub fn set_down(&self, down: bool) {
        let mut store = self.lock();
        store.down = down;
        store.generation += 1;
    }

    /// When the last list page was answered.
    pub fn last_list(&self) -> Option<std::time::Instant> {
        self.lock().last_list
    }

    pub fn requests(&self) -> Vec<String> {
        self.lock().requests.clone()
    }

    async fn handle(&self, request: Request<Body>) -> Response<Body> {
        let path = request.uri().path().to_string();
        let query: BTreeMap<String, String> =
            form_urlencoded::parse(request.uri().query().unwrap_or_default().as_bytes())
                .into_owned()
                .collect();
        {
            let mut store = self.lock();
            store
                .requests
                .push(format!("{} {path} {query:?}", request.method()));
            if store.down {
                return status(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ServiceUnavailable",
                    "down",
                );
            }
        }
        if let Some(response) = self.discovery(&path) {
            return response;
        }
        let Some(target) = parse_path(&path) else {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("no route {path}"),
            );
        };
        if self
            .lock()
            .unserved
            .iter()
            .any(|u| *u == target.plural || *u == target.resource)
        {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
            );
        }
        let method = request.method().clone();
        if method != "GET" || target.name.is_some() {
            let body = axum::body::to_bytes(request.into_body(), 16 * 1024 * 1024)
                .await
                .unwrap_or_default();
            return self.object_request(method.as_str(), target, &body);
        }
        let selector = FieldSelector::parse(query.get("fieldSelector").map(String::as_str));
        let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
        if watching {
            self.watch(target, selector, &query)
        } else {
            let response = self.list(target, selector, &query);
            self.lock().last_list = Some(std::time::Instant::now());
            response
        }
    }

    fn list(
        &self,
        target: Target,
        selector: FieldSelector,
        query: &BTreeMap<String, String>,
    ) -> Response<Body> {
        let store = self.lock();
        let items: Vec<&Value> = store
            .objects
            .iter()
            .filter(|((resource, ns, _), object)| {
                *resource == target.resource
                    && target.namespace.as_ref().is_none_or(|t| t == ns)
                    && selector.matches(object)
            })
            .map(|(_, object)| object)
            .collect();
        let start: usize = query
            .get("continue")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let limit: usize = query
            .get("limit")
            .and_then(|l| l.parse().ok())
            .filter(|l| *l > 0)
            .unwrap_or(usize::MAX);
        let page: Vec<Value> = items
            .iter()
            .skip(start)
            .take(limit)
            .map(|object| {
                // List items carry no apiVersion and kind, as from a real API server.
                let mut item = (*object).clone();
                if let Some(fields) = item.as_object_mut() {
                    fields.remove("apiVersion");
                    fields.remove("kind");
                }
                item
            })
            .collect();
        let next = start + page.len();
        let mut metadata = json!({"resourceVersion": store.rv.to_string()});
        if next < items.len() {
            metadata["continue"] = json!(next.to_string());
        }
        let body = json!({
            "apiVersion": target.api_version,
            "kind": format!("{}List", kind_of(&target.plural)),
            "metadata": metadata,
            "items": page,
        });
        json_response(StatusCode::OK, &body)
    }

    fn watch(
        &self,
        target: Target,
        selector: FieldSelector,
        query: &BTreeMap<String, String>,
    ) -> Response<Body> {
        let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);
        let mut changes = self.changes.subscribe();
        let from: u64 = query
            .get("resourceVersion")
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(0);
        let timeout = query
            .get("timeoutSeconds")
            .and_then(|t| t.parse().ok())
            .unwrap_or(290u64);
        let bookmarks = query.get("allowWatchBookmarks").map(String::as_str) == Some("true");
        let (backlog, generation, gone, snapshot_rv) = {
            let store = self.lock();
            let gone = from != 0 && from < store.oldest;
            let backlog: Vec<Change> = store
                .history
                .iter()
                .filter(|c| c.rv > from)
                .cloned()
                .collect();
            (backlog, store.generation, gone, store.rv)
        };
        let server = self.clone();
        tokio::spawn(async move {
            let line = |value: Value| {
                let mut text = value.to_string();
                text.push('\n');
                Ok(Bytes::from(text))
            };
            if gone {
                let error = json!({"type": "ERROR", "object": {
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "message": "too old resource version",
                    "reason": "Expired", "code": 410,
                }});
                let _ = tx.send(line(error)).await;
                return;
            }
            let relevant = |c: &Change| {
                c.resource == target.resource
                    && target.namespace.as_ref().is_none_or(|t| *t == c.namespace)
                    && selector.matches(&c.object)
            };
            let mut last = from;
            for change in backlog.iter().filter(|c| relevant(c)) {
                last = change.rv;
                let event = json!({"type": change.kind, "object": change.object});
                if tx.send(line(event)).await.is_err() {
                    return;
                }
            }
            // The newest change this watch has passed (sent, or not of its resource): a
            // bookmark names no later one, as the API server's do, or a watch resumed
            // from it would miss the changes still queued for this one.
            let mut seen = snapshot_rv.max(from);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => return,
                    _ = tick.tick() => {
                        let current = server.lock().generation;
                        let rv = seen;
                        if current != generation {
                            return;
                        }
                        if bookmarks {
                            let bookmark = json!({"type": "BOOKMARK", "object": {
                                "apiVersion": target.api_version,
                                "kind": kind_of(&target.plural),
                                "metadata": {"resourceVersion": rv.to_string()},
                            }});
                            if tx.send(line(bookmark)).await.is_err() {
                                return;
                            }
                        }
                    }
                    change = changes.recv() => match change {
                        Ok(change) if change.rv > last && relevant(&change) => {
                            last = change.rv;
                            seen = seen.max(change.rv);
                            let event = json!({"type": change.kind, "object": change.object});
                            if tx.send(line(event)).await.is_err() {
                                return;
                            }
                        }
                        Ok(change) => seen = seen.max(change.rv),
                        // Fallen behind the broadcast: the watch ends, and the client
                        // resumes from its last bookmark or event.
                        Err(_) => return,
                    },
                }
            }
        });
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(Body::from_stream(
                tokio_stream::wrappers::ReceiverStream::new(rx),
            ))
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

impl ApiServer {
    /// GET one object, POST (create), PUT (replace, with resourceVersion check) and PUT
    /// `/status`, as the API server does them.
    fn object_request(&self, method: &str, target: Target, body: &[u8]) -> Response<Body> {
        let namespace = target.namespace.clone().unwrap_or_default();
        let sent: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let name = target
            .name
            .clone()
            .or_else(|| sent["metadata"]["name"].as_str().map(String::from))
            .unwrap_or_default();
        let key = (target.resource.clone(), namespace.clone(), name.clone());
        let mut store = self.lock();
        let existing = store.objects.get(&key).cloned();
        let object = match (method, existing, target.status) {
            ("GET", Some(object), _) => return json_response(StatusCode::OK, &object),
            ("GET", None, _) => {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{name} not found"),
                );
            }
            ("POST", Some(_), _) => {
                return status(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    &format!("{name} already exists"),
                );
            }
            ("POST", None, false) => sent,
            ("PUT", None, _) => {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{name} not found"),
                );
            }
            ("PUT", Some(current), status_only) => {
                let stale = sent["metadata"]["resourceVersion"]
                    .as_str()
                    .is_some_and(|rv| Some(rv) != current["metadata"]["resourceVersion"].as_str());
                if status_only && store.conflicts > 0 {
                    store.conflicts -= 1;
                    return status(StatusCode::CONFLICT, "Conflict", "injected conflict");
                }
                if stale {
                    return status(
                        StatusCode::CONFLICT,
                        "Conflict",
                        "the object has been modified; please apply your changes to the latest version and try again",
                    );
                }
                if status_only {
                    *store
                        .status_writes
                        .entry(format!("{namespace}/{name}"))
                        .or_default() += 1;
                    let mut next = current.clone();
                    next["status"] = sent["status"].clone();
                    next
                } else {
                    let mut next = sent;
                    next["status"] = current["status"].clone();
                    next
                }
            }
            _ => {
                return status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", method);
            }
        };
        store.rv += 1;
        let rv = store.rv;
        let mut object = object;
        object["apiVersion"] = json!(target.api_version);
        object["kind"] = json!(kind_of(&target.plural));
        if target.namespace.is_some() {
            object["metadata"]["namespace"] = json!(namespace);
        }
        object["metadata"]["name"] = json!(name);
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let created = !store.objects.contains_key(&key);
        store.objects.insert(key, object.clone());
        let change = Change {
            rv,
            resource: target.resource.clone(),
            namespace,
            kind: if created { "ADDED" } else { "MODIFIED" },
            object: object.clone(),
        };
        store.history.push(change.clone());
        // Sent while the store is held (see `put`).
        let _ = self.changes.send(change);
        drop(store);
        json_response(
            if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            },
            &object,
        )
    }

    /// The next `n` status updates answer 409 Conflict.
    pub fn inject_conflicts(&self, n: u32) {
        self.lock().conflicts = n;
    }

    /// Accepted status writes per "namespace/name".
    pub fn status_writes(&self) -> BTreeMap<String, u32> {
        self.lock().status_writes.clone()
    }

    /// An object as stored (with status), if it exists.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource = resource_of(api_version, kind)?;
        self.lock()
            .objects
            .get(&(resource, namespace.to_string(), name.to_string()))
            .cloned()
    }
}

struct Target {
    status: bool,
    resource: String,
    api_version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
}

/// `/api/v1/[namespaces/NS/]PLURAL[/NAME]` or `/apis/GROUP/VERSION/[namespaces/NS/]PLURAL[/NAME]`.
fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, plural, name, status) = match rest {
        ["namespaces", ns, plural] => (Some(ns.to_string()), *plural, None, false),
        ["namespaces", ns, plural, name] => {
            (Some(ns.to_string()), *plural, Some(name.to_string()), false)
        }
        ["namespaces", ns, plural, name, "status"] => {
            (Some(ns.to_string()), *plural, Some(name.to_string()), true)
        }
        [plural] => (None, *plural, None, false),
        [plural, name] => (None, *plural, Some(name.to_string()), false),
        [plural, name, "status"] => (None, *plural, Some(name.to_string()), true),
        _ => return None,
    };
    Some(Target {
        status,
        resource: format!("{group}/{version}/{plural}"),
        api_version: if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        },
        plural: plural.to_string(),
        namespace,
        name,
    })
}

/// `field=value` and `field!=value` terms, comma-separated (`type`, `metadata.name`,
/// `metadata.namespace`).
struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    fn parse(text: Option<&str>) -> FieldSelector {
        let terms = text
            .unwrap_or_default()
            .split(',')
            .filter(|t| !t.is_empty())
            .filter_map(|term| {
                if let Some((field, value)) = term.split_once("!=") {
                    Some((field.to_string(), false, value.to_string()))
                } else {
                    let (field, value) = term.split_once('=')?;
                    Some((
                        field.to_string(),
                        true,
                        value.trim_start_matches('=').to_string(),
                    ))
                }
            })
            .collect();
        FieldSelector(terms)
    }

    fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let actual = object
                .pointer(&pointer)
                .and_then(Value::as_str)
                .unwrap_or_default();
            (actual == value) == *equal
        })
    }
}

fn json_response(code: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    json_response(
        code,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason,
            "code": code.as_u16(),
        }),
    )
}
