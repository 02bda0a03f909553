//! Decoding an AdmissionReview body in one pass over its bytes.
//!
//! kube's `AdmissionReview<DynamicObject>` derives its decoder with `#[serde(flatten)]` (for
//! the review's `apiVersion`/`kind` and twice inside every `DynamicObject`), which makes serde
//! buffer the whole document into an intermediate tree and walk it again; going through a
//! `serde_json::Value` first doubles that once more. Here the envelope and its objects are
//! read in the same pass: each object straight into a `DynamicObject` (`apiVersion`/`kind`
//! into its type fields, `metadata` into the typed `ObjectMeta`, every other key into `data`).
//!
//! Parts of an object that only some resources' rules read are kept as borrowed raw JSON
//! (checked, not copied) while reading, and built once the request's resource is known
//! ([`Reads`]): managedFields are read for PersistentVolumeClaims only (who set
//! `spec.storageClassName`); a StatefulSet's pod template and status are read by no rule.
//! For a StatefulSet those are most of the document. The result is otherwise what kube's
//! decoder gives (a test and the fuzz harness compare the two, after [`forget_unread`]).
//!
//! A body this pass cannot decode is decoded again the slow way (envelope first, then each
//! object on its own), which names the mistake and the object it is in.

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

use super::BadReview;
use crate::admission::Route;

/// What the rules read of an object besides the rest of it, by the review's resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reads {
    /// `metadata.managedFields`: who set a claim's `spec.storageClassName`.
    managed_fields: bool,
    /// `spec.template` (a StatefulSet's pod template).
    pod_template: bool,
    /// `status` (a claim's capacity, allocation and conditions).
    status: bool,
}

impl Reads {
    fn of(resource: &GroupVersionResource) -> Self {
        match (resource.group.as_str(), resource.resource.as_str()) {
            ("", "persistentvolumeclaims") => Reads {
                managed_fields: true,
                pod_template: true,
                status: true,
            },
            // The StatefulSet rules read metadata, replicas, ordinals, the update strategy and
            // the claim templates; the pod template and status are half of a set's JSON.
            ("apps", "statefulsets") => Reads {
                managed_fields: false,
                pod_template: false,
                status: false,
            },
            _ => Reads {
                managed_fields: false,
                pod_template: true,
                status: true,
            },
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound(deserialize = "O: Deserialize<'de>"))]
struct Envelope<O> {
    api_version: String,
    kind: String,
    /// `None` when absent or not an object; decoded in the same pass otherwise.
    #[serde(default, deserialize_with = "request_if_object")]
    request: Option<Request<O>>,
}

fn request_if_object<'de, D: Deserializer<'de>, O: Deserialize<'de>>(
    d: D,
) -> Result<Option<Request<O>>, D::Error> {
    IfObject(std::marker::PhantomData::<Request<O>>).deserialize(d)
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

/// `AdmissionRequest` with its objects as `O`: decoded in the same pass ([`Lazy`]), or raw.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound(deserialize = "O: Deserialize<'de>"))]
struct Request<O> {
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
    #[serde(default)]
    object: Option<O>,
    #[serde(default)]
    old_object: Option<O>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    options: Option<RawExtension>,
}

impl<O> Request<O> {
    /// The request, each object finished by `object(object, what the rules read)`.
    fn finish(
        self,
        types: TypeMeta,
        object: impl Fn(O, Reads) -> Result<DynamicObject, String>,
    ) -> Result<AdmissionRequest<DynamicObject>, DecodeError> {
        let reads = Reads::of(&self.resource);
        // The objects of a request no rule handles are not built, nor required to be
        // Kubernetes objects (a CONNECT carries options without metadata).
        let handled = Route::of(
            &self.resource,
            self.sub_resource.as_deref(),
            &self.operation,
        )
        .is_some();
        let uid = &self.uid;
        let object = |field: &str, o: Option<O>| {
            o.filter(|_| handled)
                .map(|o| object(o, reads))
                .transpose()
                .map_err(|e| DecodeError {
                    error: BadReview::Decode(format!("request.{field}: {e}")),
                    uid: Some(uid.clone()),
                })
        };
        let new = object("object", self.object)?;
        let old = object("oldObject", self.old_object)?;
        Ok(AdmissionRequest {
            types,
            uid: self.uid,
            kind: self.kind,
            resource: self.resource,
            sub_resource: self.sub_resource,
            request_kind: self.request_kind,
            request_resource: self.request_resource,
            request_sub_resource: self.request_sub_resource,
            name: self.name,
            namespace: self.namespace,
            operation: self.operation,
            user_info: self.user_info,
            object: new,
            old_object: old,
            dry_run: self.dry_run,
            options: self.options,
        })
    }
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
    // Checked whole first: serde_json does not check the UTF-8 of strings it reads past (an
    // unknown field's value), and JSON is UTF-8 throughout. Found by the fuzzer.
    let body = std::str::from_utf8(body).map_err(|e| DecodeError {
        error: BadReview::NotJson(format!("not UTF-8: {e}")),
        uid: None,
    })?;
    if let Ok(Envelope {
        api_version,
        kind,
        request: Some(request),
    }) = serde_json::from_str::<Envelope<Lazy<'_>>>(body)
        && let Ok(req) = request.finish(TypeMeta { api_version, kind }, |o, reads| {
            o.finish(reads).map_err(|e| e.to_string())
        })
    {
        return Ok(req);
    }
    decode_review_slowly(body)
}

/// The envelope first with its objects raw, then each object: slower than [`decode_review`],
/// used to tell what is wrong with a body that one could not decode.
fn decode_review_slowly(body: &str) -> Result<AdmissionRequest<DynamicObject>, DecodeError> {
    let envelope: Envelope<&RawValue> = serde_json::from_str(body).map_err(|e| {
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
        DecodeError { error, uid }
    })?;
    let Some(request) = envelope.request else {
        return Err(DecodeError {
            error: BadReview::NoRequest,
            uid: None,
        });
    };
    let types = TypeMeta {
        api_version: envelope.api_version,
        kind: envelope.kind,
    };
    request.finish(types, |raw, reads| decode_object(raw.get(), reads))
}

/// An object of a review held as a JSON value (an object patched offline), decoded as
/// [`decode_review`] decodes the request's objects.
pub fn object_from_value(
    object: &Value,
    resource: &GroupVersionResource,
) -> Result<DynamicObject, String> {
    let json = serde_json::to_string(object).map_err(|e| e.to_string())?;
    decode_object(&json, Reads::of(resource))
}

/// Where a set's pod template is read past, the key under `spec` that holds a digest of its
/// text instead (no field of the API has a `/` in its name).
pub const TEMPLATE_DIGEST: &str = "stateful-admission.io/template-digest";

fn digest(text: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Whether `old` and `new` (a set's specs as decoded) have different pod templates: by their
/// digests where the templates were read past, else by value.
pub fn pod_template_changed(old: &Value, new: &Value) -> bool {
    match (old.get(TEMPLATE_DIGEST), new.get(TEMPLATE_DIGEST)) {
        (Some(a), Some(b)) => a != b,
        _ => old.get("template") != new.get("template"),
    }
}

/// Removes from a request another decoder gave what [`decode_review`] does not keep for the
/// request's resource, to compare the two (and from ours, the digest it keeps instead).
#[doc(hidden)]
pub fn forget_unread(req: &mut AdmissionRequest<DynamicObject>) {
    if Route::of_request(req).is_none() {
        req.object = None;
        req.old_object = None;
        return;
    }
    let reads = Reads::of(&req.resource);
    for o in [req.object.as_mut(), req.old_object.as_mut()]
        .into_iter()
        .flatten()
    {
        if !reads.managed_fields {
            o.metadata.managed_fields = None;
        }
        let Some(data) = o.data.as_object_mut() else {
            continue;
        };
        if !reads.status {
            data.remove("status");
        }
        if let Some(spec) = data.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove(TEMPLATE_DIGEST);
            if !reads.pod_template {
                spec.remove("template");
            }
        }
    }
}

/// One object of a review, on its own. An object must have `metadata` (never missing from
/// what the apiserver sends): the rules patch paths under it.
fn decode_object(json: &str, reads: Reads) -> Result<DynamicObject, String> {
    if !json.starts_with('{') {
        return Err(NO_META.to_owned());
    }
    let mut de = serde_json::Deserializer::from_str(json);
    let object = Lazy::deserialize(&mut de).map_err(|e| {
        // Our own error (see `Lazy`); serde's messages start otherwise ("invalid type: …",
        // "missing field …").
        if e.classify() == serde_json::error::Category::Data && e.to_string().starts_with(NO_META) {
            NO_META.to_owned()
        } else {
            e.to_string()
        }
    })?;
    de.end().map_err(|e| e.to_string())?;
    object.finish(reads).map_err(|e| e.to_string())
}

const NO_META: &str = "metadata must be an object";

/// An object read but for the parts only some resources' rules read ([`Reads`]), which are
/// kept as the raw JSON they were in the body until [`Lazy::finish`].
struct Lazy<'a> {
    object: DynamicObject,
    managed_fields: Option<&'a RawValue>,
    pod_template: Option<&'a RawValue>,
    status: Option<&'a RawValue>,
}

impl Lazy<'_> {
    /// The object with what `reads` asks for built from the raw parts.
    fn finish(self, reads: Reads) -> Result<DynamicObject, serde_json::Error> {
        let Lazy {
            mut object,
            managed_fields,
            pod_template,
            status,
        } = self;
        if reads.managed_fields
            && let Some(raw) = managed_fields
        {
            object.metadata.managed_fields = serde_json::from_str(raw.get())?;
        }
        let data = object.data.as_object_mut();
        if reads.status
            && let (Some(raw), Some(data)) = (status, data)
        {
            data.insert("status".to_owned(), serde_json::from_str(raw.get())?);
        }
        if let Some(raw) = pod_template
            && let Some(spec) = object.data.get_mut("spec").and_then(Value::as_object_mut)
        {
            if reads.pod_template {
                spec.insert("template".to_owned(), serde_json::from_str(raw.get())?);
            } else {
                // Read past, but whether it changed is known: the apiserver encodes the old
                // and the new object alike, so the same template is the same text.
                spec.insert(TEMPLATE_DIGEST.to_owned(), Value::from(digest(raw.get())));
            }
        }
        Ok(object)
    }
}

impl<'de> Deserialize<'de> for Lazy<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Lazy<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(NO_META)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Lazy<'de>, A::Error> {
        let mut api_version: Option<Value> = None;
        let mut kind: Option<Value> = None;
        let mut metadata: Option<(ObjectMeta, Option<&'de RawValue>)> = None;
        let mut pod_template = None;
        let mut status = None;
        let mut data = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "apiVersion" => api_version = Some(map.next_value()?),
                "kind" => kind = Some(map.next_value()?),
                "metadata" => {
                    // Any other type is our own error (see `decode_object`), not serde's.
                    let meta = map.next_value_seed(IfObject(MetaSeed))?;
                    metadata = Some(meta.ok_or_else(|| de::Error::custom(NO_META))?);
                }
                "status" => status = Some(map.next_value()?),
                "spec" => {
                    let (spec, template) = map.next_value_seed(SpecSeed)?;
                    data.insert(key, spec);
                    pod_template = template;
                }
                _ => {
                    let value = map.next_value()?;
                    data.insert(key, value);
                }
            }
        }
        let (metadata, managed_fields) = metadata.ok_or_else(|| de::Error::custom(NO_META))?;
        // As kube's `#[serde(flatten)] types: Option<TypeMeta>`: set when both are strings;
        // otherwise none, and (as kube mostly does) they are not kept among the other keys.
        let types = match (api_version, kind) {
            (Some(Value::String(api_version)), Some(Value::String(kind))) => {
                Some(TypeMeta { api_version, kind })
            }
            _ => None,
        };
        Ok(Lazy {
            object: DynamicObject {
                types,
                metadata,
                data: Value::Object(data),
            },
            managed_fields,
            pod_template,
            status,
        })
    }
}

/// `metadata`, an object, with its managedFields kept raw.
struct MetaSeed;

impl<'de> DeserializeSeed<'de> for MetaSeed {
    type Value = (ObjectMeta, Option<&'de RawValue>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed {
    type Value = (ObjectMeta, Option<&'de RawValue>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(NO_META)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut map = WithoutManagedFields {
            inner: map,
            managed_fields: None,
        };
        let meta = ObjectMeta::deserialize(de::value::MapAccessDeserializer::new(&mut map))?;
        Ok((meta, map.managed_fields))
    }
}

/// A map that hides its `managedFields` entry, keeping it raw.
struct WithoutManagedFields<'de, A> {
    inner: A,
    managed_fields: Option<&'de RawValue>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for WithoutManagedFields<'de, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(key) = self.inner.next_key::<String>()? else {
                return Ok(None);
            };
            if key == "managedFields" {
                self.managed_fields = Some(self.inner.next_value()?);
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

/// `spec` as a JSON value; when `spec` is an object, its `template` is kept raw instead.
struct SpecSeed;

impl<'de> DeserializeSeed<'de> for SpecSeed {
    type Value = (Value, Option<&'de RawValue>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SpecSeed {
    type Value = (Value, Option<&'de RawValue>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut spec = Map::new();
        let mut template = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "template" {
                template = Some(map.next_value()?);
            } else {
                let value = map.next_value()?;
                spec.insert(key, value);
            }
        }
        Ok((Value::Object(spec), template))
    }

    // Any other value, as `serde_json::Value` builds it.
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let value = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok((value, None))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((Value::Null, None))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok((Value::from(v), None))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok((Value::from(v), None))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok((Value::from(v), None))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok((Value::from(v), None))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok((Value::from(v), None))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok((Value::from(v), None))
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

    /// A captured review (tests/fixtures/apiserver-behaviour) with its placeholders for values
    /// that change from run to run (`<uid>`, `<time>`, `<resourceVersion>`) filled in.
    fn filled(text: &str) -> String {
        text.replace("<uid>", "6f2d9c5e-1111-4a3b-9c2d-0123456789ab")
            .replace("<time>", "2026-01-01T00:00:00Z")
            .replace("<resourceVersion>", "1")
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
                    let text = filled(&std::fs::read_to_string(&path).expect("fixture"));
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
        let (mut claims, mut sets_trimmed, mut unhandled) = (0, 0, 0);
        for (name, review) in all {
            let body = serde_json::to_vec(&review).expect("json");
            let ours = decode_review(&body).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            let slow = decode_review_slowly(std::str::from_utf8(&body).expect("utf-8"))
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert!(same(&ours, &slow), "{name}: both ways agree");
            if Route::of_request(&ours).is_none() {
                // Options objects (PodExecOptions) are no DynamicObject for kube either.
                assert!(ours.object.is_none() && ours.old_object.is_none(), "{name}");
                unhandled += 1;
                continue;
            }
            let mut theirs = kube_decode(&review);
            if theirs.resource.resource == "persistentvolumeclaims" {
                claims += 1;
                assert!(same(&ours, &theirs), "{name}: a claim is decoded whole");
                continue;
            }
            let whole = theirs.clone();
            forget_unread(&mut theirs);
            let mut ours = ours;
            forget_unread(&mut ours);
            assert!(same(&ours, &theirs), "{name}");
            if theirs.resource.resource == "statefulsets" && !same(&whole, &theirs) {
                sets_trimmed += 1;
                let object = ours.object.as_ref().expect("a set");
                assert_eq!(object.metadata.managed_fields, None, "{name}");
                assert_eq!(object.data.get("status"), None, "{name}");
                assert_eq!(object.data["spec"].get("template"), None, "{name}");
            }
        }
        assert!(
            claims > 0 && sets_trimmed > 0 && unhandled > 0,
            "{claims} {sets_trimmed} {unhandled}"
        );
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

    /// What the apiserver sends for `kubectl exec`: a CONNECT of `pods/exec` whose object is
    /// `PodExecOptions`, with no metadata.
    fn connect_exec() -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-exec", "kind": {"group": "", "version": "v1", "kind": "PodExecOptions"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "exec",
            "requestKind": {"group": "", "version": "v1", "kind": "PodExecOptions"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "requestSubResource": "exec",
            "name": "web-0", "namespace": "default", "operation": "CONNECT",
            "userInfo": {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]},
            "object": {"kind": "PodExecOptions", "apiVersion": "v1", "stdin": true, "stdout": true,
                       "tty": true, "container": "app", "command": ["sh"]},
            "oldObject": null, "dryRun": false, "options": null}})
    }

    #[test]
    fn unhandled_requests_need_no_kubernetes_objects() {
        let mut cases = vec![("CONNECT pods/exec".to_owned(), connect_exec())];
        // The same resources the rules handle, with a subresource or another operation.
        for (sub, operation) in [
            (Some("status"), "UPDATE"),
            (Some("scale"), "UPDATE"),
            (None, "DELETE"),
            (None, "CONNECT"),
        ] {
            for object in [json!({"spec": {}}), json!([1]), json!("x"), json!(7)] {
                let mut r = with_resource(review(object.clone()), "apps", "statefulsets");
                r["request"]["operation"] = json!(operation);
                r["request"]["oldObject"] = object.clone();
                if let Some(sub) = sub {
                    r["request"]["subResource"] = json!(sub);
                }
                cases.push((format!("{sub:?} {operation} {object}"), r));
            }
        }
        for (what, review) in cases {
            let decoded = decode_review(&serde_json::to_vec(&review).expect("json"))
                .unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!(decoded.uid, review["request"]["uid"], "{what}");
            assert!(
                decoded.object.is_none() && decoded.old_object.is_none(),
                "{what}"
            );
        }
        // A body that is not JSON is still refused, handled or not.
        let mut body = serde_json::to_string(&connect_exec()).expect("json");
        body = body.replace(r#""stdin":true"#, r#""stdin"::true"#);
        assert!(error_of(body.as_bytes()).0.starts_with("not JSON: "));
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

    fn with_resource(mut review: Value, group: &str, resource: &str) -> Value {
        review["request"]["resource"] =
            json!({"group": group, "version": "v1", "resource": resource});
        review
    }

    #[test]
    fn managed_fields_are_skipped_except_for_claims() {
        let meta = json!({"name": "web", "managedFields": [{"manager": "m", "operation": "Update",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]});
        let set = with_resource(
            review(json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta})),
            "apps",
            "statefulsets",
        );
        let decoded = decode_review(&serde_json::to_vec(&set).expect("json")).expect("decodes");
        let object = decoded.object.expect("object");
        assert_eq!(object.metadata.managed_fields, None);
        assert_eq!(object.metadata.name.as_deref(), Some("web"));

        let claim = review(json!({"metadata": meta}));
        let decoded = decode_review(&serde_json::to_vec(&claim).expect("json")).expect("decodes");
        let fields = decoded.object.expect("object").metadata.managed_fields;
        assert_eq!(fields.map(|f| f.len()), Some(1));
        // A claim's managedFields that are not what the API defines fail it, as with kube.
        let bad = review(json!({"metadata": {"managedFields": "x"}}));
        let (e, uid) = error_of(&serde_json::to_vec(&bad).expect("json"));
        assert!(
            e.starts_with("malformed AdmissionReview: request.object: invalid type"),
            "{e}"
        );
        assert_eq!(uid.as_deref(), Some("u-1"));
    }

    #[test]
    fn a_sets_pod_template_and_status_are_read_past() {
        let object = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "managedFields": [{"manager": "m"}]},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"}}]},
            "status": {"replicas": 3}});
        let set = with_resource(review(object.clone()), "apps", "statefulsets");
        let decoded = decode_review(&serde_json::to_vec(&set).expect("json")).expect("decodes");
        let data = decoded.object.expect("object").data;
        assert_eq!(
            data,
            json!({"spec": {"replicas": 3,
                TEMPLATE_DIGEST: digest(r#"{"spec":{"containers":[{"name":"c"}]}}"#),
                "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}})
        );
        // What is read past still tells a changed template from the same one.
        let mut changed = object.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("db:2");
        let changed = with_resource(review(changed), "apps", "statefulsets");
        let changed = decode_review(&serde_json::to_vec(&changed).expect("json")).expect("decodes");
        let changed = changed.object.expect("object").data;
        assert!(pod_template_changed(&data["spec"], &changed["spec"]));
        assert!(!pod_template_changed(&data["spec"], &data["spec"]));
        assert!(pod_template_changed(
            &json!({"template": {"a": 1}}),
            &json!({"template": {"a": 2}})
        ));
        // A claim keeps them (it has no pod template; this one is hostile).
        let other = with_resource(review(object.clone()), "", "persistentvolumeclaims");
        let decoded = decode_review(&serde_json::to_vec(&other).expect("json")).expect("decodes");
        let data = decoded.object.expect("object").data;
        assert_eq!(data["spec"], object["spec"]);
        assert_eq!(data["status"], object["status"]);
        // A resource no rule handles: its objects are not built at all.
        let other = with_resource(review(object.clone()), "apps", "deployments");
        let decoded = decode_review(&serde_json::to_vec(&other).expect("json")).expect("decodes");
        assert!(decoded.object.is_none());
        // What is read past is still checked: a body with a broken template is not JSON.
        let mut body = serde_json::to_string(&set).expect("json");
        body = body.replace(r#""containers":"#, r#""containers"::"#);
        assert!(error_of(body.as_bytes()).0.starts_with("not JSON: "));
        // A spec that is not an object is kept as it is, template or not.
        for spec in [
            json!(null),
            json!([{"template": 1}]),
            json!("x"),
            json!(1.5),
        ] {
            let mut object = object.clone();
            object["spec"] = spec.clone();
            let set = with_resource(review(object), "apps", "statefulsets");
            let decoded = decode_review(&serde_json::to_vec(&set).expect("json")).expect("decodes");
            assert_eq!(decoded.object.expect("object").data["spec"], spec);
        }
    }

    #[test]
    fn numbers_no_f64_holds_are_refused_only_where_they_are_read() {
        let huge = "1E400";
        let unknown = review(json!({"metadata": {"name": "n", "unknownField": "HUGE"}}));
        let body = serde_json::to_string(&unknown)
            .expect("json")
            .replace("\"HUGE\"", huge);
        assert!(decode_review(body.as_bytes()).is_ok(), "read past: {body}");
        let read = review(json!({"metadata": {"name": "n"}, "spec": {"x": "HUGE"}}));
        let body = serde_json::to_string(&read)
            .expect("json")
            .replace("\"HUGE\"", huge);
        let (e, uid) = error_of(body.as_bytes());
        assert!(
            e.starts_with("malformed AdmissionReview: request.object: number out of range"),
            "{e}"
        );
        assert_eq!(uid.as_deref(), Some("u-1"));
    }

    #[test]
    fn objects_before_the_resource_decode_alike() {
        // The apiserver writes `resource` before the objects; another order decodes the same.
        let set = with_resource(
            review(json!({"metadata": {"name": "web", "managedFields": []},
                "spec": {"template": {}}, "status": {}})),
            "apps",
            "statefulsets",
        );
        let request = set["request"].as_object().expect("request");
        let mut reordered: Vec<_> = request.iter().collect();
        reordered.sort_by_key(|(k, _)| !k.ends_with("bject"));
        let fields: Vec<String> = reordered
            .iter()
            .map(|(k, v)| format!("{}:{v}", Value::from(k.as_str())))
            .collect();
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{{}}}}}"#,
            fields.join(",")
        );
        assert!(
            body.find("\"object\"") < body.find("\"resource\""),
            "{body}"
        );
        let decoded = decode_review(body.as_bytes()).expect("decodes");
        let expected = decode_review(&serde_json::to_vec(&set).expect("json")).expect("decodes");
        assert!(same(&decoded, &expected));
        assert_eq!(
            decoded.object.expect("object").data,
            json!({"spec": {TEMPLATE_DIGEST: digest("{}")}})
        );
    }
}
