//! Harness 3: network faults between the services and a real S3 server.
//!
//! The shipper and the applier (in process, as in [`crate::faults`]) reach
//! an S3-compatible server (moto, started by `tests/s3-server.sh`) through
//! a [`FaultProxy`] that drops connections, delays requests and cuts
//! responses for a share of requests. `object_store`'s own retries absorb
//! most faults; what they cannot (a write done with its answer lost, a
//! retry budget spent) reaches the services, which must cope. The run
//! passes when the pair converges with the destination identical to the
//! source and nothing lost or duplicated.
//!
//! Needs `SEGMIRROR_TEST_S3_BUCKET` and the AWS endpoint and credentials
//! in the environment: `eval "$(bash tests/s3-server.sh start)"`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;

use crate::faults::{FaultOptions, FaultReport, run_with};
use crate::faulty::{FaultPlan, FaultyStore};
use crate::pair::PairOptions;
use crate::proxy::{FaultProxy, ProxyCounts, ProxyPlan};

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct NetOptions {
    /// Seed.
    pub seed: u64,
    /// Share of requests faulted by the proxy.
    pub share: f64,
    /// Rounds of production.
    pub rounds: u64,
    /// Partitions.
    pub partitions: usize,
    /// The run fails (instead of hanging in the store client's retries)
    /// when it takes longer than this, e.g. because the server went away.
    pub deadline: Duration,
    /// The shipper's layout: packs, head deltas, compaction
    /// ([`PairOptions::layout2`], `compact_ranges`, `background_compaction`);
    /// its key prefix and sizes are the harness's own.
    pub pair: PairOptions,
}

impl Default for NetOptions {
    fn default() -> Self {
        NetOptions {
            seed: 1,
            share: 0.10,
            rounds: 20,
            partitions: 3,
            deadline: Duration::from_secs(600),
            pair: PairOptions::default(),
        }
    }
}

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct NetReport {
    /// The proxy's counts.
    pub proxy: ProxyCounts,
    /// The store-level run (requests and errors counted, none injected).
    pub run: FaultReport,
    /// The S3 endpoint behind the proxy.
    pub endpoint: String,
    /// The pair's settings.
    pub pair: PairOptions,
}

impl NetReport {
    /// Converged and clean.
    pub fn passed(&self) -> bool {
        self.run.passed()
    }

    /// The figures, one per line.
    pub fn render(&self) -> String {
        let r = &self.run;
        let t = &r.trouble;
        let a = &r.outcome.accounting;
        let mut out = format!(
            "network faults against S3 ({}), seed {}, {} partitions, {} rounds x {} batches\n",
            self.endpoint,
            r.options.seed,
            r.options.partitions,
            r.options.rounds,
            r.options.batches_per_round
        );
        out.push_str(&format!("  proxy: {}\n", self.proxy));
        if let (pack_below @ 1.., head_deltas) = self.pair.layout2 {
            out.push_str(&format!(
                "  layout 2: pack_below {pack_below}, head deltas {head_deltas}; {} packed ranges compacted{}\n",
                t.compacted_ranges,
                if self.pair.background_compaction { " in the background" } else { "" }
            ));
        }
        out.push_str(&format!(
            "  errors the services saw (after object_store's retries): shipper {} of {} requests, applier {} of {}\n",
            r.shipper_faults.store_errors.values().sum::<u64>(),
            r.shipper_faults.total_requests(),
            r.applier_faults.store_errors.values().sum::<u64>(),
            r.applier_faults.total_requests()
        ));
        out.push_str(&format!(
            "  shipper: {} cycles, {} with errors; applier: {} retryable failures, {} automatic retries, {} operator restarts\n",
            t.shipper_cycles,
            t.shipper_cycles_with_errors,
            t.applier_retryable_failures,
            t.applier_automatic_retries,
            t.operator_restarts.len()
        ));
        out.push_str(&format!(
            "  converged: {} after {} cycles; batches compared {}: lost {}, duplicated {}, foreign {}, misplaced {}; compare: {}; verify: {}\n",
            if r.converged { "yes" } else { "NO" },
            r.converge_cycles,
            a.source_batches,
            a.lost,
            a.duplicated,
            a.foreign,
            a.misplaced,
            crate::faults::summarize_compare(&r.outcome.compare),
            match &r.outcome.verify {
                Ok(n) => format!("ok ({n} batches)"),
                Err(e) => format!("FAILED: {e}"),
            }
        ));
        let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
        for m in &t.messages {
            *kinds.entry(crate::faults::short_reason(m)).or_default() += 1;
        }
        for (k, n) in kinds.iter().take(8) {
            out.push_str(&format!(
                "    error seen by a service ({n} distinct): {k}\n"
            ));
        }
        if std::env::var_os("SEGMIRROR_RELIABILITY_VERBOSE").is_some() {
            for m in &t.messages {
                out.push_str(&format!("    message: {m}\n"));
            }
        }
        for d in &r.diagnosis {
            out.push_str(&format!("  not converged: {d}\n"));
        }
        out.push_str(&format!(
            "  result: {} in {:.1} s\n",
            if self.passed() { "PASS" } else { "FAIL" },
            r.elapsed.as_secs_f64()
        ));
        out
    }
}

/// The S3 settings from the environment: (bucket, endpoint URL).
pub fn s3_env() -> Option<(String, String)> {
    let bucket = std::env::var("SEGMIRROR_TEST_S3_BUCKET").ok()?;
    let endpoint = std::env::var("AWS_ENDPOINT_URL_S3")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
        .ok()?;
    Some((bucket, endpoint))
}

fn s3_store(bucket: &str, endpoint: &str) -> anyhow::Result<Arc<dyn ObjectStore>> {
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_endpoint(endpoint)
        .with_allow_http(endpoint.starts_with("http://"))
        .with_virtual_hosted_style_request(false);
    if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
        b = b.with_region("us-east-1");
    }
    Ok(Arc::new(b.build().context("S3 client")?))
}

/// The objects `cluster_id` shipped under `prefix` in an S3 bucket.
pub fn s3_manifest_store(
    bucket: &str,
    endpoint: &str,
    prefix: &str,
    cluster_id: &str,
) -> anyhow::Result<bucket::store::ManifestStore> {
    let layout = manifest::layout::ClusterLayout::new(prefix, cluster_id).context("layout")?;
    Ok(bucket::store::ManifestStore::new(
        s3_store(bucket, endpoint)?,
        layout,
    ))
}

/// Runs the harness; fails when the S3 environment is not set.
pub async fn run(o: &NetOptions) -> anyhow::Result<NetReport> {
    let Some((bucket, endpoint)) = s3_env() else {
        bail!(
            "SEGMIRROR_TEST_S3_BUCKET and AWS_ENDPOINT_URL are not set: eval \"$(bash tests/s3-server.sh start)\" first"
        );
    };
    let hostport = endpoint
        .strip_prefix("http://")
        .context("the proxy speaks plain HTTP: the endpoint must be http://")?
        .trim_end_matches('/');
    let upstream: SocketAddr = hostport
        .to_socket_addrs()
        .context("endpoint address")?
        .next()
        .context("endpoint address")?;
    let proxy = FaultProxy::start(upstream, ProxyPlan::share(o.seed, o.share))
        .await
        .context("starting the proxy")?;
    let via = format!("http://{}", proxy.addr());
    let prefix = format!("reliability-net-{}", bucket::upload_id::fresh_string());
    let direct = s3_store(&bucket, &endpoint)?;
    // The store decorators inject nothing here: they count requests and
    // the errors that got past object_store's retries.
    let shipper_store = FaultyStore::new(s3_store(&bucket, &via)?, FaultPlan::none(o.seed));
    let applier_store = FaultyStore::new(s3_store(&bucket, &via)?, FaultPlan::none(o.seed + 1));
    let fo = FaultOptions {
        seed: o.seed,
        partitions: o.partitions,
        rounds: o.rounds,
        fail: 0.0,
        latency: (Duration::ZERO, Duration::ZERO),
        drop_manifest: 0.0,
        lost_ack: 0.0,
        truncate: 0.0,
        max_converge_cycles: 300,
        ..FaultOptions::default()
    };
    let pair_options = PairOptions {
        prefix,
        // S3 parts are at least 5 MiB.
        part_size: 5 * 1024 * 1024,
        max_object_size: 64 * 1024,
        // Objects over 32 KiB are appended as they download: a response
        // cut in the middle of one undoes what it appended.
        stream_above: Some(32 * 1024),
        ..o.pair.clone()
    };
    let run = tokio::time::timeout(
        o.deadline,
        run_with(&fo, direct, shipper_store, applier_store, &pair_options),
    )
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "no result within {:?} ({}); is the S3 server at {endpoint} still up?",
            o.deadline,
            proxy.counts()
        )
    })??;
    Ok(NetReport {
        proxy: proxy.counts(),
        run,
        endpoint,
        pair: pair_options,
    })
}
