//! The `gather` command (see the crate documentation and `gather --help`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use oooi_gather::gather::{LogsSince, Options, run};

/// Collects oooi's state for a support case into a directory tree.
///
/// `oc adm must-gather --image=<oooi must-gather image>` runs this program
/// in a pod with cluster-wide read access; `oc` copies the destination
/// directory back. <DEST>/version names the product and its release (two
/// lines); written under <DEST>/oooi:
///
///   summary.txt, errors.txt;
///   namespaces/<ns>/<resource>/<name>.yaml: every Infra, InfraClusterAttachment,
///     DHCPServer, DNSServer and ProxyServer with its status; their Deployments,
///     Pods, ConfigMaps, Services, ServiceAccounts, PVCs, PodDisruptionBudgets,
///     NetworkPolicies and Leases; the NetworkAttachmentDefinitions the Infras
///     name; the HostedClusters and NodePools the attachments name; the
///     Machines' addresses and VMIs' interfaces of their control-plane namespaces;
///   namespaces/<ns>/events.yaml;
///   namespaces/<ns>/logs/<pod>/<container>[.previous].log;
///   namespaces/<ns>/endpoints/<pod>/<port>-<path>.txt: each proxy replica's
///     table (generation, digest), each DHCP server's health (pair state) and
///     metrics (leases), each DNS replica's health and metrics (views), read
///     through the API server's pod proxy (pods/<name>:<port>/proxy/<path>), so
///     this pod needs no network path to them;
///   cluster-scoped/: oooi's CRDs, the Infras' ClusterUserDefinedNetworks.
///
/// Secrets are written as name, type and keys only. Every Secret value of the
/// namespaces visited, bearer tokens, `Basic` credentials, JWTs,
/// `*token=`/`*password=` values, the value after a `--token`/`--password`-like
/// flag, literal env values named *TOKEN*, *PASSWORD*, *SECRET* and literal env
/// values shaped like generated credentials are redacted everywhere. A failure to read one thing is written to errors.txt and the
/// gather goes on; each request has its own deadline.
#[derive(Debug, Parser)]
#[command(name = "gather", version, verbatim_doc_comment)]
struct Args {
    /// Destination directory (oc adm must-gather copies /must-gather back).
    #[arg(long, default_value = "/must-gather", env = "OOOI_GATHER_DEST")]
    dest: PathBuf,
    /// Deadline of each API request, in seconds.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=600))]
    request_timeout: u64,
    /// Most bytes kept of each container log (the end of the log).
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    log_limit_bytes: u64,
    /// Also gather this namespace (repeatable); oooi's own are found from its
    /// resources and pods.
    #[arg(long = "namespace", short = 'n')]
    namespaces: Vec<String>,
    /// Do not read the components' HTTP endpoints.
    #[arg(long)]
    skip_endpoints: bool,
    /// Only log lines of this recent past, a duration such as 2h0m0s
    /// (`oc adm must-gather --since` sets MUST_GATHER_SINCE).
    #[arg(long, env = "MUST_GATHER_SINCE", conflicts_with = "since_time")]
    since: Option<String>,
    /// Only log lines from this RFC 3339 time on (`oc adm must-gather
    /// --since-time` sets MUST_GATHER_SINCE_TIME).
    #[arg(long, env = "MUST_GATHER_SINCE_TIME")]
    since_time: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    oooi_process::logs::Logs::new("info").to_stderr().init();
    let args = Args::parse();
    let logs_since = match (args.since.as_deref(), args.since_time.as_deref()) {
        (Some(d), _) if !d.is_empty() => LogsSince::from_duration(d).map(Some),
        (_, Some(t)) if !t.is_empty() => LogsSince::from_time(t).map(Some),
        _ => Ok(None),
    };
    let logs_since = match logs_since {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "bad argument");
            return std::process::ExitCode::from(2);
        }
    };
    // kube's TLS needs one process-level crypto provider: with two compiled in,
    // rustls cannot choose and the client panics.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let timeout = Duration::from_secs(args.request_timeout);
    let client = match client(timeout).await {
        Ok(c) => c,
        Err(e) => {
            // Say why in the tree too: under `oc adm must-gather` the tree is
            // what comes back.
            let why = format!("{e:#}");
            tracing::error!(error = %why, "no Kubernetes client");
            if let Ok(mut tree) = oooi_gather::tree::Tree::create(&args.dest) {
                tree.error("Kubernetes client (in-cluster or KUBECONFIG)", &why);
                tree.finish();
            }
            return std::process::ExitCode::from(2);
        }
    };
    let options = Options {
        dest: args.dest,
        request_timeout: timeout,
        log_limit_bytes: args.log_limit_bytes,
        extra_namespaces: args.namespaces,
        skip_endpoints: args.skip_endpoints,
        logs_since,
    };
    match run(client, &options).await {
        Ok(tree) => {
            tracing::info!(
                root = %tree.root().display(),
                files = tree.files(),
                errors = tree.errors().len(),
                "gathered"
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(dest = %options.dest.display(), error = %e, "cannot write the destination");
            std::process::ExitCode::from(1)
        }
    }
}

async fn client(timeout: Duration) -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::infer().await?;
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    // A 503 through the pod proxy is a component's own answer (`/ready`
    // before its table): report it, never wait it out with retries; each
    // request has its deadline instead.
    config.default_retry = false;
    Ok(kube::Client::try_from(config)?)
}
