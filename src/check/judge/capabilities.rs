//! What the cluster was seen to do (the capabilities each replica learned), and whether the
//! replicas agree.

use super::*;

/// What the cluster does, one line per capability: as `check` learned it itself (discovery,
/// OpenAPI, dry runs in the release namespace) and as each replica's `/readyz?verbose` says
/// its prober learned it. What `check` cannot try itself (a dry-run patch of an existing claim)
/// comes from the replicas. Returns the lines and the capabilities judged by.
pub(crate) fn capabilities(
    own: &crate::capabilities::probe::Round,
    answers: &[(String, Result<String, String>)],
) -> (Vec<Check>, Capabilities) {
    use crate::capabilities::probe::Outcome;
    let reported: Vec<(String, Vec<ReplicaCapability>)> = answers
        .iter()
        .filter_map(|(pod, answer)| {
            answer
                .as_ref()
                .ok()
                .map(|t| (pod.clone(), replica_capabilities(t)))
        })
        .collect();
    let mut merged = Capabilities::unknown("not learned");
    merged.git_version = own.git_version.as_ref().ok().cloned();
    let mut checks = Vec::new();
    for name in Name::ALL {
        let check_name = format!("capability {name}");
        let said: Vec<(&str, &ReplicaCapability)> = reported
            .iter()
            .filter_map(|(pod, caps)| {
                caps.iter()
                    .find(|c| c.name == name)
                    .map(|c| (pod.as_str(), c))
            })
            .collect();
        let known_by_replica = said.iter().find(|(_, c)| c.value.is_some());
        let outcome = own.outcome(name);
        let (learned, source) = match (outcome, known_by_replica) {
            (Some(Outcome::Learned(learned)), _) => (learned.clone(), "check".to_owned()),
            (_, Some((pod, c))) => (
                crate::capabilities::Learned {
                    value: c.value,
                    how: crate::capabilities::How::Evidence(format!("replica {pod}: {}", c.detail)),
                    last_error: None,
                },
                format!("replica {pod}"),
            ),
            (Some(Outcome::Failed(why) | Outcome::NotTried(why)), None) => (
                crate::capabilities::Learned::unknown(why.clone()),
                "check".to_owned(),
            ),
            (None, None) => (
                crate::capabilities::Learned::unknown(match &own.git_version {
                    Err(why) => format!("the apiserver did not answer: {why}"),
                    Ok(_) => "no replica reports it".to_owned(),
                }),
                "check".to_owned(),
            ),
        };
        let disagree: Vec<String> = said
            .iter()
            .filter(|(_, c)| c.value.is_some() && c.value != learned.value)
            .map(|(pod, c)| format!("{pod} says {}", c.value.map_or("unknown", |v| v.as_str())))
            .collect();
        let check = match (learned.value, disagree.is_empty()) {
            (Some(value), true) => Check::ok(
                &check_name,
                format!(
                    "{value} ({}: {}){}",
                    learned.how.source(),
                    learned.how.detail(),
                    by(&source)
                ),
            ),
            (Some(value), false) => Check::warning(
                &check_name,
                format!(
                    "{value} ({}: {}){}, but {}: a replica learns it again within its probe interval, or at once when the apiserver's version changes",
                    learned.how.source(),
                    learned.how.detail(),
                    by(&source),
                    disagree.join(", ")
                ),
                format!(
                    "restart the replicas to learn it now, see {}",
                    runbook("what-the-cluster-does")
                ),
            ),
            // Not knowing is harmless where nothing could be tried yet; a failure is not.
            (None, _) if matches!(outcome, Some(Outcome::NotTried(_))) || outcome.is_none() => {
                Check::ok(
                    &check_name,
                    format!("not known yet ({})", learned.how.detail()),
                )
            }
            (None, _) => Check::warning(
                &check_name,
                format!("not known ({})", learned.how.detail()),
                format!("see {}", runbook("what-the-cluster-does")),
            ),
        };
        checks.push(check);
        merged.set(name, learned);
    }
    (checks, merged)
}

fn by(source: &str) -> String {
    if source == "check" {
        String::new()
    } else {
        format!(", as {source} learned it")
    }
}

/// One `[+]capability <name> <value> (...)` line of a replica's `/readyz?verbose`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReplicaCapability {
    pub name: Name,
    /// `None`: the replica does not know it.
    pub value: Option<crate::capabilities::Value>,
    pub detail: String,
}

/// The capability lines of a replica's `/readyz?verbose`.
pub(crate) fn replica_capabilities(text: &str) -> Vec<ReplicaCapability> {
    text.lines()
        .filter_map(|line| {
            let rest = ["[+]", "[!]", "[-]"]
                .iter()
                .find_map(|m| line.strip_prefix(m))?
                .strip_prefix("capability ")?;
            let (name, rest) = rest.split_once(' ')?;
            let name = Name::parse(name)?;
            let (value, detail) = rest.split_once(' ').unwrap_or((rest, ""));
            let value = name.values().iter().copied().find(|v| v.as_str() == value);
            let detail = detail.trim().trim_start_matches('(').trim_end_matches(')');
            Some(ReplicaCapability {
                name,
                value,
                detail: detail.to_owned(),
            })
        })
        .collect()
}
