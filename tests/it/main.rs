//! Integration tests: one binary, one module per area.

mod fake_apiserver_tests;
mod support;
