//! Serving certificate that follows its files on disk. A Secret volume swaps its content with
//! an atomic rename of a `..data` symlink, which a watch on the file itself would miss, so the
//! parent directories are watched and the files are also polled. A pair that fails to load is
//! logged and the last good one keeps serving.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate found")]
    NoCertificate { path: String },
    #[error("{path}: cannot parse: {message}")]
    Pem { path: String, message: String },
    #[error("certificate and key do not form a usable pair: {0}")]
    Pair(#[from] rustls::Error),
}

/// Resolves every handshake to the current certificate, which [`CertReloader::reload`] swaps.
#[derive(Debug)]
pub struct CertReloader {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// Bytes of the last pair tried, loaded or not, so that one bad pair is reported once.
    last_seen: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl CertReloader {
    /// Loads the pair once; failing here is a startup error.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Arc<Self>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (cert, key) = read_pair(cert_path, key_path)?;
        let certified = certified_key(cert_path, key_path, &cert, &key, &provider)?;
        Ok(Arc::new(Self {
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
            provider,
            current: RwLock::new(Arc::new(certified)),
            last_seen: Mutex::new((cert, key)),
        }))
    }

    /// A rustls server configuration: TLS 1.2 and 1.3, ALPN h2 then http/1.1.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Re-reads the files; swaps the certificate when they changed and load. Returns whether
    /// a new certificate is now served.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (cert, key) = read_pair(&self.cert_path, &self.key_path)?;
        {
            let mut last = self.last_seen.lock().unwrap_or_else(|p| p.into_inner());
            if last.0 == cert && last.1 == key {
                return Ok(false);
            }
            *last = (cert.clone(), key.clone());
        }
        let certified =
            certified_key(&self.cert_path, &self.key_path, &cert, &key, &self.provider)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(certified);
        Ok(true)
    }

    /// notAfter of the leaf now served, in Unix seconds; `None` when x509 parsing fails
    /// (rustls accepted the chain, so that would be an x509-parser gap, not a bad file).
    pub fn not_after(&self) -> Option<i64> {
        let current = self.current();
        let leaf = current.cert.first()?;
        crate::certs::x509::parse_der(leaf)
            .inspect_err(
                |error| tracing::warn!(%error, "cannot read the serving certificate's expiry"),
            )
            .ok()
            .map(|info| info.not_after.unix_timestamp())
    }

    /// Publishes the served certificate's expiry (at load and after every reload).
    pub fn report_expiry(&self, metrics: &Metrics) {
        if let Some(not_after) = self.not_after() {
            metrics.serving_certificate(not_after);
        }
    }

    fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reloads on file-system events in the certificate directories and every `poll`, until
    /// `stop` is cancelled.
    pub async fn watch(
        self: Arc<Self>,
        poll: Duration,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) {
        let changed = Arc::new(tokio::sync::Notify::new());
        let _watcher = self.fs_watcher(changed.clone());
        let mut ticker = tokio::time::interval(poll);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticker.tick() => {}
                _ = changed.notified() => {
                    // A Secret update is several renames; let them settle.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            match self.reload() {
                Ok(true) => {
                    metrics.cert_reload("success");
                    self.report_expiry(&metrics);
                    tracing::info!(cert = %self.cert_path.display(), "serving certificate reloaded");
                }
                Ok(false) => {}
                Err(error) => {
                    metrics.cert_reload("failure");
                    tracing::error!(%error, "new serving certificate rejected; keeping the previous one");
                }
            }
        }
    }

    fn fs_watcher(&self, changed: Arc<tokio::sync::Notify>) -> Option<notify::RecommendedWatcher> {
        let mut watcher = notify::recommended_watcher(move |_event| changed.notify_one())
            .inspect_err(|error| tracing::warn!(%error, "file watch unavailable; polling only"))
            .ok()?;
        let mut dirs = vec![parent(&self.cert_path), parent(&self.key_path)];
        dirs.dedup();
        for dir in dirs {
            if let Err(error) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
                tracing::warn!(%error, dir = %dir.display(), "cannot watch directory; polling only");
            }
        }
        Some(watcher)
    }
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

fn read_pair(cert_path: &Path, key_path: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.display().to_string(),
            source,
        })
    };
    Ok((read(cert_path)?, read(key_path)?))
}

fn certified_key(
    cert_path: &Path,
    key_path: &Path,
    cert: &[u8],
    key: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: cert_path.display().to_string(),
            message: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_path.display().to_string(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError::Pem {
        path: key_path.display().to_string(),
        message: e.to_string(),
    })?;
    // from_der checks that the key belongs to the certificate.
    Ok(CertifiedKey::from_der(chain, key, provider)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served_cert(reloader: &CertReloader) -> Vec<u8> {
        let current = reloader.current.read().unwrap_or_else(|p| p.into_inner());
        current.cert[0].to_vec()
    }

    fn expiry_line(registry: &prometheus_client::registry::Registry) -> Option<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
        text.lines()
            .find(|l| l.starts_with("serving_certificate_expiry_timestamp_seconds "))
            .map(str::to_owned)
    }

    #[test]
    fn the_served_certificate_expiry_follows_reloads_and_survives_a_bad_pair() {
        let names = vec!["localhost".to_owned()];
        let first = crate::certs::generate("a", &names, 2, 1).expect("certs");
        let second = crate::certs::generate("b", &names, 5, 3).expect("certs");
        let expiry = |pem: &str| {
            crate::certs::x509::parse_pem(pem.as_bytes())
                .expect("parses")
                .not_after
                .unix_timestamp()
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = first.write(dir.path(), false).expect("write");
        let reloader = CertReloader::load(&paths.cert, &paths.key).expect("loads");
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut registry);
        assert_eq!(
            expiry_line(&registry).as_deref(),
            Some("serving_certificate_expiry_timestamp_seconds 0"),
            "nothing loaded yet"
        );

        reloader.report_expiry(&metrics);
        assert_eq!(reloader.not_after(), Some(expiry(&first.cert_pem)));
        assert_eq!(
            expiry_line(&registry),
            Some(format!(
                "serving_certificate_expiry_timestamp_seconds {}",
                expiry(&first.cert_pem)
            ))
        );

        // The leaf, not the CA behind it: a chain file reports the first certificate.
        std::fs::write(
            &paths.cert,
            format!("{}{}", second.cert_pem, second.ca_cert_pem),
        )
        .expect("write");
        std::fs::write(&paths.key, &second.key_pem).expect("write");
        assert!(reloader.reload().expect("good pair"));
        reloader.report_expiry(&metrics);
        assert_ne!(expiry(&first.cert_pem), expiry(&second.cert_pem));
        assert_eq!(reloader.not_after(), Some(expiry(&second.cert_pem)));
        assert_eq!(
            expiry_line(&registry),
            Some(format!(
                "serving_certificate_expiry_timestamp_seconds {}",
                expiry(&second.cert_pem)
            ))
        );

        // A rejected pair changes nothing: the expiry stays that of the certificate served.
        std::fs::write(&paths.cert, &first.cert_pem).expect("write");
        assert!(reloader.reload().is_err());
        assert_eq!(reloader.not_after(), Some(expiry(&second.cert_pem)));
    }

    #[test]
    fn reload_swaps_a_good_pair_and_keeps_the_last_good_one_on_a_bad_pair() {
        let names = vec!["localhost".to_owned()];
        let first = crate::certs::generate("a", &names, 1, 1).expect("certs");
        let second = crate::certs::generate("b", &names, 1, 1).expect("certs");
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = first.write(dir.path(), false).expect("write");
        let reloader = CertReloader::load(&paths.cert, &paths.key).expect("loads");
        let original = served_cert(&reloader);

        assert!(
            !reloader.reload().expect("unchanged files reload"),
            "nothing changed"
        );

        // Certificate of one pair, key of the other: rejected, still serving the first.
        std::fs::write(&paths.cert, &second.cert_pem).expect("write");
        let err = reloader.reload().expect_err("mismatched pair");
        assert!(matches!(err, TlsError::Pair(_)), "{err}");
        assert_eq!(served_cert(&reloader), original);
        // The same bad pair is not retried (and not re-reported) until the files change.
        assert!(!reloader.reload().expect("same bad pair"));

        std::fs::write(&paths.key, &second.key_pem).expect("write");
        assert!(reloader.reload().expect("good pair"));
        assert_ne!(served_cert(&reloader), original);

        std::fs::write(&paths.cert, "not a certificate").expect("write");
        assert!(matches!(
            reloader.reload(),
            Err(TlsError::NoCertificate { .. })
        ));
        std::fs::remove_file(&paths.key).expect("remove");
        assert!(matches!(reloader.reload(), Err(TlsError::Read { .. })));
    }
}
