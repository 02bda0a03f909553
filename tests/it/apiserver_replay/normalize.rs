//! Both sides of a comparison normalized alike, as the captures were: run-to-run values become
//! the captures' placeholders, managedFields are sorted, and the documents the captures keep in
//! part (version, discovery, OpenAPI, the Event lists) are trimmed the same way.

use serde_json::{Map, Value, json};

/// Applies `f` to every string; where it answers a value, that value replaces the string.
pub fn replace_strings(value: &mut Value, f: &dyn Fn(&str) -> Option<Value>) {
    match value {
        Value::String(text) => {
            if let Some(new) = f(text) {
                *value = new;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| replace_strings(v, f)),
        Value::Object(map) => map.values_mut().for_each(|v| replace_strings(v, f)),
        _ => {}
    }
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// Every UUID in `text` as `<uid>`, but the all-zero one.
fn uuids(text: &str) -> String {
    const SHAPE: [usize; 5] = [8, 4, 4, 4, 12];
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let mut j = i;
        let mut ok = true;
        for (n, len) in SHAPE.iter().enumerate() {
            if j + len > bytes.len() || !bytes[j..j + len].iter().all(|b| is_hex(*b)) {
                ok = false;
                break;
            }
            j += len;
            if n < 4 {
                if bytes.get(j) != Some(&b'-') {
                    ok = false;
                    break;
                }
                j += 1;
            }
        }
        if ok && &text[i..j] != "00000000-0000-0000-0000-000000000000" {
            out.push_str("<uid>");
            i = j;
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Every RFC 3339 time stamp in `text` as `<time>`.
fn times(text: &str) -> String {
    let bytes = text.as_bytes();
    let digits = |from: usize, n: usize| {
        from + n <= bytes.len() && bytes[from..from + n].iter().all(u8::is_ascii_digit)
    };
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let stamp = digits(i, 4)
            && bytes.get(i + 4) == Some(&b'-')
            && digits(i + 5, 2)
            && bytes.get(i + 7) == Some(&b'-')
            && digits(i + 8, 2)
            && bytes.get(i + 10) == Some(&b'T')
            && digits(i + 11, 2)
            && bytes.get(i + 13) == Some(&b':')
            && digits(i + 14, 2)
            && bytes.get(i + 16) == Some(&b':')
            && digits(i + 17, 2);
        if stamp {
            let mut j = i + 19;
            if bytes.get(j) == Some(&b'.') {
                j += 1;
                while j < bytes.len() && bytes[j].is_ascii_digit() {
                    j += 1;
                }
            }
            if bytes.get(j) == Some(&b'Z') {
                j += 1;
            } else if matches!(bytes.get(j), Some(b'+' | b'-')) && digits(j + 1, 2) {
                j += 6;
            }
            out.push_str("<time>");
            i = j;
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// `127.0.0.1:<digits>` as `127.0.0.1:<port>`.
fn ports(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("127.0.0.1:") {
        let (before, after) = rest.split_at(at + "127.0.0.1:".len());
        out.push_str(before);
        let end = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        if end > 0 {
            out.push_str("<port>");
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn placeholders(value: &mut Value, key: Option<&str>) {
    match value {
        Value::String(text) => {
            *text = match key {
                Some("resourceVersion") => "<resourceVersion>".to_owned(),
                Some("continue") if !text.is_empty() => "<continue>".to_owned(),
                Some("caBundle") => "<caBundle>".to_owned(),
                _ => ports(&times(&uuids(text))),
            };
        }
        Value::Array(items) => items.iter_mut().for_each(|v| placeholders(v, None)),
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                placeholders(v, Some(k));
            }
            if let Some(Value::Array(entries)) = map.get_mut("managedFields") {
                let order = |e: &Value| {
                    ["operation", "manager", "subresource", "apiVersion"]
                        .map(|k| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned())
                };
                entries.sort_by_key(order);
            }
        }
        _ => {}
    }
}

/// A value with the captures' placeholders and managedFields order.
pub fn normalized(mut value: Value) -> Value {
    placeholders(&mut value, None);
    value
}

/// A groupVersion as the captures keep it: the string.
fn group_version(entry: &Value) -> Value {
    match entry {
        Value::Object(map) => map.get("groupVersion").cloned().unwrap_or(Value::Null),
        other => other.clone(),
    }
}

fn keep(body: &Value, keys: &[&str]) -> Value {
    let map: Map<String, Value> = keys
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), body.get(*k)?.clone())))
        .collect();
    Value::Object(map)
}

fn trim_group(group: &Value, keys: &[&str]) -> Value {
    let mut trimmed = keep(group, keys);
    if let Some(versions) = group.get("versions").and_then(Value::as_array) {
        trimmed["versions"] = Value::Array(versions.iter().map(group_version).collect());
    }
    if let Some(preferred) = group.get("preferredVersion") {
        trimmed["preferredVersion"] = group_version(preferred);
    }
    trimmed
}

/// The fake's answer to a probe, trimmed as the capture of that probe was.
pub fn trimmed(record: &Value, body: Value) -> Value {
    let path = record["request"]["path"].as_str().unwrap_or("");
    let id = record["id"].as_str().unwrap_or("");
    if record["request"]["method"] != "GET" {
        return body;
    }
    match body.get("kind").and_then(Value::as_str) {
        _ if path == "/version" => keep(&body, &["major", "minor", "gitVersion", "gitCommit"]),
        _ if path == "/openapi/v2" => {
            let captured = record["response"]["body"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            let definitions = body.get("definitions").cloned().unwrap_or(json!({}));
            let trimmed: Map<String, Value> = captured
                .keys()
                .map(|name| {
                    let properties = definitions
                        .get(name)
                        .and_then(|d| d.get("properties"))
                        .and_then(Value::as_object)
                        .map(|p| {
                            let mut names: Vec<&String> = p.keys().collect();
                            names.sort();
                            json!(names)
                        })
                        .unwrap_or(Value::Null);
                    (name.clone(), properties)
                })
                .collect();
            Value::Object(trimmed)
        }
        Some("APIGroupList") => {
            let mut trimmed = keep(&body, &["kind", "apiVersion"]);
            let groups: Vec<Value> = body["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|g| trim_group(g, &["name"]))
                .collect();
            trimmed["groups"] = json!(groups);
            trimmed
        }
        Some("APIGroup") => trim_group(&body, &["kind", "name"]),
        Some("APIResourceList") => {
            let mut trimmed = keep(&body, &["kind", "groupVersion"]);
            let resources: Vec<Value> = body["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| keep(r, &["name", "kind", "namespaced", "verbs"]))
                .collect();
            trimmed["resources"] = json!(resources);
            trimmed
        }
        Some("EventList") if id.starts_with("09") => {
            let mut trimmed = body.clone();
            if let Some(items) = trimmed.get_mut("items").and_then(Value::as_array_mut) {
                items.retain(|e| {
                    matches!(
                        e.pointer("/metadata/name").and_then(Value::as_str),
                        Some("from-core-api" | "from-events-api")
                    )
                });
            }
            trimmed
        }
        _ => body,
    }
}
