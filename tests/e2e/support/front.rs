//! The webhook Service's stand-in: a TCP front on loopback that the webhook configurations name
//! in URL mode, forwarding each connection to a replica that is ready — as kube-proxy sends
//! traffic only to the endpoints whose readiness probe passes. TLS passes through untouched.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// One replica behind the front.
#[derive(Debug, Clone)]
struct Backend {
    id: u64,
    addr: SocketAddr,
    probe: SocketAddr,
    ready: bool,
}

/// The front: its address, and the replicas it may forward to.
#[derive(Clone)]
pub struct Front {
    pub addr: SocketAddr,
    backends: Arc<Mutex<Vec<Backend>>>,
}

impl Front {
    /// Listens on a free port of `host` and starts the readiness poller (every 100 ms, as a
    /// tight readiness probe would).
    pub async fn start(host: std::net::IpAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((host, 0)).await?;
        let front = Self {
            addr: listener.local_addr()?,
            backends: Arc::default(),
        };
        let accepting = front.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let targets = accepting.candidates();
                tokio::spawn(async move {
                    // A replica that died since its last probe refuses the connection: try the
                    // next. None left: the connection closes, and the apiserver's call fails as
                    // it would against a Service without endpoints.
                    for target in targets {
                        if let Ok(mut upstream) = TcpStream::connect(target).await {
                            let mut conn = conn;
                            let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
                            return;
                        }
                    }
                });
            }
        });
        let polling = front.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_millis(500))
                .build()
                .expect("probe client");
            loop {
                let backends: Vec<Backend> = polling.backends.lock().expect("backends").clone();
                for b in backends {
                    let ready = http
                        .get(format!("http://{}/readyz", b.probe))
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    if let Some(found) = polling
                        .backends
                        .lock()
                        .expect("backends")
                        .iter_mut()
                        .find(|x| x.id == b.id)
                    {
                        found.ready = ready;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Ok(front)
    }

    /// Adds a replica (not ready until its probe says so).
    pub fn add(&self, id: u64, addr: SocketAddr, probe: SocketAddr) {
        self.backends.lock().expect("backends").push(Backend {
            id,
            addr,
            probe,
            ready: false,
        });
    }

    /// Removes a replica at once (its process is gone).
    pub fn remove(&self, id: u64) {
        self.backends
            .lock()
            .expect("backends")
            .retain(|b| b.id != id);
    }

    /// The replicas ready now.
    pub fn ready(&self) -> usize {
        self.backends
            .lock()
            .expect("backends")
            .iter()
            .filter(|b| b.ready)
            .count()
    }

    /// The ready replicas, starting round-robin.
    fn candidates(&self) -> Vec<SocketAddr> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let backends = self.backends.lock().expect("backends");
        let mut ready: Vec<SocketAddr> = backends
            .iter()
            .filter(|b| b.ready)
            .map(|b| b.addr)
            .collect();
        if !ready.is_empty() {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let len = ready.len();
            ready.rotate_left(n % len);
        }
        ready
    }
}
