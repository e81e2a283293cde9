//! A mocked Kubernetes API for the controller's integration tests, on the
//! kube-rs `tower-test` pattern: every request the client sends is recorded
//! and answered from an in-memory object store, and scenarios assert the
//! exact requests. One instance is one cluster (the hosted-cluster tests run
//! two: management and hosted).
//!
//! Close to a real API server where the tests need it:
//! - GET, LIST, POST, PUT (a replace at another resourceVersion than the
//!   stored one is a 409 Conflict, as optimistic concurrency wants), DELETE,
//!   merge and JSON patches, the `status`
//!   subresource; uids, resourceVersions, and a generation bumped when the
//!   spec changes; an object being deleted goes with its last finalizer;
//! - server-side apply by one field manager keeps the fields other writers
//!   set: what the manager applied before and no longer applies is removed,
//!   the applied fields are merged in (maps by key, lists replaced whole),
//!   the rest stays, and `status` is never applied;
//! - LIST and WATCH honour `labelSelector` (equality, inequality and
//!   existence terms) and `fieldSelector` (`metadata.name=`);
//! - WATCH requests are held open until an object they select changes, then
//!   answered with the events (kube's watcher re-watches from the new
//!   resourceVersion), so a real `kube::runtime::watcher` runs against it;
//! - [`MockApi::collect_garbage`] does what the garbage collector does;
//! - [`MockApi::set_unreachable`] makes every request of the in-process
//!   client fail as a transport error, as a hosted API that is gone does,
//!   and leaves HTTP requests unanswered (packets dropped);
//! - [`MockApi::serve_http`] serves the same store on loopback, for a real
//!   controller process with a kubeconfig;
//! - a pod's `log` subresource answers what [`MockApi::set_pod_log`] stored
//!   (`container`, `previous`, `limitBytes` honoured; 400 for a container
//!   the pod lacks or a previous instance that never ran, as the API server
//!   does);
//! - a pod's `proxy` subresource (`pods/<name>:<port>/proxy/<path>`)
//!   forwards a GET to the loopback address [`MockApi::set_pod_endpoint`]
//!   registered for that pod and port, and passes its status and body back;
//!   without one it answers 503 as the API server does when the pod does not
//!   answer.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tower_test::mock::SendResponse;

/// One request as the API server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// Content type of the body, if any.
    pub content_type: Option<String>,
    /// JSON body, if any.
    pub body: Option<Value>,
}

impl Recorded {
    fn new(method: &http::Method, uri: &http::Uri, headers: &http::HeaderMap, body: &[u8]) -> Self {
        Recorded {
            method: method.to_string(),
            uri: uri
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            content_type: headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            body: serde_json::from_slice(body).ok(),
        }
    }
    /// The path without the query.
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or("")
    }
    /// A query parameter, percent-decoded.
    pub fn query(&self, key: &str) -> Option<String> {
        let q = self.uri.split_once('?')?.1;
        q.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == key).then(|| decode(v))
        })
    }
    /// `METHOD path` (no query), for compact assertions.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path())
    }
    /// True for requests that change state.
    pub fn is_write(&self) -> bool {
        self.method != "GET"
    }
    /// True for a WATCH request (held open until there are events).
    pub fn opens_watch(&self) -> bool {
        self.method == "GET" && matches!(self.query("watch").as_deref(), Some("true" | "1"))
    }
    /// True for a watch or a watcher's initial list (which has a field
    /// selector): a background watch's request, not a reconcile's.
    pub fn is_watch(&self) -> bool {
        self.opens_watch() || self.query("fieldSelector").is_some()
    }
}

/// Decodes a query value: `+` is a space, `%XX` the byte XX.
fn decode(v: &str) -> String {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        let hex = v
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (v.as_bytes()[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
                continue;
            }
            (b'+', _) => out.push(b' '),
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a LIST or WATCH selects in its collection.
struct Selector {
    labels: Vec<String>,
    name: Option<String>,
}

impl Selector {
    fn of(rec: &Recorded) -> Result<Selector, String> {
        let labels = rec.query("labelSelector").unwrap_or_default();
        if labels.contains('(') {
            return Err(format!("set-based label selector not mocked: {labels}"));
        }
        let name = match rec.query("fieldSelector") {
            None => None,
            Some(f) => match f.strip_prefix("metadata.name=") {
                Some(n) => Some(n.to_string()),
                None => return Err(format!("field selector not mocked: {f}")),
            },
        };
        Ok(Selector {
            labels: labels
                .split(',')
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect(),
            name,
        })
    }

    fn matches(&self, obj: &Value) -> bool {
        let meta = &obj["metadata"];
        let label = |k: &str| meta["labels"][k.trim()].as_str();
        let name_ok = self
            .name
            .as_ref()
            .is_none_or(|n| meta["name"].as_str() == Some(n));
        name_ok
            && self.labels.iter().all(|term| {
                if let Some((k, v)) = term.split_once("!=") {
                    label(k) != Some(v.trim())
                } else if let Some((k, v)) = term.split_once('=') {
                    label(k) == Some(v.trim_start_matches('=').trim())
                } else if let Some(k) = term.strip_prefix('!') {
                    label(k).is_none()
                } else {
                    label(term).is_some()
                }
            })
    }
}

/// Where the answer to a request goes (at once, or when a held watch has
/// events).
enum Responder {
    /// The in-process client.
    Client(SendResponse<Response<Body>>),
    /// An HTTP handler of [`MockApi::serve_http`]: status, body and
    /// content type.
    Http(oneshot::Sender<(u16, Vec<u8>, &'static str)>),
}

impl Responder {
    fn send(self, code: u16, body: Vec<u8>) {
        self.send_typed(code, body, "application/json");
    }
    fn send_typed(self, code: u16, body: Vec<u8>, content_type: &'static str) {
        match self {
            Responder::Client(send) => send.send_response(response_typed(code, body, content_type)),
            // The client may have gone; nothing waits for the answer then.
            Responder::Http(tx) => drop(tx.send((code, body, content_type))),
        }
    }
    fn fail(self) {
        match self {
            Responder::Client(send) => send.send_error(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection reset",
            )),
            Responder::Http(tx) => drop(tx),
        }
    }
}

struct Watch {
    collection: String,
    selector: Selector,
    after: u64,
    responder: Responder,
}

/// The in-memory store, keyed by object path (`/api/v1/namespaces/ns/secrets/x`).
#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    /// What the (one) field manager last applied, per object path.
    applied: BTreeMap<String, Value>,
    log: Vec<Recorded>,
    next_rv: u64,
    unreachable: bool,
    watches: Vec<Watch>,
    /// (resourceVersion, object path, watch event) of every change.
    events: Vec<(u64, String, Value)>,
    /// Container logs by (namespace, pod, container, previous).
    pod_logs: BTreeMap<(String, String, String, bool), String>,
    /// Where a pod's port answers, by (namespace, pod, port).
    pod_endpoints: BTreeMap<(String, String, u16), std::net::SocketAddr>,
}

/// A running mock; clone it freely.
#[derive(Clone)]
pub struct MockApi {
    state: Arc<Mutex<State>>,
    /// A client of this API.
    pub client: kube::Client,
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

fn response_typed<B: From<Vec<u8>>>(code: u16, body: Vec<u8>, content_type: &str) -> Response<B> {
    Response::builder()
        .status(code)
        .header("content-type", content_type)
        .body(B::from(body))
        .unwrap()
}

impl MockApi {
    /// Starts the mock.
    pub fn start() -> MockApi {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let mock = MockApi {
            state: Arc::new(Mutex::new(State::default())),
            client: kube::Client::new(service, "default"),
        };
        let state = mock.state.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = http_body_util::BodyExt::collect(body)
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                let rec = Recorded::new(&parts.method, &parts.uri, &parts.headers, &bytes);
                let mut s = state.lock().unwrap();
                if s.unreachable {
                    s.log.push(rec);
                    send.send_error(std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        "connection refused",
                    ));
                    continue;
                }
                s.serve(rec, Responder::Client(send));
            }
        });
        mock
    }

    /// Puts an object into the store (as if it existed before the test, or
    /// another actor wrote it), notifying watches.
    pub fn insert(&self, path: &str, mut object: Value) {
        let mut s = self.state.lock().unwrap();
        s.next_rv += 1;
        object["metadata"]["resourceVersion"] = json!(s.next_rv.to_string());
        if object["metadata"]["generation"].is_null() {
            object["metadata"]["generation"] = json!(1);
        }
        let kind = if s.objects.contains_key(path) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        s.objects.insert(path.to_string(), object.clone());
        s.record(path, kind, object);
        s.flush_watches();
    }

    /// Changes a stored object with `f` (another actor's write).
    pub fn update(&self, path: &str, f: impl FnOnce(&mut Value)) {
        let mut obj = self.get(path).expect(path);
        f(&mut obj);
        self.insert(path, obj);
    }

    /// Removes an object (another actor's delete).
    pub fn remove(&self, path: &str) {
        let mut s = self.state.lock().unwrap();
        s.delete(path);
        s.flush_watches();
    }

    /// The stored object at `path`.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.state.lock().unwrap().objects.get(path).cloned()
    }

    /// Every path in the store under `prefix`.
    pub fn paths(&self, prefix: &str) -> Vec<String> {
        let s = self.state.lock().unwrap();
        s.objects
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Every stored object.
    pub fn objects(&self) -> Vec<Value> {
        self.state
            .lock()
            .unwrap()
            .objects
            .values()
            .cloned()
            .collect()
    }

    /// Stores the log of `container` in a pod (`previous`: of its
    /// terminated instance before the current one), as the `log`
    /// subresource answers it.
    pub fn set_pod_log(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
        text: &str,
    ) {
        self.state.lock().unwrap().pod_logs.insert(
            (
                namespace.to_string(),
                pod.to_string(),
                container.to_string(),
                previous,
            ),
            text.to_string(),
        );
    }

    /// Makes the `proxy` subresource of a pod's `port` forward to `target`
    /// (a loopback server standing in for the pod's address).
    pub fn set_pod_endpoint(
        &self,
        namespace: &str,
        pod: &str,
        port: u16,
        target: std::net::SocketAddr,
    ) {
        self.state
            .lock()
            .unwrap()
            .pod_endpoints
            .insert((namespace.to_string(), pod.to_string(), port), target);
    }

    /// The request log so far (kept).
    pub fn log(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().log.clone()
    }

    /// Takes the request log (and clears it).
    pub fn take(&self) -> Vec<Recorded> {
        std::mem::take(&mut self.state.lock().unwrap().log)
    }

    /// Takes the log without the background watches' requests.
    pub fn take_reconcile(&self) -> Vec<Recorded> {
        self.take().into_iter().filter(|r| !r.is_watch()).collect()
    }

    /// Makes every request of the in-process client fail (or succeed again)
    /// at the transport level; held watches are reset.
    pub fn set_unreachable(&self, on: bool) {
        let mut s = self.state.lock().unwrap();
        s.unreachable = on;
        if on {
            for w in s.watches.drain(..) {
                w.responder.fail();
            }
        }
    }

    /// What the garbage collector does: deletes every object all of whose
    /// owners (by uid) are gone, until nothing more goes. Returns the
    /// deleted paths.
    pub fn collect_garbage(&self) -> Vec<String> {
        let mut s = self.state.lock().unwrap();
        let mut deleted = Vec::new();
        loop {
            let uids: BTreeSet<String> = s
                .objects
                .values()
                .filter_map(|o| o["metadata"]["uid"].as_str().map(str::to_string))
                .collect();
            let orphans: Vec<String> = s
                .objects
                .iter()
                .filter(|(_, o)| {
                    o["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|refs| {
                            !refs.is_empty()
                                && refs
                                    .iter()
                                    .all(|r| !uids.contains(r["uid"].as_str().unwrap_or_default()))
                        })
                })
                .map(|(p, _)| p.clone())
                .collect();
            if orphans.is_empty() {
                s.flush_watches();
                return deleted;
            }
            for p in orphans {
                s.delete(&p);
                deleted.push(p);
            }
        }
    }

    /// Serves the same API over HTTP on 127.0.0.1 (for a real process with
    /// a kubeconfig), watches included. Also answers `/version`.
    pub async fn serve_http(&self) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        self.serve_http_on(listener)
    }

    /// Serves the API on `listener` (e.g. one bound inside a test's own
    /// network namespace); returns its address.
    pub fn serve_http_on(&self, listener: tokio::net::TcpListener) -> std::net::SocketAddr {
        use axum::body::Body as HttpBody;
        let addr = listener.local_addr().unwrap();
        async fn handle(
            axum::extract::State(state): axum::extract::State<Arc<Mutex<State>>>,
            method: http::Method,
            uri: http::Uri,
            headers: http::HeaderMap,
            body: axum::body::Bytes,
        ) -> Response<HttpBody> {
            let rec = Recorded::new(&method, &uri, &headers, &body);
            let (tx, rx) = oneshot::channel();
            let dropped = {
                let mut s = state.lock().unwrap();
                if s.unreachable {
                    s.log.push(rec);
                    true
                } else {
                    s.serve(rec, Responder::Http(tx));
                    false
                }
            };
            if dropped {
                // Like a network that drops packets: no answer.
                return std::future::pending().await;
            }
            let (code, body, content_type) = rx.await.unwrap_or_else(|_| {
                let (code, v) = status(503, "ServiceUnavailable", "watch reset");
                (code, serde_json::to_vec(&v).unwrap(), "application/json")
            });
            response_typed(code, body, content_type)
        }
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(self.state.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        addr
    }
}

/// A kubeconfig whose one context reaches the mocked API served at `api`
/// over plain HTTP, as an anonymous user, in `namespace`. `ca` names a
/// certificate-authority file for clients that insist on one (the mock
/// never uses it).
pub fn kubeconfig(api: std::net::SocketAddr, namespace: &str, ca: Option<&str>) -> String {
    let ca = ca
        .map(|path| format!(", certificate-authority: \"{path}\""))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: mock\n\
         clusters: [{{name: mock, cluster: {{server: \"http://{api}\"{ca}}}}}]\n\
         contexts: [{{name: mock, context: {{cluster: mock, user: mock, namespace: {namespace}}}}}]\n\
         users: [{{name: mock, user: {{}}}}]\n"
    )
}

/// Collection path, object name and subresource of an object path.
pub fn split(path: &str) -> (String, Option<String>, Option<String>) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1[/namespaces/ns]/res[/name[/sub]] or /apis/g/v[/namespaces/ns]/res[/name[/sub]]
    let base = if parts.first() == Some(&"api") { 2 } else { 3 };
    let mut i = base;
    if parts.get(i) == Some(&"namespaces") && parts.len() > i + 2 {
        i += 2;
    }
    let collection = format!("/{}", parts[..=i.min(parts.len() - 1)].join("/"));
    let name = parts.get(i + 1).map(|s| s.to_string());
    let sub = parts.get(i + 2).map(|s| s.to_string());
    (collection, name, sub)
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// Removes from `target` the map keys present in `old` but not in `new`
/// (what a manager stopped applying).
fn unapply(target: &mut Value, old: &Value, new: &Value) {
    if let (Value::Object(t), Value::Object(o)) = (target, old) {
        for (k, ov) in o {
            match new.get(k) {
                None => {
                    t.remove(k);
                }
                Some(nv) => {
                    if let Some(tv) = t.get_mut(k) {
                        unapply(tv, ov, nv);
                    }
                }
            }
        }
    }
}

fn namespace_of(collection: &str) -> Value {
    let parts: Vec<&str> = collection.split('/').collect();
    match parts.iter().position(|p| *p == "namespaces") {
        Some(i) => json!(parts.get(i + 1)),
        None => Value::Null,
    }
}

/// True when the object at `object` is in `collection`; a cluster-wide
/// collection (`/apis/g/v/res`) covers `…/namespaces/*/res/*`.
fn in_collection(collection: &str, object: &str) -> bool {
    let (c, _, _) = split(object);
    if c == collection {
        return true;
    }
    if collection.contains("/namespaces/") {
        return false;
    }
    let res = collection.rsplit('/').next().unwrap_or("");
    c.starts_with(collection.trim_end_matches(res)) && c.ends_with(&format!("/{res}"))
}

impl State {
    /// Logs one request and answers it through `responder`, a watch once
    /// it has events.
    fn serve(&mut self, rec: Recorded, responder: Responder) {
        self.log.push(rec.clone());
        if rec.method == "GET" {
            let (collection, name, sub) = split(rec.path());
            if collection.ends_with("/pods")
                && let Some(name) = name
            {
                match sub.as_deref() {
                    Some("log") => return self.pod_log(&rec, &collection, &name, responder),
                    Some("proxy") => return self.pod_proxy(&rec, &collection, &name, responder),
                    _ => {}
                }
            }
        }
        let (code, value) = if rec.opens_watch() {
            match Selector::of(&rec) {
                Ok(selector) => return self.watch(&rec, selector, responder),
                Err(e) => status(400, "BadRequest", &e),
            }
        } else {
            self.answer(&rec)
        };
        self.flush_watches();
        responder.send(code, serde_json::to_vec(&value).unwrap());
    }

    /// `GET …/pods/<name>/log`: the stored log of the container the query
    /// names (the pod's only container when it names none).
    fn pod_log(&mut self, rec: &Recorded, collection: &str, name: &str, responder: Responder) {
        let send_status = |responder: Responder, (code, v): (u16, Value)| {
            responder.send(code, serde_json::to_vec(&v).unwrap())
        };
        let Some(pod) = self.objects.get(&format!("{collection}/{name}")) else {
            return send_status(
                responder,
                status(404, "NotFound", &format!("pods \"{name}\" not found")),
            );
        };
        let containers: Vec<String> = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .chain(pod["spec"]["initContainers"].as_array())
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect();
        let container = match rec.query("container") {
            Some(c) => c,
            None if containers.len() == 1 => containers[0].clone(),
            None => {
                return send_status(
                    responder,
                    status(
                        400,
                        "BadRequest",
                        &format!(
                            "a container name must be specified for pod {name}, choose one of: {containers:?}"
                        ),
                    ),
                );
            }
        };
        if !containers.contains(&container) {
            return send_status(
                responder,
                status(
                    400,
                    "BadRequest",
                    &format!("container {container} is not valid for pod {name}"),
                ),
            );
        }
        let previous = matches!(rec.query("previous").as_deref(), Some("true" | "1"));
        let ns = namespace_of(collection).as_str().unwrap_or("").to_string();
        let key = (ns, name.to_string(), container.clone(), previous);
        match self.pod_logs.get(&key) {
            Some(text) => {
                let mut bytes = text.as_bytes().to_vec();
                if let Some(limit) = rec
                    .query("limitBytes")
                    .and_then(|l| l.parse::<usize>().ok())
                {
                    bytes.truncate(limit);
                }
                responder.send_typed(200, bytes, "text/plain")
            }
            None if previous => send_status(
                responder,
                status(
                    400,
                    "BadRequest",
                    &format!(
                        "previous terminated container \"{container}\" in pod \"{name}\" not found"
                    ),
                ),
            ),
            None => responder.send_typed(200, Vec::new(), "text/plain"),
        }
    }

    /// `GET …/pods/<name>:<port>/proxy/<path>`: forwarded to the pod's
    /// registered endpoint, whose status and body come back.
    fn pod_proxy(&mut self, rec: &Recorded, collection: &str, target: &str, responder: Responder) {
        let (name, port) = match target.rsplit_once(':') {
            Some((n, p)) => (n.to_string(), p.parse::<u16>().ok()),
            None => (target.to_string(), None),
        };
        let send_status = |responder: Responder, (code, v): (u16, Value)| {
            responder.send(code, serde_json::to_vec(&v).unwrap())
        };
        if !self.objects.contains_key(&format!("{collection}/{name}")) {
            return send_status(
                responder,
                status(404, "NotFound", &format!("pods \"{name}\" not found")),
            );
        }
        let Some(port) = port else {
            return send_status(
                responder,
                status(
                    400,
                    "BadRequest",
                    &format!("no port in {target}: the mock needs one"),
                ),
            );
        };
        let ns = namespace_of(collection).as_str().unwrap_or("").to_string();
        let Some(addr) = self.pod_endpoints.get(&(ns, name.clone(), port)).copied() else {
            return send_status(
                responder,
                status(
                    503,
                    "ServiceUnavailable",
                    &format!(
                        "error trying to reach service: dial tcp {name}:{port}: connect: connection refused"
                    ),
                ),
            );
        };
        let marker = format!("/{target}/proxy");
        let rest = rec
            .uri
            .split_once(&marker)
            .map(|(_, r)| r.to_string())
            .unwrap_or_default();
        let path = if rest.starts_with('/') {
            rest
        } else {
            format!("/{rest}")
        };
        tokio::spawn(async move {
            match forward_get(addr, &path).await {
                Ok((code, body)) => responder.send_typed(code, body, "text/plain"),
                Err(e) => {
                    let (code, v) = status(
                        503,
                        "ServiceUnavailable",
                        &format!("error trying to reach service: {e}"),
                    );
                    responder.send(code, serde_json::to_vec(&v).unwrap())
                }
            }
        });
    }

    fn record(&mut self, path: &str, kind: &str, object: Value) {
        let rv = self.next_rv;
        self.events.push((
            rv,
            path.to_string(),
            json!({"type": kind, "object": object}),
        ));
    }

    /// Deletes the object at `path`, if any, as a change watches see.
    fn delete(&mut self, path: &str) -> Option<Value> {
        let o = self.objects.remove(path)?;
        self.applied.remove(path);
        self.next_rv += 1;
        self.record(path, "DELETED", o.clone());
        Some(o)
    }

    fn watch(&mut self, rec: &Recorded, selector: Selector, responder: Responder) {
        let (collection, _, _) = split(rec.path());
        let after = rec
            .query("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.next_rv);
        self.watches.push(Watch {
            collection,
            selector,
            after,
            responder,
        });
        self.flush_watches();
    }

    /// Answers every held watch that has events to deliver.
    fn flush_watches(&mut self) {
        for w in std::mem::take(&mut self.watches) {
            let lines: Vec<String> = self
                .events
                .iter()
                .filter(|(rv, path, ev)| {
                    *rv > w.after
                        && in_collection(&w.collection, path)
                        && w.selector.matches(&ev["object"])
                })
                .map(|(_, _, ev)| serde_json::to_string(ev).unwrap())
                .collect();
            if lines.is_empty() {
                self.watches.push(w);
            } else {
                w.responder
                    .send(200, (lines.join("\n") + "\n").into_bytes());
            }
        }
    }

    fn bump(&mut self, obj: &mut Value, spec_changed: bool) {
        self.next_rv += 1;
        // Like the API server: a new object gets a uid.
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(format!("uid-{}", self.next_rv));
        }
        obj["metadata"]["resourceVersion"] = json!(self.next_rv.to_string());
        let g = obj["metadata"]["generation"].as_i64().unwrap_or(0);
        if spec_changed || g == 0 {
            obj["metadata"]["generation"] = json!(g + 1);
        }
    }

    fn answer(&mut self, rec: &Recorded) -> (u16, Value) {
        let path = rec.path().to_string();
        if path == "/version" {
            return (
                200,
                json!({"major": "1", "minor": "35", "gitVersion": "v1.35.0-mock",
                       "platform": "linux/amd64"}),
            );
        }
        let (collection, name, sub) = split(&path);
        let object_path = match &name {
            Some(n) => format!("{collection}/{n}"),
            None => collection.clone(),
        };
        match (rec.method.as_str(), name.is_some()) {
            ("GET", false) => {
                let selector = match Selector::of(rec) {
                    Ok(s) => s,
                    Err(e) => return status(400, "BadRequest", &e),
                };
                let items: Vec<Value> = self
                    .objects
                    .iter()
                    .filter(|(k, v)| in_collection(&collection, k) && selector.matches(v))
                    .map(|(_, v)| v.clone())
                    .collect();
                (
                    200,
                    json!({"kind":"List","apiVersion":"v1",
                           "metadata":{"resourceVersion": self.next_rv.to_string()},"items": items}),
                )
            }
            ("GET", true) => match self.objects.get(&object_path) {
                Some(o) => (200, o.clone()),
                None => status(404, "NotFound", &format!("{object_path} not found")),
            },
            ("POST", _) => {
                let mut obj = rec.body.clone().unwrap_or(Value::Null);
                let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
                let p = format!("{collection}/{name}");
                if self.objects.contains_key(&p) {
                    return status(409, "AlreadyExists", &format!("{p} already exists"));
                }
                self.bump(&mut obj, true);
                self.objects.insert(p.clone(), obj.clone());
                self.record(&p, "ADDED", obj.clone());
                (201, obj)
            }
            ("PUT", true) => {
                let Some(existing) = self.objects.get(&object_path).cloned() else {
                    return status(404, "NotFound", &format!("{object_path} not found"));
                };
                let mut obj = rec.body.clone().unwrap_or(Value::Null);
                let want = obj["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_string);
                let have = existing["metadata"]["resourceVersion"].as_str();
                if want.is_some() && want.as_deref() != have {
                    return status(
                        409,
                        "Conflict",
                        &format!(
                            "Operation cannot be fulfilled on {object_path}: the object has been modified; please apply your changes to the latest version and try again"
                        ),
                    );
                }
                if sub.as_deref() == Some("status") {
                    let mut whole = existing.clone();
                    whole["status"] = obj["status"].clone();
                    obj = whole;
                } else {
                    obj["status"] = existing["status"].clone();
                    if obj["status"].is_null()
                        && let Some(o) = obj.as_object_mut()
                    {
                        o.remove("status");
                    }
                }
                obj["metadata"]["uid"] = existing["metadata"]["uid"].clone();
                obj["metadata"]["generation"] = existing["metadata"]["generation"].clone();
                let spec_changed = existing.get("spec") != obj.get("spec");
                self.bump(&mut obj, spec_changed && sub.is_none());
                self.objects.insert(object_path.clone(), obj.clone());
                self.record(&object_path, "MODIFIED", obj.clone());
                (200, obj)
            }
            ("DELETE", true) => match self.delete(&object_path) {
                Some(o) => (200, o),
                None => status(404, "NotFound", &format!("{object_path} not found")),
            },
            ("PATCH", true) => self.patch(rec, &collection, &object_path, name, sub),
            _ => status(405, "MethodNotAllowed", &rec.line()),
        }
    }

    fn patch(
        &mut self,
        rec: &Recorded,
        collection: &str,
        object_path: &str,
        name: Option<String>,
        sub: Option<String>,
    ) -> (u16, Value) {
        let ct = rec.content_type.clone().unwrap_or_default();
        let body = rec.body.clone().unwrap_or(Value::Null);
        let existing = self.objects.get(object_path).cloned();
        let mut obj = match existing.clone() {
            Some(o) => o,
            None if ct.contains("apply-patch") => {
                json!({"metadata":{"name": name, "namespace": namespace_of(collection)}})
            }
            None => return status(404, "NotFound", &format!("{object_path} not found")),
        };
        if ct.contains("json-patch") {
            // Like the API server, a `test` for null passes on a missing
            // path (kube's finalizer helper relies on it).
            let ops: Vec<Value> = body
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|op| {
                    !(op["op"] == "test"
                        && op["value"].is_null()
                        && obj.pointer(op["path"].as_str().unwrap_or("")).is_none())
                })
                .collect();
            let patch: json_patch::Patch = match serde_json::from_value(Value::Array(ops)) {
                Ok(p) => p,
                Err(e) => return status(400, "BadRequest", &e.to_string()),
            };
            if let Err(e) = json_patch::patch(&mut obj, &patch) {
                return status(422, "Invalid", &e.to_string());
            }
        } else if sub.as_deref() == Some("status") {
            merge(&mut obj["status"], &body["status"]);
        } else if ct.contains("apply-patch") {
            let old = self.applied.get(object_path).cloned().unwrap_or(json!({}));
            let mut applied = body.clone();
            if let Some(o) = applied.as_object_mut() {
                o.remove("status");
            }
            unapply(&mut obj, &old, &applied);
            merge(&mut obj, &applied);
            self.applied.insert(object_path.to_string(), applied);
        } else {
            merge(&mut obj, &body);
        }
        let spec_changed = existing
            .as_ref()
            .map(|e| e.get("spec") != obj.get("spec"))
            .unwrap_or(true);
        self.bump(&mut obj, spec_changed && sub.is_none());
        self.objects.insert(object_path.to_string(), obj.clone());
        // Removing the last finalizer of an object being deleted deletes it.
        let gone = !obj["metadata"]["deletionTimestamp"].is_null()
            && obj["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty());
        if gone {
            self.delete(object_path);
        } else {
            let kind = if existing.is_some() {
                "MODIFIED"
            } else {
                "ADDED"
            };
            self.record(object_path, kind, obj.clone());
        }
        (200, obj)
    }
}

/// One HTTP/1.1 GET to `addr` (a pod proxy's target): status and body.
async fn forward_get(addr: std::net::SocketAddr, path: &str) -> Result<(u16, Vec<u8>), String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("dial tcp {addr}: {e}"))?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = Request::get(path)
        .header("host", addr.to_string())
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = send
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let code = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map_err(|e| e.to_string())?
        .to_bytes()
        .to_vec();
    Ok((code, body))
}

/// `METHOD path` of every request.
pub fn lines(log: &[Recorded]) -> Vec<String> {
    log.iter().map(Recorded::line).collect()
}

/// The requests that change state.
pub fn writes(log: &[Recorded]) -> Vec<&Recorded> {
    log.iter().filter(|r| r.is_write()).collect()
}

/// Paths of the objects `log` created or applied (POST, server-side apply).
pub fn created(log: &[Recorded]) -> BTreeSet<String> {
    log.iter()
        .filter_map(|r| match r.method.as_str() {
            "POST" => {
                let name = r.body.as_ref()?["metadata"]["name"].as_str()?.to_string();
                Some(format!("{}/{name}", r.path()))
            }
            "PATCH" if r.content_type.as_deref() == Some("application/apply-patch+yaml") => {
                Some(r.path().to_string())
            }
            _ => None,
        })
        .collect()
}
