//! The resource types the fake API server serves, with the per-type facts the registry
//! needs (scope, status subresource, generation tracking, supported field selectors).

/// One served resource type, identified on the wire by group, version and plural.
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Whether `/status` is a separate subresource, so that writes to the main resource
    /// keep the stored `.status` (as the real registries do).
    pub status_subresource: bool,
    /// Whether `metadata.generation` counts changes of anything but metadata and status (the
    /// spec; a webhook configuration's `webhooks`).
    pub tracks_generation: bool,
    /// Field selector labels beyond `metadata.name`/`metadata.namespace`, with the JSON
    /// pointer each reads; the real apiserver rejects any other label.
    pub field_labels: &'static [(&'static str, &'static str)],
}

impl ResourceType {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `statefulsets.apps`, or `persistentvolumeclaims` for the core group: the resource
    /// as NotFound, AlreadyExists and Conflict messages name it.
    pub fn qualified_resource(&self) -> String {
        qualify(self.plural, self.group)
    }

    /// `StatefulSet.apps`: the kind as Invalid messages name it.
    pub fn qualified_kind(&self) -> String {
        qualify(self.kind, self.group)
    }

    /// Looks a type up by its URL coordinates.
    pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
        ALL.iter()
            .copied()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// Looks a type up by the `apiVersion` and `kind` an object carries.
    pub fn for_object_type(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
        ALL.iter()
            .copied()
            .find(|r| r.api_version() == api_version && r.kind == kind)
    }

    /// The served type matching a kube/k8s-openapi resource type.
    ///
    /// # Panics
    /// If the fake server does not serve `K` (a mistake in the test, not in a request).
    pub fn of<K: kube::Resource<DynamicType = ()>>() -> &'static ResourceType {
        let (group, version, plural) = (K::group(&()), K::version(&()), K::plural(&()));
        Self::find(&group, &version, &plural).unwrap_or_else(|| {
            panic!("the fake API server does not serve {group}/{version} {plural}")
        })
    }
}

fn qualify(name: &str, group: &str) -> String {
    if group.is_empty() {
        name.to_owned()
    } else {
        format!("{name}.{group}")
    }
}

pub static STATEFULSETS: ResourceType = ResourceType {
    group: "apps",
    version: "v1",
    plural: "statefulsets",
    kind: "StatefulSet",
    namespaced: true,
    status_subresource: true,
    tracks_generation: true,
    field_labels: &[],
};

pub static PERSISTENT_VOLUME_CLAIMS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "persistentvolumeclaims",
    kind: "PersistentVolumeClaim",
    namespaced: true,
    status_subresource: true,
    tracks_generation: false,
    field_labels: &[],
};

pub static PODS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "pods",
    kind: "Pod",
    namespaced: true,
    status_subresource: true,
    tracks_generation: false,
    field_labels: &[
        ("spec.nodeName", "/spec/nodeName"),
        ("status.phase", "/status/phase"),
    ],
};

pub static NAMESPACES: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "namespaces",
    kind: "Namespace",
    namespaced: false,
    status_subresource: false,
    tracks_generation: false,
    field_labels: &[("status.phase", "/status/phase")],
};

pub static CONFIG_MAPS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "configmaps",
    kind: "ConfigMap",
    namespaced: true,
    status_subresource: false,
    tracks_generation: false,
    field_labels: &[],
};

pub static CORE_EVENTS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "events",
    kind: "Event",
    namespaced: true,
    status_subresource: false,
    tracks_generation: false,
    field_labels: &[
        ("involvedObject.kind", "/involvedObject/kind"),
        ("involvedObject.name", "/involvedObject/name"),
        ("involvedObject.namespace", "/involvedObject/namespace"),
        ("involvedObject.uid", "/involvedObject/uid"),
        ("involvedObject.apiVersion", "/involvedObject/apiVersion"),
        (
            "involvedObject.resourceVersion",
            "/involvedObject/resourceVersion",
        ),
        ("involvedObject.fieldPath", "/involvedObject/fieldPath"),
        ("reason", "/reason"),
        ("reportingComponent", "/reportingComponent"),
        ("source", "/source/component"),
        ("type", "/type"),
    ],
};

pub static EVENTS: ResourceType = ResourceType {
    group: "events.k8s.io",
    version: "v1",
    plural: "events",
    kind: "Event",
    namespaced: true,
    status_subresource: false,
    tracks_generation: false,
    field_labels: &[
        ("regarding.kind", "/regarding/kind"),
        ("regarding.name", "/regarding/name"),
        ("regarding.namespace", "/regarding/namespace"),
        ("regarding.uid", "/regarding/uid"),
        ("regarding.apiVersion", "/regarding/apiVersion"),
        ("regarding.resourceVersion", "/regarding/resourceVersion"),
        ("regarding.fieldPath", "/regarding/fieldPath"),
        ("reason", "/reason"),
        ("reportingController", "/reportingController"),
        ("type", "/type"),
    ],
};

pub static STORAGE_CLASSES: ResourceType = ResourceType {
    group: "storage.k8s.io",
    version: "v1",
    plural: "storageclasses",
    kind: "StorageClass",
    namespaced: false,
    status_subresource: false,
    tracks_generation: false,
    field_labels: &[],
};

pub static LEASES: ResourceType = ResourceType {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    kind: "Lease",
    namespaced: true,
    status_subresource: false,
    tracks_generation: false,
    field_labels: &[],
};

pub static SECRETS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "secrets",
    kind: "Secret",
    namespaced: true,
    status_subresource: false,
    tracks_generation: false,
    field_labels: &[("type", "/type")],
};

pub static MUTATING_WEBHOOK_CONFIGURATIONS: ResourceType = ResourceType {
    group: "admissionregistration.k8s.io",
    version: "v1",
    plural: "mutatingwebhookconfigurations",
    kind: "MutatingWebhookConfiguration",
    namespaced: false,
    status_subresource: false,
    tracks_generation: true,
    field_labels: &[],
};

pub static VALIDATING_WEBHOOK_CONFIGURATIONS: ResourceType = ResourceType {
    group: "admissionregistration.k8s.io",
    version: "v1",
    plural: "validatingwebhookconfigurations",
    kind: "ValidatingWebhookConfiguration",
    namespaced: false,
    status_subresource: false,
    tracks_generation: true,
    field_labels: &[],
};

/// Stored and served, with no controller behind them (`check` reads the release's).
pub static DEPLOYMENTS: ResourceType = ResourceType {
    group: "apps",
    version: "v1",
    plural: "deployments",
    kind: "Deployment",
    namespaced: true,
    status_subresource: true,
    tracks_generation: true,
    field_labels: &[],
};

pub static PERSISTENT_VOLUMES: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "persistentvolumes",
    kind: "PersistentVolume",
    namespaced: false,
    status_subresource: true,
    tracks_generation: false,
    field_labels: &[],
};

/// Served where the configuration says (`FakeApiConfig::volume_attributes_class_api`): GA.
pub static VOLUME_ATTRIBUTES_CLASSES: ResourceType = ResourceType {
    group: "storage.k8s.io",
    version: "v1",
    plural: "volumeattributesclasses",
    kind: "VolumeAttributesClass",
    namespaced: false,
    status_subresource: false,
    tracks_generation: false,
    field_labels: &[],
};

/// The same in beta (v1.31 to v1.33 with the gate on and the version enabled).
pub static VOLUME_ATTRIBUTES_CLASSES_V1BETA1: ResourceType = ResourceType {
    version: "v1beta1",
    ..VOLUME_ATTRIBUTES_CLASSES
};

/// Stored and served with their status subresource; no disruption controller writes the
/// status: the Eviction subresource computes what it needs ([`eviction`](super::eviction)).
pub static POD_DISRUPTION_BUDGETS: ResourceType = ResourceType {
    group: "policy",
    version: "v1",
    plural: "poddisruptionbudgets",
    kind: "PodDisruptionBudget",
    namespaced: true,
    status_subresource: true,
    tracks_generation: true,
    field_labels: &[],
};

/// Every served type.
pub static ALL: [&ResourceType; 17] = [
    &STATEFULSETS,
    &DEPLOYMENTS,
    &PERSISTENT_VOLUME_CLAIMS,
    &PODS,
    &NAMESPACES,
    &CONFIG_MAPS,
    &CORE_EVENTS,
    &EVENTS,
    &STORAGE_CLASSES,
    &LEASES,
    &SECRETS,
    &MUTATING_WEBHOOK_CONFIGURATIONS,
    &VALIDATING_WEBHOOK_CONFIGURATIONS,
    &PERSISTENT_VOLUMES,
    &VOLUME_ATTRIBUTES_CLASSES,
    &VOLUME_ATTRIBUTES_CLASSES_V1BETA1,
    &POD_DISRUPTION_BUDGETS,
];
