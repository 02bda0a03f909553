//! Decoding an AdmissionReview body in one pass over its bytes.
//!
//! kube's `AdmissionReview<DynamicObject>` derives its decoder with `#[serde(flatten)]` (for
//! the review's `apiVersion`/`kind` and twice inside every `DynamicObject`), which makes serde
//! buffer the whole document into an intermediate tree and walk it again; going through a
//! `serde_json::Value` first doubles that once more. Here the envelope is read with the
//! objects left as borrowed raw JSON (checked, not copied), and each object is then decoded
//! straight into a `DynamicObject`: `apiVersion`/`kind` into its type fields, `metadata` into
//! the typed `ObjectMeta`, every other key into `data`.
//!
//! The rules read managedFields of PersistentVolumeClaims only (who set
//! `spec.storageClassName`); for every other resource they are skipped while decoding, which
//! is most of the work for a StatefulSet. The result is otherwise what kube's decoder gives
//! (a test and the fuzz harness compare the two).

use std::fmt;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};
use serde::de::{self, DeserializeSeed, IgnoredAny, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::offline::BadReview;

/// The resource whose rules read managedFields.
const KEEPS_MANAGED_FIELDS: (&str, &str) = ("", "persistentvolumeclaims");

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<'a> {
    api_version: String,
    kind: String,
    /// `None` when absent or not an object; decoded in the same pass otherwise.
    #[serde(default, borrow, deserialize_with = "request_if_object")]
    request: Option<Request<'a>>,
}

fn request_if_object<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Request<'de>>, D::Error> {
    IfObject(std::marker::PhantomData::<Request<'de>>).deserialize(d)
}

/// Decodes a JSON object with the seed `S`; any other value is read past and gives `None`, so
/// that the caller names the mistake rather than serde.
struct IfObject<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for IfObject<S> {
    type Value = Option<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for IfObject<S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0
            .deserialize(de::value::MapAccessDeserializer::new(map))
            .map(Some)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// `AdmissionRequest` with its objects still raw.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<GroupVersionResource>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: UserInfo,
    #[serde(default, borrow)]
    object: Option<&'a RawValue>,
    #[serde(default, borrow)]
    old_object: Option<&'a RawValue>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    options: Option<RawExtension>,
}

/// Just the request uid, to name the request in an error about the rest of it.
#[derive(Deserialize)]
struct UidOnly {
    request: Option<UidOnlyRequest>,
}

#[derive(Deserialize)]
struct UidOnlyRequest {
    uid: Option<String>,
}

/// A review that could not be decoded, with the request uid when it could be read.
#[derive(Debug)]
pub struct DecodeError {
    pub error: BadReview,
    pub uid: Option<String>,
}

/// Decodes an AdmissionReview body that must carry a `request`.
pub fn decode_review(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, DecodeError> {
    let fail = |error, uid| DecodeError { error, uid };
    // Checked whole first: serde_json does not check the UTF-8 of strings it reads past (an
    // unknown field's value), and JSON is UTF-8 throughout. Found by the fuzzer.
    let body = std::str::from_utf8(body)
        .map_err(|e| fail(BadReview::NotJson(format!("not UTF-8: {e}")), None))?;
    let envelope: Envelope<'_> = serde_json::from_str(body).map_err(|e| {
        // serde_json reports some type errors (an enum given a number) as syntax errors; only
        // a body that does not parse at all is "not JSON". Only on this error path: the body
        // is read again, for its syntax and for nothing but the uid.
        let is_json = serde_json::from_str::<IgnoredAny>(body).is_ok();
        let error = if is_json {
            BadReview::Decode(e.to_string())
        } else {
            BadReview::NotJson(e.to_string())
        };
        let uid = serde_json::from_str::<UidOnly>(body)
            .ok()
            .and_then(|u| u.request)
            .and_then(|r| r.uid);
        fail(error, uid)
    })?;
    let Some(raw) = envelope.request else {
        return Err(fail(BadReview::NoRequest, None));
    };
    let keep_managed_fields = keeps_managed_fields(&raw.resource);
    let object = |field: &str, raw_object: Option<&RawValue>| {
        raw_object
            .map(|o| decode_object(o.get(), keep_managed_fields))
            .transpose()
            .map_err(|e| BadReview::Decode(format!("request.{field}: {e}")))
    };
    let uid = || Some(raw.uid.clone());
    let new = object("object", raw.object).map_err(|e| fail(e, uid()))?;
    let old = object("oldObject", raw.old_object).map_err(|e| fail(e, uid()))?;
    Ok(AdmissionRequest {
        types: TypeMeta {
            api_version: envelope.api_version,
            kind: envelope.kind,
        },
        uid: raw.uid,
        kind: raw.kind,
        resource: raw.resource,
        sub_resource: raw.sub_resource,
        request_kind: raw.request_kind,
        request_resource: raw.request_resource,
        request_sub_resource: raw.request_sub_resource,
        name: raw.name,
        namespace: raw.namespace,
        operation: raw.operation,
        user_info: raw.user_info,
        object: new,
        old_object: old,
        dry_run: raw.dry_run,
        options: raw.options,
    })
}

fn keeps_managed_fields(resource: &GroupVersionResource) -> bool {
    (resource.group.as_str(), resource.resource.as_str()) == KEEPS_MANAGED_FIELDS
}

/// An object of a review held as a JSON value (an object patched offline), decoded as
/// [`decode_review`] decodes the request's objects.
pub fn object_from_value(
    object: &Value,
    resource: &GroupVersionResource,
) -> Result<DynamicObject, String> {
    let json = serde_json::to_string(object).map_err(|e| e.to_string())?;
    decode_object(&json, keeps_managed_fields(resource))
}

/// One object of a review. An object must have `metadata` (never missing from what the
/// apiserver sends): the rules patch paths under it.
fn decode_object(json: &str, keep_managed_fields: bool) -> Result<DynamicObject, String> {
    if !json.starts_with('{') {
        return Err(NO_META.to_owned());
    }
    let mut de = serde_json::Deserializer::from_str(json);
    let object = ObjectSeed {
        keep_managed_fields,
    }
    .deserialize(&mut de)
    .map_err(|e| {
        // Our own error (see `ObjectSeed`); serde's messages start otherwise ("invalid
        // type: …", "missing field …").
        if e.classify() == serde_json::error::Category::Data && e.to_string().starts_with(NO_META) {
            NO_META.to_owned()
        } else {
            e.to_string()
        }
    })?;
    de.end().map_err(|e| e.to_string())?;
    Ok(object)
}

const NO_META: &str = "metadata must be an object";

struct ObjectSeed {
    keep_managed_fields: bool,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed {
    type Value = DynamicObject;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<DynamicObject, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed {
    type Value = DynamicObject;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(NO_META)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DynamicObject, A::Error> {
        let mut api_version: Option<Value> = None;
        let mut kind: Option<Value> = None;
        let mut metadata: Option<ObjectMeta> = None;
        let mut data = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "apiVersion" => api_version = Some(map.next_value()?),
                "kind" => kind = Some(map.next_value()?),
                "metadata" => {
                    let seed = IfObject(MetaSeed {
                        keep_managed_fields: self.keep_managed_fields,
                    });
                    // Any other type is our own error (see `decode_object`), not serde's.
                    let meta = map.next_value_seed(seed)?;
                    metadata = Some(meta.ok_or_else(|| de::Error::custom(NO_META))?);
                }
                _ => {
                    let value = map.next_value()?;
                    data.insert(key, value);
                }
            }
        }
        let metadata = metadata.ok_or_else(|| de::Error::custom(NO_META))?;
        // As kube's `#[serde(flatten)] types: Option<TypeMeta>`: set when both are strings;
        // otherwise none, and (as kube mostly does) they are not kept among the other keys.
        let types = match (api_version, kind) {
            (Some(Value::String(api_version)), Some(Value::String(kind))) => {
                Some(TypeMeta { api_version, kind })
            }
            _ => None,
        };
        Ok(DynamicObject {
            types,
            metadata,
            data: Value::Object(data),
        })
    }
}

/// `metadata`, an object, optionally without its managedFields.
struct MetaSeed {
    keep_managed_fields: bool,
}

impl<'de> DeserializeSeed<'de> for MetaSeed {
    type Value = ObjectMeta;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ObjectMeta, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed {
    type Value = ObjectMeta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(NO_META)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ObjectMeta, A::Error> {
        let map = WithoutManagedFields {
            inner: map,
            skip: !self.keep_managed_fields,
        };
        ObjectMeta::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

/// A map that hides its `managedFields` entry (read past, never decoded) when `skip`.
struct WithoutManagedFields<A> {
    inner: A,
    skip: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for WithoutManagedFields<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(key) = self.inner.next_key::<String>()? else {
                return Ok(None);
            };
            if self.skip && key == "managedFields" {
                self.inner.next_value::<IgnoredAny>()?;
                continue;
            }
            return seed.deserialize(key.into_deserializer()).map(Some);
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.inner.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::admission::AdmissionReview;
    use serde_json::json;

    /// kube's own decoder, for comparison.
    fn kube_decode(review: &Value) -> AdmissionRequest<DynamicObject> {
        AdmissionReview::<DynamicObject>::deserialize(review)
            .expect("kube decodes")
            .try_into()
            .expect("has a request")
    }

    fn strip_managed_fields(req: &mut AdmissionRequest<DynamicObject>) {
        for o in [req.object.as_mut(), req.old_object.as_mut()]
            .into_iter()
            .flatten()
        {
            o.metadata.managed_fields = None;
        }
    }

    /// Equal, but for type fields that are not both strings: kube keeps one or the other in
    /// `data` depending on key order; we keep neither.
    fn same(a: &AdmissionRequest<DynamicObject>, b: &AdmissionRequest<DynamicObject>) -> bool {
        let plain = |r: &AdmissionRequest<DynamicObject>| {
            let mut r = r.clone();
            for o in [r.object.as_mut(), r.old_object.as_mut()]
                .into_iter()
                .flatten()
            {
                if let Some(data) = o.data.as_object_mut() {
                    data.remove("apiVersion");
                    data.remove("kind");
                }
            }
            serde_json::to_value(&r).ok()
        };
        plain(a) == plain(b) && a.types == b.types
    }

    fn fixtures() -> Vec<(String, Value)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut out = Vec::new();
        let mut stack: Vec<_> = ["tests/fixtures", "benches/fixtures", "examples/reviews"]
            .iter()
            .map(|d| root.join(d))
            .collect();
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).expect("fixtures dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "json") {
                    let text = std::fs::read_to_string(&path).expect("fixture");
                    if let Ok(v) = serde_json::from_str::<Value>(&text)
                        && v.get("request").is_some_and(Value::is_object)
                    {
                        out.push((path.display().to_string(), v));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_fixture_decodes_as_kube_decodes_it() {
        let all = fixtures();
        assert!(all.len() >= 12, "fixtures found: {}", all.len());
        let mut managed_dropped = 0;
        for (name, review) in all {
            let body = serde_json::to_vec(&review).expect("json");
            let mut ours = decode_review(&body).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            let mut theirs = kube_decode(&review);
            if theirs.resource.resource == "persistentvolumeclaims" {
                assert!(same(&ours, &theirs), "{name}");
            } else {
                let had = theirs
                    .object
                    .as_ref()
                    .is_some_and(|o| o.metadata.managed_fields.is_some());
                managed_dropped += usize::from(had);
                assert!(
                    ours.object
                        .as_ref()
                        .is_none_or(|o| o.metadata.managed_fields.is_none()),
                    "{name}: managedFields skipped"
                );
                strip_managed_fields(&mut theirs);
                strip_managed_fields(&mut ours);
                assert!(same(&ours, &theirs), "{name}");
            }
        }
        assert!(managed_dropped > 0, "some fixture exercises the skip");
    }

    fn review(object: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
            "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
            "name": "data-web-0", "namespace": "default", "operation": "CREATE",
            "userInfo": {}, "object": object, "oldObject": null}})
    }

    fn error_of(body: &[u8]) -> (String, Option<String>) {
        let e = decode_review(body).expect_err("must not decode");
        (e.error.to_string(), e.uid)
    }

    #[test]
    fn malformed_reviews_are_told_apart() {
        let (e, uid) = error_of(b"{nope");
        assert!(e.starts_with("not JSON: "), "{e}");
        assert_eq!(uid, None);
        let (e, _) = error_of(b"{\"apiVersion\": \"v\", \"kind\": \"k\"} trailing");
        assert!(e.starts_with("not JSON: "), "{e}");
        // Invalid UTF-8 where nothing reads it: an unknown field's value.
        let mut body = serde_json::to_vec(&review(json!({"metadata": {}}))).expect("json");
        let at = body.len() - 1;
        body.splice(at..at, br#","unknown":"\xff""#.iter().copied());
        let pos = body.windows(4).position(|w| w == br"\xff").expect("marker");
        body.splice(pos..pos + 4, [0xff]);
        let (e, _) = error_of(&body);
        assert!(e.starts_with("not JSON: not UTF-8"), "{e}");
        for body in [
            &br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#[..],
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":[1]}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"x"}"#,
        ] {
            assert_eq!(
                error_of(body).0,
                "not an AdmissionReview with a request",
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let mut no_version = review(json!({"metadata": {}}));
        no_version.as_object_mut().map(|r| r.remove("apiVersion"));
        let (e, uid) = error_of(&serde_json::to_vec(&no_version).expect("json"));
        assert!(e.contains("missing field `apiVersion`"), "{e}");
        assert_eq!(uid.as_deref(), Some("u-1"));
        for operation in ["5", "[]", "\"NUKE\""] {
            let body = format!(
                r#"{{"apiVersion":"v1","kind":"AdmissionReview","request":{{"uid":"u-9","operation":{operation}}}}}"#
            );
            let (e, uid) = error_of(body.as_bytes());
            assert!(e.starts_with("malformed AdmissionReview: "), "{e}");
            assert_eq!(uid.as_deref(), Some("u-9"));
        }
    }

    #[test]
    fn an_object_must_have_metadata() {
        for object in [
            json!({"spec": {}}),
            json!({"metadata": "x"}),
            json!({"metadata": null}),
            json!([1]),
            json!("x"),
        ] {
            let body = serde_json::to_vec(&review(object.clone())).expect("json");
            let (e, uid) = error_of(&body);
            assert_eq!(
                e, "malformed AdmissionReview: request.object: metadata must be an object",
                "{object}"
            );
            assert_eq!(uid.as_deref(), Some("u-1"));
        }
        let mut bad_old = review(json!({"metadata": {}}));
        bad_old["request"]["oldObject"] = json!({"spec": 1});
        let (e, _) = error_of(&serde_json::to_vec(&bad_old).expect("json"));
        assert_eq!(
            e,
            "malformed AdmissionReview: request.oldObject: metadata must be an object"
        );
        let (e, _) = error_of(
            &serde_json::to_vec(&review(json!({"metadata": {"labels": {"a": 1}}}))).expect("json"),
        );
        assert!(
            e.starts_with("malformed AdmissionReview: request.object: "),
            "{e}"
        );
    }

    #[test]
    fn objects_decode_like_kube_dynamic_objects() {
        for object in [
            Value::Null,
            json!({"metadata": {"name": "n"}}),
            json!({"apiVersion": "v1", "metadata": {}, "spec": {"a": 1}}),
            json!({"kind": "PersistentVolumeClaim", "metadata": {}, "status": {}}),
            json!({"apiVersion": 1, "kind": "K", "metadata": {"name": "n"}}),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
                "name": "n", "labels": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:storageClassName": {}}}}]
            }, "spec": {"storageClassName": "x"}}),
        ] {
            let review = review(object.clone());
            let body = serde_json::to_vec(&review).expect("json");
            let ours = decode_review(&body).expect("decodes");
            assert!(same(&ours, &kube_decode(&review)), "{object}");
        }
    }

    #[test]
    fn managed_fields_are_skipped_except_for_claims() {
        let meta = json!({"name": "web", "managedFields": [{"manager": "m", "operation": "Update",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]});
        let mut set =
            review(json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta}));
        set["request"]["resource"] =
            json!({"group": "apps", "version": "v1", "resource": "statefulsets"});
        let decoded = decode_review(&serde_json::to_vec(&set).expect("json")).expect("decodes");
        let object = decoded.object.expect("object");
        assert_eq!(object.metadata.managed_fields, None);
        assert_eq!(object.metadata.name.as_deref(), Some("web"));

        let claim = review(json!({"metadata": meta}));
        let decoded = decode_review(&serde_json::to_vec(&claim).expect("json")).expect("decodes");
        let fields = decoded.object.expect("object").metadata.managed_fields;
        assert_eq!(fields.map(|f| f.len()), Some(1));
    }
}
