//! Whether the apiserver keeps StatefulSet `maxUnavailable` (its `MaxUnavailableStatefulSet`
//! gate: alpha and off up to 1.34, on in 1.35.0–1.35.3, off again from 1.35.4 and in 1.36).
//! No API tells a gate's state; a server-side dry-run create of a small StatefulSet with
//! `maxUnavailable: 2` shows it: the registry drops the field where the gate is off, and an
//! apiserver from before the field drops it while decoding. Nothing is stored.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use tokio_util::sync::CancellationToken;

use super::MaxUnavailable;
use crate::admission::GateStatus;
use crate::controller::context::Ctx;

/// Prefix of the probe's generated name (a fixed name could collide with a real set).
pub(crate) const PROBE_NAME_PREFIX: &str = "stateful-admission-gate-probe-";
/// How often series of StatefulSets that no longer exist are removed from the metrics.
const METRICS_SWEEP: Duration = Duration::from_secs(30);

/// How the controller learns the gate's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateMode {
    /// Probe at start and every `probe_interval`.
    Auto,
    /// Trust the operator (e.g. where RBAC forbids creating StatefulSets, even dry-run).
    Enabled,
    Disabled,
}

impl GateMode {
    /// The state set by the operator, if any.
    pub fn configured(self) -> Option<GateStatus> {
        match self {
            Self::Auto => None,
            Self::Enabled => Some(GateStatus::Enabled),
            Self::Disabled => Some(GateStatus::Disabled),
        }
    }
}

pub use crate::admission::GateCell;

/// The StatefulSet sent as a dry run: no replicas (so no limit against replicas applies and
/// nothing would run even if it were stored), `maxUnavailable: 2`.
pub(crate) fn probe_object() -> StatefulSet {
    let labels = BTreeMap::from([(
        "app.kubernetes.io/name".to_owned(),
        "stateful-admission-gate-probe".to_owned(),
    )]);
    StatefulSet {
        metadata: ObjectMeta {
            generate_name: Some(PROBE_NAME_PREFIX.to_owned()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: StatefulSetSpec {
            replicas: Some(0),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "probe".to_owned(),
                        image: Some("registry.k8s.io/pause:3.10".to_owned()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateStatefulSetStrategy {
                    max_unavailable: Some(IntOrString::Int(2)),
                    partition: Some(0),
                }),
            }),
            ..StatefulSetSpec::default()
        },
        status: None,
    }
}

/// What the apiserver's answer to the dry run says about the gate.
pub(crate) fn gate_from_answer(answer: &StatefulSet) -> GateStatus {
    let kept = answer
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.max_unavailable.as_ref())
        .is_some();
    if kept {
        GateStatus::Enabled
    } else {
        GateStatus::Disabled
    }
}

/// One probe: a server-side dry-run create in the controller's namespace.
pub(crate) async fn probe(
    client: kube::Client,
    namespace: &str,
) -> Result<GateStatus, kube::Error> {
    let sets: Api<StatefulSet> = Api::namespaced(client, namespace);
    let answer = sets
        .create(&crate::field_manager::dry_run_post(), &probe_object())
        .await?;
    Ok(gate_from_answer(&answer))
}

/// What a stored set tells of the gate, before or without a probe: a set that kept
/// `spec.updateStrategy.rollingUpdate.maxUnavailable` shows it on; one whose managedFields
/// say a writer set the field though the stored object lacks it shows it dropped (off, or an
/// apiserver from before the field). `None` when the set says neither.
pub(crate) fn evidence(set: &StatefulSet) -> Option<GateStatus> {
    let kept = set
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .is_some_and(|r| r.max_unavailable.is_some());
    if kept {
        return Some(GateStatus::Enabled);
    }
    let owned = set.metadata.managed_fields.iter().flatten().any(|m| {
        m.fields_v1
            .as_ref()
            .and_then(|f| {
                f.0.pointer("/f:spec/f:updateStrategy/f:rollingUpdate/f:maxUnavailable")
            })
            .is_some()
    });
    owned.then_some(GateStatus::Disabled)
}

/// The wait before the next probe after `failures` failed ones in a row: 1 s, doubling, at
/// most `cap` (client-go's backoff shape, without jitter: one prober per process).
pub(crate) fn retry_after(failures: u32, cap: Duration) -> Duration {
    let doubled = Duration::from_secs(1).saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    doubled.min(cap).max(Duration::from_millis(1))
}

/// Probes at start and every `probe_interval`; after a failure again with backoff (1 s,
/// doubling, at most `probe_retry`) until the apiserver answers; and at once when the
/// apiserver's version changes (an upgrade can flip the gate's default). Also sweeps metric
/// series of StatefulSets that are gone. With the gate set by flag, only records that.
pub(crate) async fn run_gate_probe(
    metrics: &MaxUnavailable,
    ctx: Arc<Ctx>,
    stop: CancellationToken,
) {
    let settings = metrics.settings().clone();
    let mut next_probe = match settings.gate.configured() {
        Some(status) => {
            metrics.record_gate(status);
            None
        }
        None => Some(tokio::time::Instant::now()),
    };
    let mut sweep = tokio::time::interval(METRICS_SWEEP);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut version_check = tokio::time::interval(settings.version_check);
    version_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The version the last answered probe was made against, and failures in a row since.
    let mut probed_version: Option<String> = None;
    let mut failures = 0u32;
    loop {
        let probe_due = async {
            match next_probe {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = sweep.tick() => metrics.sweep(|ns, name| ctx.view.has_stateful_set(ns, name)),
            _ = version_check.tick(), if next_probe.is_some() && probed_version.is_some() => {
                if let Ok(info) = ctx.client.apiserver_version().await
                    && probed_version.as_deref() != Some(info.git_version.as_str())
                {
                    tracing::info!(
                        version = %info.git_version,
                        previous = probed_version.as_deref().unwrap_or(""),
                        "the apiserver's version changed: probing the MaxUnavailableStatefulSet gate again"
                    );
                    next_probe = Some(tokio::time::Instant::now());
                }
            }
            _ = probe_due => {
                let version = ctx.client.apiserver_version().await.ok().map(|i| i.git_version);
                let wait = match probe(ctx.client.clone(), &ctx.config.namespace).await {
                    Ok(status) => {
                        failures = 0;
                        probed_version = version.or(probed_version);
                        let previous = metrics.record_gate(status);
                        if previous != status {
                            tracing::info!(
                                gate = status.as_str(),
                                previous = previous.as_str(),
                                namespace = %ctx.config.namespace,
                                "MaxUnavailableStatefulSet gate probed: the apiserver {} spec.updateStrategy.rollingUpdate.maxUnavailable",
                                if status == GateStatus::Enabled { "keeps" } else { "drops" },
                            );
                        } else {
                            tracing::debug!(gate = status.as_str(), "MaxUnavailableStatefulSet gate probed");
                        }
                        metrics.probed(status.as_str());
                        settings.probe_interval
                    }
                    Err(error) => {
                        failures = failures.saturating_add(1);
                        metrics.probed("error");
                        let wait = retry_after(failures, settings.probe_retry.min(settings.probe_interval));
                        metrics.probe_failed(&error.to_string());
                        tracing::warn!(
                            %error,
                            namespace = %ctx.config.namespace,
                            last_known = metrics.gate().as_str(),
                            retry_in = ?wait,
                            "MaxUnavailableStatefulSet gate probe (dry-run create of a StatefulSet) failed; keeping the last known state"
                        );
                        wait
                    }
                };
                next_probe = Some(tokio::time::Instant::now() + wait);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_asks_for_two_and_reads_the_answer() {
        let sent = probe_object();
        assert_eq!(gate_from_answer(&sent), GateStatus::Enabled);
        assert_eq!(sent.spec.replicas, Some(0));
        assert!(
            sent.metadata.name.is_none(),
            "a generated name never collides"
        );
        let json = serde_json::to_value(&sent).expect("serializes");
        assert_eq!(
            json.pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable"),
            Some(&serde_json::json!(2))
        );
        let mut dropped = sent;
        if let Some(r) = dropped
            .spec
            .update_strategy
            .as_mut()
            .and_then(|s| s.rolling_update.as_mut())
        {
            r.max_unavailable = None;
        }
        assert_eq!(gate_from_answer(&dropped), GateStatus::Disabled);
        // An apiserver from before the field: the whole rollingUpdate may come back bare.
        dropped.spec.update_strategy = None;
        assert_eq!(gate_from_answer(&dropped), GateStatus::Disabled);
    }

    #[test]
    fn a_failed_probe_is_retried_after_a_second_then_doubling_up_to_the_cap() {
        let cap = Duration::from_secs(60);
        let waits: Vec<u64> = (1..=9).map(|n| retry_after(n, cap).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_after(u32::MAX, cap), cap);
        assert_eq!(
            retry_after(3, Duration::from_millis(500)),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn a_stored_set_shows_the_gate_by_the_field_or_its_dropped_ownership() {
        let set = |spec: serde_json::Value, managed: serde_json::Value| -> StatefulSet {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "db", "managedFields": managed}, "spec": spec}))
            .expect("a set")
        };
        let strategy = |rolling: serde_json::Value| {
            serde_json::json!({"selector": {}, "serviceName": "db", "template": {},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling}})
        };
        let owns = serde_json::json!([{"manager": "helm", "operation": "Apply",
            "fieldsV1": {"f:spec": {"f:updateStrategy": {"f:rollingUpdate": {"f:maxUnavailable": {}}}}}}]);
        let other = serde_json::json!([{"manager": "helm", "operation": "Apply",
            "fieldsV1": {"f:spec": {"f:updateStrategy": {"f:rollingUpdate": {"f:partition": {}}}}}}]);
        let kept = strategy(serde_json::json!({"maxUnavailable": 2}));
        let dropped = strategy(serde_json::json!({"partition": 0}));
        assert_eq!(
            evidence(&set(kept.clone(), owns.clone())),
            Some(GateStatus::Enabled)
        );
        assert_eq!(
            evidence(&set(kept, other.clone())),
            Some(GateStatus::Enabled)
        );
        assert_eq!(
            evidence(&set(dropped.clone(), owns)),
            Some(GateStatus::Disabled)
        );
        // The annotation alone (or nothing) tells nothing: the user may have written it.
        assert_eq!(evidence(&set(dropped.clone(), other)), None);
        assert_eq!(evidence(&set(dropped, serde_json::Value::Null)), None);
    }

    #[test]
    fn a_configured_gate_skips_the_probe() {
        assert_eq!(GateMode::Auto.configured(), None);
        assert_eq!(GateMode::Enabled.configured(), Some(GateStatus::Enabled));
        assert_eq!(GateMode::Disabled.configured(), Some(GateStatus::Disabled));
    }
}
