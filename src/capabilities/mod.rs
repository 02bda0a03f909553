//! What this cluster does, learned from the apiserver itself rather than from its version
//! number: vendor builds and `--feature-gates` make any version table a guess (a v1.35.3 build
//! drops StatefulSet `maxUnavailable` where upstream 1.35.0 keeps it). Every feature reads the
//! one answer kept here: the webhook (per request, from memory), the controller, `/readyz`,
//! the metrics and the Lease.
//!
//! - [`judge`]: pure functions from the apiserver's answers (discovery, OpenAPI, dry runs) to
//!   values, testable with captured JSON;
//! - [`probe`]: the requests (reads and server-side dry runs only), shared by `serve` and
//!   `check`;
//! - [`run`]: the loop of `serve` that probes at start, when `/version` changes, every
//!   interval, and again with backoff until the apiserver answers.

pub mod judge;
pub mod probe;
pub mod run;

use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;

/// One behaviour of the apiserver the product depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Name {
    /// StatefulSet `spec.updateStrategy.rollingUpdate.maxUnavailable` kept on write (gate
    /// `MaxUnavailableStatefulSet`, KEP-961).
    MaxUnavailable,
    /// A claim's `spec.volumeAttributesClassName` kept on write (gate `VolumeAttributesClass`).
    ClaimVolumeAttributesClass,
    /// The `storage.k8s.io` version that serves VolumeAttributesClass objects.
    VolumeAttributesClassApi,
    /// A class-less claim may be given a class (`RetroactiveDefaultStorageClass`, KEP-3333).
    RetroactiveDefaultClass,
    /// A request lowered to a value still above the capacity is accepted
    /// (`RecoverVolumeExpansionFailure`, KEP-1790).
    ExpansionRecovery,
    /// The StatefulSet accepts volumeClaimTemplate edits itself (KEP-4650 shipped).
    NativeTemplateEdits,
}

impl Name {
    pub const ALL: [Name; 6] = [
        Name::MaxUnavailable,
        Name::ClaimVolumeAttributesClass,
        Name::VolumeAttributesClassApi,
        Name::RetroactiveDefaultClass,
        Name::ExpansionRecovery,
        Name::NativeTemplateEdits,
    ];

    /// The name in flags, `/readyz`, metrics and `check`.
    pub fn as_str(self) -> &'static str {
        match self {
            Name::MaxUnavailable => "max-unavailable",
            Name::ClaimVolumeAttributesClass => "claim-volume-attributes-class",
            Name::VolumeAttributesClassApi => "volume-attributes-class-api",
            Name::RetroactiveDefaultClass => "retroactive-default-class",
            Name::ExpansionRecovery => "expansion-recovery",
            Name::NativeTemplateEdits => "native-template-edits",
        }
    }

    /// The `/readyz?verbose` part that says it.
    pub fn health_part(self) -> &'static str {
        match self {
            Name::MaxUnavailable => "capability max-unavailable",
            Name::ClaimVolumeAttributesClass => "capability claim-volume-attributes-class",
            Name::VolumeAttributesClassApi => "capability volume-attributes-class-api",
            Name::RetroactiveDefaultClass => "capability retroactive-default-class",
            Name::ExpansionRecovery => "capability expansion-recovery",
            Name::NativeTemplateEdits => "capability native-template-edits",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|n| n.as_str() == text)
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The values this capability can take, as flags spell them.
    pub fn values(self) -> &'static [Value] {
        match self {
            Name::MaxUnavailable | Name::ClaimVolumeAttributesClass => {
                &[Value::Kept, Value::Dropped, Value::Absent]
            }
            Name::VolumeAttributesClassApi => &[
                Value::Served(StorageVersion::V1),
                Value::Served(StorageVersion::V1beta1),
                Value::Served(StorageVersion::V1alpha1),
                Value::NotServed,
            ],
            Name::RetroactiveDefaultClass | Name::ExpansionRecovery => {
                &[Value::Accepted, Value::Refused]
            }
            Name::NativeTemplateEdits => &[
                Value::Native(NativeField::VolumeClaimUpdatePolicy),
                Value::Native(NativeField::VolumeClaimUpdateStrategy),
                Value::NotNative,
            ],
        }
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `storage.k8s.io` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StorageVersion {
    V1,
    V1beta1,
    V1alpha1,
}

impl StorageVersion {
    /// Newest first: the order in which a served version is preferred.
    pub const NEWEST_FIRST: [StorageVersion; 3] = [
        StorageVersion::V1,
        StorageVersion::V1beta1,
        StorageVersion::V1alpha1,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StorageVersion::V1 => "v1",
            StorageVersion::V1beta1 => "v1beta1",
            StorageVersion::V1alpha1 => "v1alpha1",
        }
    }

    /// `storage.k8s.io/<version>`, as an object's `apiVersion`.
    pub fn api_version(self) -> String {
        format!("storage.k8s.io/{}", self.as_str())
    }
}

/// The StatefulSet field through which an apiserver with KEP-4650 takes the claim update
/// policy. The proposal names `spec.volumeClaimUpdatePolicy`; a later revision may nest it as
/// `spec.volumeClaimUpdateStrategy.type`. Either, where the apiserver keeps it, wins over our
/// annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NativeField {
    VolumeClaimUpdatePolicy,
    VolumeClaimUpdateStrategy,
}

impl NativeField {
    pub const ALL: [NativeField; 2] = [
        NativeField::VolumeClaimUpdatePolicy,
        NativeField::VolumeClaimUpdateStrategy,
    ];

    /// The property of `StatefulSetSpec`.
    pub fn property(self) -> &'static str {
        match self {
            NativeField::VolumeClaimUpdatePolicy => "volumeClaimUpdatePolicy",
            NativeField::VolumeClaimUpdateStrategy => "volumeClaimUpdateStrategy",
        }
    }
}

/// What a capability was found to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value {
    /// The field survives a write.
    Kept,
    /// The field is dropped on write (a gate off).
    Dropped,
    /// The apiserver's types do not have the field at all (dropped while decoding; clients
    /// that validate, as kubectl does, refuse it).
    Absent,
    /// The change is accepted.
    Accepted,
    /// The change is refused.
    Refused,
    /// The API is served at this version.
    Served(StorageVersion),
    /// The API is not served.
    NotServed,
    /// The apiserver takes template edits itself, through this field.
    Native(NativeField),
    /// It does not.
    NotNative,
}

impl Value {
    /// The value in flags, `/readyz`, metrics and `check`.
    pub fn as_str(self) -> &'static str {
        match self {
            Value::Kept => "kept",
            Value::Dropped => "dropped",
            Value::Absent => "absent",
            Value::Accepted => "accepted",
            Value::Refused => "refused",
            Value::Served(v) => v.as_str(),
            Value::NotServed => "none",
            Value::Native(NativeField::VolumeClaimUpdatePolicy) => "volumeClaimUpdatePolicy",
            Value::Native(NativeField::VolumeClaimUpdateStrategy) => "volumeClaimUpdateStrategy",
            Value::NotNative => "no",
        }
    }

    /// Whether the field or change survives (kept, accepted, served, native).
    pub fn is_yes(self) -> bool {
        matches!(
            self,
            Value::Kept | Value::Accepted | Value::Served(_) | Value::Native(_)
        )
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a value was learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum How {
    /// From the apiserver's answer to a request of ours (what was asked, what came back).
    Probe(String),
    /// Stated by the operator (which flag).
    Flag(String),
    /// From the answer to a write made for another reason, or from stored objects.
    Evidence(String),
    /// Not known, and why.
    Unknown(String),
}

impl How {
    /// `probe`, `flag`, `evidence` or `unknown`: the `source` label of the metric.
    pub fn source(&self) -> &'static str {
        match self {
            How::Probe(_) => "probe",
            How::Flag(_) => "flag",
            How::Evidence(_) => "evidence",
            How::Unknown(_) => "unknown",
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            How::Probe(d) | How::Flag(d) | How::Evidence(d) | How::Unknown(d) => d,
        }
    }
}

/// One capability as this process knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Learned {
    /// `None` while unknown.
    pub value: Option<Value>,
    pub how: How,
    /// Why the last attempt to learn it again failed, while an earlier answer still stands.
    pub last_error: Option<String>,
}

impl Learned {
    pub fn unknown(why: impl Into<String>) -> Self {
        Self {
            value: None,
            how: How::Unknown(clip(why.into())),
            last_error: None,
        }
    }

    pub fn probed(value: Value, detail: impl Into<String>) -> Self {
        Self {
            value: Some(value),
            how: How::Probe(clip(detail.into())),
            last_error: None,
        }
    }

    pub fn flag(value: Value, flag: impl Into<String>) -> Self {
        Self {
            value: Some(value),
            how: How::Flag(flag.into()),
            last_error: None,
        }
    }

    pub fn evidence(value: Value, detail: impl Into<String>) -> Self {
        Self {
            value: Some(value),
            how: How::Evidence(clip(detail.into())),
            last_error: None,
        }
    }

    /// One line: `dropped (probe: …)`, `unknown (…)`, with the last failure where an earlier
    /// answer still stands.
    pub fn describe(&self) -> String {
        let mut text = match self.value {
            Some(value) => format!("{value} ({}: {})", self.how.source(), self.how.detail()),
            None => format!("unknown ({})", self.how.detail()),
        };
        if let Some(error) = &self.last_error {
            text.push_str(&format!(
                "; the last attempt to learn it again failed: {error}"
            ));
        }
        text
    }
}

/// Bounds what an apiserver's error text adds to a line.
fn clip(text: String) -> String {
    crate::text::clip(&text, 400)
}

/// Everything learned, with the apiserver version it was learned against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// `gitVersion` of `/version` at the last probe.
    pub git_version: Option<String>,
    entries: [Learned; 6],
}

/// Why a capability is unknown before anything was asked.
pub const NOT_PROBED_YET: &str = "not probed yet";

impl Default for Capabilities {
    /// Nothing known yet.
    fn default() -> Self {
        Self::unknown(NOT_PROBED_YET)
    }
}

impl Capabilities {
    /// Every capability unknown for the same reason.
    pub fn unknown(why: &str) -> Self {
        Self {
            git_version: None,
            entries: std::array::from_fn(|_| Learned::unknown(why)),
        }
    }

    pub fn get(&self, name: Name) -> &Learned {
        &self.entries[name.index()]
    }

    pub fn set(&mut self, name: Name, learned: Learned) {
        self.entries[name.index()] = learned;
    }

    pub fn value(&self, name: Name) -> Option<Value> {
        self.get(name).value
    }

    /// Whether every capability was asked at least once (or stated): what is unknown now is
    /// unknown for a reason, not for want of asking.
    pub fn asked(&self) -> bool {
        self.entries
            .iter()
            .all(|l| l.how != How::Unknown(NOT_PROBED_YET.to_owned()))
    }

    /// Each capability with what is known of it, in [`Name::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (Name, &Learned)> {
        Name::ALL.into_iter().map(|n| (n, self.get(n)))
    }

    /// Whether the apiserver keeps StatefulSet `maxUnavailable` (`None`: unknown).
    pub fn keeps_max_unavailable(&self) -> Option<bool> {
        self.value(Name::MaxUnavailable).map(Value::is_yes)
    }

    /// Whether the apiserver keeps a claim's `volumeAttributesClassName` (`None`: unknown).
    pub fn keeps_claim_volume_attributes_class(&self) -> Option<bool> {
        self.value(Name::ClaimVolumeAttributesClass)
            .map(Value::is_yes)
    }

    /// The field through which the apiserver takes volumeClaimTemplate edits natively, when it
    /// is known to.
    pub fn native_template_edits(&self) -> Option<NativeField> {
        match self.value(Name::NativeTemplateEdits) {
            Some(Value::Native(field)) => Some(field),
            _ => None,
        }
    }

    /// Applies what the operator stated (`--capability`): those are never probed.
    pub fn with_flags(mut self, flags: &[(Name, Value)]) -> Self {
        for (name, value) in flags {
            self.set(
                *name,
                Learned::flag(
                    *value,
                    format!("--capability {}={}", name.as_str(), value.as_str()),
                ),
            );
        }
        self
    }
}

/// Parses `NAME=VALUE` (one `--capability`): e.g. `max-unavailable=dropped`.
pub fn parse_flag(text: &str) -> Result<(Name, Value), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected NAME=VALUE, e.g. max-unavailable=dropped"))?;
    let name = Name::parse(name.trim()).ok_or_else(|| {
        format!(
            "{name:?}: not a capability; one of {}",
            Name::ALL.map(Name::as_str).join(", ")
        )
    })?;
    let value = value.trim();
    name.values()
        .iter()
        .copied()
        .find(|v| v.as_str() == value)
        .map(|v| (name, v))
        .ok_or_else(|| {
            format!(
                "{name}={value}: the value is one of {}",
                name.values()
                    .iter()
                    .map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// The capabilities this process knows, shared by everything in it that reads them: a cell
/// that can also be waited on for a change. Reading is a lock-free-enough borrow and an `Arc`
/// clone, so the webhook takes a snapshot per request without an API call.
#[derive(Debug, Clone)]
pub struct CapabilityCell(Arc<watch::Sender<Arc<Capabilities>>>);

impl Default for CapabilityCell {
    fn default() -> Self {
        Self::new(Capabilities::default())
    }
}

impl CapabilityCell {
    pub fn new(initial: Capabilities) -> Self {
        Self(Arc::new(watch::Sender::new(Arc::new(initial))))
    }

    /// What is known now.
    pub fn get(&self) -> Arc<Capabilities> {
        self.0.borrow().clone()
    }

    /// Changes what is known; waiters are woken only when `change` says it changed something.
    pub fn update(&self, change: impl FnOnce(&mut Capabilities) -> bool) {
        self.0.send_if_modified(|current| {
            let mut next = (**current).clone();
            let changed = change(&mut next) && next != **current;
            if changed {
                *current = Arc::new(next);
            }
            changed
        });
    }

    /// Sets one capability.
    pub fn set(&self, name: Name, learned: Learned) {
        self.update(|c| {
            c.set(name, learned);
            true
        });
    }

    /// Records what a write made for another reason showed, unless the operator stated the
    /// value: a probe's answer is replaced by fresher evidence only where they differ.
    pub fn evidence(&self, name: Name, value: Value, detail: impl Into<String>) {
        let detail = detail.into();
        self.update(|c| {
            let known = c.get(name);
            if matches!(known.how, How::Flag(_)) || known.value == Some(value) {
                return false;
            }
            c.set(name, Learned::evidence(value, detail));
            true
        });
    }

    /// A receiver that sees every change from now on.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Capabilities>> {
        self.0.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_name_a_capability_and_one_of_its_values() {
        assert_eq!(
            parse_flag("max-unavailable=dropped"),
            Ok((Name::MaxUnavailable, Value::Dropped))
        );
        assert_eq!(
            parse_flag(" volume-attributes-class-api = v1beta1 "),
            Ok((
                Name::VolumeAttributesClassApi,
                Value::Served(StorageVersion::V1beta1)
            ))
        );
        assert_eq!(
            parse_flag("native-template-edits=volumeClaimUpdatePolicy"),
            Ok((
                Name::NativeTemplateEdits,
                Value::Native(NativeField::VolumeClaimUpdatePolicy)
            ))
        );
        let err = parse_flag("max-unavailable=accepted").expect_err("not a value of it");
        assert!(err.contains("kept, dropped, absent"), "{err}");
        let err = parse_flag("maxunavailable=kept").expect_err("not a name");
        assert!(err.contains("one of max-unavailable,"), "{err}");
        assert!(parse_flag("max-unavailable").is_err());
        // Every value of every capability round-trips through its spelling.
        for name in Name::ALL {
            assert_eq!(Name::parse(name.as_str()), Some(name));
            for value in name.values() {
                assert_eq!(
                    parse_flag(&format!("{name}={value}")),
                    Ok((name, *value)),
                    "{name}={value}"
                );
            }
        }
    }

    #[test]
    fn a_line_says_the_value_and_how_it_was_learned() {
        let mut learned = Learned::probed(Value::Dropped, "dry-run create in \"sa\"");
        assert_eq!(
            learned.describe(),
            "dropped (probe: dry-run create in \"sa\")"
        );
        learned.last_error = Some("connection refused".into());
        assert!(learned.describe().ends_with("failed: connection refused"));
        assert_eq!(
            Learned::unknown("not probed yet").describe(),
            "unknown (not probed yet)"
        );
        let hostile = "x".repeat(10_000);
        assert!(Learned::unknown(hostile).describe().len() < 500);
    }

    #[tokio::test]
    async fn the_cell_wakes_waiters_only_on_a_change_and_flags_outrank_evidence() {
        let cell = CapabilityCell::new(
            Capabilities::default().with_flags(&[(Name::ExpansionRecovery, Value::Refused)]),
        );
        let mut changes = cell.subscribe();
        cell.evidence(Name::ExpansionRecovery, Value::Accepted, "a claim's patch");
        assert_eq!(
            cell.get().value(Name::ExpansionRecovery),
            Some(Value::Refused)
        );
        assert!(!changes.has_changed().expect("open"));
        cell.evidence(
            Name::RetroactiveDefaultClass,
            Value::Refused,
            "claim db/data: 422",
        );
        assert!(changes.has_changed().expect("open"));
        changes.borrow_and_update();
        // The same value again is no change.
        cell.evidence(Name::RetroactiveDefaultClass, Value::Refused, "again");
        assert!(!changes.has_changed().expect("open"));
        assert_eq!(
            cell.get().get(Name::RetroactiveDefaultClass).how,
            How::Evidence("claim db/data: 422".into())
        );
    }
}
