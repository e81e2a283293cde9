//! The TLS servers that stand in for the hosted control planes and the
//! MetalLB apps VIPs, and how the lab starts them in a namespace.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, anyhow, bail};

use crate::lab::Lab;

/// Starts `backends` with `listen` in `ns` and waits for its `ready`.
pub fn start(lab: &mut Lab, ns: &str, listen: &[String], log: &str) -> Result<()> {
    let me = std::env::current_exe()?;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(me)
        .arg("backends")
        .args(listen)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(
            lab.dir.join(format!("{log}.log")),
        )?))
        .spawn()?;
    lab.record_pid(child.id())?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out).read_line(&mut line)?;
    }
    lab.children.push(child);
    if line.trim() != "ready" {
        bail!(
            "control-plane backends did not start: see {}",
            lab.dir.join(format!("{log}.log")).display()
        );
    }
    Ok(())
}

/// Serves one TLS backend per `NAME@IP:PORT` that announces `backend=NAME`.
pub fn serve(listen: &[String]) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async {
        // Held until the process is killed: a Backend stops when dropped.
        let mut running = Vec::new();
        for spec in listen {
            let (name, addr) = spec
                .split_once('@')
                .ok_or_else(|| anyhow!("backend `{spec}`: expected NAME@IP:PORT"))?;
            let addr: SocketAddr = addr
                .parse()
                .with_context(|| format!("backend `{spec}`: address"))?;
            running.push(oooi_tests::Backend::start_on(name, addr).await?);
        }
        println!("ready");
        std::io::stdout().flush()?;
        std::future::pending::<()>().await;
        Ok(())
    })
}
