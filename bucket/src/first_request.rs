//! The checks around a service's first request to its bucket: before it
//! (credentials that would come from an instance metadata endpoint that
//! does not answer) and after it failed or had no answer (the error
//! classified, or one TCP connection to the endpoint), each a
//! [`StoreProblem`] line from [`crate::diagnosis`]. Both services' `once`,
//! `backfill` and `doctor` use these, so an operator reads the same line
//! from each.

use crate::diagnosis::{self, FirstRequestFailure, StoreContext, StoreProblem};
use crate::url::BucketUrl;

impl StoreContext {
    /// The context of an S3 bucket from the process environment, as
    /// [`BucketUrl::build`] reads it; `None` for local buckets (nothing
    /// here applies to them).
    pub fn from_env(url: &BucketUrl) -> Option<StoreContext> {
        let BucketUrl::S3 { bucket, prefix } = url else {
            return None;
        };
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let custom = env("AWS_ENDPOINT_URL_S3")
            .or_else(|| env("AWS_ENDPOINT_URL"))
            .is_some();
        Some(StoreContext {
            bucket: bucket.clone(),
            prefix: prefix.clone(),
            endpoint: url.endpoint().unwrap_or_default(),
            custom_endpoint: custom,
            region: crate::url::region(),
            credentials: crate::url::credential_source(),
            metadata_endpoint: env("AWS_METADATA_ENDPOINT")
                .unwrap_or_else(|| diagnosis::DEFAULT_METADATA_ENDPOINT.to_string()),
            instance_metadata: !diagnosis::other_credential_source(
                |k| std::env::var(k).ok(),
                crate::url::has_shared_profile(),
            ),
        })
    }
}

/// Before the first request to `url`: the problem [`diagnosis::probe_credentials`]
/// finds (credentials that would come from an instance metadata endpoint
/// that does not answer), run off the async runtime. `None` for local
/// buckets and when credentials can be had.
pub async fn check_before_first_request(url: &BucketUrl) -> Option<StoreProblem> {
    let ctx = StoreContext::from_env(url)?;
    tokio::task::spawn_blocking(move || {
        diagnosis::probe_credentials(&ctx, std::time::Duration::from_secs(1))
    })
    .await
    .ok()
    .flatten()
}

/// The recognised problem behind a failed or unanswered first request to
/// `url`, or `None` (say the raw error; for no answer, the endpoint
/// accepts connections). A failure is [`diagnosis::classify`]d; no answer is probed
/// with one TCP connection ([`diagnosis::probe_tcp`]). Both services' `once` use this,
/// so an operator reads the same line from either.
pub async fn explain_first_request(
    url: &BucketUrl,
    failure: FirstRequestFailure,
) -> Option<StoreProblem> {
    let ctx = StoreContext::from_env(url)?;
    match failure {
        FirstRequestFailure::Failed(text) => diagnosis::classify(&text, &ctx),
        FirstRequestFailure::NoAnswer(within) => {
            let endpoint = ctx.endpoint.clone();
            let probe = tokio::task::spawn_blocking(move || {
                diagnosis::probe_tcp(&endpoint, std::time::Duration::from_secs(2))
            })
            .await
            .unwrap_or_else(|e| Err(format!("no answer ({e})")));
            probe.err().map(|why| StoreProblem::Unreachable {
                bucket: ctx.url(),
                endpoint: ctx.endpoint,
                custom_endpoint: ctx.custom_endpoint,
                why: format!(
                    "{why}; no answer within {}",
                    humantime::format_duration(within)
                ),
            })
        }
    }
}
