//! The Kubernetes-service names a worker resolves and connects to.

use std::borrow::Cow;

/// Names a worker uses for the in-cluster Kubernetes service. They are the
/// same in every hosted cluster, so the proxy can only route them by source
/// address, and the DNS server answers them per VLAN client.
pub const KUBERNETES_ALIASES: [&str; 4] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// True when `name` (already normalised, see [`normalize_name`]) is one of
/// [`KUBERNETES_ALIASES`].
pub fn is_kubernetes_alias(name: &str) -> bool {
    KUBERNETES_ALIASES.contains(&name)
}

/// Lower-cases and strips one trailing dot: the forms in which SNI and DNS
/// names compare equal. Borrows when there is nothing to change.
pub fn normalize_name(name: &str) -> Cow<'_, str> {
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    if trimmed.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(trimmed.to_ascii_lowercase())
    } else {
        Cow::Borrowed(trimmed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_match_only_in_normal_form() {
        assert!(is_kubernetes_alias("kubernetes.default.svc"));
        assert!(!is_kubernetes_alias("kubernetes.default.svc."));
        assert!(is_kubernetes_alias(&normalize_name("Kubernetes.Default.")));
        assert!(!is_kubernetes_alias("kubernetes.default.svc.cluster"));
        assert!(matches!(normalize_name("api.a.b"), Cow::Borrowed(_)));
    }
}
