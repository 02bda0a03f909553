//! Certificate generation with rcgen: a CA and a serving certificate for a set of DNS names
//! and IP addresses. Used by `serve --self-signed` and `certs generate` for local runs;
//! [`rotation`] and [`self_managed`] keep a cluster's certificates in a Secret.

pub mod rotation;
pub mod self_managed;
pub mod x509;

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the stored CA certificate is unreadable: {0}")]
    Existing(#[from] x509::X509Error),
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// A CA and a serving certificate it signed, all PEM.
pub struct GeneratedCerts {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// Paths of the files [`GeneratedCerts::write`] wrote.
#[derive(Debug, Clone)]
pub struct CertPaths {
    pub ca_cert: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The DNS names by which the apiserver may call a Service: `NAME`, `NAME.NS`, `NAME.NS.svc`
/// (what it actually uses) and `NAME.NS.svc.cluster.local`.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// Makes a CA valid for `ca_days` and a serving certificate for `names` valid for `leaf_days`.
/// Names that parse as IP addresses become IP SANs.
pub fn generate(
    common_name: &str,
    names: &[String],
    ca_days: i64,
    leaf_days: i64,
) -> Result<GeneratedCerts, CertError> {
    let now = OffsetDateTime::now_utc();
    // Backdate a little so that clocks slightly behind ours accept the certificate.
    let not_before = now - Duration::minutes(5);

    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{common_name} CA"));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = not_before;
    ca_params.not_after = now + Duration::days(ca_days);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;

    let mut leaf_params = CertificateParams::new(names.to_vec())?;
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    leaf_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf_params.not_before = not_before;
    leaf_params.not_after = now + Duration::days(leaf_days);
    let leaf_key = KeyPair::generate()?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let leaf_cert = leaf_params.signed_by(&leaf_key, &issuer)?;

    Ok(GeneratedCerts {
        ca_cert_pem: ca_cert.pem(),
        ca_key_pem: ca_key.serialize_pem(),
        cert_pem: leaf_cert.pem(),
        key_pem: leaf_key.serialize_pem(),
    })
}

impl GeneratedCerts {
    /// Writes `ca.crt`, `tls.crt` and `tls.key` (the key readable by the owner only) into
    /// `dir`, and `ca.key` too when `with_ca_key`.
    pub fn write(&self, dir: &Path, with_ca_key: bool) -> Result<CertPaths, CertError> {
        std::fs::create_dir_all(dir).map_err(|source| CertError::Write {
            path: dir.display().to_string(),
            source,
        })?;
        let paths = CertPaths {
            ca_cert: dir.join("ca.crt"),
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        write_file(&paths.ca_cert, &self.ca_cert_pem, false)?;
        write_file(&paths.cert, &self.cert_pem, false)?;
        write_file(&paths.key, &self.key_pem, true)?;
        if with_ca_key {
            write_file(&dir.join("ca.key"), &self.ca_key_pem, true)?;
        }
        Ok(paths)
    }
}

fn write_file(path: &Path, content: &str, secret: bool) -> Result<(), CertError> {
    let err = |source| CertError::Write {
        path: path.display().to_string(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut file = options.open(path).map_err(err)?;
    std::io::Write::write_all(&mut file, content.as_bytes()).map_err(err)
}

#[cfg(test)]
pub(crate) mod tests {
    use time::OffsetDateTime;

    /// A UTC instant, for certificate validity tables.
    pub(crate) fn utc(y: i32, mo: u8, d: u8, h: u8, mi: u8, s: u8) -> OffsetDateTime {
        let month = time::Month::try_from(mo).expect("month");
        let date = time::Date::from_calendar_date(y, month, d).expect("date");
        let time = time::Time::from_hms(h, mi, s).expect("time");
        time::PrimitiveDateTime::new(date, time).assume_utc()
    }
}
