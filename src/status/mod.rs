//! `stateful-admission status`: where a storage rollout stands, and waiting for it, as
//! `kubectl rollout status` does for pods.
//!
//! [`gather`] watches what the controller records (read-only: list and watch), [`model`] turns
//! it into one status per StatefulSet with the rollout model the controller plans with (the
//! shape of which is [`report`]), [`judge`] says whether each is done, failed or under way, and
//! [`render`] prints it; all but `gather` are pure. This module only runs them: once, or on every change with `--watch` and `--wait`.

#[cfg(test)]
pub(crate) mod fixtures;
pub(crate) mod gather;
pub(crate) mod judge;
pub(crate) mod model;
pub(crate) mod render;
pub(crate) mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use futures::FutureExt;
use jiff::Timestamp;
use tokio::time::Instant;

use gather::{Applied, Feed, Store};
use model::{Absent, Followed, Key, Presence, Selection, StatusReport};
use render::{Table, TableOptions};

/// `--timeout` of `--wait` unless given.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(600);

/// The flags of `status`, kubectl's where kubectl has one.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// A StatefulSet: show its detail view (each claim, its resize conditions, our Events);
    /// with --wait, wait for it alone.
    pub name: Option<String>,
    /// Namespace (default: the kubeconfig context's namespace, as kubectl takes it).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(long, short = 'A', conflicts_with_all = ["namespace", "name"])]
    pub all_namespaces: bool,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long)]
    pub context: Option<String>,
    /// Kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Output format: the table by default, wide for more columns, json for scripts (the
    /// StatusReport documented in the README; one report per line with --watch or --wait).
    #[arg(long, short = 'o', value_enum, value_name = "wide|json")]
    pub output: Option<Output>,
    /// Redraw on every change (from watches); on a terminal with a progress bar per set,
    /// else one line per changed row. Ends on Ctrl-C or after --timeout.
    #[arg(long, short = 'w')]
    pub watch: bool,
    /// Wait until every selected set has its recorded templates on the live object and on
    /// the claims: exit 0 then, 1 when one failed, 2 on --timeout, a set not found or a
    /// cluster error; one line saying why and which object.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait (default 10m) or --watch (default: no limit) goes on; 0 means no
    /// limit. A duration like 90s, 10m or 1h30m.
    #[arg(long, value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
    /// Namespace of the controller, where its convergence journals are (the chart's release
    /// namespace).
    #[arg(long, default_value = "stateful-admission")]
    pub controller_namespace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Wide,
    Json,
}

/// kubectl's durations (`90s`, `10m`, `1h30m`), and `0` for none.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    let d: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("not a duration like 90s, 10m or 1h30m: {e}"))?;
    Duration::try_from(d).map_err(|_| "must not be negative".to_owned())
}

/// Exit codes.
const FAILED: u8 = 1;
const ERROR: u8 = 2;

/// Runs `status` to its end; returns the exit code.
pub async fn run(args: Args) -> u8 {
    let config = match client_config(&args).await {
        Ok(config) => config,
        Err(why) => {
            eprintln!("error: no cluster configuration (kubeconfig or in-cluster): {why}");
            return ERROR;
        }
    };
    let namespace = if args.all_namespaces {
        None
    } else {
        Some(
            args.namespace
                .clone()
                .unwrap_or_else(|| config.default_namespace.clone()),
        )
    };
    let client = match kube::Client::try_from(config) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("error: cannot build a client: {e}");
            return ERROR;
        }
    };
    let selection = Selection {
        namespace,
        name: args.name.clone(),
        controller_namespace: args.controller_namespace.clone(),
    };
    let follow = args.watch || args.wait;
    let timeout = match args.timeout {
        Some(t) => t,
        None if args.wait => DEFAULT_WAIT_TIMEOUT,
        None => Duration::ZERO,
    };
    let deadline = (!timeout.is_zero()).then(|| Instant::now() + timeout);
    // Waiting for a rollout, a cluster that answers with errors for a while is waited for too.
    let mut feed = Feed::start(&client, &selection, args.wait);
    let mut store = Store::default();
    let mut tracker = Tracker::new(&selection, Timestamp::now());
    let mut view = View::new(
        &args,
        selection.namespace.clone(),
        std::io::stdout().is_terminal() && follow,
    );
    // A one-shot run does not wait for a set that is not there.
    let grace = if follow {
        judge::NOT_FOUND_GRACE
    } else {
        Duration::ZERO
    };
    loop {
        if store.synced() {
            let now = Timestamp::now();
            tracker.note(&store.inputs, now);
            let mut report = model::build(&store.inputs, &selection, &tracker.followed(), now);
            judge::judge_report(&mut report, now, grace);
            tracker.saw(&report);
            if !follow {
                if let Some(code) = not_found(&report, &selection) {
                    return code;
                }
                view.show(&report, now);
                return 0;
            }
            view.show(&report, now);
            if args.wait {
                match judge::wait_result(&report) {
                    judge::WaitResult::Done(lines) => {
                        for line in lines {
                            // Standard output stays one JSON report per line.
                            if args.output == Some(Output::Json) {
                                eprintln!("{line}");
                            } else {
                                print(&format!("{line}\n"));
                            }
                        }
                        return 0;
                    }
                    judge::WaitResult::Failed(lines) => {
                        lines.iter().for_each(|l| eprintln!("error: {l}"));
                        return FAILED;
                    }
                    judge::WaitResult::NotFound(lines) => {
                        lines.iter().for_each(|l| eprintln!("error: {l}"));
                        return ERROR;
                    }
                    judge::WaitResult::Waiting => {}
                }
            }
        }
        // The next change: an update from a watch, an absent set's grace running out, or the
        // end of --timeout.
        let recheck = tracker.recheck_at(grace);
        tokio::select! {
            update = feed.next() => {
                let Some(update) = update else {
                    eprintln!("error: every watch ended");
                    return ERROR;
                };
                let mut changed = false;
                let mut next = Some(update);
                // Everything already arrived is applied before the next report.
                while let Some(update) = next {
                    match store.apply(update) {
                        Applied::Changed => changed = true,
                        Applied::Unchanged => {}
                        Applied::Fatal(why) => {
                            eprintln!("error: {why}");
                            return ERROR;
                        }
                    }
                    next = feed.next().now_or_never().flatten();
                }
                if !changed {
                    continue;
                }
            }
            () = sleep_until(recheck) => {}
            () = sleep_until(deadline) => {
                if !store.synced() {
                    let why = store.retrying().map(|w| format!(" ({w})")).unwrap_or_default();
                    eprintln!("error: timed out after {} before the cluster answered{why}", render::duration(timeout));
                    return ERROR;
                }
                if !args.wait {
                    return 0;
                }
                let now = Timestamp::now();
                let mut report = model::build(&store.inputs, &selection, &tracker.followed(), now);
                judge::judge_report(&mut report, now, grace);
                for line in judge::timed_out(&report, timeout, selection.namespace.as_deref()) {
                    eprintln!("error: {line}");
                }
                return ERROR;
            }
        }
    }
}

/// Sleeps until `at`, forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A run without --watch or --wait ends at once (2) when the named set is not there.
fn not_found(report: &StatusReport, selection: &Selection) -> Option<u8> {
    if selection.name.is_some()
        && let Some(set) = report
            .items
            .iter()
            .find(|s| s.verdict.result == model::Outcome::NotFound)
    {
        eprintln!(
            "error: statefulset {}/{} not found (when it is being re-created by its convergence, it is back within seconds)",
            set.namespace, set.name
        );
        return Some(ERROR);
    }
    None
}

async fn client_config(args: &Args) -> Result<kube::Config, String> {
    let options = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    match &args.kubeconfig {
        Some(path) => {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| e.to_string())
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| e.to_string()),
        None => kube::Config::infer().await.map_err(|e| e.to_string()),
    }
}

/// Writes to stdout; a reader that went away (`| head`) is not an error of ours.
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("error: cannot write the output: {e}");
    }
}

/// The sets this run follows beyond what is there now: the named one, and every set it has
/// reported, so that a set convergence deletes and creates again is waited for rather than
/// dropped, with when each went away.
#[derive(Debug)]
struct Tracker {
    followed: BTreeSet<Key>,
    absent: BTreeMap<Key, Timestamp>,
    /// When the last report was judged.
    judged_at: Option<Timestamp>,
}

impl Tracker {
    fn new(selection: &Selection, now: Timestamp) -> Self {
        let mut tracker = Self {
            followed: BTreeSet::new(),
            absent: BTreeMap::new(),
            judged_at: None,
        };
        if let (Some(namespace), Some(name)) = (&selection.namespace, &selection.name) {
            let key = (namespace.clone(), name.clone());
            tracker.followed.insert(key.clone());
            tracker.absent.insert(key, now);
        }
        tracker
    }

    /// Notes which followed sets are there at `now`, for the report judged at `now`.
    fn note(&mut self, inputs: &model::Inputs, now: Timestamp) {
        self.judged_at = Some(now);
        for key in &self.followed {
            if inputs.sets.objects.contains_key(key) {
                self.absent.remove(key);
            } else {
                self.absent.entry(key.clone()).or_insert(now);
            }
        }
    }

    /// Follows every set present in `report`.
    fn saw(&mut self, report: &StatusReport) {
        for set in &report.items {
            if set.presence == Presence::Present {
                self.followed
                    .insert((set.namespace.clone(), set.name.clone()));
            }
        }
    }

    fn followed(&self) -> Followed {
        Followed {
            sets: self.followed.clone(),
            absent: self
                .absent
                .iter()
                .map(|((namespace, name), since)| Absent {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    since: *since,
                })
                .collect(),
        }
    }

    /// When the first absent set's grace runs out (then it is judged not found).
    fn recheck_at(&self, grace: Duration) -> Option<Instant> {
        let left = recheck_in(
            self.absent.values().copied(),
            grace,
            self.judged_at?,
            Timestamp::now(),
        )?;
        Some(Instant::now() + left + Duration::from_millis(10))
    }
}

/// How long until the first grace of sets absent since `since` runs out that the report
/// judged at `judged` did not see run out: none left once it has passed (at once, not later),
/// and nothing to wait for when every grace had run out by `judged` (each was judged then).
fn recheck_in(
    since: impl Iterator<Item = Timestamp>,
    grace: Duration,
    judged: Timestamp,
    now: Timestamp,
) -> Option<Duration> {
    let end = since
        .filter_map(|t| t.checked_add(grace).ok())
        .filter(|end| *end > judged)
        .min()?;
    Some(Duration::try_from(now.duration_until(end)).unwrap_or(Duration::ZERO))
}

/// What is printed as reports come: once, redrawn on a terminal, or only what changed.
struct View {
    output: Option<Output>,
    detail: bool,
    /// The namespace selected (`None`: all).
    namespace: Option<String>,
    /// --watch or --wait.
    follow: bool,
    /// Redraw the screen (a terminal with --watch or --wait).
    redraw: bool,
    /// What was last drawn or printed.
    last: String,
    /// Column widths of the table first printed, and the rows last printed (without ages).
    widths: Option<Vec<usize>>,
    header_printed: bool,
    rows: BTreeMap<Key, Vec<String>>,
}

impl View {
    fn new(args: &Args, namespace: Option<String>, redraw: bool) -> Self {
        Self {
            output: args.output,
            detail: args.name.is_some(),
            namespace,
            follow: args.watch || args.wait,
            redraw,
            last: String::new(),
            widths: None,
            header_printed: false,
            rows: BTreeMap::new(),
        }
    }

    fn table_options(&self) -> TableOptions {
        TableOptions {
            wide: self.output == Some(Output::Wide),
            all_namespaces: self.namespace.is_none(),
            progress: self.redraw,
        }
    }

    fn show(&mut self, report: &StatusReport, now: Timestamp) {
        if self.output == Some(Output::Json) {
            // The report's time changes every time; what it says is what counts.
            let text = if self.follow {
                render::json_line(report)
            } else {
                render::json(report)
            };
            let mut same = report.clone();
            same.time = String::new();
            let key = render::json_line(&same);
            if key != self.last {
                self.last = key;
                print(&text);
            }
            return;
        }
        if report.items.is_empty() {
            // On stderr in every mode, as kubectl's "No resources found": stdout is the view.
            let text = render::nothing_found(self.namespace.as_deref());
            if text != self.last {
                eprint!("{text}");
                self.last = text;
            }
            return;
        }
        let text = self.text(report, now);
        if !self.follow {
            print(&text);
            return;
        }
        if self.redraw {
            if text != self.last {
                // Home and clear, as watch(1) redraws.
                print(&format!("\x1b[H\x1b[2J{text}"));
                self.last = text;
            }
            return;
        }
        self.print_changes(report, text, now);
    }

    fn text(&self, report: &StatusReport, now: Timestamp) -> String {
        match (self.detail, report.items.first()) {
            (true, Some(set)) => render::detail(set, now, self.redraw),
            _ => render::table(report, self.table_options(), now).render(),
        }
    }

    /// Not on a terminal: the first view whole, then each row that changed, laid out in the
    /// first table's columns (as `kubectl get --watch` prints).
    fn print_changes(&mut self, report: &StatusReport, text: String, now: Timestamp) {
        let table = render::table(report, self.table_options(), now);
        let ignored: Vec<usize> = table
            .header
            .iter()
            .enumerate()
            .filter(|(_, h)| *h == "AGE" || *h == "LAST-BATCH")
            .map(|(i, _)| i)
            .collect();
        let comparable = |cells: &[String]| -> Vec<String> {
            cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if ignored.contains(&i) {
                        String::new()
                    } else {
                        c.clone()
                    }
                })
                .collect()
        };
        if self.widths.is_none() {
            print(&text);
            self.widths = Some(table.widths());
            self.header_printed = !self.detail && !report.items.is_empty();
            for row in &table.rows {
                self.rows.insert(row.key.clone(), comparable(&row.cells));
            }
            return;
        }
        let widths = self.widths.clone().unwrap_or_default();
        for row in &table.rows {
            let now_cells = comparable(&row.cells);
            if self.rows.get(&row.key) == Some(&now_cells) {
                continue;
            }
            if !self.header_printed {
                print(&format!("{}\n", Table::line(&table.header, &widths)));
                self.header_printed = true;
            }
            print(&format!("{}\n", Table::line(&row.cells, &widths)));
            self.rows.insert(row.key.clone(), now_cells);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::fixtures::at;

    #[test]
    fn an_absent_sets_grace_is_rechecked_when_it_runs_out_and_not_later() {
        let grace = Duration::from_secs(30);
        let recheck = |since: &[i64], judged: i64, now: i64| {
            recheck_in(since.iter().map(|s| at(*s)), grace, at(judged), at(now))
        };
        // Running: the rest of it, for the first to run out.
        assert_eq!(recheck(&[90, 100], 110, 110), Some(Duration::from_secs(10)));
        // Run out after the last report (while it was being made): at once.
        assert_eq!(recheck(&[100], 129, 131), Some(Duration::ZERO));
        // Run out before the last report, which judged the set not found: nothing to wait for.
        assert_eq!(recheck(&[100], 140, 150), None);
        assert_eq!(recheck(&[], 140, 150), None);
    }
}
