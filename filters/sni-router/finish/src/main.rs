//! `oooi-filter-finish MODULE.wasm [--out PATH] [--build-id ID] [--strip EXPORT]...`
//!
//! Finishes a filter module built with `cargo build -p oooi-sni-router
//! --target wasm32-wasip1 --profile wasm` (see the library docs): removes the
//! exports of unused proxy-wasm callbacks, checks the result, stamps the
//! build id `--build-id` into it when given (what the filter reports and
//! ProxyServers show in their FILTER column; unstamped builds say `dev`) and
//! writes it to `--out` (default: in place, through a temporary file and a
//! rename). `--strip` removes further exports, for experiments only.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

const USAGE: &str =
    "oooi-filter-finish MODULE.wasm [--out PATH] [--build-id ID] [--strip EXPORT]...";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut input: Option<PathBuf> = None;
    let mut out: Option<PathBuf> = None;
    let mut also: Vec<String> = Vec::new();
    let mut build_id: Option<String> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = Some(args.next().context("--out needs a path")?.into()),
            "--strip" => also.push(args.next().context("--strip needs an export name")?),
            "--build-id" => build_id = Some(args.next().context("--build-id needs an id")?),
            "-h" | "--help" => {
                println!("usage: {USAGE}");
                return Ok(());
            }
            other if input.is_none() && !other.starts_with('-') => input = Some(other.into()),
            other => bail!("unexpected argument {other:?} (see --help)"),
        }
    }
    let input = input.with_context(|| format!("usage: {USAGE}"))?;
    let bytes = std::fs::read(&input).with_context(|| format!("reading {}", input.display()))?;
    let also: Vec<&str> = also.iter().map(String::as_str).collect();
    let mut finished = oooi_filter_finish::finish(&bytes, &also)
        .with_context(|| format!("finishing {}", input.display()))?;
    if let Some(id) = build_id {
        finished.module = oooi_routes::build_id::stamp(&finished.module, &id)
            .map_err(|e| anyhow::anyhow!("--build-id: {e}"))?;
        finished.build_id = id;
    }
    let out = out.unwrap_or_else(|| input.clone());
    let tmp = out.with_extension("wasm.finishing");
    std::fs::write(&tmp, &finished.module).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &out).with_context(|| format!("renaming to {}", out.display()))?;
    println!(
        "{}: {} bytes, build {}, removed {} unused callback export(s){}",
        out.display(),
        finished.module.len(),
        finished.build_id,
        finished.removed.len(),
        if finished.removed.is_empty() {
            String::new()
        } else {
            format!(": {}", finished.removed.join(", "))
        }
    );
    Ok(())
}
