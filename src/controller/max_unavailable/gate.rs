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

use super::super::context::Ctx;
use crate::admission::GateStatus;

/// Prefix of the probe's generated name (a fixed name could collide with a real set).
pub const PROBE_NAME_PREFIX: &str = "stateful-admission-gate-probe-";
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
pub fn probe_object() -> StatefulSet {
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
pub fn gate_from_answer(answer: &StatefulSet) -> GateStatus {
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
pub async fn probe(client: kube::Client, namespace: &str) -> Result<GateStatus, kube::Error> {
    let sets: Api<StatefulSet> = Api::namespaced(client, namespace);
    let answer = sets
        .create(&crate::field_manager::dry_run_post(), &probe_object())
        .await?;
    Ok(gate_from_answer(&answer))
}

/// Probes at start and every `probe_interval` (sooner again after a failure), until `stop`;
/// also sweeps metric series of StatefulSets that are gone. With the gate set by flag, only
/// records that.
pub async fn run_gate_probe(ctx: Arc<Ctx>, stop: CancellationToken) {
    let settings = ctx.config.max_unavailable.clone();
    let metrics = &ctx.metrics.max_unavailable;
    let mut next_probe = match settings.gate.configured() {
        Some(status) => {
            metrics.record_gate(status);
            None
        }
        None => Some(tokio::time::Instant::now()),
    };
    let mut sweep = tokio::time::interval(METRICS_SWEEP);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
            _ = probe_due => {
                let wait = match probe(ctx.client.clone(), &ctx.config.namespace).await {
                    Ok(status) => {
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
                        metrics.probed("error");
                        tracing::warn!(
                            %error,
                            namespace = %ctx.config.namespace,
                            last_known = metrics.gate().as_str(),
                            "MaxUnavailableStatefulSet gate probe (dry-run create of a StatefulSet) failed; keeping the last known state"
                        );
                        settings.probe_retry.min(settings.probe_interval)
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
    fn a_configured_gate_skips_the_probe() {
        assert_eq!(GateMode::Auto.configured(), None);
        assert_eq!(GateMode::Enabled.configured(), Some(GateStatus::Enabled));
        assert_eq!(GateMode::Disabled.configured(), Some(GateStatus::Disabled));
    }
}
