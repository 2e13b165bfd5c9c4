//! `compare A B`: the same scenarios against two brokers in alternation (A B A B …), and
//! per-round ratios A ÷ B with their median. Alternating keeps slow drift of a shared,
//! noisy machine (other builds, page cache, thermal state) out of the ratio: each pair
//! ran back to back, and the median ignores an outlier round.

use serde::{Deserialize, Serialize};

use crate::report::RunResult;
use crate::stats::median;

/// A figure taken from one run, named for the comparison table.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    pub name: &'static str,
    pub value: f64,
    /// Throughput (higher is better) or latency (lower is better).
    pub higher_is_better: bool,
}

/// The figures worth comparing in one run; absent ones (no consumers, say) are skipped.
pub fn figures(run: &RunResult) -> Vec<Figure> {
    let mut out = Vec::new();
    let mut push = |name, value: Option<f64>, higher_is_better| {
        if let Some(value) = value {
            out.push(Figure {
                name,
                value,
                higher_is_better,
            });
        }
    };
    let produce = run.produce.as_ref();
    push("produce MiB/s", produce.map(|p| p.mib_per_s), true);
    let ack = produce.and_then(|p| p.ack_latency.as_ref());
    push("ack p50 ms", ack.map(|l| l.p50_ms), false);
    push("ack p99 ms", ack.map(|l| l.p99_ms), false);
    push("ack p99.9 ms", ack.map(|l| l.p999_ms), false);
    let e2e = run.e2e_latency.as_ref();
    push("e2e p50 ms", e2e.map(|l| l.p50_ms), false);
    push("e2e p99 ms", e2e.map(|l| l.p99_ms), false);
    push("e2e p99.9 ms", e2e.map(|l| l.p999_ms), false);
    if !run.groups.is_empty() {
        push(
            "consumed MiB/s (all groups)",
            Some(run.groups.iter().map(|g| g.mib_per_s).sum()),
            true,
        );
    }
    push(
        "catch-up MiB/s",
        run.catchup.as_ref().map(|c| c.mib_per_s),
        true,
    );
    out
}

/// One figure across rounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RatioRow {
    pub scenario: String,
    pub figure: String,
    pub higher_is_better: bool,
    /// Per round; `None` where the run lacks the figure (it failed, say).
    pub a: Vec<Option<f64>>,
    pub b: Vec<Option<f64>>,
    /// A ÷ B per round (None where B is 0 or a figure is missing).
    pub ratios: Vec<Option<f64>>,
    pub median_a: Option<f64>,
    pub median_b: Option<f64>,
    pub median_ratio: Option<f64>,
}

/// A ÷ B, or `None` when it means nothing.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    let r = a / b;
    (b != 0.0 && r.is_finite()).then_some(r)
}

/// Rows for one scenario from its rounds (`pairs[i]` = round i's A and B runs).
pub fn ratio_rows(scenario: &str, pairs: &[(&RunResult, &RunResult)]) -> Vec<RatioRow> {
    let mut rows: Vec<RatioRow> = Vec::new();
    for (a_run, b_run) in pairs {
        let (fa, fb) = (figures(a_run), figures(b_run));
        for f in &fa {
            if !rows.iter().any(|r| r.figure == f.name) {
                rows.push(RatioRow {
                    scenario: scenario.to_string(),
                    figure: f.name.to_string(),
                    higher_is_better: f.higher_is_better,
                    a: Vec::new(),
                    b: Vec::new(),
                    ratios: Vec::new(),
                    median_a: None,
                    median_b: None,
                    median_ratio: None,
                });
            }
        }
        for row in &mut rows {
            let a = fa.iter().find(|f| f.name == row.figure).map(|f| f.value);
            let b = fb.iter().find(|f| f.name == row.figure).map(|f| f.value);
            row.a.push(a);
            row.b.push(b);
            row.ratios.push(a.zip(b).and_then(|(a, b)| ratio(a, b)));
        }
    }
    for row in &mut rows {
        let present = |v: &[Option<f64>]| v.iter().flatten().copied().collect::<Vec<f64>>();
        row.median_a = median(&present(&row.a));
        row.median_b = median(&present(&row.b));
        let ratios: Vec<f64> = row.ratios.iter().flatten().copied().collect();
        row.median_ratio = median(&ratios);
    }
    rows
}

/// Whether the median ratio says A is better, in words for the summary.
pub fn verdict(row: &RatioRow) -> &'static str {
    match row.median_ratio {
        None => "n/a",
        Some(r) if (r - 1.0).abs() < 0.05 => "about equal",
        Some(r) if (r > 1.0) == row.higher_is_better => "A better",
        Some(_) => "B better",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{ProduceStats, RunResult};
    use crate::stats::LatencySummary;

    fn run(mib: f64, p99: f64) -> RunResult {
        let mut r = RunResult::empty("t", "b", crate::scenario::Kind::Produce);
        r.produce = Some(ProduceStats {
            mib_per_s: mib,
            ack_latency: Some(LatencySummary {
                count: 1,
                mean_ms: p99,
                p50_ms: p99,
                p90_ms: p99,
                p99_ms: p99,
                p999_ms: p99,
                max_ms: p99,
            }),
            ..ProduceStats::default()
        });
        r
    }

    #[test]
    fn ratios_and_medians() {
        assert_eq!(ratio(6.0, 3.0), Some(2.0));
        assert_eq!(ratio(1.0, 0.0), None);
        let runs = [
            run(100.0, 4.0),
            run(50.0, 2.0),
            run(90.0, 5.0),
            run(30.0, 1.0),
            run(80.0, 2.0),
            run(80.0, 8.0),
        ];
        let pairs: Vec<_> = runs.chunks(2).map(|p| (&p[0], &p[1])).collect();
        let rows = ratio_rows("produce", &pairs);
        let mib = rows
            .iter()
            .find(|r| r.figure == "produce MiB/s")
            .expect("row");
        assert_eq!(mib.ratios, vec![Some(2.0), Some(3.0), Some(1.0)]);
        assert_eq!(mib.median_ratio, Some(2.0));
        assert_eq!(mib.median_a, Some(90.0));
        assert_eq!(verdict(mib), "A better");
        let p99 = rows.iter().find(|r| r.figure == "ack p99 ms").expect("row");
        assert_eq!(p99.ratios, vec![Some(2.0), Some(5.0), Some(0.25)]);
        assert_eq!(p99.median_ratio, Some(2.0));
        assert_eq!(verdict(p99), "B better", "higher latency is worse");
    }

    #[test]
    fn missing_figures_do_not_count() {
        let a = run(10.0, 1.0);
        let b = RunResult::empty("t", "b", crate::scenario::Kind::Produce);
        let rows = ratio_rows("x", &[(&a, &b)]);
        assert!(rows.iter().all(|r| r.median_ratio.is_none()));
        assert_eq!(verdict(&rows[0]), "n/a");
        // Missing figures are null in JSON and read back as such.
        let json = serde_json::to_string(&rows).expect("serializes");
        let back: Vec<RatioRow> = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, rows);
    }
}
