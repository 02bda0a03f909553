//! Self-managed certificates, the pure part: given the time and what the Secret holds, decide
//! whether to issue a new CA, a new serving certificate, or nothing, and which CAs the webhook
//! configurations must trust. [`plan_rotation`] has no I/O and no clock; [`execute`] turns a
//! plan into new Secret contents. The actor in [`super::self_managed`] only reads and writes.
//!
//! Renewal happens at two thirds of a certificate's lifetime (as cert-manager's default
//! `renewBefore` does), so a renewal that fails keeps a third of the lifetime to be retried.
//! A renewed CA does not replace the old one in the trust bundle at once: certificates the old
//! CA signed stay trusted until it expires, so a replica still serving one keeps working.

use std::collections::BTreeMap;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

use super::CertError;
use super::x509::{self, CertInfo};

/// Secret keys. `tls.crt`/`tls.key`/`ca.crt` follow the `kubernetes.io/tls` convention.
pub const CA_CERT_KEY: &str = "ca.crt";
pub const CA_KEY_KEY: &str = "ca.key";
pub const TLS_CERT_KEY: &str = "tls.crt";
pub const TLS_KEY_KEY: &str = "tls.key";
/// Every CA the webhook configurations trust: the signing CA first, then older ones that
/// have not expired.
pub const CA_BUNDLE_KEY: &str = "ca-bundle.crt";

/// Issued certificates are backdated by this much for clocks slightly behind ours.
const BACKDATE: Duration = Duration::minutes(5);

/// How long issued certificates live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    pub ca: Duration,
    pub leaf: Duration,
}

impl Default for Lifetimes {
    /// CA one year, serving certificate 90 days.
    fn default() -> Self {
        Self {
            ca: Duration::days(365),
            leaf: Duration::days(90),
        }
    }
}

/// The Secret's data as far as rotation is concerned; any key may be missing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertSecret {
    pub ca_cert: Option<Vec<u8>>,
    pub ca_key: Option<Vec<u8>>,
    pub tls_cert: Option<Vec<u8>>,
    pub tls_key: Option<Vec<u8>>,
    pub ca_bundle: Option<Vec<u8>>,
}

impl CertSecret {
    pub fn from_data(data: &BTreeMap<String, Vec<u8>>) -> Self {
        let get = |k: &str| data.get(k).cloned();
        Self {
            ca_cert: get(CA_CERT_KEY),
            ca_key: get(CA_KEY_KEY),
            tls_cert: get(TLS_CERT_KEY),
            tls_key: get(TLS_KEY_KEY),
            ca_bundle: get(CA_BUNDLE_KEY),
        }
    }

    pub fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        [
            (CA_CERT_KEY, &self.ca_cert),
            (CA_KEY_KEY, &self.ca_key),
            (TLS_CERT_KEY, &self.tls_cert),
            (TLS_KEY_KEY, &self.tls_key),
            (CA_BUNDLE_KEY, &self.ca_bundle),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.to_owned(), v)))
        .collect()
    }
}

/// Why a certificate is (re)issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    Missing,
    Unreadable(String),
    /// Two thirds of the lifetime have passed.
    DueForRenewal,
    Expired,
    /// The serving certificate was not signed by the current CA.
    NotIssuedByCa,
    /// The serving certificate's DNS names differ from the service's.
    NamesChanged,
    /// A new CA was issued, so the serving certificate must be re-signed by it.
    CaRenewed,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Missing => f.write_str("missing"),
            Reason::Unreadable(e) => write!(f, "unreadable: {e}"),
            Reason::DueForRenewal => f.write_str("two thirds of its lifetime have passed"),
            Reason::Expired => f.write_str("expired"),
            Reason::NotIssuedByCa => f.write_str("not signed by the current CA"),
            Reason::NamesChanged => f.write_str("DNS names differ from the service's"),
            Reason::CaRenewed => f.write_str("the CA was renewed"),
        }
    }
}

/// What to do with the Secret now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationPlan {
    pub issue_ca: Option<Reason>,
    pub issue_leaf: Option<Reason>,
    /// CA certificates (PEM) to keep trusting after the signing CA: older CAs not yet expired.
    pub retained_cas: Vec<String>,
    /// The trust bundle differs from what it should be even if nothing is issued (an old CA
    /// expired, or the bundle is missing).
    pub bundle_outdated: bool,
    /// When the plan would next change if nothing else does: the earliest renewal point or
    /// retained-CA expiry after this plan is carried out.
    pub next_check: OffsetDateTime,
}

impl RotationPlan {
    /// True when the Secret is fine as it is: no write.
    pub fn is_noop(&self) -> bool {
        self.issue_ca.is_none() && self.issue_leaf.is_none() && !self.bundle_outdated
    }
}

/// Two thirds into the certificate's lifetime.
pub fn renew_at(info: &CertInfo) -> OffsetDateTime {
    info.not_before + info.lifetime() * 2 / 3
}

fn due(now: OffsetDateTime, info: &CertInfo) -> Option<Reason> {
    if now >= info.not_after {
        Some(Reason::Expired)
    } else if now >= renew_at(info) {
        Some(Reason::DueForRenewal)
    } else {
        None
    }
}

/// Reads a certificate and checks its key parses; a problem with either is the reason to
/// re-issue.
fn read_pair(cert: Option<&[u8]>, key: Option<&[u8]>) -> Result<CertInfo, Reason> {
    let (Some(cert), Some(key)) = (cert, key) else {
        return Err(Reason::Missing);
    };
    let info = x509::parse_pem(cert).map_err(|e| Reason::Unreadable(e.to_string()))?;
    let key = std::str::from_utf8(key).map_err(|_| Reason::Unreadable("key is not PEM".into()))?;
    KeyPair::from_pem(key).map_err(|e| Reason::Unreadable(format!("key: {e}")))?;
    Ok(info)
}

/// The PEM blocks of a bundle, each with what it says; unreadable blocks are left out.
fn bundle_entries(bundle: &[u8]) -> Vec<(String, CertInfo)> {
    const END: &str = "-----END CERTIFICATE-----";
    let Ok(text) = std::str::from_utf8(bundle) else {
        return Vec::new();
    };
    text.split_inclusive(END)
        .filter_map(|block| {
            let start = block.find("-----BEGIN CERTIFICATE-----")?;
            let pem = block.get(start..)?;
            pem.ends_with(END).then_some(())?;
            let info = x509::parse_pem(pem.as_bytes()).ok()?;
            Some((format!("{pem}\n"), info))
        })
        .collect()
}

/// Decides what to issue. `names` are the DNS names the serving certificate must carry.
pub fn plan_rotation(
    now: OffsetDateTime,
    secret: &CertSecret,
    names: &[String],
    lifetimes: Lifetimes,
) -> RotationPlan {
    let ca = read_pair(secret.ca_cert.as_deref(), secret.ca_key.as_deref());
    let issue_ca = match &ca {
        Err(reason) => Some(reason.clone()),
        Ok(info) => due(now, info),
    };
    let leaf = read_pair(secret.tls_cert.as_deref(), secret.tls_key.as_deref());
    let issue_leaf = if issue_ca.is_some() {
        Some(Reason::CaRenewed)
    } else {
        match (&ca, &leaf) {
            (Err(reason), _) | (_, Err(reason)) => Some(reason.clone()),
            (Ok(ca), Ok(leaf)) => {
                let mut have = leaf.dns_names.clone();
                let mut want = names.to_vec();
                have.sort();
                want.sort();
                if leaf.issuer != ca.subject {
                    Some(Reason::NotIssuedByCa)
                } else if have != want {
                    Some(Reason::NamesChanged)
                } else {
                    due(now, leaf)
                }
            }
        }
    };

    // The signing CA heads the bundle; the old one joins the retained set when replaced.
    let signing_der = match (&issue_ca, &ca) {
        (None, Ok(info)) => Some(info.subject.clone()),
        _ => None,
    };
    let mut retained: Vec<(String, CertInfo)> = Vec::new();
    let mut candidates = secret
        .ca_bundle
        .as_deref()
        .map(bundle_entries)
        .unwrap_or_default();
    if issue_ca.is_some()
        && let (Ok(_), Some(old)) = (&ca, secret.ca_cert.as_deref())
    {
        candidates.extend(bundle_entries(old));
    }
    for (pem, info) in candidates {
        let is_signing = signing_der.as_ref() == Some(&info.subject);
        let duplicate = retained.iter().any(|(p, _)| *p == pem);
        if !is_signing && !duplicate && now < info.not_after {
            retained.push((pem, info));
        }
    }

    let bundle_outdated = match (&issue_ca, &secret.ca_cert) {
        (None, Some(ca_pem)) => {
            let mut expected = String::from_utf8_lossy(ca_pem).into_owned();
            if !expected.ends_with('\n') {
                expected.push('\n');
            }
            for (pem, _) in &retained {
                expected.push_str(pem);
            }
            secret.ca_bundle.as_deref() != Some(expected.as_bytes())
        }
        _ => true,
    };

    let ca_renewal = match (&issue_ca, &ca) {
        (None, Ok(info)) => renew_at(info),
        _ => now + lifetimes.ca * 2 / 3,
    };
    let leaf_renewal = match (&issue_leaf, &leaf) {
        (None, Ok(info)) => renew_at(info),
        _ => now + lifetimes.leaf * 2 / 3,
    };
    let next_check = retained
        .iter()
        .map(|(_, info)| info.not_after)
        .chain([ca_renewal, leaf_renewal])
        .min()
        .unwrap_or(leaf_renewal);

    RotationPlan {
        issue_ca,
        issue_leaf,
        retained_cas: retained.into_iter().map(|(pem, _)| pem).collect(),
        bundle_outdated,
        next_check,
    }
}

fn ca_params(common_name: &str) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

/// Carries out `plan` on `current`, returning the Secret's new contents. Key generation is the
/// only source of randomness; the time comes from `now`.
pub fn execute(
    plan: &RotationPlan,
    current: &CertSecret,
    names: &[String],
    lifetimes: Lifetimes,
    now: OffsetDateTime,
) -> Result<CertSecret, CertError> {
    let mut next = current.clone();
    let (ca_params, ca_key, ca_not_after) =
        match (&plan.issue_ca, &current.ca_cert, &current.ca_key) {
            (None, Some(cert), Some(key)) => {
                let info = x509::parse_pem(cert).map_err(CertError::Existing)?;
                let key = KeyPair::from_pem(&String::from_utf8_lossy(key))?;
                let cn = info.common_name.clone().unwrap_or_default();
                (ca_params(&cn)?, key, info.not_after)
            }
            _ => {
                // A name unique to this CA (time and key), so that a serving certificate's
                // issuer tells which CA signed it.
                let key = KeyPair::generate()?;
                let fingerprint: String = key
                    .public_key_raw()
                    .iter()
                    .rev()
                    .take(4)
                    .map(|b| format!("{b:02x}"))
                    .collect();
                let cn = format!(
                    "stateful-admission CA {} {fingerprint}",
                    now.unix_timestamp()
                );
                let mut params = ca_params(&cn)?;
                params.not_before = now - BACKDATE;
                params.not_after = now + lifetimes.ca;
                let cert = params.self_signed(&key)?;
                next.ca_cert = Some(cert.pem().into_bytes());
                next.ca_key = Some(key.serialize_pem().into_bytes());
                (params, key, now + lifetimes.ca)
            }
        };
    if plan.issue_leaf.is_some() {
        let mut params = CertificateParams::new(names.to_vec())?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().map_or("webhook", String::as_str),
        );
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = now - BACKDATE;
        // Never outlive the CA that signs it.
        params.not_after = (now + lifetimes.leaf).min(ca_not_after);
        let key = KeyPair::generate()?;
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let cert = params.signed_by(&key, &issuer)?;
        next.tls_cert = Some(cert.pem().into_bytes());
        next.tls_key = Some(key.serialize_pem().into_bytes());
    }
    let mut bundle = next
        .ca_cert
        .as_deref()
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .unwrap_or_default();
    if !bundle.ends_with('\n') {
        bundle.push('\n');
    }
    for pem in &plan.retained_cas {
        bundle.push_str(pem);
    }
    next.ca_bundle = Some(bundle.into_bytes());
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::certs::tests::utc;
    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use std::sync::Arc;

    fn t0() -> OffsetDateTime {
        utc(2026, 1, 1, 0, 0, 0)
    }

    fn names() -> Vec<String> {
        crate::certs::service_dns_names("webhook", "sa-system")
    }

    fn issued_at(at: OffsetDateTime) -> CertSecret {
        let plan = plan_rotation(at, &CertSecret::default(), &names(), Lifetimes::default());
        execute(
            &plan,
            &CertSecret::default(),
            &names(),
            Lifetimes::default(),
            at,
        )
        .expect("issue")
    }

    /// Re-issues the serving certificate of `secret` as of `at`.
    fn leaf_reissued(secret: &CertSecret, at: OffsetDateTime) -> CertSecret {
        let plan = RotationPlan {
            issue_ca: None,
            issue_leaf: Some(Reason::DueForRenewal),
            retained_cas: Vec::new(),
            bundle_outdated: false,
            next_check: at,
        };
        execute(&plan, secret, &names(), Lifetimes::default(), at).expect("issue")
    }

    fn plan_at(at: OffsetDateTime, secret: &CertSecret) -> RotationPlan {
        plan_rotation(at, secret, &names(), Lifetimes::default())
    }

    fn days(n: i64) -> Duration {
        Duration::days(n)
    }

    /// The leaf verifies for `name` against the bundle's CAs at `at`, as the apiserver checks.
    fn verifies(secret: &CertSecret, name: &str, at: OffsetDateTime) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(secret.ca_bundle.as_deref().unwrap_or_default()) {
            roots.add(der.expect("bundle pem")).expect("root");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .expect("verifier");
        let leaf = CertificateDer::from_pem_slice(secret.tls_cert.as_deref().unwrap_or_default())
            .expect("leaf pem");
        let when = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            u64::try_from(at.unix_timestamp()).expect("after 1970"),
        ));
        verifier
            .verify_server_cert(
                &leaf,
                &[],
                &ServerName::try_from(name.to_owned()).expect("name"),
                &[],
                when,
            )
            .is_ok()
    }

    fn bundle_len(secret: &CertSecret) -> usize {
        x509::parse_pem_bundle(secret.ca_bundle.as_deref().unwrap_or_default())
            .map(|v| v.len())
            .unwrap_or(0)
    }

    #[test]
    fn empty_secret_issues_ca_and_leaf() {
        let plan = plan_at(t0(), &CertSecret::default());
        assert_eq!(plan.issue_ca, Some(Reason::Missing));
        assert_eq!(plan.issue_leaf, Some(Reason::CaRenewed));
        assert!(plan.retained_cas.is_empty());
        // The next renewal is the leaf's, 60 of its 90 days.
        assert_eq!(plan.next_check, t0() + days(60));
    }

    #[test]
    fn issued_secret_is_valid_for_every_service_name_and_stable() {
        let secret = issued_at(t0());
        for name in names() {
            assert!(verifies(&secret, &name, t0()), "{name}");
        }
        assert!(!verifies(&secret, "other.sa-system.svc", t0()));
        let ca = x509::parse_pem(secret.ca_cert.as_deref().unwrap_or_default()).expect("ca");
        let leaf = x509::parse_pem(secret.tls_cert.as_deref().unwrap_or_default()).expect("leaf");
        assert_eq!(ca.not_after, t0() + days(365));
        assert_eq!(leaf.not_after, t0() + days(90));
        assert_eq!(leaf.not_before, t0() - BACKDATE);
        let plan = plan_at(t0() + Duration::minutes(1), &secret);
        assert!(plan.is_noop(), "{plan:?}");
        assert_eq!(plan.next_check, renew_at(&leaf));
    }

    /// The two-thirds rule at its boundary, for the leaf (lifetime 90 days + 5 minutes of
    /// backdating) and the CA.
    #[test]
    fn renewal_happens_at_two_thirds_of_lifetime() {
        let secret = issued_at(t0());
        let leaf = x509::parse_pem(secret.tls_cert.as_deref().unwrap_or_default()).expect("leaf");
        let leaf_due = renew_at(&leaf);
        assert_eq!(leaf_due, t0() - BACKDATE + (days(90) + BACKDATE) * 2 / 3);
        let cases = [
            (leaf_due - Duration::seconds(1), None),
            (leaf_due, Some(Reason::DueForRenewal)),
            (t0() + days(89), Some(Reason::DueForRenewal)),
            (t0() + days(90), Some(Reason::Expired)),
        ];
        for (at, want) in cases {
            let plan = plan_at(at, &secret);
            assert_eq!(plan.issue_leaf, want, "at {at}");
            assert_eq!(plan.issue_ca, None, "at {at}");
        }
    }

    #[test]
    fn leaf_renewal_keeps_the_ca_and_the_bundle() {
        let secret = issued_at(t0());
        let at = t0() + days(61);
        let plan = plan_at(at, &secret);
        assert_eq!(plan.issue_leaf, Some(Reason::DueForRenewal));
        let renewed = execute(&plan, &secret, &names(), Lifetimes::default(), at).expect("run");
        assert_eq!(renewed.ca_cert, secret.ca_cert);
        assert_eq!(renewed.ca_key, secret.ca_key);
        assert_eq!(renewed.ca_bundle, secret.ca_bundle);
        assert_ne!(renewed.tls_cert, secret.tls_cert);
        assert!(verifies(&renewed, "webhook.sa-system.svc", at));
        assert!(plan_at(at, &renewed).is_noop());
    }

    /// CA renewal at two thirds of its year re-issues the leaf with the new CA, and the bundle
    /// trusts old and new CA until the old one expires.
    #[test]
    fn ca_rollover_trusts_old_and_new_until_old_expires() {
        let mut secret = issued_at(t0());
        // Keep the leaf fresh so that only the CA is due.
        let at = t0() + days(244);
        secret = leaf_reissued(&secret, at - days(1));
        let plan = plan_at(at, &secret);
        assert_eq!(plan.issue_ca, Some(Reason::DueForRenewal));
        assert_eq!(plan.issue_leaf, Some(Reason::CaRenewed));
        assert_eq!(plan.retained_cas.len(), 1);
        let rolled = execute(&plan, &secret, &names(), Lifetimes::default(), at).expect("run");
        assert_ne!(rolled.ca_cert, secret.ca_cert);
        assert_eq!(bundle_len(&rolled), 2);
        // A replica still serving the old leaf and one serving the new leaf both verify.
        assert!(verifies(&rolled, "webhook.sa-system.svc", at));
        let old_leaf_new_bundle = CertSecret {
            ca_bundle: rolled.ca_bundle.clone(),
            ..secret.clone()
        };
        assert!(verifies(&old_leaf_new_bundle, "webhook.sa-system.svc", at));
        // Steady until the new leaf is due; its renewal still keeps the old CA trusted.
        let new_leaf =
            x509::parse_pem(rolled.tls_cert.as_deref().unwrap_or_default()).expect("leaf");
        let steady = plan_at(at + days(1), &rolled);
        assert!(steady.is_noop(), "{steady:?}");
        assert_eq!(steady.next_check, renew_at(&new_leaf));
        let leaf_due = renew_at(&new_leaf);
        let plan = plan_at(leaf_due, &rolled);
        assert_eq!(
            (plan.issue_ca.clone(), plan.issue_leaf.clone()),
            (None, Some(Reason::DueForRenewal))
        );
        assert_eq!(plan.retained_cas.len(), 1);
        let releafed =
            execute(&plan, &rolled, &names(), Lifetimes::default(), leaf_due).expect("run");
        assert_eq!(releafed.ca_bundle, rolled.ca_bundle);
        // The old CA's expiry is among the next events, and it prunes the bundle without
        // issuing.
        let leaf2 =
            x509::parse_pem(releafed.tls_cert.as_deref().unwrap_or_default()).expect("leaf");
        assert_eq!(
            plan_at(leaf_due, &releafed).next_check,
            renew_at(&leaf2).min(t0() + days(365))
        );
        // A leaf renewed just before, so that only the expiry is at stake.
        let just_before = t0() + days(365) - Duration::minutes(1);
        let mut refresh = plan_at(just_before, &releafed);
        refresh.issue_leaf = Some(Reason::DueForRenewal);
        let releafed = execute(
            &refresh,
            &releafed,
            &names(),
            Lifetimes::default(),
            just_before,
        )
        .expect("run");
        let pruned = plan_at(t0() + days(365), &releafed);
        assert_eq!(
            (pruned.issue_ca.clone(), pruned.issue_leaf.clone()),
            (None, None)
        );
        assert!(pruned.bundle_outdated);
        assert!(pruned.retained_cas.is_empty());
        let after = execute(
            &pruned,
            &releafed,
            &names(),
            Lifetimes::default(),
            t0() + days(365),
        )
        .expect("run");
        assert_eq!(bundle_len(&after), 1);
        assert_eq!(after.tls_cert, releafed.tls_cert);
        assert!(verifies(
            &after,
            "webhook.sa-system.svc.cluster.local",
            t0() + days(365)
        ));
    }

    #[test]
    fn expired_ca_is_replaced_and_not_retained() {
        let secret = issued_at(t0());
        let at = t0() + days(400);
        let plan = plan_at(at, &secret);
        assert_eq!(plan.issue_ca, Some(Reason::Expired));
        assert!(plan.retained_cas.is_empty());
        let renewed = execute(&plan, &secret, &names(), Lifetimes::default(), at).expect("run");
        assert_eq!(bundle_len(&renewed), 1);
        assert!(verifies(&renewed, "webhook.sa-system", at));
    }

    #[test]
    fn leaf_never_outlives_its_ca() {
        let secret = issued_at(t0());
        // A leaf forced 300 days in: the CA has 65 days left.
        let forced = leaf_reissued(&secret, t0() + days(300));
        let leaf = x509::parse_pem(forced.tls_cert.as_deref().unwrap_or_default()).expect("leaf");
        assert_eq!(leaf.not_after, t0() + days(365));
    }

    #[test]
    fn broken_or_foreign_contents_are_reissued() {
        let good = issued_at(t0());
        let other = issued_at(t0());
        let garbage =
            Some(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec());
        let cases: Vec<(&str, CertSecret, Option<Reason>, Option<Reason>)> = vec![
            (
                "ca key missing",
                CertSecret {
                    ca_key: None,
                    ..good.clone()
                },
                Some(Reason::Missing),
                Some(Reason::CaRenewed),
            ),
            (
                "leaf missing",
                CertSecret {
                    tls_cert: None,
                    ..good.clone()
                },
                None,
                Some(Reason::Missing),
            ),
            (
                "leaf key not pem",
                CertSecret {
                    tls_key: Some(b"\xff\xfe".to_vec()),
                    ..good.clone()
                },
                None,
                Some(Reason::Unreadable("key is not PEM".into())),
            ),
            (
                "leaf signed by another CA",
                CertSecret {
                    tls_cert: other.tls_cert.clone(),
                    tls_key: other.tls_key.clone(),
                    ..good.clone()
                },
                None,
                Some(Reason::NotIssuedByCa),
            ),
        ];
        for (name, secret, ca, leaf) in cases {
            let plan = plan_at(t0() + Duration::minutes(1), &secret);
            assert_eq!(plan.issue_ca, ca, "{name}");
            assert_eq!(plan.issue_leaf, leaf, "{name}");
        }
        let unreadable = plan_at(
            t0(),
            &CertSecret {
                ca_cert: garbage.clone(),
                ..good.clone()
            },
        );
        assert!(matches!(unreadable.issue_ca, Some(Reason::Unreadable(_))));
        let bad_leaf = plan_at(
            t0(),
            &CertSecret {
                tls_cert: garbage,
                ..good.clone()
            },
        );
        assert!(matches!(bad_leaf.issue_leaf, Some(Reason::Unreadable(_))));
    }

    #[test]
    fn a_renamed_service_gets_a_new_leaf() {
        let secret = issued_at(t0());
        let renamed = crate::certs::service_dns_names("webhook2", "sa-system");
        let plan = plan_rotation(t0(), &secret, &renamed, Lifetimes::default());
        assert_eq!(plan.issue_leaf, Some(Reason::NamesChanged));
        assert_eq!(plan.issue_ca, None);
    }

    #[test]
    fn missing_or_hand_edited_bundle_is_rewritten_without_issuing() {
        let secret = issued_at(t0());
        for bundle in [None, Some(b"junk".to_vec())] {
            let edited = CertSecret {
                ca_bundle: bundle,
                ..secret.clone()
            };
            let plan = plan_at(t0(), &edited);
            assert!(plan.bundle_outdated);
            assert_eq!(
                (plan.issue_ca.clone(), plan.issue_leaf.clone()),
                (None, None)
            );
            let fixed = execute(&plan, &edited, &names(), Lifetimes::default(), t0()).expect("run");
            assert_eq!(fixed.ca_bundle, secret.ca_bundle);
        }
    }

    #[test]
    fn secret_data_round_trips_and_ignores_other_keys() {
        let secret = issued_at(t0());
        let mut data = secret.to_data();
        assert_eq!(data.len(), 5);
        data.insert("unrelated".into(), b"x".to_vec());
        assert_eq!(CertSecret::from_data(&data), secret);
    }
}
