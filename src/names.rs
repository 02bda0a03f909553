//! User-facing names fixed by the design contract: annotation and label keys.

/// Prefix of every annotation and label this project reads or writes.
pub const PREFIX: &str = "stateful-admission.io/";

/// StatefulSet: `OnDelete` (default) or `InPlace`.
pub const VOLUME_CLAIM_UPDATE_POLICY: &str = "stateful-admission.io/volume-claim-update-policy";
/// StatefulSet: the desired volumeClaimTemplates (JSON array), written by the webhook.
pub const DESIRED_VOLUME_CLAIM_TEMPLATES: &str =
    "stateful-admission.io/desired-volume-claim-templates";
/// StatefulSet: int or percent, kept where the apiserver drops the native field.
pub const MAX_UNAVAILABLE: &str = "stateful-admission.io/max-unavailable";
/// StatefulSet: seconds without progress before `Progressing` turns False.
pub const PROGRESS_DEADLINE_SECONDS: &str = "stateful-admission.io/progress-deadline-seconds";
/// StatefulSet: the controller's progress record for the `Progressing` condition (JSON:
/// rollout, high-water marks, last progress time, condition transition times).
pub const PROGRESS: &str = "stateful-admission.io/progress";
/// StatefulSet: per-template claim status, written by the controller.
pub const VOLUME_CLAIM_STATUS: &str = "stateful-admission.io/volume-claim-status";
/// StorageClass: largest size a claim of this class may request.
pub const MAX_VOLUME_SIZE: &str = "stateful-admission.io/max-volume-size";
/// Namespace: class used for claims without one, before the cluster default.
pub const DEFAULT_STORAGE_CLASS: &str = "stateful-admission.io/default-storage-class";
/// Namespace label: `"true"` opts every object in the namespace out.
pub const IGNORE_LABEL: &str = "stateful-admission.io/ignore";

/// ConfigMap label marking a convergence journal written by the controller.
pub const JOURNAL_LABEL: &str = "stateful-admission.io/journal";
/// Journal annotations: the set it belongs to (namespace, name, uid, and the
/// resourceVersion it was written from), and how far the convergence got.
pub const JOURNAL_SET_NAMESPACE: &str = "stateful-admission.io/journal-namespace";
pub const JOURNAL_SET_NAME: &str = "stateful-admission.io/journal-name";
pub const JOURNAL_SET_UID: &str = "stateful-admission.io/journal-uid";
pub const JOURNAL_SET_RESOURCE_VERSION: &str = "stateful-admission.io/journal-resource-version";
pub const JOURNAL_STEP: &str = "stateful-admission.io/journal-step";
/// Name of the convergence journal ConfigMap of set `namespace/name` (in the controller's
/// namespace). A namespace name has no dots, so the first dot after the prefix ends it and no
/// two sets share a journal.
pub fn journal_name(namespace: &str, name: &str) -> String {
    format!("sa-journal.{namespace}.{name}")
}
/// On a StatefulSet: `"true"` restarts (evicts) a replica's pod whose claim waits for it to
/// finish growing its file system (offline node expansion); `"false"` never does. Without it
/// the `serve` flag `--restart-pods-for-resize` decides.
pub const RESTART_PODS_FOR_RESIZE: &str = "stateful-admission.io/restart-pods-for-resize";
/// On a claim, written by the controller before it evicts the claim's pod for a resize: the
/// pod and its uid (so a restart survives a crash and is never made twice).
pub const RESIZE_RESTART: &str = "stateful-admission.io/resize-restart";
/// On a StatefulSet, while a coordinated rollout holds its rolling update (the pod template
/// and the claims changed in one update): the partition held at and the user's partition
/// (JSON), written by the webhook and lowered by the controller, replica by replica.
pub const ROLLOUT_HOLD: &str = "stateful-admission.io/rollout-hold";
/// On the controller's Lease, kept by its holder: the apiserver's MaxUnavailableStatefulSet
/// gate as the controller knows it (`enabled`, `disabled`, `unknown: <why>`), for `check`.
pub const LEASE_MAX_UNAVAILABLE_GATE: &str = "stateful-admission.io/max-unavailable-gate";
/// Annotation that gives a claim a class (deprecated, still honoured by the apiserver).
pub const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
/// Label the StatefulSet controller puts on every pod of a set (upstream
/// `apps.StatefulSetPodNameLabel`); selects the pods the controller watches.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Label the StatefulSet controller puts on every pod with the name of the
/// ControllerRevision it was made from (upstream `apps.ControllerRevisionHashLabelKey`).
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller-revision-hash";
/// Field manager and event reporter name of the companion controller.
pub const CONTROLLER_NAME: &str = "stateful-admission";
/// Usernames kube-controller-manager's StatefulSet controller creates claims as: its own
/// service account where controllers get their own credentials
/// (`--use-service-account-credentials`, the kubeadm and most managed-cluster default; upstream
/// `ClientOrDie("statefulset-controller")` in kube-system), else the controller-manager's.
pub const STATEFULSET_CONTROLLER_USERS: [&str; 2] = [
    "system:serviceaccount:kube-system:statefulset-controller",
    "system:kube-controller-manager",
];
