//! Label and field selectors in the string forms the apiserver accepts on list and watch.

use serde_json::Value;

use super::errors::ApiError;
use super::resources::ResourceType;

/// A parsed `labelSelector`: every requirement must hold.
#[derive(Debug, Default, Clone)]
pub struct LabelSelector(Vec<LabelRequirement>);

#[derive(Debug, Clone)]
enum LabelRequirement {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e,!f,g in (h,i),j notin (k)`; an empty string selects everything.
    pub fn parse(selector: &str) -> Result<Self, ApiError> {
        split_top_level(selector)
            .into_iter()
            .map(str::trim)
            .filter(|term| !term.is_empty())
            .map(parse_requirement)
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`), as
    /// `LabelSelectorAsSelector` reads it; `None` where that fails (an unknown operator,
    /// `In`/`NotIn` without values, `Exists`/`DoesNotExist` with some).
    pub fn from_object(selector: &Value) -> Option<Self> {
        let mut requirements = Vec::new();
        for (key, value) in selector
            .get("matchLabels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            requirements.push(LabelRequirement::Equals(
                key.clone(),
                value.as_str()?.to_owned(),
            ));
        }
        for expression in selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = expression.get("key")?.as_str()?.to_owned();
            let values: Vec<String> = expression
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<_>>()?;
            let operator = expression.get("operator")?.as_str()?;
            requirements.push(match (operator, values.is_empty()) {
                ("In", false) => LabelRequirement::In(key, values),
                ("NotIn", false) => LabelRequirement::NotIn(key, values),
                ("Exists", true) => LabelRequirement::Exists(key),
                ("DoesNotExist", true) => LabelRequirement::NotExists(key),
                _ => return None,
            });
        }
        Some(Self(requirements))
    }

    /// Whether it has no requirement (selects everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|requirement| match requirement {
            LabelRequirement::Exists(key) => label(key).is_some(),
            LabelRequirement::NotExists(key) => label(key).is_none(),
            LabelRequirement::Equals(key, value) => label(key) == Some(value.as_str()),
            LabelRequirement::NotEquals(key, value) => label(key) != Some(value.as_str()),
            LabelRequirement::In(key, values) => {
                label(key).is_some_and(|v| values.iter().any(|x| x == v))
            }
            LabelRequirement::NotIn(key, values) => {
                !label(key).is_some_and(|v| values.iter().any(|x| x == v))
            }
        })
    }
}

/// Splits on commas outside parentheses, so `in (a,b)` stays one term.
fn split_top_level(selector: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    terms
}

fn parse_requirement(term: &str) -> Result<LabelRequirement, ApiError> {
    let invalid = || {
        ApiError::bad_request(format!(
            "unable to parse requirement: invalid label selector term {term:?}"
        ))
    };
    let key = |k: &str| {
        let k = k.trim();
        if k.is_empty() || k.contains(char::is_whitespace) {
            Err(invalid())
        } else {
            Ok(k.to_owned())
        }
    };
    if let Some(open) = term.find('(') {
        let close = term.rfind(')').filter(|&c| c > open).ok_or_else(invalid)?;
        let mut words = term[..open].split_whitespace();
        let (Some(name), Some(op), None) = (words.next(), words.next(), words.next()) else {
            return Err(invalid());
        };
        let values = term[open + 1..close]
            .split(',')
            .map(|v| v.trim().to_owned())
            .collect();
        return match op {
            "in" => Ok(LabelRequirement::In(key(name)?, values)),
            "notin" => Ok(LabelRequirement::NotIn(key(name)?, values)),
            _ => Err(invalid()),
        };
    }
    if let Some(name) = term.strip_prefix('!') {
        return Ok(LabelRequirement::NotExists(key(name)?));
    }
    if let Some((name, value)) = term.split_once("!=") {
        return Ok(LabelRequirement::NotEquals(
            key(name)?,
            value.trim().to_owned(),
        ));
    }
    if let Some((name, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(LabelRequirement::Equals(
            key(name)?,
            value.trim().to_owned(),
        ));
    }
    if term.contains(['<', '>']) {
        return Err(invalid());
    }
    Ok(LabelRequirement::Exists(key(term)?))
}

/// A parsed `fieldSelector`, restricted like the real apiserver to the labels each type
/// supports.
#[derive(Debug, Default, Clone)]
pub struct FieldSelector(Vec<FieldRequirement>);

#[derive(Debug, Clone)]
struct FieldRequirement {
    pointer: &'static str,
    value: String,
    equal: bool,
}

impl FieldSelector {
    pub fn parse(selector: &str, resource: &ResourceType) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (label, value, equal) = if let Some((l, v)) = term.split_once("!=") {
                (l, v, false)
            } else if let Some((l, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (l, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{selector}'; can't understand '{term}'"
                )));
            };
            let label = label.trim();
            let pointer = match label {
                "metadata.name" => "/metadata/name",
                "metadata.namespace" => "/metadata/namespace",
                other => resource
                    .field_labels
                    .iter()
                    .find(|(l, _)| *l == other)
                    .map(|(_, p)| *p)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!("field label not supported: {other}"))
                    })?,
            };
            requirements.push(FieldRequirement {
                pointer,
                value: value.trim().to_owned(),
                equal,
            });
        }
        Ok(Self(requirements))
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|r| {
            let actual = object
                .pointer(r.pointer)
                .and_then(Value::as_str)
                .unwrap_or("");
            (actual == r.value) == r.equal
        })
    }
}

/// Both selectors of a list or watch request.
#[derive(Debug, Default, Clone)]
pub struct Selection {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selection {
    pub fn parse(
        labels: Option<&str>,
        fields: Option<&str>,
        resource: &ResourceType,
    ) -> Result<Self, ApiError> {
        Ok(Self {
            labels: LabelSelector::parse(labels.unwrap_or(""))?,
            fields: FieldSelector::parse(fields.unwrap_or(""), resource)?,
        })
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }
}
