//! `oooi-filter-finish MODULE.wasm [--out PATH] [--strip EXPORT]...`
//!
//! Finishes a filter module built with `cargo build -p oooi-sni-router
//! --target wasm32-wasip1 --profile wasm` (see the library docs): removes the
//! exports of unused proxy-wasm callbacks, checks the result and writes it to
//! `--out` (default: in place, through a temporary file and a rename).
//! `--strip` removes further exports, for experiments only.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut input: Option<PathBuf> = None;
    let mut out: Option<PathBuf> = None;
    let mut also: Vec<String> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = Some(args.next().context("--out needs a path")?.into()),
            "--strip" => also.push(args.next().context("--strip needs an export name")?),
            "-h" | "--help" => {
                println!("usage: oooi-filter-finish MODULE.wasm [--out PATH] [--strip EXPORT]...");
                return Ok(());
            }
            other if input.is_none() && !other.starts_with('-') => input = Some(other.into()),
            other => bail!("unexpected argument {other:?} (see --help)"),
        }
    }
    let input =
        input.context("usage: oooi-filter-finish MODULE.wasm [--out PATH] [--strip EXPORT]...")?;
    let bytes = std::fs::read(&input).with_context(|| format!("reading {}", input.display()))?;
    let also: Vec<&str> = also.iter().map(String::as_str).collect();
    let finished = oooi_filter_finish::finish(&bytes, &also)
        .with_context(|| format!("finishing {}", input.display()))?;
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
