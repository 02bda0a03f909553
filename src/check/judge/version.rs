//! The apiserver's version, against what this release supports and what the cluster does.

use super::*;

/// The apiserver's version, what upstream does there by default, and what this cluster was
/// seen to do (`cluster`): where the two differ (a vendor build, `--feature-gates`) the cluster
/// wins. One of ours is called redundant only where the cluster was seen doing it natively,
/// never from the version alone.
pub(crate) fn version(
    git_version: &Result<String, String>,
    features: &Features,
    cluster: &Capabilities,
) -> Check {
    let name = "kubernetes version";
    let hint = format!("see {}", runbook("which-of-our-features-to-turn-off-there"));
    let text = match git_version {
        Ok(text) => text,
        Err(why) => return Check::warning(name, format!("/version failed: {why}"), hint),
    };
    let defaults = Version::parse(text).map(versions::native);
    // Ours is redundant only where the Deployment runs it.
    let ours_on = |kep: &str| match kep {
        "KEP-961" => features.max_unavailable,
        "KEP-3333" => features.retroactive_default_class,
        "KEP-2804" => features.conditions,
        _ => false,
    };
    let observed = |kep: &str| -> Option<(bool, String)> {
        let (capability, native) = match kep {
            "KEP-961" => (Name::MaxUnavailable, cluster.keeps_max_unavailable()?),
            "KEP-3333" => (
                Name::RetroactiveDefaultClass,
                cluster.value(Name::RetroactiveDefaultClass)?.is_yes(),
            ),
            "KEP-4650" => (
                Name::NativeTemplateEdits,
                cluster.value(Name::NativeTemplateEdits)?.is_yes(),
            ),
            _ => return None,
        };
        let learned = cluster.get(capability);
        Some((
            native,
            format!(
                "{capability} {} ({})",
                learned.value.map_or("unknown", |v| v.as_str()),
                learned.how.source()
            ),
        ))
    };
    let mut native = Vec::new();
    let mut apply = Vec::new();
    let mut differs = Vec::new();
    let mut redundant = Vec::new();
    let mut unknown = Vec::new();
    for kep in ["KEP-4650", "KEP-961", "KEP-3333", "KEP-284", "KEP-2804"] {
        let default = defaults
            .as_ref()
            .and_then(|d| d.iter().find(|n| n.kep == kep).cloned());
        match (kep, observed(kep)) {
            // Expansion is built in everywhere we run; ours adds limits and warnings.
            ("KEP-284", _) => native.push(kep.to_owned()),
            // No release sets these conditions: nothing to observe.
            ("KEP-2804", _) => apply.push(kep.to_owned()),
            (_, Some((is_native, seen))) => {
                if let Some(default) = &default
                    && default.native != is_native
                {
                    differs.push(format!(
                        "{kep}: upstream {}'s default is {} (gate {}), this cluster {} ({seen}): a vendor build or --feature-gates, and the cluster's answer is what counts",
                        Version::parse(text).map_or_else(|| text.clone(), |v| v.to_string()),
                        if default.native { "on" } else { "off" },
                        default.gate.unwrap_or("none"),
                        if is_native { "does it" } else { "does not" },
                    ));
                }
                if is_native {
                    native.push(kep.to_owned());
                    if kep == "KEP-4650" {
                        differs.push(
                            "KEP-4650: the apiserver takes volumeClaimTemplate edits itself: the webhook leaves them to it (the native path is used)".to_owned(),
                        );
                    }
                    if ours_on(kep) {
                        redundant.push(format!(
                            "{kep}: this cluster does it natively ({seen}): ours is redundant: {}",
                            default.as_ref().map_or("", |d| d.ours)
                        ));
                    }
                } else {
                    apply.push(kep.to_owned());
                }
            }
            (_, None) => unknown.push(kep.to_owned()),
        }
    }
    let mut message = format!("{text}: natively {}", list_or_none(&native));
    message.push_str(&format!("; ours apply: {}", list_or_none(&apply)));
    if !unknown.is_empty() {
        message.push_str(&format!(
            "; not known yet whether it does {} (see the capability lines)",
            unknown.join(", ")
        ));
    }
    for note in differs.iter().chain(&redundant) {
        message.push_str("; ");
        message.push_str(note);
    }
    if redundant.is_empty() {
        Check::ok(name, message)
    } else {
        Check::warning(name, message, hint)
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}
