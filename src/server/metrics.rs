//! Prometheus metrics of the webhook, served as text on the probe port.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    pub endpoint: &'static str,
    pub resource: String,
    pub operation: String,
    pub allowed: bool,
    pub mutated: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WouldDenyLabels {
    pub endpoint: &'static str,
    pub resource: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    pub endpoint: &'static str,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

/// The webhook's metric families.
#[derive(Debug)]
pub struct Metrics {
    requests: Family<ReviewLabels, Counter>,
    latency: Family<ReviewLabels, Histogram>,
    in_flight: Family<EndpointLabels, Gauge>,
    rejected: Family<RejectLabels, Counter>,
    would_deny: Family<WouldDenyLabels, Counter>,
    cert_reloads: Family<ResultLabels, Counter>,
    cert_expiry: Gauge,
}

impl Metrics {
    /// Creates the families and registers them (names prefixed by the registry's prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(|| {
                // 50µs .. ~1.6s
                Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
            }),
            in_flight: Family::default(),
            rejected: Family::default(),
            would_deny: Family::default(),
            cert_reloads: Family::default(),
            cert_expiry: Gauge::default(),
        };
        registry.register(
            "admission_requests",
            "Admission reviews answered, by endpoint, resource, operation, allowed and mutated",
            metrics.requests.clone(),
        );
        registry.register(
            "admission_request_duration_seconds",
            "Time to answer an admission review, from the full body to the response",
            metrics.latency.clone(),
        );
        registry.register(
            "admission_requests_in_flight",
            "Admission requests being handled",
            metrics.in_flight.clone(),
        );
        registry.register(
            "admission_requests_rejected",
            "Requests answered with an HTTP error (400, 413, 415, 500) instead of a review",
            metrics.rejected.clone(),
        );
        registry.register(
            "admission_would_deny",
            "Reviews the rules deny that the admission mode warn allowed with a warning, by endpoint, resource and reason (Invalid or Forbidden)",
            metrics.would_deny.clone(),
        );
        registry.register(
            "certificate_reloads",
            "Serving certificate reloads, by result",
            metrics.cert_reloads.clone(),
        );
        registry.register(
            "serving_certificate_expiry_timestamp_seconds",
            "When the certificate the webhook listener serves expires (notAfter of the leaf as last loaded, in every certificate mode), Unix time",
            metrics.cert_expiry.clone(),
        );
        metrics
    }

    pub fn observe(&self, labels: ReviewLabels, seconds: f64) {
        self.latency.get_or_create(&labels).observe(seconds);
        self.requests.get_or_create(&labels).inc();
    }

    pub fn rejected(&self, endpoint: &'static str, code: u16) {
        self.rejected
            .get_or_create(&RejectLabels { endpoint, code })
            .inc();
    }

    pub fn would_deny(&self, endpoint: &'static str, resource: &str, reason: &'static str) {
        self.would_deny
            .get_or_create(&WouldDenyLabels {
                endpoint,
                resource: resource.to_owned(),
                reason,
            })
            .inc();
    }

    pub fn cert_reload(&self, result: &'static str) {
        self.cert_reloads
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Records the notAfter (Unix seconds) of the certificate the listener now serves.
    pub fn serving_certificate(&self, not_after: i64) {
        self.cert_expiry.set(not_after);
    }

    /// Counts a request in flight until the guard drops.
    pub fn in_flight(&self, endpoint: &'static str) -> InFlight {
        let gauge = self
            .in_flight
            .get_or_create(&EndpointLabels { endpoint })
            .clone();
        gauge.inc();
        InFlight(gauge)
    }
}

pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}
