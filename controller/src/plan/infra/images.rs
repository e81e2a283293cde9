//! Component images: an Infra's own `image`, else the controller's defaults
//! (`run --dhcp-image/--dns-image/--proxy-image`, which the chart sets from
//! its `images` values; `render` takes the same flags).

use crate::crd::Infra;

/// The images the controller gives components whose Infra names none.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct DefaultImages {
    /// Image of oooi-dhcp for Infras that leave infraComponents.dhcp.image
    /// unset.
    #[arg(long = "dhcp-image", env = "OOOI_DHCP_IMAGE")]
    pub dhcp: Option<String>,
    /// Image of oooi-dns for Infras that leave infraComponents.dns.image
    /// unset.
    #[arg(long = "dns-image", env = "OOOI_DNS_IMAGE")]
    pub dns: Option<String>,
    /// Image of the proxy (Envoy 1.40 with the V8 wasm runtime) for Infras
    /// that leave infraComponents.proxy.image unset.
    #[arg(long = "proxy-image", env = "OOOI_PROXY_IMAGE")]
    pub proxy: Option<String>,
}

impl DefaultImages {
    /// `infra` with each unset component image taken from these defaults.
    pub fn apply(&self, infra: &Infra) -> Infra {
        let mut infra = infra.clone();
        let c = &mut infra.spec.infra_components;
        fill(&mut c.dhcp.pod.image, &self.dhcp);
        fill(&mut c.dns.pod.image, &self.dns);
        fill(&mut c.proxy.pod.image, &self.proxy);
        infra
    }
}

fn fill(image: &mut Option<String>, default: &Option<String>) {
    if image.as_deref().is_none_or(str::is_empty) {
        image.clone_from(default);
    }
}

/// (field, message) for every enabled component left without an image.
pub fn missing(infra: &Infra) -> Vec<(String, String)> {
    let c = &infra.spec.infra_components;
    [
        ("dhcp", c.dhcp.enabled, &c.dhcp.pod.image),
        ("dns", c.dns.enabled, &c.dns.pod.image),
        ("proxy", c.proxy.enabled, &c.proxy.pod.image),
    ]
    .into_iter()
    .filter(|(_, enabled, image)| *enabled && image.as_deref().is_none_or(str::is_empty))
    .map(|(name, _, _)| {
        (
            format!("spec.infraComponents.{name}.image"),
            format!(
                "unset, and the controller has no default (--{name}-image or OOOI_{}_IMAGE; the chart sets it from images.{name})",
                name.to_uppercase()
            ),
        )
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Infra `v` in `n` with its own DHCP image, the DNS and proxy images
    /// unset.
    fn infra() -> Infra {
        crate::testing::InfraBuilder::new()
            .named("n", "v")
            .remove("/metadata/uid")
            .remove("/metadata/generation")
            .upstreams(&["10.0.0.10"])
            .images(Some("own/dhcp:1"), None, None)
            .build()
    }

    #[test]
    fn unset_images_come_from_the_defaults_and_set_ones_stay() {
        let defaults = DefaultImages {
            dhcp: Some("r/oooi-dhcp:0.1.0".into()),
            dns: Some("r/oooi-dns:0.1.0".into()),
            proxy: None,
        };
        let applied = defaults.apply(&infra());
        let c = &applied.spec.infra_components;
        assert_eq!(c.dhcp.pod.image.as_deref(), Some("own/dhcp:1"));
        assert_eq!(c.dns.pod.image.as_deref(), Some("r/oooi-dns:0.1.0"));
        assert_eq!(c.proxy.pod.image, None);
        let missing = missing(&applied);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert_eq!(missing[0].0, "spec.infraComponents.proxy.image");
        assert!(missing[0].1.contains("--proxy-image"), "{}", missing[0].1);
    }

    #[test]
    fn a_disabled_component_needs_no_image() {
        let mut i = infra();
        i.spec.infra_components.dns.enabled = false;
        i.spec.infra_components.proxy.enabled = false;
        assert!(missing(&i).is_empty());
    }
}
