//! The few facts the rotation planner needs from a certificate — validity, subject and issuer
//! names, DNS names — read with x509-parser. Input comes from a Secret that anyone with write
//! access could have filled, so malformed input is an error, never a panic.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum X509Error {
    #[error("no PEM certificate found")]
    NoCertificate,
    #[error("not a PEM certificate: {0}")]
    Pem(String),
    #[error("malformed certificate: {0}")]
    Der(String),
}

/// What the planner reads from one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    /// DER of the subject Name, compared byte for byte with a leaf's issuer.
    pub subject: Vec<u8>,
    pub issuer: Vec<u8>,
    /// The first commonName of the subject, if any.
    pub common_name: Option<String>,
    /// dNSName entries of subjectAltName, in order.
    pub dns_names: Vec<String>,
}

impl CertInfo {
    pub fn lifetime(&self) -> time::Duration {
        self.not_after - self.not_before
    }
}

/// Every certificate of a PEM bundle, first to last.
pub fn parse_pem_bundle(pem: &[u8]) -> Result<Vec<CertInfo>, X509Error> {
    let ders = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| X509Error::Pem(e.to_string()))?;
    if ders.is_empty() {
        return Err(X509Error::NoCertificate);
    }
    ders.iter().map(|der| parse_der(der)).collect()
}

/// The first certificate of a PEM bundle.
pub fn parse_pem(pem: &[u8]) -> Result<CertInfo, X509Error> {
    parse_pem_bundle(pem)?
        .into_iter()
        .next()
        .ok_or(X509Error::NoCertificate)
}

/// One DER certificate.
pub fn parse_der(der: &[u8]) -> Result<CertInfo, X509Error> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| X509Error::Der(e.to_string()))?;
    let validity = cert.validity();
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned);
    let dns_names = cert
        .subject_alternative_name()
        .map_err(|e| X509Error::Der(e.to_string()))?
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(CertInfo {
        not_before: validity.not_before.to_datetime(),
        not_after: validity.not_after.to_datetime(),
        subject: cert.subject().as_raw().to_vec(),
        issuer: cert.issuer().as_raw().to_vec(),
        common_name,
        dns_names,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::certs::tests::utc;
    use rcgen::{CertificateParams, DnType, KeyPair};

    fn self_signed(cn: &str, names: &[&str], from: OffsetDateTime, to: OffsetDateTime) -> String {
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.not_before = from;
        params.not_after = to;
        let key = KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").pem()
    }

    #[test]
    fn reads_validity_names_and_common_name() {
        let pem = self_signed(
            "webhook",
            &["a.example", "b.example"],
            utc(2026, 1, 2, 3, 4, 5),
            utc(2027, 1, 2, 3, 4, 5),
        );
        let info = parse_pem(pem.as_bytes()).expect("parses");
        assert_eq!(info.not_before, utc(2026, 1, 2, 3, 4, 5));
        assert_eq!(info.not_after, utc(2027, 1, 2, 3, 4, 5));
        assert_eq!(info.common_name.as_deref(), Some("webhook"));
        assert_eq!(info.dns_names, ["a.example", "b.example"]);
        assert_eq!(info.subject, info.issuer, "self-signed");
    }

    #[test]
    fn reads_generalized_time_after_2049() {
        let pem = self_signed(
            "far",
            &[],
            utc(2049, 12, 31, 0, 0, 0),
            utc(2051, 6, 1, 12, 0, 0),
        );
        let info = parse_pem(pem.as_bytes()).expect("parses");
        assert_eq!(info.not_after, utc(2051, 6, 1, 12, 0, 0));
        assert!(info.dns_names.is_empty());
    }

    #[test]
    fn bundle_yields_every_certificate_in_order() {
        let a = self_signed("a", &[], utc(2026, 1, 1, 0, 0, 0), utc(2027, 1, 1, 0, 0, 0));
        let b = self_signed("b", &[], utc(2026, 1, 1, 0, 0, 0), utc(2027, 1, 1, 0, 0, 0));
        let infos = parse_pem_bundle(format!("{a}{b}").as_bytes()).expect("parses");
        let names: Vec<_> = infos.iter().map(|i| i.common_name.clone()).collect();
        assert_eq!(names, [Some("a".to_owned()), Some("b".to_owned())]);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let good = self_signed(
            "x",
            &["x"],
            utc(2026, 1, 1, 0, 0, 0),
            utc(2027, 1, 1, 0, 0, 0),
        );
        let der = CertificateDer::pem_slice_iter(good.as_bytes())
            .next()
            .expect("one")
            .expect("pem");
        // Every truncation of a real certificate must fail cleanly.
        for cut in 0..der.len() {
            assert!(parse_der(&der[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(parse_pem(b""), Err(X509Error::NoCertificate));
        assert_eq!(parse_pem(b"not pem at all"), Err(X509Error::NoCertificate));
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(matches!(
            parse_pem(garbage.as_bytes()),
            Err(X509Error::Der(_))
        ));
        let huge_length = [0x30, 0x84, 0xff, 0xff, 0xff, 0xff];
        assert!(parse_der(&huge_length).is_err());
    }
}
