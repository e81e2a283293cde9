//! `oooi-controller run`: the controller process.
//!
//! Starts the HTTP server (`/metrics`, `/healthz`, `/readyz`), waits for the
//! leader Lease (unless `--leader-election=false`), runs the controllers
//! ([`crate::controllers::run`]) and shuts down gracefully on SIGTERM or SIGINT:
//! in-flight reconciliations finish, the Lease is released so a standby takes
//! over at once, and the HTTP server stops last.
//!
//! `/healthz` answers 200 while the process runs. `/readyz` answers 200 once
//! the process has reached the API server and is either reconciling (leader)
//! or standing by, and 503 while shutting down.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::leader::{Leader, LeaderConfig};
use crate::metrics::Metrics;

pub use oooi_process::logs::LogFormat;

/// Flags of `oooi-controller run` (each also read from the environment).
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Address of the HTTP server for /metrics (OpenMetrics), /healthz
    /// (200 while the process runs) and /readyz (200 once leading or standing
    /// by, 503 while starting or shutting down).
    #[arg(long, env = "OOOI_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// Address of a listener serving /healthz and /readyz alone, with a
    /// connection budget of its own: point the kubelet's probes here, so
    /// that whatever holds the --http-addr port's connections cannot make
    /// the controller unready or have it restarted. Unset: no such listener
    /// (both stay on --http-addr too).
    #[arg(long, env = "OOOI_HEALTH_ADDR")]
    pub health_addr: Option<SocketAddr>,
    /// Elect one active replica through a Lease.
    #[arg(long, env = "OOOI_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Namespace of the leader Lease (the controller's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Name of the leader Lease.
    #[arg(long, env = "OOOI_LEASE_NAME", default_value = oooi_vocabulary::labels::LEADER_LEASE)]
    pub lease_name: String,
    /// Identity in the Lease (the pod name; default: the host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Watch oooi objects and their children only in this namespace (default:
    /// all namespaces). Control-plane NetworkPolicies are watched in every
    /// namespace, since they live in the hosted clusters' namespaces.
    #[arg(long, env = "OOOI_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Run on OpenShift: leave the component pods' UID and fsGroup to the
    /// SCC (restricted-v2 admits them) and grant each component's
    /// ServiceAccount `use` of the least privileged SCC its pods need, by a
    /// Role and RoleBinding in the Infra's namespace. The
    /// `oooi-address-agent` SCC that pods with an address agent need is
    /// created by the install; the controller only reads it.
    #[arg(long, env = "OOOI_OPENSHIFT_SCC", default_value_t = false, action = clap::ArgAction::Set)]
    pub openshift_scc: bool,
    /// ConfigMap holding the filter module to roll out (the chart's).
    #[arg(
        long,
        env = "OOOI_FILTER_CONFIG_MAP",
        default_value = "oooi-sni-router"
    )]
    pub filter_config_map: String,
    /// Namespace of that ConfigMap (default: the controller's own, POD_NAMESPACE).
    #[arg(long, env = "OOOI_FILTER_NAMESPACE")]
    pub filter_namespace: Option<String>,
    /// Key of the module in the ConfigMap's binaryData.
    #[arg(long, env = "OOOI_FILTER_KEY", default_value = "oooi_sni_router.wasm")]
    pub filter_key: String,
    /// Log format.
    #[arg(long, env = "OOOI_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Images of components whose Infra names none.
    #[command(flatten)]
    pub images: crate::plan::infra::images::DefaultImages,
    /// Placement of components whose Infra leaves it unset.
    #[command(flatten)]
    pub placement: crate::plan::workload::placement::DefaultPlacement,
    /// Resources of components whose server leaves them unset.
    #[command(flatten)]
    pub resources: crate::plan::workload::resources::DefaultResources,
    /// Who may scrape the components' metrics ports.
    #[command(flatten)]
    pub metrics_scrapers: crate::plan::network_policy::MetricsScrapers,
}

/// Process phase, for `/readyz`.
#[derive(Debug, Default)]
pub struct Health(AtomicU8);

// 0 (the default) is "starting".
const READY: u8 = 1;
const STOPPING: u8 = 2;

impl Health {
    /// Marks the process ready (API reached; leading or standing by).
    pub fn set_ready(&self) {
        self.0.store(READY, Ordering::Release);
    }
    /// Marks the process as shutting down.
    pub fn set_stopping(&self) {
        self.0.store(STOPPING, Ordering::Release);
    }
    /// True while ready.
    pub fn ready(&self) -> bool {
        self.0.load(Ordering::Acquire) == READY
    }
}

#[derive(Clone)]
struct HttpState {
    metrics: Metrics,
    health: Arc<Health>,
}

/// The HTTP routes: `/metrics`, `/healthz`, `/readyz`.
pub fn router(metrics: Metrics, health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz_handler))
        .with_state(HttpState { metrics, health })
}

/// The health listener's routes: `/healthz` and `/readyz` alone.
pub fn health_router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|State(h): State<Arc<Health>>| async move { readiness(&h) }),
        )
        .with_state(health)
}

/// Serves [`health_router`] on `addr` until `shutdown` resolves, within
/// [`oooi_serve::Limits::HEALTH`]: a listener of its own for the kubelet's
/// probes, whose connections nothing sent to the http port can take.
pub async fn serve_health(
    addr: SocketAddr,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--health-addr {addr}: cannot bind"))?;
    info!(%addr, "serving /healthz, /readyz");
    serve_health_listener(listener, health, shutdown).await
}

/// [`serve_health`] on a bound listener.
async fn serve_health_listener(
    listener: tokio::net::TcpListener,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    tokio::select! {
        served = oooi_serve::serve(listener, health_router(health), oooi_serve::Limits::HEALTH) => {
            match served? {}
        }
        () = shutdown => Ok(()),
    }
}

async fn metrics_handler(State(s): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

async fn readyz_handler(State(s): State<HttpState>) -> impl IntoResponse {
    readiness(&s.health)
}

/// `/readyz`'s answer, on either listener.
fn readiness(h: &Health) -> (StatusCode, &'static str) {
    if h.ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// Serves [`router`] on `addr` until `shutdown` resolves, within
/// [`oooi_serve::Limits::SMALL`] like every component's small listener: at
/// most 64 connections, heads within 5 s and 16 KiB, idle connections closed
/// after 30 s. Whoever reaches the port (Prometheus, the kubelet, anything
/// the NetworkPolicy admits) cannot take the controller past its memory
/// limit by holding connections or sending unfinished heads.
pub async fn serve_http(
    addr: SocketAddr,
    metrics: Metrics,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--http-addr {addr}: cannot bind"))?;
    info!(%addr, "serving /metrics, /healthz, /readyz");
    serve_listener(listener, metrics, health, shutdown).await
}

/// [`serve_http`] on a bound listener.
async fn serve_listener(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    tokio::select! {
        served = oooi_serve::serve(listener, router(metrics, health), oooi_serve::Limits::SMALL) => {
            match served? {}
        }
        () = shutdown => Ok(()),
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = term => info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
    }
}

/// Entry point of `oooi-controller run`.
pub fn main(mut args: RunArgs) -> anyhow::Result<()> {
    oooi_process::logs::Logs::new("info,kube=warn,hyper=warn")
        .format(args.log_format)
        .init();
    // Under OLM the component images arrive as RELATED_IMAGE_* (by digest).
    args.images = crate::olm::with_related_images(args.images, |k| std::env::var(k).ok());
    // More than one rustls provider is compiled in (through kube's and other
    // crates' features), so rustls cannot pick one by itself.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run(args))
}

/// A shutdown trigger many tasks can wait on.
#[derive(Clone)]
struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    async fn wait(mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    // Refused before anything starts (an OperatorGroup naming several
    // namespaces), not after the Lease is won.
    let watched = watch_namespace(args.watch_namespace.as_deref())?;
    let metrics = Metrics::new();
    let health = Arc::new(Health::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let shutdown = Shutdown(stop_rx);

    // The HTTP server stops after everything else (see the end of this fn).
    let (http_stop_tx, http_stop_rx) = watch::channel(false);
    let probes = args.health_addr.map(|addr| {
        tokio::spawn(serve_health(
            addr,
            health.clone(),
            Shutdown(http_stop_rx.clone()).wait(),
        ))
    });
    let http = tokio::spawn(serve_http(
        args.http_addr,
        metrics.clone(),
        health.clone(),
        Shutdown(http_stop_rx).wait(),
    ));
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });

    let client = kube::Client::try_default()
        .await
        .context("cannot build a Kubernetes client (in cluster, or $KUBECONFIG)")?;
    client
        .apiserver_version()
        .await
        .context("cannot reach the Kubernetes API server")?;

    let mut leader = if args.leader_election {
        let identity = args
            .identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("oooi-controller-{}", std::process::id()));
        let cfg = LeaderConfig::new(&args.lease_namespace, &args.lease_name, &identity);
        Some(Leader::start(client.clone(), cfg, metrics.clone()).await?)
    } else {
        metrics.set_leader(true);
        None
    };
    health.set_ready();

    let mut result = Ok(());
    let acquired = async {
        if let Some(l) = leader.as_mut() {
            l.acquired().await;
        }
    };
    let leading = tokio::select! {
        _ = acquired => true,
        _ = shutdown.clone().wait() => false,
    };
    if leading && args.openshift_scc {
        report_address_agent_scc(&client).await;
    }
    if leading {
        let settings = crate::reconcile::Settings {
            watch_namespace: watched.clone(),
            openshift_scc: args.openshift_scc,
            // The push API of every Envoy admits this namespace only.
            controller_namespace: Some(args.lease_namespace.clone()),
            filter_source: crate::rollout::SourceConfig {
                namespace: args
                    .filter_namespace
                    .clone()
                    .unwrap_or_else(|| args.lease_namespace.clone()),
                name: args.filter_config_map.clone(),
                key: args.filter_key.clone(),
            },
            images: args.images.clone(),
            placement: args.placement.clone(),
            resources: args.resources.clone(),
            metrics_scrapers: args.metrics_scrapers.clone(),
        };
        let controllers = crate::controllers::run(
            client.clone(),
            settings,
            metrics.clone(),
            shutdown.clone().wait(),
        );
        let lost = async {
            match leader.as_mut() {
                Some(l) => l.lost().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = controllers => {
                if let Err(e) = r {
                    error!("controllers stopped: {e:#}");
                    result = Err(e);
                }
            }
            _ = lost => {
                // Another replica may be reconciling already: stop at once
                // and let Kubernetes restart this one as a standby.
                result = Err(anyhow::anyhow!("lost the leader lease"));
            }
        }
    }
    health.set_stopping();
    if let Some(l) = leader {
        l.release().await;
    }
    let _ = http_stop_tx.send(true);
    match http.await {
        Ok(Err(e)) => error!("HTTP server: {e:#}"),
        Err(e) => error!("HTTP server task: {e}"),
        Ok(Ok(())) => {}
    }
    if let Some(probes) = probes {
        match probes.await {
            Ok(Err(e)) => error!("health listener: {e:#}"),
            Err(e) => error!("health listener task: {e}"),
            Ok(Ok(())) => {}
        }
    }
    info!("stopped");
    result
}

/// Says at start whether the SCC that pods with an address agent need
/// exists (read by name; the install creates it, never the controller).
/// Components whose pods need it report `Degraded` while it is missing.
async fn report_address_agent_scc(client: &kube::Client) {
    let name = crate::plan::workload::scc::ADDRESS_AGENT_SCC;
    match crate::reconcile::component::scc_exists(client, name).await {
        Ok(true) => info!(
            scc = name,
            "the address agent's SecurityContextConstraints exists"
        ),
        Ok(false) => warn!(
            scc = name,
            "the address agent's SecurityContextConstraints does not exist: components with an \
             address agent cannot start until the install creates it (docs/installation.md#openshift)"
        ),
        Err(e) => warn!(
            scc = name,
            "cannot read the address agent's SecurityContextConstraints: {e}"
        ),
    }
}

/// The namespace `--watch-namespace` names: an empty value (OLM's
/// `olm.targetNamespaces` in AllNamespaces mode) means every namespace;
/// several (MultiNamespace) are refused, since the controller watches one.
pub fn watch_namespace(value: Option<&str>) -> anyhow::Result<Option<String>> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) if v.contains(',') => anyhow::bail!(
            "--watch-namespace {v:?} names several namespaces: the controller watches one \
             (OLM install modes OwnNamespace, SingleNamespace or AllNamespaces)"
        ),
        Some(v) => Ok(Some(v.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let status = out.split_whitespace().nth(1).unwrap().parse().unwrap();
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    #[test]
    fn olm_target_namespaces_become_the_watched_namespace() {
        assert_eq!(watch_namespace(None).unwrap(), None);
        assert_eq!(watch_namespace(Some("")).unwrap(), None, "AllNamespaces");
        assert_eq!(
            watch_namespace(Some("hcp-infra")).unwrap().as_deref(),
            Some("hcp-infra")
        );
        let e = watch_namespace(Some("a,b")).unwrap_err().to_string();
        assert!(e.contains("several namespaces"), "{e}");
    }

    #[tokio::test]
    async fn http_endpoints_report_metrics_health_and_readiness() {
        let metrics = Metrics::new();
        metrics.reconciled("Infra", std::time::Duration::from_millis(1));
        let health = Arc::new(Health::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(false);
        let server = tokio::spawn(serve_listener(
            listener,
            metrics,
            health.clone(),
            Shutdown(rx).wait(),
        ));
        assert_eq!(get(addr, "/healthz").await.0, 200);
        assert_eq!(get(addr, "/readyz").await.0, 503, "not ready before start");
        health.set_ready();
        assert_eq!(get(addr, "/readyz").await.0, 200);
        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            body.contains("oooi_controller_reconciles_total{kind=\"Infra\"} 1"),
            "{body}"
        );
        health.set_stopping();
        assert_eq!(
            get(addr, "/readyz").await.0,
            503,
            "not ready while stopping"
        );
        tx.send(true).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn the_health_listener_answers_health_and_readiness_alone() {
        let health = Arc::new(Health::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(false);
        let server = tokio::spawn(serve_health_listener(
            listener,
            health.clone(),
            Shutdown(rx).wait(),
        ));
        assert_eq!(get(addr, "/healthz").await.0, 200);
        assert_eq!(get(addr, "/readyz").await.0, 503, "not ready before start");
        health.set_ready();
        assert_eq!(get(addr, "/readyz").await.0, 200);
        assert_eq!(
            get(addr, "/metrics").await.0,
            404,
            "metrics stay on --http-addr"
        );
        health.set_stopping();
        assert_eq!(
            get(addr, "/readyz").await.0,
            503,
            "not ready while stopping"
        );
        tx.send(true).unwrap();
        server.await.unwrap().unwrap();
    }
}
