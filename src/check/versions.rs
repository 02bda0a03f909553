//! Which of the five proposals a Kubernetes version implements natively, with the default of
//! each feature gate. The one table in code; docs/runbooks.md ("What each version implements
//! natively") says the same for people, and a test keeps the two in agreement.

/// A Kubernetes version as `/version` reports it (`gitVersion` `v1.35.2-gke.100` → 1.35.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Parses `v1.35.2`, `1.35`, `v1.28.3-gke.100`; the leading digits of each part count.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().trim_start_matches('v').splitn(3, '.');
        let number = |part: Option<&str>| -> Option<u32> {
            let part = part?;
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        };
        let major = number(parts.next())?;
        let minor = number(parts.next())?;
        let patch = number(parts.next()).unwrap_or(0);
        Some(Self::new(major, minor, patch))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// One proposal as a version implements it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Native {
    pub kep: &'static str,
    /// The upstream feature gate, where there is one.
    pub gate: Option<&'static str>,
    /// Whether the version does it out of the box (the gate's default, or GA).
    pub native: bool,
    /// Our part that is redundant where `native`, and how to turn it off.
    pub ours: &'static str,
}

/// What `version` implements natively, for each of the five proposals.
pub fn native(version: Version) -> Vec<Native> {
    let v = |minor, patch| Version::new(1, minor, patch);
    // MaxUnavailableStatefulSet: alpha (off) 1.24 – 1.34, beta on 1.35.0 – 1.35.3, beta off
    // 1.35.4 – 1.36 (a Parallel-pod-management regression), beta on from 1.37.
    let max_unavailable = (version >= v(35, 0) && version < v(35, 4)) || version >= v(37, 0);
    // RetroactiveDefaultStorageClass: alpha (off) 1.25, beta (on) 1.26 – 1.27, GA 1.28.
    let retroactive = version >= v(26, 0);
    vec![
        Native {
            kep: "KEP-4650",
            gate: Some("StatefulSetUpdateVolumeClaimTemplate"),
            native: false,
            ours: "volumeClaimTemplate edits",
        },
        Native {
            kep: "KEP-961",
            gate: Some("MaxUnavailableStatefulSet"),
            native: max_unavailable,
            ours: "the maxUnavailable driver and annotation (--max-unavailable-driver=false, --max-unavailable-fallback=false)",
        },
        Native {
            kep: "KEP-3333",
            gate: Some("RetroactiveDefaultStorageClass"),
            native: retroactive,
            ours: "the retroactive default StorageClass (--retroactive-default-class=false)",
        },
        Native {
            kep: "KEP-284",
            gate: Some("ExpandPersistentVolumes"),
            // GA since 1.24 and beta (on) since 1.11; ours adds size limits and stays useful.
            native: version >= v(11, 0),
            ours: "none: expansion gating adds size limits and warnings, keep it",
        },
        Native {
            kep: "KEP-2804",
            gate: Some("ExtendedWorkloadConditions"),
            native: false,
            ours: "StatefulSet conditions",
        },
    ]
}
