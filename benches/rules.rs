//! Criterion benchmarks of the pure admission path (no HTTP, no TLS) against a cluster view
//! of 10,000 PVCs, 2,000 StatefulSets and 50 StorageClasses: the whole path as the handler
//! runs it, and each phase of it. `cargo bench --bench rules`; percentiles come from
//! `cargo bench --bench rule_latency`.

mod support;

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use stateful_admission::admission::{Context, Policy};

fn rules(c: &mut Criterion) {
    let view = support::issue_view();
    let policy = Policy::default();
    let ctx = Context {
        view: &view,
        policy: &policy,
    };
    for s in support::scenarios() {
        let mut group = c.benchmark_group(s.name);
        group.bench_function("total", |b| {
            b.iter(|| support::review(s.phase, black_box(&s.body), &ctx))
        });
        group.bench_function("decode", |b| b.iter(|| support::decode(black_box(&s.body))));
        group.bench_function("decode_via_value", |b| {
            b.iter(|| support::decode_via_value(black_box(&s.body)))
        });
        let req = support::decode(&s.body);
        group.bench_function("evaluate", |b| {
            b.iter(|| support::evaluate(s.phase, black_box(&req), &ctx))
        });
        let verdict = support::evaluate(s.phase, &req, &ctx);
        group.bench_function("respond_encode", |b| {
            b.iter_batched(
                || verdict.clone(),
                |v| support::respond_encode(black_box(&req), v),
                criterion::BatchSize::SmallInput,
            )
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = rules
}
criterion_main!(benches);
