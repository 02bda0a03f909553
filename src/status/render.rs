//! The report as text (pure): the table, `-o wide`, the detail view of one set, `-o json`,
//! and the pieces `--watch` prints. Columns are laid out as kubectl's printers do (left
//! aligned, three spaces apart); ages are kubectl's human durations.

use std::time::Duration;

use jiff::Timestamp;

use super::model::{
    ClaimCounts, ClaimState, ClaimStatus, Condition, ConvergencePhase, FromTo, Key, MaxUnavailable,
    Outcome, Presence, SetStatus, StatusReport, TemplateChange,
};

/// How the table is drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TableOptions {
    /// `-o wide`: more columns.
    pub wide: bool,
    /// `-A`: a NAMESPACE column first.
    pub all_namespaces: bool,
    /// On a terminal with `--watch`: a progress bar per set.
    pub progress: bool,
}

/// Cells of a table, by row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Row>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub key: Key,
    pub cells: Vec<String>,
}

/// Space between columns, as kubectl's tabwriter pads.
const GAP: usize = 3;

impl Table {
    /// Column widths: the widest cell of each column, header included.
    pub(crate) fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(&row.cells) {
                *w = (*w).max(cell.chars().count());
            }
        }
        widths
    }

    /// One line of `cells` laid out in `widths` (a wider cell pushes the rest right).
    pub(crate) fn line(cells: &[String], widths: &[usize]) -> String {
        let mut out = String::new();
        let last = cells.len().saturating_sub(1);
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                let width = widths.get(i).copied().unwrap_or(0);
                let pad = width.saturating_sub(cell.chars().count()) + GAP;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out
    }

    /// The header and every row.
    pub(crate) fn render(&self) -> String {
        let widths = self.widths();
        let mut out = Self::line(&self.header, &widths);
        out.push('\n');
        for row in &self.rows {
            out.push_str(&Self::line(&row.cells, &widths));
            out.push('\n');
        }
        out
    }
}

/// The table of `report`.
pub(crate) fn table(report: &StatusReport, options: TableOptions, now: Timestamp) -> Table {
    let mut header: Vec<&str> = Vec::new();
    if options.all_namespaces {
        header.push("NAMESPACE");
    }
    header.extend([
        "NAME",
        "STATE",
        "POLICY",
        "CHANGE",
        "CLAIMS",
        "CONVERGENCE",
        "MAXUNAVAILABLE",
        "AVAILABLE",
        "PROGRESSING",
        "AGE",
    ]);
    if options.wide {
        header.extend(["JOURNAL", "LAST-BATCH", "MESSAGE"]);
    }
    if options.progress {
        header.push("PROGRESS");
    }
    let rows = report
        .items
        .iter()
        .map(|set| Row {
            key: (set.namespace.clone(), set.name.clone()),
            cells: cells(set, options, now),
        })
        .collect();
    Table {
        header: header.into_iter().map(str::to_owned).collect(),
        rows,
    }
}

fn cells(set: &SetStatus, options: TableOptions, now: Timestamp) -> Vec<String> {
    let mut cells = Vec::new();
    if options.all_namespaces {
        cells.push(set.namespace.clone());
    }
    let present = set.presence == Presence::Present;
    let or_dash = |s: String| if s.is_empty() { "-".to_owned() } else { s };
    cells.push(set.name.clone());
    cells.push(outcome(set.verdict.result).to_owned());
    cells.push(if present {
        set.policy.clone()
    } else {
        "-".to_owned()
    });
    let mut change = change_text(&set.changes);
    if change.is_empty() {
        change = change_text(&following(set));
    }
    let not_applied = not_applied_text(set);
    if !not_applied.is_empty() {
        if !change.is_empty() {
            change.push_str("; ");
        }
        change.push_str(&not_applied);
    }
    cells.push(or_dash(change));
    cells.push(if present {
        claims_text(&set.claims)
    } else {
        "-".to_owned()
    });
    cells.push(convergence_cell(set));
    cells.push(
        set.max_unavailable
            .as_ref()
            .map_or_else(|| "-".to_owned(), budget_text),
    );
    cells.push(condition_cell(&set.conditions, "Available"));
    cells.push(condition_cell(&set.conditions, "Progressing"));
    cells.push(
        set.change_recorded_at
            .as_deref()
            .and_then(|t| t.parse().ok())
            .map_or_else(|| "-".to_owned(), |t| age(t, now)),
    );
    if options.wide {
        cells.push(set.convergence.journal.as_ref().map_or_else(
            || "-".to_owned(),
            |j| match &set.convergence.journal_step {
                Some(step) => format!("{j} ({step})"),
                None => j.clone(),
            },
        ));
        cells.push(
            set.max_unavailable
                .as_ref()
                .and_then(|m| m.last_batch_time.as_deref())
                .and_then(|t| t.parse().ok())
                .map_or_else(|| "-".to_owned(), |t| age(t, now)),
        );
        cells.push(or_dash(set.verdict.message.clone()));
    }
    if options.progress {
        cells.push(if present && set.claims.total > 0 {
            progress_bar(set.claims.compatible, set.claims.total, 20)
        } else {
            "-".to_owned()
        });
    }
    cells
}

/// The phase, and how long an orphan delete has waited for the garbage collector where it
/// has for long: `deleting (gc 21s)`.
fn convergence_cell(set: &SetStatus) -> String {
    let phase = set.convergence.phase.as_str();
    match set.convergence.garbage_collector_wait_seconds {
        Some(seconds) => format!("{phase} (gc {seconds}s)"),
        None => phase.to_owned(),
    }
}

/// `1/2 (batch 2)`: the unavailable replicas (those being updated, and any down otherwise) of
/// the budget, then the pods the controller deleted in its batch of the update in progress.
fn budget_text(m: &MaxUnavailable) -> String {
    let mut text = format!("{}/{}", m.unavailable, m.budget);
    if let Some(batch) = m.batch {
        text.push_str(&format!(" (batch {batch})"));
    }
    text
}

pub(crate) fn outcome(o: Outcome) -> &'static str {
    match o {
        Outcome::Done => "Done",
        Outcome::Progressing => "Progressing",
        Outcome::Failed => "Failed",
        Outcome::NotFound => "NotFound",
    }
}

/// `True/Reason` of a condition, `-` without it.
fn condition_cell(conditions: &[Condition], type_: &str) -> String {
    conditions.iter().find(|c| c.type_ == type_).map_or_else(
        || "-".to_owned(),
        |c| {
            if c.reason.is_empty() {
                c.status.clone()
            } else {
                format!("{}/{}", c.status, c.reason)
            }
        },
    )
}

/// `data: 1Gi -> 2Gi, class fast -> faster; logs: labels`.
pub(crate) fn change_text(changes: &[TemplateChange]) -> String {
    let value = |v: &Option<String>| v.clone().unwrap_or_else(|| "unset".to_owned());
    changes
        .iter()
        .map(|c| {
            let mut parts = Vec::new();
            if let Some(s) = &c.storage {
                parts.push(format!("{} -> {}", value(&s.from), value(&s.to)));
            }
            if let Some(v) = &c.volume_attributes_class_name {
                parts.push(format!("class {} -> {}", value(&v.from), value(&v.to)));
            }
            if c.labels {
                parts.push("labels".to_owned());
            }
            if c.annotations {
                parts.push("annotations".to_owned());
            }
            format!("{}: {}", c.template, parts.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What claims are still being moved to, per template, where no change is recorded (the set
/// was re-created with it): the template's size and class (as the live templates carry them)
/// against the claims' sizes and classes, those of every claim the controller is patching or
/// will patch. Claims held back, incompatible or still provisioning are not moving.
pub(crate) fn following(set: &SetStatus) -> Vec<TemplateChange> {
    use crate::quantity::Quantity;
    let smaller = |have: &str, want: &str| match (Quantity::parse(have), Quantity::parse(want)) {
        (Ok(have), Ok(want)) => have < want,
        _ => have != want,
    };
    let add = |slot: &mut Option<FromTo>, from: String, to: &str| {
        let entry = slot.get_or_insert_with(|| FromTo {
            from: None,
            to: Some(to.to_owned()),
        });
        match &mut entry.from {
            Some(all) if !all.split(", ").any(|f| f == from) => {
                all.push_str(&format!(", {from}"));
            }
            Some(_) => {}
            None => entry.from = Some(from),
        }
    };
    let mut out: Vec<TemplateChange> = Vec::new();
    let moving = set.claim_list.iter().filter(|c| {
        matches!(
            c.state,
            ClaimState::Pending
                | ClaimState::Updating
                | ClaimState::Waiting
                | ClaimState::Failed
                | ClaimState::WaitingForRestart
                | ClaimState::Restarting
        )
    });
    for c in moving {
        let at = match out.iter().position(|t| t.template == c.template) {
            Some(at) => at,
            None => {
                out.push(TemplateChange {
                    template: c.template.clone(),
                    storage: None,
                    volume_attributes_class_name: None,
                    labels: false,
                    annotations: false,
                });
                out.len() - 1
            }
        };
        let change = &mut out[at];
        // Where the volume is: its capacity, else (not bound yet) what it asks for.
        if let (Some(size), Some(target)) = (c.capacity.as_ref().or(c.request.as_ref()), &c.target)
            && smaller(size, target)
        {
            add(&mut change.storage, size.clone(), target);
        }
        if let Some(target) = &c.target_volume_attributes_class {
            let current = c
                .current_volume_attributes_class
                .as_ref()
                .or(c.volume_attributes_class.as_ref());
            if current != Some(target) {
                let from = current.cloned().unwrap_or_else(|| "unset".to_owned());
                add(&mut change.volume_attributes_class_name, from, target);
            }
        }
    }
    out.retain(|c| c.storage.is_some() || c.volume_attributes_class_name.is_some());
    out
}

/// `data: class "gold" not applied`: each template's class the cluster cannot apply.
fn not_applied_text(set: &SetStatus) -> String {
    set.classes_not_applied()
        .into_iter()
        .map(|(template, class)| format!("{template}: class {} not applied", class.name))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `2/3 (1 updating, 1 over-sized)`: compatible of existing claims, then what else there is.
pub(crate) fn claims_text(c: &ClaimCounts) -> String {
    if c.total == 0 && c.missing == 0 {
        return "-".to_owned();
    }
    let mut extra = Vec::new();
    for (n, what) in [
        (c.updating, "updating"),
        (c.pending, "pending"),
        (c.held, "held"),
        (c.waiting, "waiting"),
        (c.provisioning, "provisioning"),
        (c.incompatible, "incompatible"),
        (c.failed, "failed"),
        (c.waiting_for_restart, "waiting for a restart"),
        (c.restarting, "restarting"),
        (c.over_sized, "over-sized"),
        (c.missing, "missing"),
    ] {
        if n > 0 {
            extra.push(format!("{n} {what}"));
        }
    }
    let mut text = format!("{}/{}", c.compatible, c.total);
    if !extra.is_empty() {
        text.push_str(&format!(" ({})", extra.join(", ")));
    }
    text
}

/// `[#########...........] 3/7`.
pub(crate) fn progress_bar(done: u32, total: u32, width: usize) -> String {
    let filled = if total == 0 {
        0
    } else {
        (usize::try_from(done).unwrap_or(0) * width / usize::try_from(total).unwrap_or(1))
            .min(width)
    };
    format!(
        "[{}{}] {done}/{total}",
        "#".repeat(filled),
        ".".repeat(width - filled)
    )
}

/// kubectl's age: apimachinery `duration.HumanDuration` of `now - t`.
pub(crate) fn age(t: Timestamp, now: Timestamp) -> String {
    let seconds = now.duration_since(t).as_secs();
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    human(seconds.max(0))
}

/// A `Duration` as kubectl prints one (`10m`, `1h30m`).
pub(crate) fn duration(d: Duration) -> String {
    human(i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn human(seconds: i64) -> String {
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let d = (hours / 24) % 365;
        return if d == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{d}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The detail view of one set, as `kubectl describe` lays one out.
pub(crate) fn detail(set: &SetStatus, now: Timestamp, progress: bool) -> String {
    let mut out = String::new();
    field(
        &mut out,
        "StatefulSet",
        format!("{}/{}", set.namespace, set.name),
    );
    field(&mut out, "State", state_text(set));
    if set.presence != Presence::Present {
        field(
            &mut out,
            "Convergence",
            convergence_text(set, set.convergence.phase),
        );
        return with_events(out, set, now);
    }
    let mut policy = set.policy.clone();
    if let Some(why) = &set.policy_error {
        policy.push_str(&format!(" (annotation ignored: {why})"));
    }
    policy.push_str(&format!(
        "; updateStrategy {}, partition {}, replicas {}",
        set.update_strategy, set.partition, set.replicas
    ));
    field(&mut out, "Policy", policy);
    if let Some(hold) = &set.hold {
        let next = hold
            .partition
            .min(i32::try_from(set.replicas).unwrap_or(i32::MAX))
            - 1;
        let text = if next >= hold.user_partition {
            format!(
                "rolling update held at partition {} (yours: {}): the claims of replica {next} are patched, then its pod is re-created, once, for the new template and the grown claims",
                hold.effective(),
                hold.user_partition
            )
        } else {
            format!(
                "rolling update through to your partition {}: the hold goes",
                hold.user_partition
            )
        };
        field(&mut out, "Coordinated", text);
    }
    if let Some(why) = &set.hold_error {
        field(
            &mut out,
            "Coordinated",
            format!(
                "{} does not parse ({why}): the controller removes it",
                crate::names::ROLLOUT_HOLD
            ),
        );
    }
    let change = change_text(&set.changes);
    let recorded = set
        .change_recorded_at
        .as_deref()
        .and_then(|t| t.parse().ok())
        .map(|t| format!(" (recorded {} ago)", age(t, now)))
        .unwrap_or_default();
    // Nothing recorded now, with an age: the change was recorded and the live object carries
    // it (the age is only there while its claims or its convergence are still under way).
    let moving = change_text(&following(set));
    let change = match (change.is_empty(), moving.is_empty(), recorded.is_empty()) {
        (false, _, _) => format!("{change}{recorded}"),
        (true, false, _) => format!("applied; claims following: {moving}{recorded}"),
        (true, true, false) => format!("applied{recorded}"),
        (true, true, true) => "none recorded".to_owned(),
    };
    field(&mut out, "Change", change);
    for (template, class) in set.classes_not_applied() {
        field(
            &mut out,
            "Not applied",
            format!(
                "{template}: volumeAttributesClassName {:?}: {}{}",
                class.name,
                class.reason,
                if class.changed {
                    " (a recorded change: it fails once the rest is done)"
                } else {
                    " (in the template all along: reported, not awaited)"
                }
            ),
        );
    }
    if let Some(why) = &set.desired_templates_error {
        field(&mut out, "Refused", why.clone());
    }
    if let Some(why) = &set.refusal {
        field(&mut out, "Refused", why.clone());
    }
    field(
        &mut out,
        "Convergence",
        convergence_text(set, set.convergence.phase),
    );
    if let Some(m) = &set.max_unavailable {
        let mut text = format!(
            "{} ({}), budget {}, {} unavailable, {} updated",
            m.value, m.source, m.budget, m.unavailable, m.updated_replicas
        );
        if let Some(batch) = m.batch {
            text.push_str(&format!(", {batch} in this update's last batch"));
        }
        if let (Some(note), Some(t)) = (&m.last_batch, &m.last_batch_time) {
            let when = t.parse().map(|t| age(t, now)).unwrap_or_default();
            text.push_str(&format!("; last batch {when} ago: {note}"));
        }
        field(&mut out, "MaxUnavailable", text);
    }
    let mut claims = claims_text(&set.claims);
    if progress && set.claims.total > 0 {
        claims = format!(
            "{}  {claims}",
            progress_bar(set.claims.compatible, set.claims.total, 20)
        );
    }
    if !set.claims_awaited {
        claims.push_str(" (not awaited: policy OnDelete)");
    }
    field(&mut out, "Claims", claims);
    if !set.conditions.is_empty() {
        out.push_str("Conditions:\n");
        let mut table = Table {
            header: ["Type", "Status", "Reason", "Age", "Message"]
                .map(str::to_owned)
                .to_vec(),
            rows: Vec::new(),
        };
        for c in &set.conditions {
            table.rows.push(Row {
                key: Key::default(),
                cells: vec![
                    c.type_.clone(),
                    c.status.clone(),
                    dash(&c.reason),
                    c.last_transition_time
                        .as_deref()
                        .and_then(|t| t.parse().ok())
                        .map_or_else(|| "-".to_owned(), |t| age(t, now)),
                    dash(&c.message),
                ],
            });
        }
        out.push_str(&indent(&table.render()));
    }
    if !set.claim_list.is_empty() {
        out.push_str("Volume claims:\n");
        let mut table = Table {
            header: [
                "Name", "State", "Request", "Capacity", "Target", "VAClass", "Detail",
            ]
            .map(str::to_owned)
            .to_vec(),
            rows: Vec::new(),
        };
        for c in &set.claim_list {
            table.rows.push(Row {
                key: Key::default(),
                cells: vec![
                    c.name.clone(),
                    claim_state(c.state).to_owned(),
                    opt(&c.request),
                    opt(&c.capacity),
                    opt(&c.target),
                    vac_text(c),
                    claim_detail(c),
                ],
            });
        }
        out.push_str(&indent(&table.render()));
    }
    with_events(out, set, now)
}

/// `Progressing (UpdatingClaims): 1 of 3 claims compatible; …`: the verdict, its reason (as
/// `-o json` gives it, and the runbooks name it) and why.
fn state_text(set: &SetStatus) -> String {
    let v = &set.verdict;
    match v.reason.as_str() {
        "" => format!("{}: {}", outcome(v.result), v.message),
        reason => format!("{} ({reason}): {}", outcome(v.result), v.message),
    }
}

/// `Name:` padded to the value column.
fn field(out: &mut String, name: &str, value: String) {
    out.push_str(&format!("{:<16}{value}\n", format!("{name}:")));
}

fn with_events(mut out: String, set: &SetStatus, now: Timestamp) -> String {
    if set.events.is_empty() {
        out.push_str("Events:         <none of stateful-admission>\n");
        return out;
    }
    out.push_str("Events:\n");
    let mut table = Table {
        header: ["Type", "Reason", "Age", "Object", "Message"]
            .map(str::to_owned)
            .to_vec(),
        rows: Vec::new(),
    };
    for e in &set.events {
        let mut when = e
            .time
            .as_deref()
            .and_then(|t| t.parse().ok())
            .map_or_else(|| "-".to_owned(), |t| age(t, now));
        if e.count > 1 {
            when = format!("{when} (x{})", e.count);
        }
        table.rows.push(Row {
            key: Key::default(),
            cells: vec![
                e.type_.clone(),
                e.reason.clone(),
                when,
                e.object.clone(),
                e.note.clone(),
            ],
        });
    }
    out.push_str(&indent(&table.render()));
    out
}

fn convergence_text(set: &SetStatus, phase: ConvergencePhase) -> String {
    let c = &set.convergence;
    let mut text = phase.as_str().to_owned();
    if let Some(journal) = &c.journal {
        text.push_str(&format!(", journal {journal}"));
        if let Some(step) = &c.journal_step {
            text.push_str(&format!(" (step {step})"));
        }
    }
    if let Some(note) = &c.message {
        text.push_str(&format!(": {note}"));
    }
    text
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        s.to_owned()
    }
}

fn opt(s: &Option<String>) -> String {
    s.clone().unwrap_or_else(|| "-".to_owned())
}

pub(crate) fn claim_state(s: ClaimState) -> &'static str {
    match s {
        ClaimState::Compatible => "Compatible",
        ClaimState::Updating => "Updating",
        ClaimState::Pending => "Pending",
        ClaimState::Held => "Held",
        ClaimState::Waiting => "Waiting",
        ClaimState::Provisioning => "Provisioning",
        ClaimState::Incompatible => "Incompatible",
        ClaimState::Failed => "Failed",
        ClaimState::WaitingForRestart => "WaitingForRestart",
        ClaimState::Restarting => "Restarting",
        ClaimState::Missing => "Missing",
    }
}

/// `current/target` volumeAttributesClassName, with the requested one where it differs from
/// the current (a modification in progress).
fn vac_text(c: &ClaimStatus) -> String {
    let current = c.current_volume_attributes_class.as_deref().unwrap_or("-");
    let target = c.target_volume_attributes_class.as_deref().unwrap_or("-");
    if current == "-" && target == "-" && c.volume_attributes_class.is_none() {
        return "-".to_owned();
    }
    match c.volume_attributes_class.as_deref() {
        Some(requested) if requested != current => format!("{current} ({requested})/{target}"),
        _ => format!("{current}/{target}"),
    }
}

/// The claim's message, its resize and modification conditions, `allocatedResourceStatuses`
/// and `modifyVolumeStatus`.
fn claim_detail(c: &ClaimStatus) -> String {
    let mut parts = Vec::new();
    if let Some(m) = &c.message {
        parts.push(m.clone());
    }
    // A failure's message already quotes where it was found.
    let said = |what: &str| {
        c.state == ClaimState::Failed && c.message.as_deref().is_some_and(|m| m.starts_with(what))
    };
    for k in &c.conditions {
        if said(&k.type_) {
            continue;
        }
        let mut text = k.type_.clone();
        if k.status != "True" {
            text.push_str(&format!("={}", k.status));
        }
        if let Some(m) = k.message.as_ref().or(k.reason.as_ref()) {
            text.push_str(&format!(": {m}"));
        }
        parts.push(text);
    }
    if !said("allocatedResourceStatuses") {
        for (resource, status) in &c.allocated_resource_statuses {
            parts.push(format!("{resource}: {status}"));
        }
    }
    if let Some(m) = c
        .modify_volume_status
        .as_ref()
        .filter(|_| !said("modifyVolumeStatus"))
    {
        parts.push(format!("modifyVolumeStatus: {m}"));
    }
    if let Some(phase) = c.phase.as_deref().filter(|p| *p != "Bound") {
        parts.push(phase.to_owned());
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join("; ")
    }
}

/// `-o json`: the report, indented.
pub(crate) fn json(report: &StatusReport) -> String {
    serde_json::to_string_pretty(report).unwrap_or_else(|_| "{}".to_owned()) + "\n"
}

/// `-o json` with `--watch`: one report per line.
pub(crate) fn json_line(report: &StatusReport) -> String {
    serde_json::to_string(report).unwrap_or_else(|_| "{}".to_owned()) + "\n"
}

/// What is printed when nothing matched, as kubectl says it.
pub(crate) fn nothing_found(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("No StatefulSets with a storage rollout found in {ns} namespace.\n"),
        None => "No StatefulSets with a storage rollout found.\n".to_owned(),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod documented;
