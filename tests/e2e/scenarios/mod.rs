//! The scenarios, each asserting what a user sees.

mod classes_dropped;
mod crash;
mod defaults_conditions;
mod denials;
mod first_contact;
mod gitops_health;
mod in_place;
mod max_unavailable;
mod offline_expansion;
mod operations;
pub mod outage;
mod replicas;
mod status_wait;
mod template_edits;

use crate::support::Scenario;

pub fn all() -> Vec<Scenario> {
    vec![
        template_edits::client_side(),
        template_edits::server_side(),
        denials::template_denials(),
        denials::namespace_default_class(),
        denials::expansion_limits(),
        in_place::in_place_rollout(),
        offline_expansion::offline_expansion(),
        offline_expansion::opt_out_during_refusal(),
        offline_expansion::image_and_storage_in_one_apply(),
        crash::crash_at_every_step(),
        crash::apply_during_recreate(),
        max_unavailable::gate_off_field(),
        max_unavailable::gate_off_annotation(),
        max_unavailable::gate_learned_late(),
        max_unavailable::gate_on(),
        max_unavailable::volume_attributes_class(),
        classes_dropped::class_dropped(),
        gitops_health::in_place_size_change(),
        gitops_health::class_dropped(),
        status_wait::status_wait(),
        replicas::leader_killed_mid_rollout(),
        defaults_conditions::retroactive_default_class(),
        defaults_conditions::conditions(),
        operations::observe_mode(),
        operations::check_install(),
        outage::claims_roll_on_after_an_outage(),
        first_contact::healthy_sets(),
    ]
}
