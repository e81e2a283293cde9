//! `oooi-controller probe`: HTTP GETs that must answer 2xx, for checks run
//! from the controller's own image (which has no shell and no HTTP client),
//! such as the chart's `helm test` pod asking the controller's `/healthz`
//! and `/metrics` through its Service.

use std::time::Duration;

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// What one probe saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The URL asked.
    pub url: String,
    /// Its HTTP status.
    pub status: u16,
    /// Bytes of the body.
    pub body_len: usize,
}

/// GETs `url` (plain HTTP) within `timeout`; an error unless it answers 2xx,
/// naming the URL and what went wrong.
pub async fn get(url: &str, timeout: Duration) -> anyhow::Result<Answer> {
    let uri: hyper::Uri = url
        .parse()
        .with_context(|| format!("--url {url:?}: not a URL"))?;
    if uri.scheme_str() != Some("http") {
        bail!("--url {url:?}: only http:// is probed");
    }
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(timeout));
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(connector);
    let answer = tokio::time::timeout(timeout, async {
        let resp = client
            .get(uri)
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .with_context(|| format!("GET {url}: reading the body"))?
            .to_bytes();
        anyhow::Ok(Answer {
            url: url.to_string(),
            status,
            body_len: body.len(),
        })
    })
    .await
    .with_context(|| format!("GET {url}: no answer within {timeout:?}"))??;
    if !(200..300).contains(&answer.status) {
        bail!("GET {url}: status {}", answer.status);
    }
    Ok(answer)
}

/// Probes every URL in order, each until it answers 2xx or `attempts` tries
/// `interval` apart have failed; the first URL that never does fails the run.
pub async fn all(
    urls: &[String],
    timeout: Duration,
    attempts: u32,
    interval: Duration,
) -> anyhow::Result<Vec<Answer>> {
    let mut out = Vec::new();
    for url in urls {
        let mut last = None;
        for attempt in 1..=attempts.max(1) {
            match get(url, timeout).await {
                Ok(a) => {
                    last = None;
                    out.push(a);
                    break;
                }
                Err(e) => {
                    tracing::warn!(url = %url, attempt, "probe failed: {e:#}");
                    last = Some(e);
                    if attempt < attempts {
                        tokio::time::sleep(interval).await;
                    }
                }
            }
        }
        if let Some(e) = last {
            return Err(e.context(format!("{url}: no 2xx answer in {attempts} attempt(s)")));
        }
    }
    Ok(out)
}
