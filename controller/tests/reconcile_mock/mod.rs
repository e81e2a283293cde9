//! A mocked Kubernetes API for reconciler tests (the kube-rs `tower-test`
//! pattern): every request the client sends is recorded, answered from a
//! small in-memory object store (GET, LIST, POST, server-side apply, merge and
//! JSON patches, DELETE), and checked against the controller's RBAC rules.
//! Scenarios then assert the exact requests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

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
    /// The path without the query.
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or("")
    }
    /// A query parameter.
    pub fn query(&self, key: &str) -> Option<String> {
        let q = self.uri.split_once('?')?.1;
        q.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == key).then(|| v.to_string())
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
}

/// The in-memory store, keyed by object path (`/api/v1/namespaces/ns/secrets/x`).
#[derive(Default)]
pub struct State {
    pub objects: BTreeMap<String, Value>,
    pub log: Vec<Recorded>,
    next_rv: u64,
    /// Paths whose GET/LIST answers 404 as if the resource type did not exist.
    pub missing_types: Vec<String>,
    /// Every change as a watch event: (resourceVersion, object path, type, object).
    pub events: Vec<(u64, String, &'static str, Value)>,
}

/// A running mock; clone the client freely.
#[derive(Clone)]
pub struct MockApi {
    pub state: Arc<Mutex<State>>,
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

impl MockApi {
    /// Starts the mock; returns a client wired to it.
    pub fn start() -> (kube::Client, MockApi) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let mock = MockApi {
            state: Arc::new(Mutex::new(State::default())),
        };
        let state = mock.state.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = http_body_util::BodyExt::collect(body)
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                let rec = Recorded {
                    method: parts.method.to_string(),
                    uri: parts
                        .uri
                        .path_and_query()
                        .map(|p| p.to_string())
                        .unwrap_or_default(),
                    content_type: parts
                        .headers
                        .get(http::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string),
                    body: serde_json::from_slice(&bytes).ok(),
                };
                let (code, value) = state.lock().unwrap().answer(rec);
                let resp = Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&value).unwrap()))
                    .unwrap();
                send.send_response(resp);
            }
        });
        (client, mock)
    }

    /// Puts an object into the store (as if it existed before the test).
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
        let rv = s.next_rv;
        s.events.push((rv, path.to_string(), kind, object.clone()));
        s.objects.insert(path.to_string(), object);
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

    /// Takes the request log (and clears it).
    pub fn take(&self) -> Vec<Recorded> {
        std::mem::take(&mut self.state.lock().unwrap().log)
    }

    /// Makes the API answer 404 for every path starting with `prefix`.
    pub fn remove_type(&self, prefix: &str) {
        self.state
            .lock()
            .unwrap()
            .missing_types
            .push(prefix.to_string());
    }
}

impl MockApi {
    /// Serves the same API over HTTP on 127.0.0.1 (for a real process with a
    /// kubeconfig), watches included: `?watch=true` streams, from the
    /// requested resourceVersion on, every change in the collection, until
    /// the client goes. Also answers `/version`.
    pub async fn serve_http(&self) -> std::net::SocketAddr {
        use axum::body::Body as AxumBody;
        use axum::extract::State as AxState;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        async fn handle(
            AxState(state): AxState<Arc<Mutex<State>>>,
            method: http::Method,
            uri: http::Uri,
            headers: http::HeaderMap,
            body: axum::body::Bytes,
        ) -> http::Response<AxumBody> {
            let rec = Recorded {
                method: method.to_string(),
                uri: uri
                    .path_and_query()
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
                content_type: headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
                body: serde_json::from_slice(&body).ok(),
            };
            let json_response = |code: u16, v: Value| {
                http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(AxumBody::from(serde_json::to_vec(&v).unwrap()))
                    .unwrap()
            };
            if rec.path() == "/version" {
                return json_response(
                    200,
                    json!({"major": "1", "minor": "35", "gitVersion": "v1.35.0-mock",
                           "platform": "linux/amd64"}),
                );
            }
            let watch = rec.method == "GET"
                && matches!(rec.query("watch").as_deref(), Some("true") | Some("1"));
            if !watch {
                let (code, v) = state.lock().unwrap().answer(rec);
                return json_response(code, v);
            }
            let from: u64 = rec
                .query("resourceVersion")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let collection = rec.path().to_string();
            state.lock().unwrap().log.push(rec);
            let stream = futures::stream::unfold(from, move |mut seen| {
                let state = state.clone();
                let collection = collection.clone();
                async move {
                    loop {
                        let batch: Vec<u8> = {
                            let s = state.lock().unwrap();
                            let mut out = Vec::new();
                            for (rv, path, kind, obj) in &s.events {
                                if *rv <= seen {
                                    continue;
                                }
                                seen = *rv;
                                if split(path).0 == collection
                                    || list_all_namespaces(&collection, path)
                                {
                                    let line = json!({"type": kind, "object": obj});
                                    out.extend(serde_json::to_vec(&line).unwrap());
                                    out.push(b'\n');
                                }
                            }
                            out
                        };
                        if !batch.is_empty() {
                            return Some((
                                Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(batch)),
                                seen,
                            ));
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                }
            });
            http::Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(AxumBody::from_stream(stream))
                .unwrap()
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

/// Collection path and object name of an object path.
fn split(path: &str) -> (String, Option<String>, Option<String>) {
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

impl State {
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

    fn answer(&mut self, rec: Recorded) -> (u16, Value) {
        self.log.push(rec.clone());
        let path = rec.path().to_string();
        if self.missing_types.iter().any(|p| path.starts_with(p)) {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            );
        }
        let (collection, name, sub) = split(&path);
        let object_path = match &name {
            Some(n) => format!("{collection}/{n}"),
            None => collection.clone(),
        };
        match (rec.method.as_str(), name.is_some()) {
            ("GET", false) => {
                let items: Vec<Value> = self
                    .objects
                    .iter()
                    .filter(|(k, _)| {
                        split(k).0 == collection || list_all_namespaces(&collection, k)
                    })
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
                self.events
                    .push((self.next_rv, p.clone(), "ADDED", obj.clone()));
                self.objects.insert(p, obj.clone());
                (201, obj)
            }
            ("DELETE", true) => match self.objects.remove(&object_path) {
                Some(o) => {
                    self.next_rv += 1;
                    self.events
                        .push((self.next_rv, object_path, "DELETED", o.clone()));
                    (200, o)
                }
                None => status(404, "NotFound", &format!("{object_path} not found")),
            },
            ("PATCH", true) => {
                let ct = rec.content_type.clone().unwrap_or_default();
                let body = rec.body.clone().unwrap_or(Value::Null);
                let existing = self.objects.get(&object_path).cloned();
                let mut obj = match existing.clone() {
                    Some(o) => o,
                    None if ct.contains("apply-patch") => {
                        json!({"metadata":{"name": name, "namespace": namespace_of(&collection)}})
                    }
                    None => return status(404, "NotFound", &format!("{object_path} not found")),
                };
                if ct.contains("json-patch") {
                    // Like the API server, a `test` for null passes on a
                    // missing path (kube's finalizer helper relies on it).
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
                    // Server-side apply by one manager: the applied config
                    // replaces what that manager set before.
                    let mut applied = body.clone();
                    if let Some(st) = obj.get("status").cloned() {
                        applied["status"] = st;
                    }
                    let meta = obj["metadata"].clone();
                    obj = applied;
                    for k in [
                        "resourceVersion",
                        "generation",
                        "uid",
                        "finalizers",
                        "deletionTimestamp",
                        "creationTimestamp",
                    ] {
                        if !meta[k].is_null() {
                            obj["metadata"][k] = meta[k].clone();
                        }
                    }
                } else {
                    merge(&mut obj, &body);
                }
                let spec_changed = existing
                    .as_ref()
                    .map(|e| e.get("spec") != obj.get("spec"))
                    .unwrap_or(true);
                self.bump(&mut obj, spec_changed && sub.is_none());
                // Removing the last finalizer of an object being deleted deletes it.
                let gone = !obj["metadata"]["deletionTimestamp"].is_null()
                    && obj["metadata"]["finalizers"]
                        .as_array()
                        .map(|f| f.is_empty())
                        .unwrap_or(true);
                let kind = match (gone, existing.is_some()) {
                    (true, _) => "DELETED",
                    (false, true) => "MODIFIED",
                    (false, false) => "ADDED",
                };
                self.events
                    .push((self.next_rv, object_path.clone(), kind, obj.clone()));
                if gone {
                    self.objects.remove(&object_path);
                } else {
                    self.objects.insert(object_path, obj.clone());
                }
                (200, obj)
            }
            _ => status(405, "MethodNotAllowed", &rec.line()),
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

/// A cluster-wide LIST (`/apis/g/v/res`) covers `…/namespaces/*/res/*`.
fn list_all_namespaces(collection: &str, object: &str) -> bool {
    if collection.contains("/namespaces/") {
        return false;
    }
    let (c, _, _) = split(object);
    let res = collection.rsplit('/').next().unwrap_or("");
    c.starts_with(collection.trim_end_matches(res)) && c.ends_with(&format!("/{res}"))
}

/// Asserts every recorded request is permitted by the controller's RBAC.
pub fn assert_rbac(log: &[Recorded]) {
    assert_rbac_with(log, &oooi_controller::rbac::rules());
}

/// Asserts every recorded request is permitted by `rules`.
pub fn assert_rbac_with(log: &[Recorded], rules: &[oooi_controller::rbac::Rule]) {
    for r in log {
        if let Some((g, res, verb)) = oooi_controller::rbac::request_attributes(&r.method, &r.uri) {
            assert!(
                oooi_controller::rbac::allows_in(rules, &g, &res, &verb),
                "RBAC does not allow {verb} {res} in group {g:?} ({})",
                r.line()
            );
        }
    }
}

impl MockApi {
    /// What the garbage collector does: deletes every object all of whose
    /// owners (by uid) are gone, until nothing more goes. Returns the
    /// deleted paths.
    pub fn collect_garbage(&self) -> Vec<String> {
        let mut s = self.state.lock().unwrap();
        let mut deleted = Vec::new();
        loop {
            let uids: std::collections::BTreeSet<String> = s
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
                return deleted;
            }
            for p in orphans {
                s.objects.remove(&p);
                deleted.push(p);
            }
        }
    }
}

/// Paths of the objects `log` created or applied (POST, server-side apply).
pub fn created(log: &[Recorded]) -> std::collections::BTreeSet<String> {
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

/// The requests that change state.
pub fn writes(log: &[Recorded]) -> Vec<&Recorded> {
    log.iter().filter(|r| r.is_write()).collect()
}
