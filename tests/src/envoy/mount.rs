//! The files of Envoy's config mount: the module under its versioned name,
//! the files `oooi-envoy` renders, and listeners a test adds to LDS.

use std::path::Path;

use anyhow::{Result, anyhow};

/// Files of a config mount: (name, contents).
pub type MountFiles = Vec<(String, Vec<u8>)>;

/// Points `config` at `module` (stored under its versioned name in the
/// mount) and renders every file the mount holds, with `extra_listeners`
/// appended to the LDS resources.
pub(super) fn config_map_files(
    mut config: oooi_envoy::ProxyConfig,
    dir: &Path,
    module: &[u8],
    extra_listeners: &[serde_json::Value],
) -> Result<(oooi_envoy::ProxyConfig, MountFiles)> {
    // Through `..data`, not the top-level link: kubelet creates the links of
    // new keys only after renaming `..data`, and Envoy may read the ECDS
    // files in between.
    config.wasm_path = dir
        .join("..data")
        .join(oooi_envoy::module_file_name(module));
    config.wasm_sha256 = oooi_envoy::module_sha256(module);
    let files = config_map_files_for(&config, dir, module, extra_listeners)?;
    Ok((config, files))
}

/// Every file of the mount for `config` as it is: `module` under its
/// versioned name, the rendered files, and `extra_listeners` in LDS.
pub(super) fn config_map_files_for(
    config: &oooi_envoy::ProxyConfig,
    dir: &Path,
    module: &[u8],
    extra_listeners: &[serde_json::Value],
) -> Result<MountFiles> {
    let mut files = vec![(oooi_envoy::module_file_name(module), module.to_vec())];
    files.extend(oooi_envoy::files(config, dir)?);
    if !extra_listeners.is_empty() {
        let (_, lds) = files
            .iter_mut()
            .find(|(name, _)| name == oooi_envoy::LDS_FILE)
            .ok_or_else(|| anyhow!("oooi-envoy rendered no {}", oooi_envoy::LDS_FILE))?;
        let mut doc: serde_json::Value = serde_json::from_slice(lds)?;
        let resources = doc
            .get_mut("resources")
            .and_then(|r| r.as_array_mut())
            .ok_or_else(|| anyhow!("{} has no resources array", oooi_envoy::LDS_FILE))?;
        resources.extend(extra_listeners.iter().cloned());
        // version_info stays the rendered one: the extras are fixed for the
        // life of one Envoy, and Envoy only reports the version.
        *lds = serde_json::to_vec_pretty(&doc)?;
    }
    Ok(files)
}
