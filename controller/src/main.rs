//! `oooi-controller`: the command line.
//!
//! - `crds`: print every CRD (generated from the Rust types).
//! - `render`: plan offline from CR files and print (or write) every object.
//! - `run`: the controller (in cluster, or with $KUBECONFIG).
//! - `rbac`: the ClusterRole rules the controller needs.
//! - `leases`: who has which DHCP address (and `leases why MAC`).
//! - `docs-reference`: write the CR reference pages of the docs site.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "oooi-controller",
    version,
    about = "oooi controller: Infra and InfraClusterAttachment → the VLAN stack"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `oooi-controller render`.
#[derive(clap::Args)]
struct RenderArgs {
    /// Multi-document YAML with Infra, InfraClusterAttachment, standalone
    /// DHCPServer/DNSServer/ProxyServer and ObservedCluster/ObservedInfra
    /// fixtures. Repeatable.
    #[arg(short = 'f', long = "file", required = true)]
    files: Vec<PathBuf>,
    /// Write objects and config files under this directory instead of printing.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Push token to render into the Envoy config (default: a fixed,
    /// clearly fake one; the controller generates the real one).
    #[arg(
        long,
        env = "OOOI_PUSH_TOKEN",
        hide_env_values = true,
        conflicts_with = "gitops"
    )]
    push_token: Option<String>,
    /// Print only what a GitOps tool can apply as it is: no PlanSummary
    /// (its verdicts go to stderr) and no Secret, so no push token. The
    /// running controller still writes each proxy's Envoy config Secret
    /// from the push token Secret (which it creates unless it exists),
    /// pushes the routing table and learns the workers' addresses.
    #[arg(long)]
    gitops: bool,
    /// The filter module (the built `oooi_sni_router.wasm`). Render then
    /// emits each proxy's `<proxy>-filter` ConfigMap as the controller's
    /// filter rollout writes it on a fresh cluster (the module under its
    /// versioned key `oooi-sni-router-<12 hex>.wasm`), and Envoy's config
    /// names that module and its SHA-256. The module must first pass the
    /// controller's wasmtime check against every rendered routing table;
    /// a refused module fails the render, naming the check. Default:
    /// $OOOI_FILTER_WASM when set. Without a module the output lacks the
    /// filter ConfigMap (a note on stderr says so): its Envoy pods start
    /// but load no filter, reset every TLS connection and answer the
    /// table API (and readiness) with 500 until the ConfigMap exists.
    #[arg(long, env = "OOOI_FILTER_WASM")]
    filter_wasm: Option<PathBuf>,
    /// Render the --filter-wasm module without the wasmtime check (the
    /// controller never skips it).
    #[arg(long, requires = "filter_wasm")]
    skip_filter_check: bool,
    /// Namespace the controller runs in: the component pods'
    /// NetworkPolicies admit the controller pods there (and no other pod)
    /// to the proxies' push API and the DHCP servers' lease inventory.
    #[arg(long, default_value = oooi_controller::render::DEFAULT_CONTROLLER_NAMESPACE)]
    controller_namespace: String,
    /// Images of components whose Infra names none, as `run` takes them.
    #[command(flatten)]
    images: oooi_controller::plan::infra::images::DefaultImages,
    /// Placement of components whose Infra leaves it unset, as `run` takes it.
    #[command(flatten)]
    placement: oooi_controller::plan::workload::placement::DefaultPlacement,
    /// Resources of components whose server leaves them unset, as `run`
    /// takes them.
    #[command(flatten)]
    resources: oooi_controller::plan::workload::resources::DefaultResources,
    /// Who may scrape the components' metrics ports, as `run` takes it.
    #[command(flatten)]
    metrics_scrapers: oooi_controller::plan::network_policy::MetricsScrapers,
    /// Print the output and exit 0 even when an Infra is invalid, an
    /// attachment is excluded or its Infra is not in the input (the
    /// problems still go to stderr). Without it, render exits 1 on any of
    /// them, so it can gate a pipeline.
    #[arg(long)]
    allow_invalid: bool,
    /// Refuse a document that is not an oooi kind (by default a
    /// Namespace, NetworkAttachmentDefinition or any other kind in the
    /// same files is skipped, with one line on stderr each).
    #[arg(long)]
    strict_kinds: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Print every CRD as multi-document YAML (generated from the Rust types).
    Crds {
        /// Write one file per CRD into this directory instead of printing.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Plan offline from CR files and print (or write) every object and config.
    Render(RenderArgs),
    /// Run the controller (in cluster, or with $KUBECONFIG).
    ///
    /// Serves /metrics, /healthz and /readyz, waits for the leader Lease
    /// (unless --leader-election=false), then reconciles Infra and
    /// InfraClusterAttachment objects into DHCPServer, DNSServer and
    /// ProxyServer objects and their pods, and pushes the routing table to
    /// every Envoy replica. Watches HyperShift NodePools, CAPI Machines and
    /// KubeVirt VMIs for worker addresses when their CRDs exist, and runs
    /// (logging which are missing) when they do not. On SIGTERM or SIGINT it
    /// finishes in-flight reconciles, releases the Lease and exits 0.
    Run(oooi_controller::run::RunArgs),
    /// Print the ClusterRole and Roles the controller needs (YAML documents
    /// `{kind, namespace, rules}`).
    ///
    /// Exactly the API calls `run` makes; the chart's ClusterRole and Roles
    /// are tested against this output.
    Rbac {
        /// The rules of `run --openshift-scc` (adds Roles, RoleBindings and
        /// `use` of the SCCs the controller grants).
        #[arg(long)]
        openshift_scc: bool,
        /// As `run --watch-namespace`: the rules for the watched namespace
        /// (Secrets among them) become a Role there instead of ClusterRole
        /// rules.
        #[arg(long)]
        watch_namespace: Option<String>,
        /// The controller's namespace, where its leader-election Lease is.
        #[arg(long, default_value = oooi_controller::render::DEFAULT_CONTROLLER_NAMESPACE)]
        release_namespace: String,
        /// A namespace of HostedClusters whose admin kubeconfig the
        /// controller reads (apps ingress): `get` on Secrets becomes a Role
        /// there instead of a ClusterRole rule. Repeatable.
        #[arg(long = "hosted-cluster-namespace")]
        hosted_cluster_namespaces: Vec<String>,
        /// Precede every rule with a comment saying why the controller needs it.
        #[arg(long)]
        explain: bool,
        /// Print the SecurityContextConstraints pods with an address agent
        /// run under, which the install creates (the chart on OpenShift, an
        /// administrator under OLM), instead of the rules.
        #[arg(long)]
        sccs: bool,
        /// The roles OLM makes from the bundle in this install mode (with
        /// --release-namespace as the operator's namespace and
        /// --watch-namespace as the OperatorGroup's target), instead of the
        /// chart's.
        #[arg(long, value_enum, conflicts_with = "hosted_cluster_namespaces")]
        olm_install_mode: Option<oooi_controller::rbac::InstallMode>,
        /// Every rule as the Markdown table of docs/installation.md (where
        /// each install mode grants it), instead of the roles.
        #[arg(long)]
        markdown: bool,
    },
    /// Write the OLM registry+v1 bundle: manifests/ (the
    /// ClusterServiceVersion, the CRDs, the filter ConfigMap), metadata/
    /// (annotations.yaml) and bundle.Containerfile; with --catalog, also the
    /// file-based catalog. Refuses a bundle that breaks an OLM or OperatorHub
    /// rule, naming each one.
    Bundle {
        /// Directory to write the bundle into.
        #[arg(long)]
        out: PathBuf,
        /// Semantic version of the bundle.
        #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
        version: String,
        /// NAME=REPOSITORY@sha256:DIGEST for each of controller, dns, dhcp,
        /// proxy and must-gather. Repeatable.
        #[arg(long = "image", value_name = "NAME=REF")]
        images: Vec<String>,
        /// A file of NAME=REF lines (`#` comments), read after --image.
        #[arg(long, value_name = "FILE")]
        image_digests: Option<PathBuf>,
        /// The filter module (the built `oooi_sni_router.wasm`), shipped as
        /// the rollout-source ConfigMap.
        #[arg(long, env = "OOOI_FILTER_WASM")]
        filter_wasm: PathBuf,
        /// The version this one replaces in the channel.
        #[arg(long)]
        replaces: Option<String>,
        /// Versions OLM may upgrade from in one step (default `<VERSION`).
        #[arg(long)]
        skip_range: Option<String>,
        /// Also write the file-based catalog (DIR/oooi/catalog.yaml).
        #[arg(long, requires = "bundle_image")]
        catalog: Option<PathBuf>,
        /// The bundle image by digest, as the catalog names it.
        #[arg(long, requires = "catalog")]
        bundle_image: Option<String>,
    },
    /// GET each URL (plain HTTP) and exit 0 only when every one answers 2xx.
    ///
    /// For checks from this image, which has no shell or HTTP client: the
    /// chart's `helm test` pod probes the controller's /healthz and /metrics
    /// through its Service.
    Probe {
        /// A URL to GET. Repeatable; probed in order.
        #[arg(long = "url", required = true)]
        urls: Vec<String>,
        /// Bound on each request, in seconds.
        #[arg(long, default_value_t = 5)]
        timeout_seconds: u64,
        /// Tries per URL before giving up.
        #[arg(long, default_value_t = 6)]
        attempts: u32,
        /// Seconds between tries.
        #[arg(long, default_value_t = 5)]
        interval_seconds: u64,
    },
    /// List the DHCP leases, joined with VMs, Machines and hosted clusters;
    /// `leases why MAC`: why a client got no address.
    #[command(long_about = oooi_controller::inventory::command::LONG_ABOUT)]
    Leases(oooi_controller::inventory::command::LeasesArgs),
    /// Write the CR reference pages of the docs site (from the CRD schemas).
    DocsReference {
        /// Directory of the pages (the docs site's `docs/reference`).
        #[arg(long)]
        out: PathBuf,
    },
}

fn crds(out: Option<PathBuf>) -> anyhow::Result<()> {
    match out {
        None => print!("{}", oooi_controller::crd::crds_yaml()?),
        Some(dir) => {
            std::fs::create_dir_all(&dir)?;
            for (name, yaml) in oooi_controller::crd::crd_files()? {
                std::fs::write(dir.join(name), yaml)?;
            }
        }
    }
    Ok(())
}

fn render(a: RenderArgs) -> anyhow::Result<oooi_controller::render::Rendered> {
    use anyhow::Context;
    use oooi_controller::render;
    let mut input = render::RenderInput {
        controller_namespace: Some(a.controller_namespace),
        images: a.images,
        placement: a.placement,
        resources: a.resources,
        metrics_scrapers: a.metrics_scrapers,
        strict_kinds: a.strict_kinds,
        gitops: a.gitops,
        ..render::RenderInput::default()
    };
    if let Some(path) = a.filter_wasm {
        let module =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut filter = render::FilterInput::new(module);
        filter.check = !a.skip_filter_check;
        input.filter = Some(filter);
    }
    for f in &a.files {
        input.add_file(f)?;
    }
    for line in &input.skipped {
        eprintln!("skipped: {line}");
    }
    let token = a
        .push_token
        .unwrap_or_else(|| render::OFFLINE_PUSH_TOKEN.to_string());
    render::render(&input, &token)
}

struct BundleArgs {
    out: PathBuf,
    version: String,
    images: Vec<String>,
    image_digests: Option<PathBuf>,
    filter_wasm: PathBuf,
    edge: oooi_controller::olm::csv::UpgradeEdge,
    catalog: Option<(PathBuf, String)>,
}

fn bundle(args: BundleArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    use oooi_controller::olm;
    let mut entries = args.images;
    if let Some(file) = &args.image_digests {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("--image-digests: cannot read {}", file.display()))?;
        entries.extend(text.lines().map(str::to_string));
    }
    let images =
        olm::BundleImages::parse(entries.iter().map(String::as_str)).map_err(anyhow::Error::msg)?;
    let filter_wasm = std::fs::read(&args.filter_wasm)
        .with_context(|| format!("--filter-wasm: cannot read {}", args.filter_wasm.display()))?;
    let input = olm::BundleInput {
        version: args.version,
        images,
        edge: args.edge,
        filter_wasm,
    };
    let built = olm::bundle(&input)?;
    olm::write(&built, &args.out)?;
    eprintln!(
        "bundle {} written to {}",
        olm::csv::csv_name(&input.version),
        args.out.display()
    );
    if let Some((dir, image)) = args.catalog {
        let text = olm::catalog(&built, &input, &image)?;
        let path = dir.join(olm::csv::PACKAGE).join("catalog.yaml");
        std::fs::create_dir_all(dir.join(olm::csv::PACKAGE))?;
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("catalog written to {}", path.display());
    }
    Ok(())
}

fn leases(args: oooi_controller::inventory::command::LeasesArgs) -> anyhow::Result<()> {
    // kube's TLS needs one process-level provider (see Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let text = rt.block_on(oooi_controller::inventory::command::run(args))?;
    print!("{text}");
    Ok(())
}

fn probe(urls: &[String], timeout: u64, attempts: u32, interval: u64) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let answers = rt.block_on(oooi_controller::probe::all(
        urls,
        std::time::Duration::from_secs(timeout),
        attempts,
        std::time::Duration::from_secs(interval),
    ))?;
    for a in answers {
        println!("{} {} ({} bytes)", a.url, a.status, a.body_len);
    }
    Ok(())
}

/// Prints (or writes) what render produced, after its notes and problems;
/// fails on a problem unless `allow_invalid`.
fn emit(
    rendered: &oooi_controller::render::Rendered,
    out: Option<PathBuf>,
    allow_invalid: bool,
) -> anyhow::Result<()> {
    use oooi_controller::render;
    for note in &rendered.notes {
        eprintln!("note: {note}");
    }
    for problem in &rendered.problems {
        eprintln!("invalid: {problem}");
    }
    if !rendered.problems.is_empty() && !allow_invalid {
        anyhow::bail!(
            "{} problem(s) in the input (listed above); --allow-invalid renders anyway",
            rendered.problems.len()
        );
    }
    match out {
        None => print!("{}", render::to_yaml(rendered)?),
        Some(dir) => render::write_out(rendered, &dir)?,
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crds { out } => crds(out),
        Command::Render(a) => {
            let (out, allow_invalid) = (a.out.clone(), a.allow_invalid);
            render(a).and_then(|rendered| emit(&rendered, out, allow_invalid))
        }
        Command::Run(args) => oooi_controller::run::main(args),
        Command::Rbac {
            openshift_scc,
            watch_namespace,
            release_namespace,
            hosted_cluster_namespaces,
            explain,
            sccs,
            olm_install_mode,
            markdown,
        } => if sccs {
            oooi_controller::rbac::sccs_yaml()
        } else if markdown {
            Ok(oooi_controller::rbac::rules_markdown())
        } else if let Some(mode) = olm_install_mode {
            match (mode, watch_namespace.as_deref()) {
                (oooi_controller::rbac::InstallMode::SingleNamespace, None) => Err(anyhow::anyhow!(
                    "--olm-install-mode SingleNamespace needs --watch-namespace (the OperatorGroup's target namespace)"
                )),
                (_, target) => oooi_controller::rbac::roles_yaml(
                    &oooi_controller::rbac::olm_layout(
                        mode,
                        &release_namespace,
                        target.unwrap_or_default(),
                    ),
                    explain,
                ),
            }
        } else {
            oooi_controller::rbac::layout_yaml(
                &oooi_controller::rbac::Layout {
                    openshift_scc,
                    watch_namespace,
                    release_namespace,
                    hosted_cluster_namespaces,
                },
                explain,
            )
        }
        .map(|y| print!("{y}")),
        Command::Bundle {
            out,
            version,
            images,
            image_digests,
            filter_wasm,
            replaces,
            skip_range,
            catalog,
            bundle_image,
        } => bundle(BundleArgs {
            out,
            version,
            images,
            image_digests,
            filter_wasm,
            edge: oooi_controller::olm::csv::UpgradeEdge {
                replaces,
                skip_range,
            },
            catalog: catalog.zip(bundle_image),
        }),
        Command::Probe {
            urls,
            timeout_seconds,
            attempts,
            interval_seconds,
        } => probe(&urls, timeout_seconds, attempts, interval_seconds),
        Command::Leases(args) => leases(args),
        Command::DocsReference { out } => oooi_controller::docs_reference::write(&out),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
