//! Latency percentiles of the pure admission path, per review: each call is timed on its
//! own (criterion reports means), so p99 and the worst case are visible. Issue 9's target is
//! p99 under 50 µs for each scenario.
//!
//! `cargo bench --bench rule_latency [-- SAMPLES]` (default 20,000 per scenario) prints one
//! table row per scenario and phase.

mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use stateful_admission::admission::{Context, Policy, Verdict};

fn percentiles(mut samples: Vec<Duration>) -> [Duration; 5] {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    [
        at(0.5),
        at(0.9),
        at(0.99),
        at(0.999),
        samples[samples.len() - 1],
    ]
}

/// A phase to time: its name and one call of it, given an input made outside the timing.
type Row<'a> = (
    &'static str,
    Box<dyn Fn() -> Input + 'a>,
    Box<dyn Fn(Input) + 'a>,
);

/// What a phase is given: nothing, or the verdict it encodes (cloned before the clock starts).
enum Input {
    None,
    Verdict(Verdict),
}

fn time(n: usize, setup: &dyn Fn() -> Input, f: &dyn Fn(Input)) -> Vec<Duration> {
    for _ in 0..n / 20 + 100 {
        f(setup());
    }
    (0..n)
        .map(|_| {
            let input = setup();
            let start = Instant::now();
            f(input);
            start.elapsed()
        })
        .collect()
}

fn main() {
    // `cargo bench` passes `--bench`; a bare number is the sample count.
    let n = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(20_000);
    // `RULE_LATENCY_VIEW=empty` times the same reviews against an empty view.
    let view = if std::env::var("RULE_LATENCY_VIEW").is_ok_and(|v| v == "empty") {
        stateful_admission::cluster::ClusterView::empty()
    } else {
        support::issue_view()
    };
    let policy = Policy::default();
    let ctx = Context {
        view: &view,
        policy: &policy,
    };
    println!("samples per row: {n}; view: {:?}", view.counts());
    println!(
        "{:<32} {:<17} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "scenario", "phase", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs", "bytes"
    );
    // `RULE_LATENCY_ONLY=<scenario>[:<phase>]` times one scenario (or one phase), for profiling.
    let only = std::env::var("RULE_LATENCY_ONLY").unwrap_or_default();
    let (only_scenario, only_phase) = only.split_once(':').unwrap_or((&only, ""));
    for s in support::scenarios()
        .into_iter()
        .filter(|s| only_scenario.is_empty() || s.name == only_scenario)
    {
        let req = support::decode(&s.body);
        let verdict = support::evaluate(s.phase, &req, &ctx);
        let (body, phase) = (&s.body, s.phase);
        let none = || Box::new(|| Input::None) as Box<dyn Fn() -> Input>;
        let rows: Vec<Row<'_>> = vec![
            (
                "total",
                none(),
                Box::new(|_| {
                    black_box(support::review(phase, black_box(body), &ctx));
                }),
            ),
            (
                "decode",
                none(),
                Box::new(|_| {
                    black_box(support::decode(black_box(body)));
                }),
            ),
            (
                "decode_via_value",
                none(),
                Box::new(|_| {
                    black_box(support::decode_via_value(black_box(body)));
                }),
            ),
            (
                // The floor for any decoder: the body read through, nothing built.
                "read_through",
                none(),
                Box::new(|_| {
                    black_box(support::read_through(black_box(body)));
                }),
            ),
            (
                "evaluate",
                none(),
                Box::new(|_| {
                    black_box(support::evaluate(phase, black_box(&req), &ctx));
                }),
            ),
            (
                "respond_encode",
                Box::new(|| Input::Verdict(verdict.clone())),
                Box::new(|input| {
                    if let Input::Verdict(v) = input {
                        black_box(support::respond_encode(&req, black_box(v)));
                    }
                }),
            ),
        ];
        for (phase, setup, run) in rows
            .into_iter()
            .filter(|(p, _, _)| only_phase.is_empty() || *p == only_phase)
        {
            let samples = time(n, &setup, &run);
            let [p50, p90, p99, p999, max] = percentiles(samples);
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            println!(
                "{:<32} {:<17} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7}",
                s.name,
                phase,
                us(p50),
                us(p90),
                us(p99),
                us(p999),
                us(max),
                s.body.len()
            );
        }
        let out = support::review(s.phase, &s.body, &ctx);
        let response: serde_json::Value = serde_json::from_slice(&out).expect("response is JSON");
        println!(
            "  -> allowed={} patch={} warnings={}",
            response["response"]["allowed"],
            response["response"]["patch"].is_string(),
            response["response"]["warnings"]
                .as_array()
                .map_or(0, Vec::len)
        );
    }
}
