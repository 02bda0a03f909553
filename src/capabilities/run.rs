//! The loop of `serve` that keeps the capabilities current on every replica (a standby's
//! webhook reads them as much as the leader's controller): each capability is probed at
//! start, again every interval, again at once when the apiserver's `/version` changes (an
//! upgrade or a gate flipped on restart), and after a failure again with backoff (1 s,
//! doubling, capped) until the apiserver answers. What was learned is published to the cell,
//! `/readyz?verbose` (one line per capability) and the metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::probe::{self, Candidates, ClaimChange, Outcome, Round};
use super::{Capabilities, CapabilityCell, How, Learned, Name, Value, judge};
use crate::backoff::Exponential;
use crate::cluster::{ClusterView, Kind};

/// How soon a capability that needs an existing claim is tried again while the view's claims
/// have not listed yet.
const UNTIL_LISTED: Duration = Duration::from_secs(2);
use crate::health::{Health, State};

/// How the prober works, from the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Where the dry runs are made: the controller's namespace, which the webhooks exclude.
    pub namespace: String,
    /// Time between probes of a capability that answered.
    pub interval: Duration,
    /// The longest wait before probing again after failures (1 s, doubling up to this).
    pub retry_cap: Duration,
    /// How often `/version` is read, to probe everything again when it changes.
    pub version_check: Duration,
    /// Values the operator states (`--capability`); never probed.
    pub flags: Vec<(Name, Value)>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: "default".to_owned(),
            interval: Duration::from_secs(3600),
            retry_cap: Duration::from_secs(60),
            version_check: Duration::from_secs(60),
            flags: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CapabilityLabels {
    capability: &'static str,
    value: &'static str,
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeLabels {
    capability: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GateProbeLabels {
    result: &'static str,
}

/// The metrics of the capabilities.
#[derive(Debug, Default)]
struct Metrics {
    /// 1 on the series of each capability's current value and source.
    capability: Family<CapabilityLabels, Gauge>,
    probes: Family<ProbeLabels, Counter>,
    /// The maxUnavailable capability as 1 kept, 0 dropped, -1 unknown (kept for dashboards
    /// and alerts written against it).
    max_unavailable_gate_enabled: Gauge,
    max_unavailable_gate_probes: Family<GateProbeLabels, Counter>,
    /// The series each capability shows now, so that an old one goes when it changes.
    shown: Mutex<HashMap<Name, CapabilityLabels>>,
}

impl Metrics {
    fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "capability",
            "What the cluster does, by capability, its value and how it was learned (probe, flag, evidence, unknown): 1 on the current series",
            metrics.capability.clone(),
        );
        registry.register(
            "capability_probes",
            "Attempts to learn a capability from the apiserver, by capability and result (its value, or error)",
            metrics.probes.clone(),
        );
        metrics.max_unavailable_gate_enabled.set(-1);
        registry.register(
            "max_unavailable_gate_enabled",
            "Whether the apiserver keeps StatefulSet maxUnavailable (MaxUnavailableStatefulSet gate): 1 on, 0 off, -1 unknown",
            metrics.max_unavailable_gate_enabled.clone(),
        );
        registry.register(
            "max_unavailable_gate_probes",
            "Gate probes (server-side dry-run creates), by result",
            metrics.max_unavailable_gate_probes.clone(),
        );
        metrics
    }

    fn publish(&self, capabilities: &Capabilities) {
        let mut shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        for (name, learned) in capabilities.iter() {
            let labels = CapabilityLabels {
                capability: name.as_str(),
                value: learned.value.map_or("unknown", Value::as_str),
                source: learned.how.source(),
            };
            if let Some(old) = shown.insert(name, labels.clone())
                && old != labels
            {
                self.capability.remove(&old);
            }
            self.capability.get_or_create(&labels).set(1);
        }
        self.max_unavailable_gate_enabled
            .set(match capabilities.keeps_max_unavailable() {
                Some(true) => 1,
                Some(false) => 0,
                None => -1,
            });
    }

    fn probed(&self, name: Name, outcome: &Outcome) {
        let result = match outcome {
            Outcome::Learned(l) => l.value.map_or("unknown", Value::as_str),
            Outcome::Failed(_) => "error",
            Outcome::NotTried(_) => return,
        };
        self.probes
            .get_or_create(&ProbeLabels {
                capability: name.as_str(),
                result,
            })
            .inc();
        if name == Name::MaxUnavailable {
            let result = match outcome {
                Outcome::Learned(l) if l.value == Some(Value::Kept) => "enabled",
                Outcome::Learned(_) => "disabled",
                _ => "error",
            };
            self.max_unavailable_gate_probes
                .get_or_create(&GateProbeLabels { result })
                .inc();
        }
    }
}

/// Keeps a [`CapabilityCell`] current.
pub struct Prober {
    settings: Settings,
    cell: CapabilityCell,
    metrics: Arc<Metrics>,
    health: Option<Arc<Health>>,
}

impl Prober {
    /// A prober writing into `cell` (which gets the flags' values at once), its metrics
    /// registered in `registry`.
    pub fn new(settings: Settings, registry: &mut Registry, cell: CapabilityCell) -> Self {
        let metrics = Arc::new(Metrics::register(registry));
        let flags = settings.flags.clone();
        cell.update(|c| {
            *c = c.clone().with_flags(&flags);
            true
        });
        metrics.publish(&cell.get());
        Self {
            settings,
            cell,
            metrics,
            health: None,
        }
    }

    /// Says each capability on `health` (`/readyz?verbose`) from now on.
    pub fn with_health(mut self, health: Arc<Health>) -> Self {
        publish_health(&health, &self.cell.get());
        self.health = Some(health);
        self
    }

    pub fn cell(&self) -> CapabilityCell {
        self.cell.clone()
    }

    /// Probes until `stop`. `view` gives the claims a dry-run patch can be tried on (none
    /// without it: those capabilities are then learned from the controller's writes).
    pub async fn run(
        self,
        client: kube::Client,
        view: Option<ClusterView>,
        stop: CancellationToken,
    ) {
        let flagged: Vec<Name> = self.settings.flags.iter().map(|(n, _)| *n).collect();
        let mut schedule = Schedule::new(&flagged, Instant::now());
        let mut changes = self.cell.subscribe();
        let mut version_check = tokio::time::interval(self.settings.version_check);
        version_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        version_check.tick().await;
        loop {
            let next = schedule.next_due();
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let now = changes.borrow_and_update().clone();
                    self.publish(&now);
                }
                _ = version_check.tick(), if self.cell.get().git_version.is_some() => {
                    if let Ok(info) = client.apiserver_version().await {
                        let known = self.cell.get().git_version.clone();
                        if known.as_deref() != Some(info.git_version.as_str()) {
                            tracing::info!(
                                version = %info.git_version,
                                previous = known.as_deref().unwrap_or(""),
                                "the apiserver's version changed: learning its capabilities again"
                            );
                            self.cell.update(|c| forget_on_new_version(c, &info.git_version));
                            schedule.all_due(Instant::now());
                        }
                    }
                }
                _ = sleep_until(next) => {
                    let now = Instant::now();
                    let due = schedule.due(now);
                    let skip: Vec<Name> = Name::ALL.into_iter().filter(|n| !due.contains(n)).collect();
                    let candidates = view.as_ref().map(candidates).unwrap_or_default();
                    // Until the claims have listed, "no claim to try on" only means "not yet".
                    let listed = view.as_ref().is_none_or(|v| v.is_synced(Kind::Claim));
                    let round = probe::probe(&client, &self.settings.namespace, &candidates, &skip).await;
                    self.record(&round, &due, &mut schedule, listed);
                }
            }
        }
    }

    fn record(&self, round: &Round, due: &[Name], schedule: &mut Schedule, listed: bool) {
        let now = Instant::now();
        match &round.git_version {
            Err(why) => {
                tracing::warn!(error = %why, "the apiserver did not answer /version: capabilities are learned again later");
                for name in due {
                    self.metrics.probed(*name, &Outcome::Failed(why.clone()));
                    let wait = schedule.failed(*name, now, self.settings.retry_cap);
                    self.cell.update(|c| keep_or_explain(c, *name, why));
                    tracing::debug!(capability = %name, retry_in = ?wait, "capability not learned");
                }
                return;
            }
            Ok(version) => {
                let version = version.clone();
                self.cell.update(|c| {
                    let changed = c.git_version.as_deref() != Some(version.as_str());
                    c.git_version = Some(version);
                    changed
                });
            }
        }
        for (name, outcome) in &round.outcomes {
            self.metrics.probed(*name, outcome);
            match outcome {
                Outcome::Learned(learned) => {
                    schedule.answered(*name, now + self.settings.interval);
                    let previous = self.cell.get().value(*name);
                    if previous != learned.value {
                        tracing::info!(
                            capability = %name,
                            value = learned.value.map_or("unknown", |v| v.as_str()),
                            previous = previous.map_or("unknown", |v| v.as_str()),
                            how = learned.how.detail(),
                            "capability learned"
                        );
                    }
                    self.cell.set(*name, learned.clone());
                }
                Outcome::Failed(why) => {
                    let wait = schedule.failed(*name, now, self.settings.retry_cap);
                    // Said once per cause: a webhook-only install that may not dry-run asks
                    // again every minute, and would say the same every time.
                    let known = self.cell.get();
                    let learned = known.get(*name);
                    let again = learned.last_error.as_deref() == Some(why.as_str())
                        || (learned.value.is_none() && learned.how.detail() == why);
                    if again {
                        tracing::debug!(capability = %name, error = %why, retry_in = ?wait, "capability probe failed again");
                    } else {
                        tracing::warn!(capability = %name, error = %why, retry_in = ?wait, "capability probe failed; keeping what is known");
                    }
                    self.cell.update(|c| keep_or_explain(c, *name, why));
                }
                Outcome::NotTried(why) => {
                    let again = if listed {
                        self.settings.interval
                    } else {
                        UNTIL_LISTED
                    };
                    schedule.answered(*name, now + again);
                    self.cell.update(|c| {
                        if c.value(*name).is_some() {
                            return false;
                        }
                        c.set(*name, Learned::unknown(why.clone()));
                        true
                    });
                }
            }
        }
    }

    fn publish(&self, capabilities: &Capabilities) {
        self.metrics.publish(capabilities);
        if let Some(health) = &self.health {
            publish_health(health, capabilities);
        }
    }
}

fn publish_health(health: &Health, capabilities: &Capabilities) {
    for (name, learned) in capabilities.iter() {
        let state = if learned.value.is_some() {
            State::Ok
        } else {
            State::Warning
        };
        health.set(name.health_part(), state, learned.describe());
    }
}

/// A failed attempt: an earlier answer stands, with the failure noted; without one the
/// capability stays unknown, saying why.
fn keep_or_explain(capabilities: &mut Capabilities, name: Name, why: &str) -> bool {
    let known = capabilities.get(name).clone();
    if matches!(known.how, How::Flag(_)) {
        return false;
    }
    let next = if known.value.is_some() {
        Learned {
            last_error: Some(crate::text::clip(why, 400)),
            ..known
        }
    } else {
        Learned::unknown(why)
    };
    capabilities.set(name, next);
    true
}

/// A new apiserver version: what only an existing claim can show (and no round may find a
/// claim to try again) is not carried over; the rest is probed again at once and kept
/// meanwhile.
fn forget_on_new_version(capabilities: &mut Capabilities, version: &str) -> bool {
    let previous = capabilities.git_version.clone().unwrap_or_default();
    for name in [Name::RetroactiveDefaultClass, Name::ExpansionRecovery] {
        if !matches!(capabilities.get(name).how, How::Flag(_)) {
            capabilities.set(
                name,
                Learned::unknown(format!(
                    "the apiserver's version changed from {previous} to {version}: learned again at the next claim it applies to"
                )),
            );
        }
    }
    capabilities.git_version = Some(version.to_owned());
    true
}

/// The claims a dry-run patch can be tried on, from the view.
fn candidates(view: &ClusterView) -> Candidates {
    let mut found = Candidates::default();
    let class = view
        .storage_classes()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .min()
        .unwrap_or_else(|| "stateful-admission-probe".to_owned());
    for (namespace, name) in view.claim_keys() {
        if found.class_less.is_some() && found.expanding.is_some() {
            break;
        }
        let Some(claim) = view.claim(&namespace, &name) else {
            continue;
        };
        if found.class_less.is_none() && judge::takes_default_class(&claim) {
            found.class_less = Some(ClaimChange {
                namespace: namespace.clone(),
                name: name.clone(),
                value: class.clone(),
            });
        }
        if found.expanding.is_none()
            && let Some(value) = judge::lowered_request(&claim)
        {
            found.expanding = Some(ClaimChange {
                namespace,
                name,
                value,
            });
        }
    }
    found
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// When each capability is due, and its failures in a row.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Schedule {
    due: [Option<Instant>; 6],
    failures: [u32; 6],
}

impl Schedule {
    /// Everything due at `now`, but what the operator stated.
    fn new(flagged: &[Name], now: Instant) -> Self {
        let mut due = [Some(now); 6];
        for name in flagged {
            due[*name as usize] = None;
        }
        Self {
            due,
            failures: [0; 6],
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.due.iter().flatten().min().copied()
    }

    fn due(&self, now: Instant) -> Vec<Name> {
        Name::ALL
            .into_iter()
            .filter(|n| self.due[*n as usize].is_some_and(|at| at <= now))
            .collect()
    }

    fn all_due(&mut self, now: Instant) {
        for due in self.due.iter_mut().flatten() {
            *due = now;
        }
    }

    fn answered(&mut self, name: Name, next: Instant) {
        self.failures[name as usize] = 0;
        self.due[name as usize] = Some(next);
    }

    /// Returns the wait before the next attempt.
    fn failed(&mut self, name: Name, now: Instant, cap: Duration) -> Duration {
        let failures = &mut self.failures[name as usize];
        *failures = failures.saturating_add(1);
        let wait = retry_after(*failures, cap);
        self.due[name as usize] = Some(now + wait);
        wait
    }
}

/// The wait before the next probe after `failures` failed ones in a row: 1 s, doubling, at
/// most `cap` (client-go's backoff shape, without jitter: one prober per process).
pub fn retry_after(failures: u32, cap: Duration) -> Duration {
    Exponential::new(Duration::from_secs(1), cap)
        .after(failures)
        .max(Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn each_capability_keeps_its_own_schedule_and_stated_ones_are_never_due() {
        let start = Instant::now();
        let mut schedule = Schedule::new(&[Name::ExpansionRecovery], start);
        assert_eq!(schedule.due(start).len(), 5);
        assert!(!schedule.due(start).contains(&Name::ExpansionRecovery));
        let hour = Duration::from_secs(3600);
        for name in Name::ALL {
            schedule.answered(name, start + hour);
        }
        let wait = schedule.failed(Name::MaxUnavailable, start, Duration::from_secs(60));
        assert_eq!(wait, Duration::from_secs(1));
        assert_eq!(schedule.next_due(), Some(start + wait));
        assert_eq!(schedule.due(start + wait), [Name::MaxUnavailable]);
        schedule.all_due(start);
        assert_eq!(schedule.due(start).len(), 6);
    }

    #[test]
    fn a_failure_keeps_an_earlier_answer_and_explains_an_unknown() {
        let mut capabilities =
            Capabilities::default().with_flags(&[(Name::ExpansionRecovery, Value::Accepted)]);
        capabilities.set(
            Name::MaxUnavailable,
            Learned::probed(Value::Dropped, "dry run"),
        );
        assert!(keep_or_explain(
            &mut capabilities,
            Name::MaxUnavailable,
            "connection refused"
        ));
        let kept = capabilities.get(Name::MaxUnavailable);
        assert_eq!(kept.value, Some(Value::Dropped));
        assert_eq!(kept.last_error.as_deref(), Some("connection refused"));
        assert!(keep_or_explain(
            &mut capabilities,
            Name::ClaimVolumeAttributesClass,
            "403 forbidden"
        ));
        assert_eq!(
            capabilities.get(Name::ClaimVolumeAttributesClass).how,
            How::Unknown("403 forbidden".into())
        );
        assert!(!keep_or_explain(
            &mut capabilities,
            Name::ExpansionRecovery,
            "x"
        ));
        // A new version forgets what only a claim can show, unless stated.
        capabilities.set(
            Name::RetroactiveDefaultClass,
            Learned::probed(Value::Refused, "dry-run patch"),
        );
        capabilities.git_version = Some("v1.24.0".into());
        forget_on_new_version(&mut capabilities, "v1.26.1");
        assert_eq!(capabilities.value(Name::RetroactiveDefaultClass), None);
        assert!(
            capabilities
                .get(Name::RetroactiveDefaultClass)
                .describe()
                .contains("from v1.24.0 to v1.26.1")
        );
        assert_eq!(
            capabilities.value(Name::ExpansionRecovery),
            Some(Value::Accepted)
        );
        assert_eq!(
            capabilities.value(Name::MaxUnavailable),
            Some(Value::Dropped)
        );
    }

    #[test]
    fn every_capability_is_a_metric_series_and_a_readyz_line() {
        let mut registry = Registry::default();
        let cell = CapabilityCell::default();
        let prober = Prober::new(
            Settings {
                flags: vec![(Name::MaxUnavailable, Value::Dropped)],
                ..Settings::default()
            },
            &mut registry,
            cell.clone(),
        );
        let health = Arc::new(Health::default());
        let prober = prober.with_health(health.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(
            text.contains(
                r#"capability{capability="max-unavailable",value="dropped",source="flag"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"capability{capability="expansion-recovery",value="unknown",source="unknown"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains("max_unavailable_gate_enabled 0"), "{text}");
        cell.set(
            Name::ExpansionRecovery,
            Learned::probed(Value::Accepted, "dry run"),
        );
        prober.publish(&cell.get());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(
            !text.contains(r#"capability="expansion-recovery",value="unknown""#),
            "the old series goes: {text}"
        );
        let parts = health.parts();
        assert_eq!(parts.len(), 6);
        let line = parts
            .iter()
            .find(|p| p.name == "capability max-unavailable")
            .expect("a line");
        assert_eq!(line.state, State::Ok);
        assert_eq!(
            line.detail,
            "dropped (flag: --capability max-unavailable=dropped)"
        );
        assert!(
            parts
                .iter()
                .any(|p| p.name == "capability expansion-recovery" && p.state == State::Ok)
        );
    }
}
