//! How a DHCP pod's inventory API is reached: one small trait ([`Reach`])
//! with the two real ways, and the API's three calls over any of them.
//!
//! - [`Direct`]: the pod address, port 9069. The controller's status poll
//!   goes this way: the servers' NetworkPolicy admits the controller's pods
//!   to that port (and nothing else on the pod network).
//! - [`PortForward`]: through the API server's `pods/portforward`, as
//!   `kubectl port-forward` does; the stream arrives on the pod's own
//!   loopback, where the server also listens, so no NetworkPolicy is in the
//!   way. `oooi-controller leases` goes this way from a laptop. (The API
//!   server's `pods/proxy` is no way here: it drops the caller's
//!   `Authorization` header, and the NetworkPolicy does not admit it.)
//!
//! Each request is one HTTP/1.1 GET with the bearer token, a timeout, and a
//! bounded body.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty, Limited};
/// The body of an answer.
pub use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use oooi_dhcp_inventory::{
    API_PREFIX, LeasePage, LeaseQuery, LeaseRow, MAX_PAGE, PoolReport, ServerInfo, Why,
};
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};

use oooi_dhcp_inventory::PORT as INVENTORY_PORT;

/// The largest answer read (a full page of rows is far smaller).
pub const MAX_BODY: usize = 8 << 20;
/// The most pages one listing walks (at [`MAX_PAGE`] rows each, far more
/// than a pool holds), so a server that keeps answering `next` cannot keep
/// the caller forever.
pub const MAX_PAGES: usize = 1000;

/// One DHCP pod to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTarget {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its pod address, once it has one.
    pub ip: Option<IpAddr>,
}

/// A way to send one GET to a pod's inventory API.
pub trait Reach: Sync {
    /// `GET <path_and_query>` with `Authorization: Bearer <token>`; the
    /// status and the body.
    fn get(
        &self,
        pod: &PodTarget,
        path_and_query: &str,
        token: &str,
    ) -> impl Future<Output = anyhow::Result<(StatusCode, Bytes)>> + Send;
}

/// One GET over an open stream to the server.
pub async fn get_over<S>(
    io: S,
    path_and_query: &str,
    token: &str,
) -> anyhow::Result<(StatusCode, Bytes)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .context("HTTP handshake")?;
    let conn = tokio::spawn(conn);
    let req = Request::get(path_and_query)
        .header(header::HOST, format!("localhost:{INVENTORY_PORT}"))
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await.context("HTTP request")?;
    let status = resp.status();
    let body = Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| anyhow!("reading the answer: {e}"))?
        .to_bytes();
    drop(sender);
    conn.abort();
    Ok((status, body))
}

/// The pod address, port 9069 (the controller's own way).
#[derive(Debug, Clone)]
pub struct Direct {
    /// Connect and answer timeout.
    pub timeout: Duration,
}

impl Default for Direct {
    fn default() -> Self {
        Direct {
            timeout: Duration::from_secs(5),
        }
    }
}

impl Reach for Direct {
    async fn get(
        &self,
        pod: &PodTarget,
        path_and_query: &str,
        token: &str,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let ip = pod
            .ip
            .ok_or_else(|| anyhow!("pod {}/{} has no address yet", pod.namespace, pod.name))?;
        let addr = SocketAddr::new(ip, INVENTORY_PORT);
        tokio::time::timeout(self.timeout, async {
            let io = tokio::net::TcpStream::connect(addr)
                .await
                .with_context(|| format!("connecting to {addr}"))?;
            get_over(io, path_and_query, token).await
        })
        .await
        .map_err(|_| anyhow!("{addr}: no answer within {:?}", self.timeout))?
    }
}

/// Through the API server's port-forward to the pod's loopback (the way
/// `kubectl port-forward` goes; needs `create` on `pods/portforward`).
#[derive(Clone)]
pub struct PortForward {
    /// The API client.
    pub client: kube::Client,
    /// Timeout of one request, forward included.
    pub timeout: Duration,
}

impl Reach for PortForward {
    async fn get(
        &self,
        pod: &PodTarget,
        path_and_query: &str,
        token: &str,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        tokio::time::timeout(self.timeout, async {
            let mut pf = api
                .portforward(&pod.name, &[INVENTORY_PORT])
                .await
                .with_context(|| format!("port-forward to {}/{}", pod.namespace, pod.name))?;
            let stream = pf
                .take_stream(INVENTORY_PORT)
                .ok_or_else(|| anyhow!("port-forward gave no stream"))?;
            let out = get_over(stream, path_and_query, token).await;
            // The forward ends with the request; its error (if any) is the
            // request's.
            drop(pf);
            out
        })
        .await
        .map_err(|_| {
            anyhow!(
                "{}/{}: no answer through port-forward within {:?}",
                pod.namespace,
                pod.name,
                self.timeout
            )
        })?
    }
}

async fn get_json<R: Reach, T: DeserializeOwned>(
    reach: &R,
    pod: &PodTarget,
    path_and_query: &str,
    token: &str,
) -> anyhow::Result<T> {
    let (status, body) = reach.get(pod, path_and_query, token).await?;
    if status != StatusCode::OK {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        bail!(
            "{}/{}: GET {path_and_query}: {status} {}",
            pod.namespace,
            pod.name,
            text.trim()
        );
    }
    serde_json::from_slice(&body).with_context(|| {
        format!(
            "{}/{}: GET {path_and_query}: not the inventory API's answer",
            pod.namespace, pod.name
        )
    })
}

/// `GET /pools`.
pub async fn pools<R: Reach>(
    reach: &R,
    pod: &PodTarget,
    token: &str,
) -> anyhow::Result<PoolReport> {
    get_json(reach, pod, &format!("{API_PREFIX}/pools"), token).await
}

/// `GET /leases?<query>`: one page.
pub async fn leases_page<R: Reach>(
    reach: &R,
    pod: &PodTarget,
    token: &str,
    query: &LeaseQuery,
) -> anyhow::Result<LeasePage> {
    let q = serde_urlencoded::to_string(query).context("encoding the lease query")?;
    let path = match q.is_empty() {
        true => format!("{API_PREFIX}/leases"),
        false => format!("{API_PREFIX}/leases?{q}"),
    };
    get_json(reach, pod, &path, token).await
}

/// Every row matching `query`, page after page (at most [`MAX_PAGES`]), and
/// who answered the last page; `query.after` and `query.limit` are the
/// walk's own.
pub async fn all_leases<R: Reach>(
    reach: &R,
    pod: &PodTarget,
    token: &str,
    query: &LeaseQuery,
) -> anyhow::Result<(ServerInfo, Vec<LeaseRow>)> {
    let mut q = LeaseQuery {
        after: None,
        limit: Some(MAX_PAGE),
        ..query.clone()
    };
    let mut rows = Vec::new();
    for _ in 0..MAX_PAGES {
        let page = leases_page(reach, pod, token, &q).await?;
        rows.extend(page.leases);
        let server = page.server;
        match page.next {
            // A `next` that does not move forward would loop.
            Some(next) if q.after.is_none_or(|a| next > a) => q.after = Some(next),
            Some(_) => bail!(
                "{}/{}: the lease pages do not move forward",
                pod.namespace,
                pod.name
            ),
            None => return Ok((server, rows)),
        }
    }
    bail!(
        "{}/{}: more than {MAX_PAGES} pages of leases",
        pod.namespace,
        pod.name
    )
}

/// `GET /why?mac=<mac>`.
pub async fn why<R: Reach>(
    reach: &R,
    pod: &PodTarget,
    token: &str,
    mac: &str,
) -> anyhow::Result<Why> {
    let q = serde_urlencoded::to_string([("mac", mac)]).context("encoding the MAC")?;
    get_json(reach, pod, &format!("{API_PREFIX}/why?{q}"), token).await
}
