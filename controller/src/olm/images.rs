//! The images a bundle names, each pinned by digest, and the
//! `RELATED_IMAGE_*` variables that carry them to the controller.
//!
//! OLM and oc-mirror find every image an operator needs in the CSV's
//! `relatedImages`; a disconnected cluster reaches the mirrored copies only
//! through digests (an ImageDigestMirrorSet maps repositories, never tags).
//! The controller container gets one `RELATED_IMAGE_<NAME>` variable per
//! image, and `run` takes the component images from them when no flag or
//! `OOOI_*_IMAGE` variable names one.

use std::collections::BTreeMap;

use crate::plan::infra::images::DefaultImages;

/// One image the bundle ships or references.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum BundleImage {
    /// `oooi-controller`, the operator itself.
    Controller,
    /// `oooi-dns`.
    Dns,
    /// `oooi-dhcp`.
    Dhcp,
    /// `oooi-proxy` (Envoy with the filter and the gate).
    Proxy,
    /// `oooi-must-gather`, run by `oc adm must-gather`.
    MustGather,
}

impl BundleImage {
    /// Every image, in the order the CSV lists them.
    pub const ALL: [BundleImage; 5] = [
        BundleImage::Controller,
        BundleImage::Dns,
        BundleImage::Dhcp,
        BundleImage::Proxy,
        BundleImage::MustGather,
    ];

    /// The name in `--image NAME=REF` and in `relatedImages`.
    pub fn name(self) -> &'static str {
        match self {
            BundleImage::Controller => "controller",
            BundleImage::Dns => "dns",
            BundleImage::Dhcp => "dhcp",
            BundleImage::Proxy => "proxy",
            BundleImage::MustGather => "must-gather",
        }
    }

    /// The repository `tools/dev images` builds it as.
    pub fn repository(self) -> &'static str {
        match self {
            BundleImage::Controller => "oooi-controller",
            BundleImage::Dns => "oooi-dns",
            BundleImage::Dhcp => "oooi-dhcp",
            BundleImage::Proxy => "oooi-proxy",
            BundleImage::MustGather => "oooi-must-gather",
        }
    }

    /// The variable on the controller container that carries it.
    pub fn env(self) -> &'static str {
        match self {
            BundleImage::Controller => "RELATED_IMAGE_CONTROLLER",
            BundleImage::Dns => "RELATED_IMAGE_DNS",
            BundleImage::Dhcp => "RELATED_IMAGE_DHCP",
            BundleImage::Proxy => "RELATED_IMAGE_PROXY",
            BundleImage::MustGather => "RELATED_IMAGE_MUST_GATHER",
        }
    }

    fn from_name(name: &str) -> Option<BundleImage> {
        BundleImage::ALL.into_iter().find(|i| i.name() == name)
    }
}

/// An image reference pinned by a SHA-256 digest
/// (`registry/repo[:tag]@sha256:<64 hex>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestRef(String);

impl DigestRef {
    /// Parses `reference`, which must end in `@sha256:` and 64 lowercase hex
    /// digits after a non-empty repository.
    pub fn parse(reference: &str) -> Result<DigestRef, String> {
        let Some((repo, digest)) = reference.rsplit_once('@') else {
            return Err(format!(
                "{reference:?} is not pinned by digest (want REPOSITORY@sha256:<64 hex>)"
            ));
        };
        let hex = digest
            .strip_prefix("sha256:")
            .ok_or_else(|| format!("{reference:?}: digest {digest:?} is not sha256:<64 hex>"))?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(format!(
                "{reference:?}: digest {digest:?} is not sha256:<64 lowercase hex>"
            ));
        }
        if repo.is_empty() || repo.contains(char::is_whitespace) {
            return Err(format!("{reference:?}: no repository before the digest"));
        }
        Ok(DigestRef(reference.to_string()))
    }

    /// The reference as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// True when `reference` is pinned by a well-formed SHA-256 digest.
pub fn is_digest_ref(reference: &str) -> bool {
    DigestRef::parse(reference).is_ok()
}

/// Every image of a bundle, each by digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleImages(BTreeMap<BundleImage, DigestRef>);

impl BundleImages {
    /// From `NAME=REF` entries (flags, then lines of a file; `#` starts a
    /// comment). Every image must be named exactly once.
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<BundleImages, String> {
        let mut out = BTreeMap::new();
        for entry in entries {
            let entry = entry.split('#').next().unwrap_or("").trim();
            if entry.is_empty() {
                continue;
            }
            let (name, reference) = entry
                .split_once('=')
                .ok_or_else(|| format!("image {entry:?}: want NAME=REFERENCE"))?;
            let image = BundleImage::from_name(name.trim()).ok_or_else(|| {
                format!(
                    "image {entry:?}: unknown name {name:?} (known: {})",
                    names().join(", ")
                )
            })?;
            let reference = DigestRef::parse(reference.trim())
                .map_err(|e| format!("image {}: {e}", image.name()))?;
            if out.insert(image, reference).is_some() {
                return Err(format!("image {} is given twice", image.name()));
            }
        }
        let missing: Vec<&str> = BundleImage::ALL
            .into_iter()
            .filter(|i| !out.contains_key(i))
            .map(BundleImage::name)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "no image given for {} (--image NAME=REPOSITORY@sha256:...)",
                missing.join(", ")
            ));
        }
        Ok(BundleImages(out))
    }

    /// The reference of `image`.
    pub fn get(&self, image: BundleImage) -> &str {
        // `parse` refuses a set without every image.
        self.0
            .get(&image)
            .map(DigestRef::as_str)
            .unwrap_or_default()
    }

    /// (image, reference) in the CSV's order.
    pub fn iter(&self) -> impl Iterator<Item = (BundleImage, &str)> {
        self.0.iter().map(|(i, r)| (*i, r.as_str()))
    }
}

fn names() -> Vec<&'static str> {
    BundleImage::ALL
        .into_iter()
        .map(BundleImage::name)
        .collect()
}

/// `images` with each component image that no flag or `OOOI_*_IMAGE`
/// variable set taken from its `RELATED_IMAGE_*` variable (`lookup` reads
/// the environment). An empty variable counts as unset.
pub fn with_related_images(
    mut images: DefaultImages,
    lookup: impl Fn(&str) -> Option<String>,
) -> DefaultImages {
    let fill = |slot: &mut Option<String>, image: BundleImage| {
        if slot.as_deref().is_none_or(str::is_empty)
            && let Some(v) = lookup(image.env()).filter(|v| !v.is_empty())
        {
            *slot = Some(v);
        }
    };
    fill(&mut images.dhcp, BundleImage::Dhcp);
    fill(&mut images.dns, BundleImage::Dns);
    fill(&mut images.proxy, BundleImage::Proxy);
    images
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn all() -> Vec<String> {
        BundleImage::ALL
            .iter()
            .map(|i| format!("{}=r.example.com/o/{}@{D}", i.name(), i.repository()))
            .collect()
    }

    #[test]
    fn a_reference_without_a_sha256_digest_is_refused() {
        assert!(DigestRef::parse(&format!("r/oooi-dns@{D}")).is_ok());
        assert!(DigestRef::parse(&format!("r/oooi-dns:0.1.0@{D}")).is_ok());
        for bad in [
            "r/oooi-dns:0.1.0".to_string(),
            "r/oooi-dns@sha512:00".to_string(),
            format!(
                "r/oooi-dns@{}",
                D.to_uppercase().replace("SHA256", "sha256")
            ),
            format!("@{D}"),
            format!("r/oooi-dns@{}", &D[..70]),
        ] {
            let e = DigestRef::parse(&bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn every_image_must_be_named_once() {
        let entries = all();
        let images = BundleImages::parse(entries.iter().map(String::as_str)).unwrap();
        assert!(
            images
                .get(BundleImage::MustGather)
                .contains("oooi-must-gather@")
        );
        let e = BundleImages::parse(entries[..4].iter().map(String::as_str)).unwrap_err();
        assert!(e.contains("must-gather"), "{e}");
        let mut twice = entries.clone();
        twice.push(entries[0].clone());
        let e = BundleImages::parse(twice.iter().map(String::as_str)).unwrap_err();
        assert!(e.contains("controller is given twice"), "{e}");
        let e = BundleImages::parse(["webhook=r/x@sha256:00"]).unwrap_err();
        assert!(
            e.contains("unknown name") && e.contains("must-gather"),
            "{e}"
        );
        let e = BundleImages::parse(["dns=r/oooi-dns:0.1.0"]).unwrap_err();
        assert!(e.starts_with("image dns:"), "{e}");
    }

    #[test]
    fn related_image_variables_fill_only_unset_component_images() {
        let env = |k: &str| match k {
            "RELATED_IMAGE_DNS" => Some(format!("m/oooi-dns@{D}")),
            "RELATED_IMAGE_DHCP" => Some(format!("m/oooi-dhcp@{D}")),
            "RELATED_IMAGE_PROXY" => Some(String::new()),
            _ => None,
        };
        let given = DefaultImages {
            dhcp: Some("chart/oooi-dhcp:1".into()),
            dns: None,
            proxy: None,
        };
        let out = with_related_images(given, env);
        assert_eq!(out.dhcp.as_deref(), Some("chart/oooi-dhcp:1"));
        assert_eq!(out.dns, Some(format!("m/oooi-dns@{D}")));
        assert_eq!(out.proxy, None, "an empty variable is unset");
    }
}
