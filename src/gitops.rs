//! Health checks for GitOps tools: the Argo CD Lua check for `apps/StatefulSet` and the Flux
//! CEL expressions (`gitops/` in the repository, in Argo CD's `resource_customizations/`
//! layout), and the snippets `stateful-admission gitops` prints to install them.
//!
//! Both read the StatefulSet alone, which is all a GitOps tool evaluates: the recorded change
//! (`desired-volume-claim-templates`), the claim status the controller writes
//! (`volume-claim-status`, with what the rollout still awaits) and its progress record. Their
//! verdicts are `status --wait`'s on one table of cases (this module's tests run the script in
//! Lua 5.1 and the expressions in a CEL interpreter beside `status`'s judge).

/// The Argo CD health check (`resource.customizations.health.apps_StatefulSet`).
pub const ARGOCD_HEALTH_LUA: &str =
    include_str!("../gitops/argocd/resource_customizations/apps/StatefulSet/health.lua");

/// The Flux `healthCheckExprs` entry for `apps/v1` StatefulSets (a YAML list).
pub const FLUX_HEALTH_CHECK_EXPRS: &str = include_str!("../gitops/flux/statefulset-health.yaml");

/// The `argocd-cm` keys: the script reads JSON annotations, so it needs Lua's standard
/// libraries, which Argo CD opens for a customization only when told.
const USE_OPEN_LIBS: &str = "resource.customizations.useOpenLibs.apps_StatefulSet";
const HEALTH: &str = "resource.customizations.health.apps_StatefulSet";

/// What `stateful-admission gitops` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Snippet {
    /// A patch for the `argocd-cm` ConfigMap.
    ArgocdCm,
    /// Values for the Argo CD Helm chart (`configs.cm`).
    ArgocdValues,
    /// The Lua script alone (`health.lua`).
    ArgocdLua,
    /// A Kustomization `spec` fragment with `healthCheckExprs` for Flux.
    Flux,
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{pad}{l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The keys under `data` (or `configs.cm`), indented by `by`.
fn argocd_keys(by: usize) -> String {
    let pad = " ".repeat(by);
    format!(
        "{pad}{USE_OPEN_LIBS}: \"true\"\n{pad}{HEALTH}: |\n{}\n",
        indent(ARGOCD_HEALTH_LUA.trim_end(), by + 2)
    )
}

/// The text of `snippet`.
pub fn render(snippet: Snippet) -> String {
    match snippet {
        Snippet::ArgocdCm => format!(
            "# Argo CD health check for StatefulSets with stateful-admission storage rollouts.\n\
             # kubectl -n argocd patch configmap argocd-cm --type merge --patch-file FILE\n\
             data:\n{}",
            argocd_keys(2)
        ),
        Snippet::ArgocdValues => format!(
            "# Argo CD Helm chart values: the health check for StatefulSets with\n\
             # stateful-admission storage rollouts (merge into your values).\n\
             configs:\n  cm:\n{}",
            argocd_keys(4)
        ),
        Snippet::ArgocdLua => ARGOCD_HEALTH_LUA.to_owned(),
        Snippet::Flux => format!(
            "# Flux Kustomization: health checks for StatefulSets with stateful-admission storage\n\
             # rollouts (merge into the Kustomization's spec; wait: true, or list the\n\
             # StatefulSets in healthChecks).\n\
             spec:\n  wait: true\n  healthCheckExprs:\n{}\n",
            indent(
                FLUX_HEALTH_CHECK_EXPRS
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .collect::<Vec<_>>()
                    .join("\n")
                    .trim_end(),
                4
            )
        ),
    }
}

#[cfg(test)]
mod tests;
