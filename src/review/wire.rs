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
use crate::admission::statefulset::TEMPLATE_DIGEST;

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

fn digest(text: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
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
mod tests;
