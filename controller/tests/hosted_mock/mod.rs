//! A mocked Kubernetes API for the hosted-cluster tests, one instance per
//! cluster (management and hosted), on the kube-rs `tower-test` pattern:
//! every request is recorded and answered from an in-memory object store.
//!
//! Closer to a real API server than the reconcile tests' mock where these
//! tests need it:
//! - server-side apply keeps fields other managers set: the fields the
//!   manager applied before and no longer applies are removed, the applied
//!   ones merged in (maps by key, lists replaced whole), the rest stays;
//! - LIST honours `labelSelector` (equality terms) and `fieldSelector`
//!   (`metadata.name=`);
//! - WATCH requests are held open until an object of their collection
//!   changes, then answered with that event (the client's watcher re-watches
//!   from the new resourceVersion), so a real `kube::runtime::watcher` runs
//!   against it;
//! - [`MockApi::set_unreachable`] makes every request fail as a transport
//!   error (connection refused), as a hosted API that is gone does.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
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
    /// The path without the query.
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or("")
    }
    /// A query parameter (percent-decoded for `=`, `,` and `/`).
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
    /// True for a watch (or the watcher's initial list, which has a field
    /// selector): the background Service watch, not the reconcile.
    pub fn is_watch(&self) -> bool {
        self.query("watch").as_deref() == Some("true") || self.query("fieldSelector").is_some()
    }
}

fn decode(v: &str) -> String {
    v.replace("%3D", "=")
        .replace("%2C", ",")
        .replace("%2F", "/")
        .replace("%2B", "+")
        .replace('+', " ")
}

struct Watch {
    collection: String,
    name: Option<String>,
    after: u64,
    send: SendResponse<Response<Body>>,
}

/// The in-memory store, keyed by object path (`/api/v1/namespaces/ns/services/x`).
#[derive(Default)]
pub struct State {
    pub objects: BTreeMap<String, Value>,
    /// Last applied configuration per object path (one manager).
    applied: BTreeMap<String, Value>,
    pub log: Vec<Recorded>,
    next_rv: u64,
    /// Path prefixes answering 404 as if the resource type did not exist.
    pub missing_types: Vec<String>,
    unreachable: bool,
    watches: Vec<Watch>,
    /// (resourceVersion, collection, event) of every change.
    events: Vec<(u64, String, Value)>,
}

/// A running mock; clone the client freely.
#[derive(Clone)]
pub struct MockApi {
    pub state: Arc<Mutex<State>>,
    pub client: kube::Client,
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

fn response(code: u16, value: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(value).unwrap()))
        .unwrap()
}

impl MockApi {
    /// Starts the mock.
    pub fn start() -> MockApi {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let mock = MockApi {
            state: Arc::new(Mutex::new(State::default())),
            client,
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
                let mut s = state.lock().unwrap();
                s.log.push(rec.clone());
                if s.unreachable {
                    send.send_error(std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        "connection refused",
                    ));
                    continue;
                }
                if rec.method == "GET" && rec.query("watch").as_deref() == Some("true") {
                    s.watch(rec, send);
                    continue;
                }
                let (code, value) = s.answer(rec);
                s.flush_watches();
                drop(s);
                send.send_response(response(code, &value));
            }
        });
        mock
    }

    /// Puts an object into the store (as if it existed before, or as
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
        if let Some(o) = s.objects.remove(path) {
            s.record(path, "DELETED", o);
            s.flush_watches();
        }
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

    /// Takes the log without the background watch's requests.
    pub fn take_reconcile(&self) -> Vec<Recorded> {
        self.take().into_iter().filter(|r| !r.is_watch()).collect()
    }

    /// Makes the API answer 404 for every path starting with `prefix`.
    pub fn remove_type(&self, prefix: &str) {
        self.state
            .lock()
            .unwrap()
            .missing_types
            .push(prefix.to_string());
    }

    /// Serves again a type removed by [`MockApi::remove_type`].
    pub fn restore_type(&self, prefix: &str) {
        self.state
            .lock()
            .unwrap()
            .missing_types
            .retain(|p| p != prefix);
    }

    /// Makes every request fail (or succeed again) at the transport level.
    pub fn set_unreachable(&self, on: bool) {
        let mut s = self.state.lock().unwrap();
        s.unreachable = on;
        if on {
            for w in s.watches.drain(..) {
                w.send.send_error(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "connection reset",
                ));
            }
        }
    }
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

/// A cluster-wide LIST (`/apis/g/v/res`) covers `…/namespaces/*/res/*`.
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

fn labels_match(obj: &Value, selector: &str) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        let (k, v) = term.split_once('=').unwrap_or((term, ""));
        obj["metadata"]["labels"][k].as_str() == Some(v)
    })
}

impl State {
    fn record(&mut self, path: &str, kind: &str, object: Value) {
        let rv = self.next_rv;
        self.events.push((
            rv,
            path.to_string(),
            json!({"type": kind, "object": object}),
        ));
    }

    fn watch(&mut self, rec: Recorded, send: SendResponse<Response<Body>>) {
        let (collection, _, _) = split(rec.path());
        let after = rec
            .query("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.next_rv);
        let name = rec
            .query("fieldSelector")
            .and_then(|f| f.strip_prefix("metadata.name=").map(str::to_string));
        self.watches.push(Watch {
            collection,
            name,
            after,
            send,
        });
        self.flush_watches();
    }

    /// Answers every held watch that has events to deliver.
    fn flush_watches(&mut self) {
        let watches = std::mem::take(&mut self.watches);
        for w in watches {
            let lines: Vec<String> = self
                .events
                .iter()
                .filter(|(rv, path, ev)| {
                    *rv > w.after
                        && in_collection(&w.collection, path)
                        && w.name
                            .as_ref()
                            .is_none_or(|n| ev["object"]["metadata"]["name"].as_str() == Some(n))
                })
                .map(|(_, _, ev)| serde_json::to_string(ev).unwrap())
                .collect();
            if lines.is_empty() {
                self.watches.push(w);
                continue;
            }
            let body = lines.join("\n") + "\n";
            w.send.send_response(
                Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(Body::from(body.into_bytes()))
                    .unwrap(),
            );
        }
    }

    fn bump(&mut self, obj: &mut Value, spec_changed: bool) {
        self.next_rv += 1;
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
                let labels = rec.query("labelSelector").unwrap_or_default();
                let field_name = rec
                    .query("fieldSelector")
                    .and_then(|f| f.strip_prefix("metadata.name=").map(str::to_string));
                let items: Vec<Value> = self
                    .objects
                    .iter()
                    .filter(|(k, _)| in_collection(&collection, k))
                    .filter(|(_, v)| labels_match(v, &labels))
                    .filter(|(_, v)| {
                        field_name
                            .as_ref()
                            .is_none_or(|n| v["metadata"]["name"].as_str() == Some(n))
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
                self.objects.insert(p.clone(), obj.clone());
                self.record(&p, "ADDED", obj.clone());
                (201, obj)
            }
            ("DELETE", true) => match self.objects.remove(&object_path) {
                Some(o) => {
                    self.applied.remove(&object_path);
                    self.next_rv += 1;
                    self.record(&object_path, "DELETED", o.clone());
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
                    let old = self.applied.get(&object_path).cloned().unwrap_or(json!({}));
                    let mut applied = body.clone();
                    if let Some(o) = applied.as_object_mut() {
                        o.remove("status");
                    }
                    unapply(&mut obj, &old, &applied);
                    merge(&mut obj, &applied);
                    self.applied.insert(object_path.clone(), applied);
                } else {
                    merge(&mut obj, &body);
                }
                let spec_changed = existing
                    .as_ref()
                    .map(|e| e.get("spec") != obj.get("spec"))
                    .unwrap_or(true);
                self.bump(&mut obj, spec_changed && sub.is_none());
                let gone = !obj["metadata"]["deletionTimestamp"].is_null()
                    && obj["metadata"]["finalizers"]
                        .as_array()
                        .map(|f| f.is_empty())
                        .unwrap_or(true);
                if gone {
                    self.objects.remove(&object_path);
                    self.record(&object_path, "DELETED", obj.clone());
                } else {
                    self.objects.insert(object_path.clone(), obj.clone());
                    let kind = if existing.is_some() {
                        "MODIFIED"
                    } else {
                        "ADDED"
                    };
                    self.record(&object_path, kind, obj.clone());
                }
                (200, obj)
            }
            _ => status(405, "MethodNotAllowed", &rec.line()),
        }
    }
}

/// Asserts every recorded request is permitted by the controller's RBAC
/// (management cluster only: the hosted cluster is reached as its admin).
pub fn assert_rbac(log: &[Recorded]) {
    for r in log {
        if let Some((g, res, verb)) = oooi_controller::rbac::request_attributes(&r.method, &r.uri) {
            assert!(
                oooi_controller::rbac::allows(&g, &res, &verb),
                "RBAC does not allow {verb} {res} in group {g:?} ({})",
                r.line()
            );
        }
    }
}

/// `METHOD path` of every request.
pub fn lines(log: &[Recorded]) -> Vec<String> {
    log.iter().map(Recorded::line).collect()
}

/// The requests that change state.
pub fn writes(log: &[Recorded]) -> Vec<&Recorded> {
    log.iter().filter(|r| r.is_write()).collect()
}
