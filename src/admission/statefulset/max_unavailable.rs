//! KEP-961: `spec.updateStrategy.rollingUpdate.maxUnavailable`, validated exactly as
//! kube-apiserver validates it, plus the KEP's limits against replicas and partition.
//!
//! Runs in the mutating phase as well as the validating one: where the
//! `MaxUnavailableStatefulSet` gate is off the registry drops the field after the mutating
//! webhooks ran, so the validating webhook may never see it.

use serde_json::Value;

use crate::admission::warning::{self, Warning};
use crate::admission::{BadValue, FieldError};
use crate::names;

pub(crate) const ROLLING_UPDATE_PATH: &str = "spec.updateStrategy.rollingUpdate";
pub(crate) const PARTITION_PATH: &str = "spec.updateStrategy.rollingUpdate.partition";
pub(crate) const MAX_UNAVAILABLE_PATH: &str = "spec.updateStrategy.rollingUpdate.maxUnavailable";
/// Field path of the fallback annotation, as apimachinery names a map key.
pub(crate) const ANNOTATION_PATH: &str =
    "metadata.annotations[stateful-admission.io/max-unavailable]";
/// Longest fallback annotation value accepted; `100%` and any int32 fit with room to spare,
/// and it keeps a hostile value out of our messages.
pub(crate) const MAX_ANNOTATION_BYTES: usize = 64;

// apimachinery validation.IsValidPercent: RegexError(percentErrMsg, percentFmt, "1%", "93%").
const PERCENT_MSG: &str = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%' or '93%', regex used for validation is '[0-9]+%')";
// apivalidation.ValidateNonnegativeField
const NEGATIVE_MSG: &str = "must be greater than or equal to 0";
// apps/validation ValidatePositiveIntOrPercent, default branch; the doubled % is upstream's
// (a plain string, not a format).
const WRONG_TYPE_MSG: &str = "must be an integer or percentage (e.g '5%%')";

/// An `intstr.IntOrString` as the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IntOrPercent {
    Int(i64),
    Str(String),
}

/// A value that is neither an integer nor a string (or an integer outside int32).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrongType(pub String);

impl IntOrPercent {
    /// Reads the JSON field; `Ok(None)` when absent or null.
    pub(crate) fn from_json(value: Option<&Value>) -> Result<Option<Self>, WrongType> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(Self::Str(s.clone()))),
            Some(Value::Number(n)) => match n.as_i64() {
                // intstr.IntOrString holds an int32; anything else never decodes upstream.
                Some(i) if i32::try_from(i).is_ok() => Ok(Some(Self::Int(i))),
                _ => Err(WrongType(n.to_string())),
            },
            Some(other) => Err(WrongType(short_json(other))),
        }
    }

    /// Reads the fallback annotation: a decimal integer is an int, anything else a string.
    pub(crate) fn from_annotation(s: &str) -> Self {
        let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
        if !digits.is_empty()
            && digits.len() <= 10
            && digits.bytes().all(|b| b.is_ascii_digit())
            && let Ok(i) = s.parse::<i64>()
        {
            return Self::Int(i);
        }
        Self::Str(s.to_owned())
    }

    /// `IntOrString.String()`: what Go prints, and what the annotation stores.
    pub(crate) fn render(&self) -> String {
        match self {
            Self::Int(i) => i.to_string(),
            Self::Str(s) => s.clone(),
        }
    }

    fn bad_value(&self) -> BadValue {
        BadValue::Display(self.render())
    }

    /// `getPercentValue`: the number of a valid percent string.
    fn percent(&self) -> Option<i64> {
        match self {
            Self::Str(s) if is_valid_percent(s) => Some(go_atoi(&s[..s.len() - 1])),
            _ => None,
        }
    }

    /// `getIntOrPercentValue`: a percent's number, else `IntValue()` (Atoi of a string, 0 on
    /// error).
    fn int_or_percent_value(&self) -> i64 {
        match (self.percent(), self) {
            (Some(p), _) => p,
            (None, Self::Int(i)) => *i,
            (None, Self::Str(s)) => go_atoi(s),
        }
    }
}

/// `^[0-9]+%$`
fn is_valid_percent(s: &str) -> bool {
    s.strip_suffix('%')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Go's `strconv.Atoi` with the error ignored as upstream does: an optional sign and digits,
/// clamped to the int64 range on overflow, 0 for anything else.
fn go_atoi(s: &str) -> i64 {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return 0;
    }
    let mut value: i64 = 0;
    for b in digits.bytes() {
        let d = i64::from(b - b'0');
        value = match value.checked_mul(10).and_then(|v| {
            if negative {
                v.checked_sub(d)
            } else {
                v.checked_add(d)
            }
        }) {
            Some(v) => v,
            None => return if negative { i64::MIN } else { i64::MAX },
        };
    }
    value
}

fn short_json(v: &Value) -> String {
    crate::text::clip(&v.to_string(), 64)
}

/// apps/validation `validateRollingUpdateStatefulSet`, the maxUnavailable part:
/// `ValidatePositiveIntOrPercent`, "cannot be 0", `IsNotMoreThan100Percent`, in that order.
pub(crate) fn validate_int_or_percent(value: &IntOrPercent, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match value {
        IntOrPercent::Str(s) => {
            if !is_valid_percent(s) {
                errors.push(FieldError::invalid(path, value.bad_value(), PERCENT_MSG));
            }
        }
        IntOrPercent::Int(i) => {
            if *i < 0 {
                errors.push(FieldError::invalid(path, *i, NEGATIVE_MSG));
            }
        }
    }
    if value.int_or_percent_value() == 0 {
        errors.push(FieldError::invalid(path, value.bad_value(), "cannot be 0"));
    }
    if value.percent().is_some_and(|p| p > 100) {
        errors.push(FieldError::invalid(
            path,
            value.bad_value(),
            "must not be greater than 100%",
        ));
    }
    errors
}

/// The update strategy as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Strategy {
    /// `RollingUpdate` (also when the type is absent, as the apiserver defaults it).
    pub rolling: bool,
    pub partition: i64,
    pub max_unavailable: Option<IntOrPercent>,
}

/// apps/validation `ValidateStatefulSetSpec` (update strategy part) and
/// `validateRollingUpdateStatefulSet`: partition non-negative, maxUnavailable a positive int
/// or a percent of at most 100, no `rollingUpdate` block with `OnDelete`. Returns the errors
/// and the strategy read from the spec.
pub(crate) fn validate_update_strategy(spec: &Value) -> (Vec<FieldError>, Strategy) {
    let mut errors = Vec::new();
    let mut strategy = Strategy {
        rolling: true,
        ..Strategy::default()
    };
    let Some(update) = spec.get("updateStrategy").filter(|v| !v.is_null()) else {
        return (errors, strategy);
    };
    let rolling_update = update.get("rollingUpdate").filter(|v| !v.is_null());
    match update.get("type").and_then(Value::as_str) {
        None | Some("RollingUpdate") => {}
        Some("OnDelete") => {
            strategy.rolling = false;
            if let Some(ru) = rolling_update {
                errors.push(FieldError::invalid(
                    ROLLING_UPDATE_PATH,
                    BadValue::Display(go_struct(ru)),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
            return (errors, strategy);
        }
        // Unknown types are the apiserver's own business (it rejects them itself).
        Some(_) => {
            strategy.rolling = false;
            return (errors, strategy);
        }
    }
    let Some(ru) = rolling_update else {
        return (errors, strategy);
    };
    match ru.get("partition") {
        None | Some(Value::Null) => {}
        Some(p) => match p.as_i64() {
            Some(p) if p < 0 => errors.push(FieldError::invalid(PARTITION_PATH, p, NEGATIVE_MSG)),
            Some(p) => strategy.partition = p,
            None => errors.push(FieldError::invalid(
                PARTITION_PATH,
                BadValue::Display(short_json(p)),
                "must be an integer",
            )),
        },
    }
    match IntOrPercent::from_json(ru.get("maxUnavailable")) {
        Ok(None) => {}
        Ok(Some(mu)) => {
            errors.extend(validate_int_or_percent(&mu, MAX_UNAVAILABLE_PATH));
            strategy.max_unavailable = Some(mu);
        }
        Err(WrongType(raw)) => errors.push(FieldError::invalid(
            MAX_UNAVAILABLE_PATH,
            BadValue::Display(raw),
            WRONG_TYPE_MSG,
        )),
    }
    (errors, strategy)
}

/// How `%#v` prints the internal `apps.RollingUpdateStatefulSetStrategy`. Go prints a set
/// maxUnavailable pointer as an address; we print the value in its place.
fn go_struct(ru: &Value) -> String {
    let partition = ru.get("partition").and_then(Value::as_i64).unwrap_or(0);
    let max_unavailable = match IntOrPercent::from_json(ru.get("maxUnavailable")) {
        Ok(Some(v)) => v.render(),
        Ok(None) => "nil".to_owned(),
        Err(WrongType(raw)) => raw,
    };
    format!(
        "apps.RollingUpdateStatefulSetStrategy{{Partition:{partition}, MaxUnavailable:(*intstr.IntOrString)({max_unavailable})}}"
    )
}

/// What the StatefulSet controller makes of maxUnavailable (`getStatefulSetMaxUnavailable`):
/// `intstr.GetScaledValueFromIntOrPercent(v, replicas, roundUp=false)`, then at least 1.
pub(crate) fn effective(value: &IntOrPercent, replicas: i64) -> i64 {
    let n = match value.percent() {
        Some(p) => p.saturating_mul(replicas) / 100,
        None => value.int_or_percent_value(),
    };
    n.max(1)
}

/// The KEP's limits: maxUnavailable above replicas, or above the replicas staged by the
/// partition. A warning by default, a field error when `strict`.
pub(crate) fn check_against_replicas(
    value: &IntOrPercent,
    spec: &Value,
    partition: i64,
    path: &str,
    strict: bool,
) -> Result<Option<Warning>, FieldError> {
    let replicas = spec.get("replicas").and_then(Value::as_i64).unwrap_or(1);
    // A set scaled to zero has nothing to update; a partition at or above replicas pauses.
    if replicas <= 0 {
        return Ok(None);
    }
    let eff = effective(value, replicas);
    let written = warning::cut_to(&value.render(), 24);
    let shown = match value.percent() {
        Some(_) => format!("{written} ({eff} of {replicas} pods)"),
        None => written,
    };
    let (limit, what) = if eff > replicas {
        (replicas, format!("spec.replicas ({replicas})"))
    } else if partition > 0 && partition < replicas && eff > replicas - partition {
        let staged = replicas - partition;
        (
            staged,
            format!("spec.replicas - partition ({replicas} - {partition} = {staged})"),
        )
    } else {
        return Ok(None);
    };
    if strict {
        return Err(FieldError::invalid(
            path,
            value.bad_value(),
            format!("must not be greater than {what}; resolves to {eff}"),
        ));
    }
    Ok(Some(
        Warning::new(path)
            .fact(format!("{shown} is greater than {what}"))
            .fact(format!(
                "all {limit} pods it applies to may be unavailable at once during an update"
            )),
    ))
}

/// Whether a set asks for a budget through `stateful-admission.io/max-unavailable` with
/// `updateStrategy: {type: RollingUpdate}` and no `rollingUpdate`, and should get the
/// `rollingUpdate: {partition: 0}` that defaulting gives a set whose type is left empty.
///
/// Upstream `SetDefaults_StatefulSet` (pkg/apis/apps/v1/defaults.go) adds `rollingUpdate`
/// only when `type` is empty, so `{type: RollingUpdate}` keeps it nil. The StatefulSet
/// controller then re-creates a deleted pod whose ordinal is below `start +
/// status.currentReplicas` at the current revision (`newVersionedStatefulSetPod`,
/// pkg/controller/statefulset/stateful_set_utils.go), where with `rollingUpdate` it compares
/// with the partition. Only its own deletions lower `currentReplicas` first, so a pod the
/// companion controller deletes for the budget would come back at the old revision and be
/// deleted again. Nil and `{partition: 0}` differ in nothing else: both update from the top
/// ordinal down to 0, and with the `MaxUnavailableStatefulSet` gate on both resolve to a
/// maxUnavailable of 1 (defaulting, re-run after a webhook's patch, fills 1 into the block;
/// `updateStatefulSetAfterInvariantEstablished` takes 1 when the block is nil).
pub(crate) fn needs_rolling_update_block(
    spec: &Value,
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> bool {
    let Some(strategy) = spec.get("updateStrategy").filter(|v| v.is_object()) else {
        return false;
    };
    strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate")
        && strategy.get("rollingUpdate").is_none_or(Value::is_null)
        && annotations.is_some_and(|a| a.contains_key(names::MAX_UNAVAILABLE))
}

/// Reads and validates the fallback annotation (`stateful-admission.io/max-unavailable`).
pub(crate) fn annotation_value(raw: &str) -> Result<IntOrPercent, Vec<FieldError>> {
    if raw.len() > MAX_ANNOTATION_BYTES {
        return Err(vec![FieldError::too_long(
            ANNOTATION_PATH,
            MAX_ANNOTATION_BYTES,
        )]);
    }
    let value = IntOrPercent::from_annotation(raw);
    let errors = validate_int_or_percent(&value, ANNOTATION_PATH);
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(ru: Value) -> Value {
        json!({"replicas": 5, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": ru}})
    }

    fn messages(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    const P: &str = "spec.updateStrategy.rollingUpdate.maxUnavailable";

    #[test]
    fn max_unavailable_is_validated_with_upstream_messages() {
        let percent = format!("{P}: Invalid value: %V: {PERCENT_MSG}");
        let cases: Vec<(Value, Vec<String>)> = vec![
            (json!(1), vec![]),
            (json!(3), vec![]),
            (json!("1%"), vec![]),
            (json!("100%"), vec![]),
            (json!("007%"), vec![]),
            (
                json!(0),
                vec![format!("{P}: Invalid value: 0: cannot be 0")],
            ),
            (
                json!("0%"),
                vec![format!("{P}: Invalid value: 0%: cannot be 0")],
            ),
            (
                json!(-1),
                vec![format!(
                    "{P}: Invalid value: -1: must be greater than or equal to 0"
                )],
            ),
            (
                json!("101%"),
                vec![format!(
                    "{P}: Invalid value: 101%: must not be greater than 100%"
                )],
            ),
            // Atoi("abc") is 0, so upstream reports both.
            (
                json!("abc"),
                vec![
                    percent.replace("%V", "abc"),
                    format!("{P}: Invalid value: abc: cannot be 0"),
                ],
            ),
            // Atoi("50") is 50: only the percent error.
            (json!("50"), vec![percent.replace("%V", "50")]),
            (
                json!("-5%"),
                vec![
                    percent.replace("%V", "-5%"),
                    format!("{P}: Invalid value: -5%: cannot be 0"),
                ],
            ),
            (
                json!("99999999999999999999%"),
                vec![format!(
                    "{P}: Invalid value: 99999999999999999999%: must not be greater than 100%"
                )],
            ),
            (
                json!(true),
                vec![format!("{P}: Invalid value: true: {WRONG_TYPE_MSG}")],
            ),
            (
                json!(2.5),
                vec![format!("{P}: Invalid value: 2.5: {WRONG_TYPE_MSG}")],
            ),
            (
                json!(4_294_967_296_i64),
                vec![format!("{P}: Invalid value: 4294967296: {WRONG_TYPE_MSG}")],
            ),
            (
                json!({"a": 1}),
                vec![format!(
                    r#"{P}: Invalid value: {{"a":1}}: {WRONG_TYPE_MSG}"#
                )],
            ),
        ];
        for (mu, want) in cases {
            let (errors, _) = validate_update_strategy(&spec(json!({"maxUnavailable": mu})));
            assert_eq!(messages(&errors), want, "maxUnavailable {mu}");
        }
    }

    #[test]
    fn partition_and_on_delete_are_validated_like_upstream() {
        let (errors, _) = validate_update_strategy(&spec(json!({"partition": -1})));
        assert_eq!(
            messages(&errors),
            [
                "spec.updateStrategy.rollingUpdate.partition: Invalid value: -1: must be greater than or equal to 0"
            ]
        );
        let on_delete =
            json!({"updateStrategy": {"type": "OnDelete", "rollingUpdate": {"partition": 0}}});
        let (errors, s) = validate_update_strategy(&on_delete);
        assert!(!s.rolling);
        assert_eq!(
            messages(&errors),
            [
                "spec.updateStrategy.rollingUpdate: Invalid value: apps.RollingUpdateStatefulSetStrategy{Partition:0, MaxUnavailable:(*intstr.IntOrString)(nil)}: only allowed for updateStrategy 'RollingUpdate'"
            ]
        );
        let on_delete_null = json!({"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}});
        assert!(validate_update_strategy(&on_delete_null).0.is_empty());
        // No strategy at all, or an unknown type: nothing for us to say.
        assert!(validate_update_strategy(&json!({})).0.is_empty());
        assert!(
            validate_update_strategy(&json!({"updateStrategy": {"type": "Nope"}}))
                .0
                .is_empty()
        );
        let (errors, s) =
            validate_update_strategy(&spec(json!({"partition": 2, "maxUnavailable": "50%"})));
        assert!(errors.is_empty());
        assert_eq!(
            s,
            Strategy {
                rolling: true,
                partition: 2,
                max_unavailable: Some(IntOrPercent::Str("50%".into()))
            }
        );
    }

    #[test]
    fn percentages_resolve_like_the_controller() {
        let cases = [
            (IntOrPercent::Str("50%".into()), 5, 2),
            (IntOrPercent::Str("10%".into()), 5, 1),
            (IntOrPercent::Str("100%".into()), 7, 7),
            (IntOrPercent::Str("1%".into()), 3, 1),
            (IntOrPercent::Int(4), 3, 4),
            (IntOrPercent::Int(1), 10, 1),
        ];
        for (v, replicas, want) in cases {
            assert_eq!(effective(&v, replicas), want, "{v:?} of {replicas}");
        }
    }

    #[test]
    fn kep_limits_warn_by_default_and_deny_when_strict() {
        let s = |replicas: i64| json!({"replicas": replicas});
        let int = IntOrPercent::Int(5);
        let warning = check_against_replicas(&int, &s(3), 0, P, false).expect("warns");
        assert_eq!(
            warning.map(Warning::build),
            Some(vec![
                "spec.updateStrategy.rollingUpdate.maxUnavailable: 5 is greater than spec.replicas (3); all 3 pods it applies to may be unavailable at once during an update".to_owned()
            ])
        );
        let err = check_against_replicas(&int, &s(3), 0, P, true).expect_err("denies");
        assert_eq!(
            err.to_string(),
            format!(
                "{P}: Invalid value: 5: must not be greater than spec.replicas (3); resolves to 5"
            )
        );
        // Percent against the partition: 50% of 10 is 5, only 2 are staged.
        let pct = IntOrPercent::Str("50%".into());
        let warning = check_against_replicas(&pct, &s(10), 8, P, false)
            .expect("warns")
            .expect("a warning")
            .build()
            .join("\n");
        assert!(warning.contains("50% (5 of 10 pods)"), "{warning}");
        assert!(warning.contains("(10 - 8 = 2)"), "{warning}");
        // A hostile value that validates (leading zeros) is cut, saying so; every warning
        // stays within 256 characters.
        let zeros = IntOrPercent::Str(format!("{}50%", "0".repeat(200)));
        let warnings = check_against_replicas(&zeros, &s(10), 8, ANNOTATION_PATH, false)
            .expect("warns")
            .expect("a warning")
            .build();
        assert!(
            warnings.iter().all(|w| w.chars().count() <= 256),
            "{warnings:?}"
        );
        assert!(
            warnings[0].contains("... (cut from 203 characters) (5 of 10 pods)"),
            "{warnings:?}"
        );
        let err = check_against_replicas(&pct, &s(10), 8, P, true).expect_err("denies");
        assert!(err.to_string().ends_with("resolves to 5"), "{err}");
        // Within limits, scaled to zero, or paused by the partition: nothing.
        for (v, replicas, partition) in [
            (IntOrPercent::Int(3), 3, 0),
            (IntOrPercent::Int(2), 5, 3),
            (IntOrPercent::Int(9), 0, 0),
            (IntOrPercent::Int(2), 5, 5),
            (IntOrPercent::Str("100%".into()), 4, 0),
        ] {
            assert_eq!(
                check_against_replicas(&v, &s(replicas), partition, P, true),
                Ok(None),
                "{v:?} replicas {replicas} partition {partition}"
            );
        }
    }

    #[test]
    fn only_a_type_only_strategy_with_a_budget_gets_the_rolling_update_block() {
        let annotated =
            std::collections::BTreeMap::from([(names::MAX_UNAVAILABLE.to_owned(), "2".to_owned())]);
        let other = std::collections::BTreeMap::from([("a".to_owned(), "b".to_owned())]);
        let strategy = |s: Value| json!({"replicas": 5, "updateStrategy": s});
        let cases = [
            (
                "type only",
                strategy(json!({"type": "RollingUpdate"})),
                true,
            ),
            (
                "rollingUpdate null",
                strategy(json!({"type": "RollingUpdate", "rollingUpdate": null})),
                true,
            ),
            (
                "rollingUpdate set",
                strategy(json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 2}})),
                false,
            ),
            (
                "empty rollingUpdate (defaulting fills the partition)",
                strategy(json!({"type": "RollingUpdate", "rollingUpdate": {}})),
                false,
            ),
            ("type left empty: defaulted", strategy(json!({})), false),
            ("no strategy: defaulted", json!({"replicas": 5}), false),
            ("OnDelete", strategy(json!({"type": "OnDelete"})), false),
            ("unknown type", strategy(json!({"type": "Nope"})), false),
            ("not an object", strategy(json!("RollingUpdate")), false),
        ];
        for (what, spec, want) in cases {
            assert_eq!(
                needs_rolling_update_block(&spec, Some(&annotated)),
                want,
                "{what}"
            );
            assert!(
                !needs_rolling_update_block(&spec, Some(&other)),
                "{what}: no budget"
            );
            assert!(
                !needs_rolling_update_block(&spec, None),
                "{what}: no annotations"
            );
        }
    }

    #[test]
    fn fallback_annotation_values_are_validated() {
        let a = ANNOTATION_PATH;
        assert_eq!(annotation_value("2"), Ok(IntOrPercent::Int(2)));
        assert_eq!(annotation_value("25%"), Ok(IntOrPercent::Str("25%".into())));
        let cases = [
            ("0", format!("{a}: Invalid value: 0: cannot be 0")),
            (
                "-3",
                format!("{a}: Invalid value: -3: must be greater than or equal to 0"),
            ),
            (
                "150%",
                format!("{a}: Invalid value: 150%: must not be greater than 100%"),
            ),
            ("", format!("{a}: Invalid value: : {PERCENT_MSG}")),
            (
                "{\"x\":1}",
                format!("{a}: Invalid value: {{\"x\":1}}: {PERCENT_MSG}"),
            ),
        ];
        for (raw, want) in cases {
            let errors = annotation_value(raw).expect_err(raw);
            assert_eq!(messages(&errors)[0], want, "{raw}");
        }
        let huge = "9".repeat(10_000);
        assert_eq!(
            messages(&annotation_value(&huge).expect_err("huge")),
            [format!("{a}: Too long: must have at most 64 bytes")]
        );
    }

    #[test]
    fn atoi_matches_go() {
        for (s, want) in [
            ("12", 12),
            ("+7", 7),
            ("-7", -7),
            ("", 0),
            ("1a", 0),
            ("99999999999999999999", i64::MAX),
            ("-99999999999999999999", i64::MIN),
        ] {
            assert_eq!(go_atoi(s), want, "{s}");
        }
    }
}
