//! The checks as pure functions of what [`super::gather`] fetched, one file per family.

use serde_json::Value;

use super::versions::{self, Version};
use super::{Check, Release, runbook};
use crate::capabilities::{Capabilities, Name};
use crate::names;

mod capabilities;
mod dry_run;
mod permissions;
mod replicas;
mod version;
mod webhook;

pub(crate) use capabilities::*;
pub(crate) use dry_run::*;
pub(crate) use permissions::*;
pub(crate) use replicas::*;
pub(crate) use version::*;
pub(crate) use webhook::*;

#[cfg(test)]
mod tests;
