//! The controller's integration tests, one binary: each file under
//! `tests/` used to be its own binary linking kube, wasmtime and the
//! controller (about 200 MB each with line tables), and thirty of them
//! filled a CI disk. One binary links once.

mod mock_api;
mod plan_support;
mod reconcile_support;

mod crd_admission;
mod crds;
mod dhcp_subnet_rule;
mod dns_config_rule;
mod docs_examples;
mod docs_reference;
mod hosted;
mod http_flood;
mod inventory;
mod olm_bundle;
mod plan;
mod plan_agent;
mod plan_children;
mod plan_dhcp_clients;
mod plan_isolation;
mod plan_network_policy;
mod plan_placement;
mod plan_reference;
mod plan_render;
mod plan_replicas;
mod plan_scc;
mod plan_views;
mod pod_security_docs;
mod probe;
mod push_envoy;
mod reconcile;
mod reconcile_decode;
mod reconcile_leader;
mod reconcile_run;
mod render_filter;
mod render_gitops;
mod render_golden;
mod render_hosted;
mod rollout;
