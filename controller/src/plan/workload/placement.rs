//! Where component pods run and how their images are pulled: an Infra's own
//! `placement` per component, field by field, else the controller's
//! defaults (`run --component-placement`, which the chart sets from its
//! `components.placement` values; `render` takes the same flag).

use crate::crd::{Infra, PodPlacement};

/// The placement the controller gives component fields an Infra leaves unset.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct DefaultPlacement {
    /// Default placement of the DHCP, DNS and proxy pods, as JSON or YAML in
    /// the shape of an Infra component's `placement` (`nodeSelector`,
    /// `tolerations`, `affinity`, `priorityClassName`, `imagePullSecrets`),
    /// e.g. '{"nodeSelector": {"vlan.example.com/trunk": "true"}}'. Each
    /// field an Infra component sets replaces the default's.
    #[arg(
        long = "component-placement",
        env = "OOOI_COMPONENT_PLACEMENT",
        value_parser = parse_placement,
        value_name = "JSON"
    )]
    pub placement: Option<PodPlacement>,
}

/// Reads a placement document; the error names the field at fault.
pub fn parse_placement(text: &str) -> Result<PodPlacement, String> {
    serde_saphyr::from_str(text).map_err(|e| format!("not a component placement: {e}"))
}

impl DefaultPlacement {
    /// `infra` with each component's unset placement fields taken from
    /// these defaults.
    pub fn apply(&self, infra: &Infra) -> Infra {
        let mut infra = infra.clone();
        if let Some(defaults) = &self.placement {
            let c = &mut infra.spec.infra_components;
            for p in [
                &mut c.dhcp.pod.placement,
                &mut c.dns.pod.placement,
                &mut c.proxy.pod.placement,
            ] {
                *p = p.or(defaults);
            }
        }
        infra
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures;

    #[test]
    fn an_infras_own_fields_win_and_the_rest_come_from_the_defaults() {
        let defaults = DefaultPlacement {
            placement: Some(
                parse_placement(
                    r#"{"nodeSelector": {"vlan": "yes"}, "priorityClassName": "oooi-high",
                        "imagePullSecrets": [{"name": "pull"}],
                        "tolerations": [{"key": "vlan", "operator": "Exists"}]}"#,
                )
                .unwrap(),
            ),
        };
        let mut infra = fixtures::infra();
        infra
            .spec
            .infra_components
            .dns
            .pod
            .placement
            .priority_class_name = Some("dns-prio".into());
        let out = defaults.apply(&infra);
        let c = &out.spec.infra_components;
        assert_eq!(
            c.dns.pod.placement.priority_class_name.as_deref(),
            Some("dns-prio")
        );
        assert_eq!(
            c.dhcp.pod.placement.priority_class_name.as_deref(),
            Some("oooi-high")
        );
        for p in [
            &c.dhcp.pod.placement,
            &c.dns.pod.placement,
            &c.proxy.pod.placement,
        ] {
            assert_eq!(p.node_selector["vlan"], "yes");
            assert_eq!(p.image_pull_secrets[0].name, "pull");
            assert_eq!(p.tolerations[0].key.as_deref(), Some("vlan"));
        }
        // No defaults: the Infra as written.
        assert_eq!(DefaultPlacement::default().apply(&infra), infra);
    }

    #[test]
    fn a_bad_default_names_the_field() {
        let e = parse_placement(r#"{"nodeSelectr": {}}"#).unwrap_err();
        assert!(e.contains("nodeSelectr"), "{e}");
        let e = parse_placement(r#"{"tolerations": "x"}"#).unwrap_err();
        assert!(e.contains("tolerations") || e.contains("sequence"), "{e}");
    }
}
