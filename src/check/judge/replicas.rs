//! The controller's replicas: their leader lease, and the replicas of the release.

use super::*;

/// The controller's Lease: present, held, and renewed within its duration.
pub(crate) fn lease(lease: Option<&Value>, name: &str, now: jiff::Timestamp) -> Check {
    let check = "controller lease";
    let hint = format!("see {}", runbook("controller-without-leader"));
    let Some(lease) = lease else {
        return Check::failed(
            check,
            format!("Lease {name:?} not found: no replica has ever led"),
            hint,
        );
    };
    let spec = lease.get("spec").cloned().unwrap_or(Value::Null);
    let holder = spec
        .get("holderIdentity")
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty());
    let Some(holder) = holder else {
        return Check::failed(check, format!("Lease {name:?} has no holder"), hint);
    };
    let duration = spec
        .get("leaseDurationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(15);
    let renewed = spec
        .get("renewTime")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let Some(renewed) = renewed else {
        return Check::failed(
            check,
            format!("Lease {name:?} held by {holder:?} has no renewTime"),
            hint,
        );
    };
    let age = now.as_second() - renewed.as_second();
    if age > duration {
        return Check::failed(
            check,
            format!(
                "Lease {name:?} held by {holder:?} was last renewed {age}s ago, longer than its {duration}s duration: the leader is gone or stuck"
            ),
            hint,
        );
    }
    Check::ok(
        check,
        format!("Lease {name:?} held by {holder:?}, renewed {age}s ago (duration {duration}s)"),
    )
}

/// What each running replica's `/readyz?verbose` says (asked through the apiserver's pod
/// proxy): which part is waiting for what. `None` when no replica runs to ask (the other
/// checks say why).
pub(crate) fn replicas(answers: &[(String, Result<String, String>)]) -> Option<Check> {
    let name = "replicas";
    if answers.is_empty() {
        return None;
    }
    let hint = format!("see {}", runbook("troubleshooting-by-symptom"));
    let mut unanswered = Vec::new();
    let mut waiting = Vec::new();
    let mut roles = Vec::new();
    for (pod, answer) in answers {
        match answer {
            Err(why) => unanswered.push(format!("{pod}: {why}")),
            Ok(text) => {
                // What the cluster does has lines of its own (see `capabilities`).
                let not_ok: Vec<&str> = text
                    .lines()
                    .filter(|l| l.starts_with("[-]") || l.starts_with("[!]"))
                    .filter(|l| !l[3..].starts_with("capability "))
                    .collect();
                if !not_ok.is_empty() {
                    waiting.push(format!("{pod}: {}", not_ok.join("; ")));
                }
                let role = text
                    .lines()
                    .find_map(|l| l.strip_prefix("[+]controller "))
                    .map(|r| {
                        r.split(':')
                            .next()
                            .unwrap_or(r)
                            .split(' ')
                            .next()
                            .unwrap_or(r)
                    });
                roles.push(format!("{pod} {}", role.unwrap_or("webhook only")));
            }
        }
    }
    if !unanswered.is_empty() && waiting.is_empty() && roles.is_empty() {
        return Some(Check::warning(
            name,
            format!(
                "no replica could be asked for its /readyz: {}",
                unanswered.join("; ")
            ),
            "allow get on pods/proxy in the release namespace to see each replica's state",
        ));
    }
    if waiting.is_empty() && unanswered.is_empty() {
        return Some(Check::ok(name, format!("ready: {}", roles.join(", "))));
    }
    // A replica whose watches fail answers from a view seconds or minutes old.
    let hint = if waiting.iter().any(|w| w.contains("[!]view stale")) {
        format!(
            "a replica cannot refresh its view from the apiserver (network, apiserver down or overloaded): its webhook answers from what it last saw, its controller writes only under a valid Lease; see {}",
            runbook("a-replicas-view-is-stale")
        )
    } else {
        hint
    };
    let mut parts = waiting;
    parts.extend(unanswered);
    Some(Check::warning(name, parts.join(" | "), hint))
}
