//! Who our writes are from. Every create, update and patch carries the field manager
//! `stateful-admission` ([`names::CONTROLLER_NAME`]), so `metadata.managedFields` name this
//! project as the owner of what it writes (deletes carry none: `DeleteOptions` has no field
//! manager). The API client also sends the user agent `stateful-admission/<version>`: the
//! apiserver names a write without a field manager after the user agent's product token
//! (`managerOrUserAgent` in `endpoints/handlers/create.go`), which covers the Events kube's
//! `Recorder` writes with default parameters.

use kube::api::{PatchParams, PostParams};

use crate::names;
use crate::write_limit::WriteLimit;

/// The user agent of our API client.
pub const USER_AGENT: &str = concat!("stateful-admission/", env!("CARGO_PKG_VERSION"));

/// Create and replace parameters of every write.
pub fn post() -> PostParams {
    PostParams {
        field_manager: Some(names::CONTROLLER_NAME.to_owned()),
        ..PostParams::default()
    }
}

/// A server-side dry run of a create.
pub fn dry_run_post() -> PostParams {
    PostParams {
        dry_run: true,
        ..post()
    }
}

/// Patch parameters of every (non-apply) patch.
pub fn patch() -> PatchParams {
    PatchParams {
        field_manager: Some(names::CONTROLLER_NAME.to_owned()),
        ..PatchParams::default()
    }
}

/// A client from the kubeconfig or the in-cluster environment, sending [`USER_AGENT`].
pub async fn client() -> anyhow::Result<kube::Client> {
    client_from(crate::connect::infer().await?, None)
}

/// A client for `config`, sending [`USER_AGENT`], its writes limited by `limit` if given.
///
/// With a limit (the client of `serve`, which the controller writes through), kube's own
/// retry layer is off: it sits below the write limit and the controller's fence and would
/// resend a write answered 429, 503 or 504 up to seconds later, unchecked, after the Lease
/// that allowed it may have passed to another replica. What fails is tried again by its
/// caller instead (a reconcile's backoff, the next poll, the watches' own retry), through
/// the fence.
///
/// # Errors
/// When the client stack cannot be built from `config` (TLS or proxy settings). Needs a tokio
/// runtime when `limit` is given.
pub fn client_from(
    mut config: kube::Config,
    limit: Option<&WriteLimit>,
) -> anyhow::Result<kube::Client> {
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static(USER_AGENT),
    ));
    if limit.is_some() {
        config.default_retry = false;
    }
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(match limit {
        Some(limit) => builder.with_layer(limit).build(),
        None => builder.build(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_names_the_project() {
        assert_eq!(post().field_manager.as_deref(), Some("stateful-admission"));
        assert!(!post().dry_run);
        assert!(dry_run_post().dry_run);
        assert_eq!(dry_run_post().field_manager, post().field_manager);
        assert_eq!(patch().field_manager.as_deref(), Some("stateful-admission"));
        assert!(!patch().force);
        assert!(USER_AGENT.starts_with("stateful-admission/"));
    }
}
