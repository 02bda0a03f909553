//! The fake API server validates object metadata as kube-apiserver does
//! (`apimachinery/pkg/api/validation.ValidateObjectMeta`, `ValidateObjectMetaUpdate`,
//! `metav1validation.ValidateLabels`, `ValidateAnnotations`), on create, replace, every patch
//! and server-side apply, through its HTTP surface: a test that writes an object a real
//! apiserver refuses fails against the fake too.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::support::fake_apiserver::admission::{
    AdmissionHook, Attributes, CallError, FailurePolicy, Phase, Webhook,
};
use crate::support::fake_apiserver::{FakeApiConfig, FakeApiServer, Profile, StoreView, resources};

/// `validation.IsDNS1123Label`'s regex message.
const LABEL_RULE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
     and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for \
     validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// `validation.IsDNS1123Subdomain`'s regex message.
const SUBDOMAIN_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
     '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
     validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// `validation.IsQualifiedName`'s regex message for the name part.
const QUALIFIED_NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
     with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is \
     '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// `validation.IsValidLabelValue`'s regex message.
const LABEL_VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', \
     '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or \
     '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// The alphabet of `utilrand.String`, which `generateName` suffixes come from.
const SUFFIX_ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";

const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";
const NAMESPACES: &str = "/api/v1/namespaces";
const STATEFULSETS: &str = "/apis/apps/v1/namespaces/default/statefulsets";
const BUDGETS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
const CLAIMS: &str = "/api/v1/namespaces/default/persistentvolumeclaims";

fn config_map(meta: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}})
}

fn namespace(meta: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
}

fn statefulset(meta: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
        "spec": {
            "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
        },
    })
}

fn budget(meta: Value) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta,
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    })
}

fn claim(meta: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    })
}

/// One request through the fake's HTTP surface: the status code and the JSON answer.
async fn send(
    api: &FakeApiServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let response = reqwest::Client::new()
        .request(method, format!("{}{path}", api.url()))
        .header("content-type", content_type)
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    let code = response.status().as_u16();
    (code, response.json().await.expect("a JSON answer"))
}

async fn create(api: &FakeApiServer, collection: &str, body: &Value) -> (u16, Value) {
    send(api, "POST", collection, "application/json", body).await
}

/// The `(reason, field, message)` of each cause of a Status.
fn causes(status: &Value) -> Vec<(String, String, String)> {
    status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (text("reason"), text("field"), text("message"))
        })
        .collect()
}

/// Asserts a 422 `Invalid` Status with this message and these causes.
fn assert_invalid(
    what: &str,
    (code, status): &(u16, Value),
    message: &str,
    want: &[(&str, &str, &str)],
) {
    assert_eq!(*code, 422, "{what}: {status}");
    assert_eq!(status["kind"], "Status", "{what}");
    assert_eq!(status["status"], "Failure", "{what}");
    assert_eq!(status["reason"], "Invalid", "{what}");
    assert_eq!(status["code"], 422, "{what}");
    assert_eq!(status["message"], message, "{what}");
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(r, f, m)| ((*r).to_owned(), (*f).to_owned(), (*m).to_owned()))
        .collect();
    assert_eq!(causes(status), want, "{what}: causes");
}

fn invalid_value(value: &str, detail: &str) -> String {
    format!("Invalid value: \"{value}\": {detail}")
}

#[tokio::test]
async fn create_refuses_the_metadata_a_real_apiserver_refuses() {
    let api = FakeApiServer::start().await;
    let long_value = "v".repeat(68);
    let name_64 = "n".repeat(64);
    let name_254 = "s".repeat(254);
    let value_too_long = invalid_value(&long_value, "must be no more than 63 characters");
    let name_64_too_long = invalid_value(&name_64, "must be no more than 63 characters");
    let name_254_too_long = invalid_value(&name_254, "must be no more than 253 characters");
    let dotted_in_namespace = invalid_value("my.config.v1", "must not contain dots");
    let upper_subdomain = invalid_value("Web", SUBDOMAIN_RULE);
    let upper_label = invalid_value("Web", LABEL_RULE);
    let bad_prefix = invalid_value("Example.com/app", &format!("prefix part {SUBDOMAIN_RULE}"));
    let empty_prefix = invalid_value("/app", "prefix part must be non-empty");
    let two_slashes = invalid_value(
        "a/b/c",
        &format!(
            "a qualified name {QUALIFIED_NAME_RULE} with an optional DNS subdomain prefix and '/' \
             (e.g. 'example.com/MyName')"
        ),
    );
    let spaced_value = invalid_value("two words", LABEL_VALUE_RULE);
    let spaced_annotation = invalid_value("bad key", &format!("name part {QUALIFIED_NAME_RULE}"));
    let percent = invalid_value("a%b", "may not contain '%'");
    let dotted_set = invalid_value("web.v1", "must not contain dots");
    // (what, collection, body, refusal: (message, causes as (reason, field, message)))
    type Refusal<'a> = Option<(String, Vec<(&'a str, &'a str, &'a str)>)>;
    let cases: Vec<(&str, &str, Value, Refusal)> = vec![
        (
            "a namespace whose label value has 68 characters",
            NAMESPACES,
            namespace(json!({"name": "labelled", "labels": {"team": long_value}})),
            Some((
                format!("Namespace \"labelled\" is invalid: metadata.labels: {value_too_long}"),
                vec![("FieldValueInvalid", "metadata.labels", value_too_long.as_str())],
            )),
        ),
        (
            "a label value of 63 characters",
            NAMESPACES,
            namespace(json!({"name": "labelled-63", "labels": {"team": "v".repeat(63)}})),
            None,
        ),
        (
            // `SetDefaults_Namespace` labels it `kubernetes.io/metadata.name=<name>` before
            // validation: the value is too long as well (kubectl shows both).
            "a namespace name of 64 characters",
            NAMESPACES,
            namespace(json!({"name": name_64})),
            Some((
                format!(
                    "Namespace \"{name_64}\" is invalid: [metadata.name: {name_64_too_long}, \
                     metadata.labels: {name_64_too_long}]"
                ),
                vec![
                    ("FieldValueInvalid", "metadata.name", name_64_too_long.as_str()),
                    ("FieldValueInvalid", "metadata.labels", name_64_too_long.as_str()),
                ],
            )),
        ),
        (
            "a namespace name of 63 characters",
            NAMESPACES,
            namespace(json!({"name": "n".repeat(63)})),
            None,
        ),
        (
            "a subdomain with dots names a ConfigMap",
            CONFIG_MAPS,
            config_map(json!({"name": "my.config.v1"})),
            None,
        ),
        (
            "but not a Namespace (a DNS label)",
            NAMESPACES,
            namespace(json!({"name": "my.config.v1"})),
            Some((
                format!("Namespace \"my.config.v1\" is invalid: metadata.name: {dotted_in_namespace}"),
                vec![("FieldValueInvalid", "metadata.name", dotted_in_namespace.as_str())],
            )),
        ),
        (
            "an uppercase ConfigMap name",
            CONFIG_MAPS,
            config_map(json!({"name": "Web"})),
            Some((
                format!("ConfigMap \"Web\" is invalid: metadata.name: {upper_subdomain}"),
                vec![("FieldValueInvalid", "metadata.name", upper_subdomain.as_str())],
            )),
        ),
        (
            "an uppercase Namespace name",
            NAMESPACES,
            namespace(json!({"name": "Web"})),
            Some((
                format!("Namespace \"Web\" is invalid: metadata.name: {upper_label}"),
                vec![("FieldValueInvalid", "metadata.name", upper_label.as_str())],
            )),
        ),
        (
            "a ConfigMap name of 254 characters",
            CONFIG_MAPS,
            config_map(json!({"name": name_254})),
            Some((
                format!("ConfigMap \"{name_254}\" is invalid: metadata.name: {name_254_too_long}"),
                vec![("FieldValueInvalid", "metadata.name", name_254_too_long.as_str())],
            )),
        ),
        (
            "a label key whose prefix is not a subdomain",
            CONFIG_MAPS,
            config_map(json!({"name": "prefixed", "labels": {"Example.com/app": "web"}})),
            Some((
                format!("ConfigMap \"prefixed\" is invalid: metadata.labels: {bad_prefix}"),
                vec![("FieldValueInvalid", "metadata.labels", bad_prefix.as_str())],
            )),
        ),
        (
            "a label key with an empty prefix",
            CONFIG_MAPS,
            config_map(json!({"name": "prefixed", "labels": {"/app": "web"}})),
            Some((
                format!("ConfigMap \"prefixed\" is invalid: metadata.labels: {empty_prefix}"),
                vec![("FieldValueInvalid", "metadata.labels", empty_prefix.as_str())],
            )),
        ),
        (
            "a label key with two slashes",
            CONFIG_MAPS,
            config_map(json!({"name": "prefixed", "labels": {"a/b/c": "web"}})),
            Some((
                format!("ConfigMap \"prefixed\" is invalid: metadata.labels: {two_slashes}"),
                vec![("FieldValueInvalid", "metadata.labels", two_slashes.as_str())],
            )),
        ),
        (
            "a label value with a space",
            CONFIG_MAPS,
            config_map(json!({"name": "spaced", "labels": {"app": "two words"}})),
            Some((
                format!("ConfigMap \"spaced\" is invalid: metadata.labels: {spaced_value}"),
                vec![("FieldValueInvalid", "metadata.labels", spaced_value.as_str())],
            )),
        ),
        (
            "two problems: listed in brackets, name first",
            NAMESPACES,
            namespace(json!({"name": "Web", "labels": {"team": long_value}})),
            Some((
                format!(
                    "Namespace \"Web\" is invalid: [metadata.name: {upper_label}, metadata.labels: {value_too_long}]"
                ),
                vec![
                    ("FieldValueInvalid", "metadata.name", upper_label.as_str()),
                    ("FieldValueInvalid", "metadata.labels", value_too_long.as_str()),
                ],
            )),
        ),
        (
            "neither name nor generateName",
            CONFIG_MAPS,
            config_map(json!({})),
            Some((
                "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required"
                    .to_owned(),
                vec![(
                    "FieldValueRequired",
                    "metadata.name",
                    "Required value: name or generateName is required",
                )],
            )),
        ),
        (
            "an annotation key is checked lowercased",
            CONFIG_MAPS,
            config_map(json!({"name": "noted", "annotations": {"Example.com/Note": "x"}})),
            None,
        ),
        (
            "an annotation key with a space",
            CONFIG_MAPS,
            config_map(json!({"name": "noted-2", "annotations": {"bad key": "x"}})),
            Some((
                format!("ConfigMap \"noted-2\" is invalid: metadata.annotations: {spaced_annotation}"),
                vec![("FieldValueInvalid", "metadata.annotations", spaced_annotation.as_str())],
            )),
        ),
        (
            "a budget's name is only a path segment: uppercase goes",
            BUDGETS,
            budget(json!({"name": "Web-Budget"})),
            None,
        ),
        (
            "but not a '%'",
            BUDGETS,
            budget(json!({"name": "a%b"})),
            Some((
                format!("PodDisruptionBudget.policy \"a%b\" is invalid: metadata.name: {percent}"),
                vec![("FieldValueInvalid", "metadata.name", percent.as_str())],
            )),
        ),
        (
            "a StatefulSet name is a DNS label (v1.27+)",
            STATEFULSETS,
            statefulset(json!({"name": "web.v1"})),
            Some((
                format!("StatefulSet.apps \"web.v1\" is invalid: metadata.name: {dotted_set}"),
                vec![("FieldValueInvalid", "metadata.name", dotted_set.as_str())],
            )),
        ),
    ];
    for (what, collection, body, refusal) in cases {
        let answer = create(&api, collection, &body).await;
        match refusal {
            None => assert_eq!(answer.0, 201, "{what}: {}", answer.1),
            Some((message, want)) => assert_invalid(what, &answer, &message, &want),
        }
    }
    assert!(
        api.get_object(&resources::NAMESPACES, "", "Web").is_none(),
        "nothing refused is stored"
    );
}

#[tokio::test]
async fn annotations_may_total_256_kib_and_no_more() {
    let api = FakeApiServer::start().await;
    // Keys and values count together: "k" and 262143 bytes is exactly the limit.
    let at_limit =
        config_map(json!({"name": "at-limit", "annotations": {"k": "x".repeat(262_143)}}));
    assert_eq!(create(&api, CONFIG_MAPS, &at_limit).await.0, 201);
    let split = config_map(json!({"name": "split", "annotations": {
        "a": "x".repeat(131_071), "b": "x".repeat(131_071),
    }}));
    assert_eq!(create(&api, CONFIG_MAPS, &split).await.0, 201);

    let over = config_map(json!({"name": "over", "annotations": {"k": "x".repeat(262_144)}}));
    assert_invalid(
        "one byte over",
        &create(&api, CONFIG_MAPS, &over).await,
        "ConfigMap \"over\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes",
        &[(
            "FieldValueTooLong",
            "metadata.annotations",
            "Too long: may not be more than 262144 bytes",
        )],
    );
    let split_over = config_map(json!({"name": "split-over", "annotations": {
        "a": "x".repeat(131_071), "bb": "x".repeat(131_071),
    }}));
    assert_eq!(create(&api, CONFIG_MAPS, &split_over).await.0, 422);
}

/// The wording of the version: v1.24 to v1.31 `field.TooLong` says "must have at most", v1.35+
/// label checks (`api/validate/content`) count bytes and name "a valid label key".
#[tokio::test]
async fn metadata_errors_are_worded_as_each_version_words_them() {
    let v1_24 = FakeApiServer::start_with(FakeApiConfig::profile(Profile::V1_24)).await;
    let over = config_map(json!({"name": "over", "annotations": {"k": "x".repeat(262_144)}}));
    assert_invalid(
        "v1.24 annotations",
        &create(&v1_24, CONFIG_MAPS, &over).await,
        "ConfigMap \"over\" is invalid: metadata.annotations: Too long: must have at most 262144 bytes",
        &[(
            "FieldValueTooLong",
            "metadata.annotations",
            "Too long: must have at most 262144 bytes",
        )],
    );
    // v1.24 StatefulSet names were DNS subdomains.
    let dotted = statefulset(json!({"name": "web.v1"}));
    assert_eq!(create(&v1_24, STATEFULSETS, &dotted).await.0, 201);

    let v1_35 = FakeApiServer::start_with(FakeApiConfig::profile(Profile::V1_35)).await;
    let long_value = "v".repeat(68);
    let too_long = invalid_value(&long_value, "must be no more than 63 bytes");
    assert_invalid(
        "v1.35 label value",
        &create(
            &v1_35,
            NAMESPACES,
            &namespace(json!({"name": "ns", "labels": {"team": long_value}})),
        )
        .await,
        &format!("Namespace \"ns\" is invalid: metadata.labels: {too_long}"),
        &[("FieldValueInvalid", "metadata.labels", &too_long)],
    );
    let two_slashes = invalid_value(
        "a/b/c",
        &format!(
            "a valid label key {QUALIFIED_NAME_RULE} with an optional DNS subdomain prefix and '/' \
             (e.g. 'example.com/MyName')"
        ),
    );
    assert_invalid(
        "v1.35 label key",
        &create(
            &v1_35,
            CONFIG_MAPS,
            &config_map(json!({"name": "cm", "labels": {"a/b/c": "x"}})),
        )
        .await,
        &format!("ConfigMap \"cm\" is invalid: metadata.labels: {two_slashes}"),
        &[("FieldValueInvalid", "metadata.labels", two_slashes.as_str())],
    );
    // Names are checked by `util/validation` in every version: characters; the name label
    // the namespace is defaulted with, by `content`: bytes.
    let name_64 = "n".repeat(64);
    let name_too_long = invalid_value(&name_64, "must be no more than 63 characters");
    let label_too_long = invalid_value(&name_64, "must be no more than 63 bytes");
    assert_invalid(
        "v1.35 name",
        &create(&v1_35, NAMESPACES, &namespace(json!({"name": name_64}))).await,
        &format!(
            "Namespace \"{name_64}\" is invalid: [metadata.name: {name_too_long}, metadata.labels: {label_too_long}]"
        ),
        &[
            ("FieldValueInvalid", "metadata.name", &name_too_long),
            ("FieldValueInvalid", "metadata.labels", &label_too_long),
        ],
    );
    assert_invalid(
        "v1.35 annotations",
        &create(&v1_35, CONFIG_MAPS, &over).await,
        "ConfigMap \"over\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes",
        &[(
            "FieldValueTooLong",
            "metadata.annotations",
            "Too long: may not be more than 262144 bytes",
        )],
    );
}

fn is_generated(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|suffix| {
        suffix.len() == 5 && suffix.chars().all(|c| SUFFIX_ALPHABET.contains(c))
    })
}

#[tokio::test]
async fn generate_name_makes_a_valid_name_and_its_prefix_is_validated() {
    let api = FakeApiServer::start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(api.client());
    let mut generated: ConfigMap =
        serde_json::from_value(config_map(json!({"generateName": "journal-"})))
            .expect("config map");
    let made = maps
        .create(&PostParams::default(), &generated)
        .await
        .expect("create");
    assert!(
        is_generated(&made.name_any(), "journal-"),
        "{}",
        made.name_any()
    );
    assert_eq!(made.metadata.generate_name.as_deref(), Some("journal-"));

    // `names.SimpleNameGenerator`: a prefix over 58 bytes is cut so the name has 63.
    let long_prefix = format!("{}-", "a".repeat(69));
    generated.metadata.generate_name = Some(long_prefix.clone());
    let made = maps
        .create(&PostParams::default(), &generated)
        .await
        .expect("a long prefix is cut, not refused");
    assert_eq!(made.name_any().len(), 63);
    assert!(
        is_generated(&made.name_any(), &"a".repeat(58)),
        "{}",
        made.name_any()
    );
    assert_eq!(
        made.metadata.generate_name.as_deref(),
        Some(long_prefix.as_str())
    );

    // A namespace's prefix is a DNS label once its trailing '-' is allowed for; the generated
    // name gets the namespace's name label.
    let namespaces: Api<Namespace> = Api::all(api.client());
    let team: Namespace =
        serde_json::from_value(namespace(json!({"generateName": "team-"}))).expect("namespace");
    let made = namespaces
        .create(&PostParams::default(), &team)
        .await
        .expect("create");
    assert!(
        is_generated(&made.name_any(), "team-"),
        "{}",
        made.name_any()
    );
    assert_eq!(
        made.labels().get("kubernetes.io/metadata.name"),
        Some(&made.name_any())
    );

    // An uppercase prefix: the prefix and the name it made are both refused.
    let (code, status) = create(
        &api,
        NAMESPACES,
        &namespace(json!({"generateName": "Team-"})),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    let fields: Vec<String> = causes(&status).into_iter().map(|(_, f, _)| f).collect();
    assert_eq!(fields, ["metadata.generateName", "metadata.name"]);
    let name = status["details"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(is_generated(&name, "Team-"), "{name}");
    assert_eq!(
        status["message"],
        format!(
            "Namespace \"{name}\" is invalid: [metadata.generateName: {}, metadata.name: {}]",
            invalid_value("Team-", LABEL_RULE),
            invalid_value(&name, LABEL_RULE)
        )
    );

    // A namespace's prefix over 63 is refused although the name it makes is cut to 63.
    let long = format!("{}-", "a".repeat(70));
    let too_long = invalid_value(&long, "must be no more than 63 characters");
    let (code, status) = create(&api, NAMESPACES, &namespace(json!({"generateName": long}))).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        causes(&status),
        [(
            "FieldValueInvalid".to_owned(),
            "metadata.generateName".to_owned(),
            too_long
        )]
    );
}

/// Records the `name` of each AdmissionReview it gets for ConfigMaps, and allows.
struct NameRecorder {
    seen: Mutex<Vec<(Phase, Option<String>)>>,
}

impl AdmissionHook for NameRecorder {
    fn webhooks(
        &self,
        phase: Phase,
        attributes: &Attributes<'_>,
        _: &StoreView<'_>,
    ) -> Vec<Webhook> {
        if !std::ptr::eq(attributes.resource, &resources::CONFIG_MAPS) {
            return Vec::new();
        }
        vec![Webhook {
            name: format!("{phase:?}.names.example.io").to_lowercase(),
            phase,
            endpoint: String::new(),
            failure_policy: FailurePolicy::Fail,
        }]
    }

    fn call(
        &self,
        webhook: &Webhook,
        review: Value,
    ) -> BoxFuture<'static, Result<Value, CallError>> {
        let name = review["request"]["name"].as_str().map(str::to_owned);
        self.seen.lock().expect("seen").push((webhook.phase, name));
        Box::pin(async move {
            Ok(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": review["request"]["uid"], "allowed": true}}),
            )
        })
    }
}

/// The registry names a `generateName` object after mutating admission: mutating webhooks see
/// no name, validating ones the generated name; a name is validated after mutation.
#[tokio::test]
async fn generate_name_is_resolved_after_mutating_admission() {
    let api = FakeApiServer::start().await;
    let hook = Arc::new(NameRecorder {
        seen: Mutex::new(Vec::new()),
    });
    api.add_admission_hook(hook.clone());
    let (code, made) = create(
        &api,
        CONFIG_MAPS,
        &config_map(json!({"generateName": "journal-"})),
    )
    .await;
    assert_eq!(code, 201, "{made}");
    let name = made["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        *hook.seen.lock().expect("seen"),
        [(Phase::Mutating, None), (Phase::Validating, Some(name))]
    );
}

/// The same checks on every write of an existing object: replace, JSON merge, JSON and
/// strategic merge patches, and server-side apply. An update runs the generic checks twice
/// (`rest.BeforeUpdate`) and the type's strategy its own: the causes repeat, the message lists
/// the problem once.
#[tokio::test]
async fn updates_patches_and_applies_refuse_invalid_metadata() {
    let api = FakeApiServer::start().await;
    assert_eq!(
        create(
            &api,
            CONFIG_MAPS,
            &config_map(json!({"name": "cm", "labels": {"app": "web"}}))
        )
        .await
        .0,
        201
    );
    let long_value = "v".repeat(68);
    let too_long = invalid_value(&long_value, "must be no more than 63 characters");
    let message = format!("ConfigMap \"cm\" is invalid: metadata.labels: {too_long}");
    let cause = ("FieldValueInvalid", "metadata.labels", too_long.as_str());
    let item = format!("{CONFIG_MAPS}/cm");
    let apply = format!("{item}?fieldManager=tester");
    let mut replaced = api
        .get_object(&resources::CONFIG_MAPS, "default", "cm")
        .expect("stored");
    replaced["metadata"]["labels"]["team"] = json!(long_value);
    let writes: [(&str, &str, &str, &str, Value); 5] = [
        (
            "replace",
            "PUT",
            item.as_str(),
            "application/json",
            replaced,
        ),
        (
            "JSON merge patch",
            "PATCH",
            item.as_str(),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"team": long_value}}}),
        ),
        (
            "JSON patch",
            "PATCH",
            item.as_str(),
            "application/json-patch+json",
            json!([{"op": "add", "path": "/metadata/labels/team", "value": long_value}]),
        ),
        (
            "strategic merge patch",
            "PATCH",
            item.as_str(),
            "application/strategic-merge-patch+json",
            json!({"metadata": {"labels": {"team": long_value}}}),
        ),
        (
            "server-side apply",
            "PATCH",
            apply.as_str(),
            "application/apply-patch+yaml",
            config_map(json!({"name": "cm", "labels": {"team": long_value}})),
        ),
    ];
    for (what, method, path, content_type, body) in writes {
        let answer = send(&api, method, path, content_type, &body).await;
        // Generic (two), then `ValidateConfigMapUpdate`'s `ValidateObjectMetaUpdate` and
        // `ValidateConfigMap`.
        assert_invalid(what, &answer, &message, &[cause; 4]);
    }
    let stored = api
        .get_object(&resources::CONFIG_MAPS, "default", "cm")
        .expect("stored");
    assert_eq!(
        stored["metadata"]["labels"],
        json!({"app": "web"}),
        "nothing written"
    );

    // Apply creating an object checks it as a create does.
    let (code, status) = send(
        &api,
        "PATCH",
        &format!("{CONFIG_MAPS}/fresh?fieldManager=tester"),
        "application/apply-patch+yaml",
        &config_map(json!({"name": "fresh", "labels": {"Example.com/app": "web"}})),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        causes(&status),
        [(
            "FieldValueInvalid".to_owned(),
            "metadata.labels".to_owned(),
            invalid_value("Example.com/app", &format!("prefix part {SUBDOMAIN_RULE}"))
        )]
    );
    assert!(
        api.get_object(&resources::CONFIG_MAPS, "default", "fresh")
            .is_none()
    );

    // Annotations by apply: up to the limit, not over it.
    let annotated = |value: String| config_map(json!({"name": "cm", "annotations": {"k": value}}));
    let (code, status) = send(
        &api,
        "PATCH",
        &apply,
        "application/apply-patch+yaml",
        &annotated("x".repeat(262_143)),
    )
    .await;
    assert_eq!(code, 200, "{status}");
    let too_big = (
        "FieldValueTooLong",
        "metadata.annotations",
        "Too long: may not be more than 262144 bytes",
    );
    assert_invalid(
        "apply over the annotation limit",
        &send(
            &api,
            "PATCH",
            &apply,
            "application/apply-patch+yaml",
            &annotated("x".repeat(262_144)),
        )
        .await,
        "ConfigMap \"cm\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes",
        &[too_big; 4],
    );
}

/// How many times each type's update reports a metadata problem: the generic two and its
/// strategy's (`ValidateNamespace` + `ValidateNamespaceUpdate`; v1.27+
/// `ValidateStatefulSetUpdate` alone; a claim validated, then `ValidatePersistentVolumeClaimUpdate`
/// validating it again; a status write's `ValidateObjectMetaUpdate`; a budget's none).
#[tokio::test]
async fn each_type_validates_metadata_on_update_as_its_strategy_does() {
    let api = FakeApiServer::start().await;
    let value = "bad value";
    let bad = invalid_value(value, LABEL_VALUE_RULE);
    let patch = json!({"metadata": {"labels": {"app": value}}});
    let cases = [
        (
            "namespace",
            NAMESPACES,
            namespace(json!({"name": "ns"})),
            "ns",
            "",
            "Namespace",
            4,
        ),
        (
            "StatefulSet",
            STATEFULSETS,
            statefulset(json!({"name": "web"})),
            "web",
            "",
            "StatefulSet.apps",
            3,
        ),
        (
            "claim",
            CLAIMS,
            claim(json!({"name": "data"})),
            "data",
            "",
            "PersistentVolumeClaim",
            5,
        ),
        (
            "claim status",
            CLAIMS,
            claim(json!({"name": "logs"})),
            "logs",
            "/status",
            "PersistentVolumeClaim",
            3,
        ),
        (
            "budget",
            BUDGETS,
            budget(json!({"name": "pdb"})),
            "pdb",
            "",
            "PodDisruptionBudget.policy",
            2,
        ),
    ];
    for (what, collection, body, name, sub, kind, count) in cases {
        assert_eq!(create(&api, collection, &body).await.0, 201, "{what}");
        let answer = send(
            &api,
            "PATCH",
            &format!("{collection}/{name}{sub}"),
            "application/merge-patch+json",
            &patch,
        )
        .await;
        let want = vec![("FieldValueInvalid", "metadata.labels", bad.as_str()); count];
        assert_invalid(
            what,
            &answer,
            &format!("{kind} \"{name}\" is invalid: metadata.labels: {bad}"),
            &want,
        );
    }
}
