//! What requests cost: list prices per 1,000 requests of each class, and
//! the monthly cost of a request rate measured by
//! [`crate::counting::CountingStore`]. Pure arithmetic; the shipper's
//! metrics and `shipper status` report it (issue 30, "cost is visible").
//!
//! Classes, as S3 bills them: PUT, COPY, POST (a multipart create or
//! complete, each part) and LIST are writes; GET and HEAD are reads;
//! DELETE and an aborted upload are free. A month is 30 days. Prices are
//! US list prices (`../shared/notes/cost-at-scale.md`, table (a)); the
//! per-GB fees of S3 Express One Zone are left out.

use crate::counting::RequestCounts;

/// Prices per 1,000 requests, in dollars.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Prices {
    /// Write-class requests (PUT, COPY, POST, LIST).
    pub write_per_1k: f64,
    /// Read-class requests (GET, HEAD).
    pub read_per_1k: f64,
}

/// The presets by name: `s3-standard` (the default), `s3-express-one-zone`,
/// `gcs-standard`, `r2`.
pub const PRESETS: &[(&str, Prices)] = &[
    (
        "s3-standard",
        Prices {
            write_per_1k: 0.005,
            read_per_1k: 0.0004,
        },
    ),
    (
        "s3-express-one-zone",
        Prices {
            write_per_1k: 0.00113,
            read_per_1k: 0.00003,
        },
    ),
    (
        "gcs-standard",
        Prices {
            write_per_1k: 0.005,
            read_per_1k: 0.0004,
        },
    ),
    (
        "r2",
        Prices {
            write_per_1k: 0.0045,
            read_per_1k: 0.00036,
        },
    ),
];

/// Seconds in the month costs are given for (30 days).
pub const MONTH_SECS: f64 = 30.0 * 24.0 * 3600.0;

impl Prices {
    /// The preset `name`, if there is one.
    pub fn preset(name: &str) -> Option<Prices> {
        PRESETS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
    }
}

/// Requests by billing class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByClass {
    /// Write-class requests.
    pub writes: u64,
    /// Read-class requests.
    pub reads: u64,
    /// Requests not billed (DELETE, aborted uploads).
    pub free: u64,
}

impl ByClass {
    /// `c`'s requests by class.
    pub fn of(c: &RequestCounts) -> ByClass {
        ByClass {
            writes: c.put
                + c.multipart_create
                + c.multipart_part
                + c.multipart_complete
                + c.list
                + c.copy,
            reads: c.get + c.head,
            free: c.delete + c.multipart_abort,
        }
    }
}

/// The cost of a rate measured over `secs` seconds, extended to a month.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MonthlyCost {
    /// Write-class requests per second.
    pub writes_per_s: f64,
    /// Read-class requests per second.
    pub reads_per_s: f64,
    /// Dollars a month at the prices given.
    pub dollars_per_month: f64,
}

/// The monthly cost of `counts` made in `secs` seconds, at `prices`
/// (zero for an empty window).
pub fn monthly(counts: &RequestCounts, secs: f64, prices: &Prices) -> MonthlyCost {
    let c = ByClass::of(counts);
    if secs <= 0.0 {
        return MonthlyCost {
            writes_per_s: 0.0,
            reads_per_s: 0.0,
            dollars_per_month: 0.0,
        };
    }
    let (w, r) = (c.writes as f64 / secs, c.reads as f64 / secs);
    MonthlyCost {
        writes_per_s: w,
        reads_per_s: r,
        dollars_per_month: (w * prices.write_per_1k + r * prices.read_per_1k) / 1000.0 * MONTH_SECS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(put: u64, get: u64, list: u64, delete: u64) -> RequestCounts {
        RequestCounts {
            put,
            get,
            list,
            delete,
            ..RequestCounts::default()
        }
    }

    /// One row per case: requests in `secs` at a preset, and the dollars a
    /// month (the worked numbers of the cost notes).
    #[test]
    fn monthly_cost_by_case() {
        let rows: &[(&str, RequestCounts, f64, &str, f64)] = &[
            // 1,000 busy partitions x 2 PUTs a second: 5.18 G a month.
            (
                "layout 1 at 1,000 partitions",
                counts(2_000, 0, 0, 0),
                1.0,
                "s3-standard",
                25_920.0,
            ),
            (
                "one pack and one head a second",
                counts(2, 0, 0, 0),
                1.0,
                "s3-standard",
                25.92,
            ),
            (
                "the same on S3 Express",
                counts(2, 0, 0, 0),
                1.0,
                "s3-express-one-zone",
                5.857_92,
            ),
            (
                "reads are cheaper",
                counts(0, 4, 0, 0),
                1.0,
                "s3-standard",
                4.1472,
            ),
            (
                "a LIST is billed as a write",
                counts(0, 0, 1, 0),
                1.0,
                "s3-standard",
                12.96,
            ),
            (
                "deletes are free",
                counts(0, 0, 0, 1_000),
                1.0,
                "s3-standard",
                0.0,
            ),
            (
                "a rate over a minute",
                counts(120, 0, 0, 0),
                60.0,
                "s3-standard",
                25.92,
            ),
            (
                "an empty window",
                counts(5, 5, 0, 0),
                0.0,
                "s3-standard",
                0.0,
            ),
        ];
        for (name, c, secs, preset, dollars) in rows {
            let prices = Prices::preset(preset).expect("preset");
            let got = monthly(c, *secs, &prices).dollars_per_month;
            assert!(
                (got - dollars).abs() < 1e-6 * dollars.max(1.0),
                "{name}: {got} != {dollars}"
            );
        }
    }

    #[test]
    fn classes_and_presets() {
        let c = RequestCounts {
            put: 1,
            multipart_create: 1,
            multipart_part: 3,
            multipart_complete: 1,
            multipart_abort: 1,
            get: 2,
            head: 1,
            list: 1,
            delete: 4,
            copy: 1,
            ..RequestCounts::default()
        };
        assert_eq!(
            ByClass::of(&c),
            ByClass {
                writes: 8,
                reads: 3,
                free: 5
            }
        );
        assert!(Prices::preset("s3-standard").is_some());
        assert!(Prices::preset("s3-glacier").is_none());
    }
}
