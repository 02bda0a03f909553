//! The few facts the rotation planner needs from a certificate — validity, subject and issuer
//! names, DNS names — read with a small DER walker (RFC 5280 §4.1), so that no X.509 parser
//! joins the dependency tree. Input comes from a Secret that anyone with write access could
//! have filled, so every read is bounds-checked and malformed input is an error, never a panic.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum X509Error {
    #[error("no PEM certificate found")]
    NoCertificate,
    #[error("not a PEM certificate: {0}")]
    Pem(String),
    #[error("malformed certificate: {0}")]
    Der(&'static str),
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

const SEQUENCE: u8 = 0x30;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const OBJECT_ID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
const BOOLEAN: u8 = 0x01;
const SET: u8 = 0x31;
/// `[0] EXPLICIT` version and `[3] EXPLICIT` extensions of TBSCertificate.
const CONTEXT_0: u8 = 0xa0;
const CONTEXT_3: u8 = 0xa3;
/// `dNSName [2] IA5String` inside GeneralNames (implicit, primitive).
const DNS_NAME: u8 = 0x82;
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

/// One DER element: tag, content, and its full encoding.
struct Tlv<'a> {
    tag: u8,
    content: &'a [u8],
    whole: &'a [u8],
}

/// Reads the elements of a constructed value one after another.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn peek_tag(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    fn next(&mut self) -> Result<Tlv<'a>, X509Error> {
        let bytes = self.rest;
        let tag = *bytes.first().ok_or(X509Error::Der("truncated tag"))?;
        if tag & 0x1f == 0x1f {
            return Err(X509Error::Der(
                "multi-byte tags are not used in certificates",
            ));
        }
        let first = *bytes.get(1).ok_or(X509Error::Der("truncated length"))?;
        let (len, header) = if first < 0x80 {
            (usize::from(first), 2)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 {
                return Err(X509Error::Der("unsupported length encoding"));
            }
            let digits = bytes
                .get(2..2 + count)
                .ok_or(X509Error::Der("truncated length"))?;
            let len = digits
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            (len, 2 + count)
        };
        let end = header
            .checked_add(len)
            .ok_or(X509Error::Der("length overflows"))?;
        let whole = bytes.get(..end).ok_or(X509Error::Der("truncated value"))?;
        let content = whole
            .get(header..)
            .ok_or(X509Error::Der("truncated value"))?;
        self.rest = bytes.get(end..).unwrap_or_default();
        Ok(Tlv {
            tag,
            content,
            whole,
        })
    }

    fn expect(&mut self, tag: u8, what: &'static str) -> Result<Tlv<'a>, X509Error> {
        let tlv = self.next()?;
        if tlv.tag == tag {
            Ok(tlv)
        } else {
            Err(X509Error::Der(what))
        }
    }
}

fn parse_der(der: &[u8]) -> Result<CertInfo, X509Error> {
    let certificate = Reader::new(der).expect(SEQUENCE, "certificate is not a SEQUENCE")?;
    let tbs = Reader::new(certificate.content).expect(SEQUENCE, "tbsCertificate missing")?;
    let mut fields = Reader::new(tbs.content);
    if fields.peek_tag() == Some(CONTEXT_0) {
        fields.next()?;
    }
    fields.next()?; // serialNumber
    fields.expect(SEQUENCE, "signature algorithm missing")?;
    let issuer = fields.expect(SEQUENCE, "issuer missing")?;
    let validity = fields.expect(SEQUENCE, "validity missing")?;
    let subject = fields.expect(SEQUENCE, "subject missing")?;
    fields.expect(SEQUENCE, "subjectPublicKeyInfo missing")?;
    let mut dns_names = Vec::new();
    while !fields.is_empty() {
        let field = fields.next()?;
        if field.tag == CONTEXT_3 {
            dns_names = subject_alt_dns_names(field.content)?;
        }
    }
    let mut times = Reader::new(validity.content);
    let not_before = parse_time(&times.next()?)?;
    let not_after = parse_time(&times.next()?)?;
    Ok(CertInfo {
        not_before,
        not_after,
        subject: subject.whole.to_vec(),
        issuer: issuer.whole.to_vec(),
        common_name: common_name(subject.content)?,
        dns_names,
    })
}

/// `Name ::= SEQUENCE OF SET OF AttributeTypeAndValue`; the first CN wins.
fn common_name(name: &[u8]) -> Result<Option<String>, X509Error> {
    let mut rdns = Reader::new(name);
    while !rdns.is_empty() {
        let rdn = rdns.expect(SET, "name component is not a SET")?;
        let mut attributes = Reader::new(rdn.content);
        while !attributes.is_empty() {
            let attribute = attributes.expect(SEQUENCE, "attribute is not a SEQUENCE")?;
            let mut parts = Reader::new(attribute.content);
            let oid = parts.expect(OBJECT_ID, "attribute type missing")?;
            let value = parts.next()?;
            if oid.content == OID_COMMON_NAME {
                return Ok(Some(String::from_utf8_lossy(value.content).into_owned()));
            }
        }
    }
    Ok(None)
}

fn subject_alt_dns_names(explicit_extensions: &[u8]) -> Result<Vec<String>, X509Error> {
    let extensions = Reader::new(explicit_extensions).expect(SEQUENCE, "extensions missing")?;
    let mut list = Reader::new(extensions.content);
    while !list.is_empty() {
        let extension = list.expect(SEQUENCE, "extension is not a SEQUENCE")?;
        let mut parts = Reader::new(extension.content);
        let oid = parts.expect(OBJECT_ID, "extension id missing")?;
        if parts.peek_tag() == Some(BOOLEAN) {
            parts.next()?;
        }
        let value = parts.expect(OCTET_STRING, "extension value missing")?;
        if oid.content != OID_SUBJECT_ALT_NAME {
            continue;
        }
        let names = Reader::new(value.content).expect(SEQUENCE, "GeneralNames missing")?;
        let mut general = Reader::new(names.content);
        let mut dns = Vec::new();
        while !general.is_empty() {
            let name = general.next()?;
            if name.tag == DNS_NAME {
                dns.push(String::from_utf8_lossy(name.content).into_owned());
            }
        }
        return Ok(dns);
    }
    Ok(Vec::new())
}

/// UTCTime `YYMMDDHHMMSSZ` (years 1950–2049, RFC 5280 §4.1.2.5.1) or GeneralizedTime
/// `YYYYMMDDHHMMSSZ`.
fn parse_time(tlv: &Tlv<'_>) -> Result<OffsetDateTime, X509Error> {
    let text = std::str::from_utf8(tlv.content).map_err(|_| X509Error::Der("time is not ASCII"))?;
    let digits = text
        .strip_suffix('Z')
        .ok_or(X509Error::Der("time is not in UTC"))?;
    // Digits only, so that the byte slicing below stays on character boundaries.
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(X509Error::Der("time field is not a number"));
    }
    let (year, rest) = match tlv.tag {
        UTC_TIME if digits.len() == 12 => {
            let yy = number(&digits[..2])?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        GENERALIZED_TIME if digits.len() == 14 => (number(&digits[..4])?, &digits[4..]),
        _ => return Err(X509Error::Der("unsupported time encoding")),
    };
    let field = |i: usize| number(&rest[i..i + 2]);
    let month = u8::try_from(field(0)?)
        .ok()
        .and_then(|m| Month::try_from(m).ok())
        .ok_or(X509Error::Der("bad month"))?;
    let small = |v: i32| u8::try_from(v).map_err(|_| X509Error::Der("bad time field"));
    let date = Date::from_calendar_date(year, month, small(field(2)?)?)
        .map_err(|_| X509Error::Der("bad date"))?;
    let time = Time::from_hms(small(field(4)?)?, small(field(6)?)?, small(field(8)?)?)
        .map_err(|_| X509Error::Der("bad time of day"))?;
    Ok(PrimitiveDateTime::new(date, time).assume_utc())
}

fn number(digits: &str) -> Result<i32, X509Error> {
    digits
        .parse()
        .map_err(|_| X509Error::Der("time field is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UTC instant; test input only.
    fn utc(y: i32, mo: u8, d: u8, h: u8, mi: u8, s: u8) -> OffsetDateTime {
        let month = time::Month::try_from(mo).expect("month");
        let date = time::Date::from_calendar_date(y, month, d).expect("date");
        let time = time::Time::from_hms(h, mi, s).expect("time");
        time::PrimitiveDateTime::new(date, time).assume_utc()
    }
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
