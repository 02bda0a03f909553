//! The documentation's links: relative links name files that exist, anchors name headings
//! that exist, and the runbook sections the chart's alerts link to are where they say. The
//! flags the README and the chart's README name are the binary's.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Documents users read; their links are checked.
const DOCUMENTS: &[&str] = &[
    "README.md",
    "CHANGELOG.md",
    "BENCHMARKS.md",
    "docs/deployment.md",
    "docs/runbooks.md",
    "certs/README.md",
    "examples/reviews/README.md",
    "charts/stateful-admission/README.md",
];

/// The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks), with GitHub's `-1`,
/// `-2` suffixes for repeated headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let base = slug(heading.trim_start_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// Targets of inline links `[text](target)` outside code blocks and code spans.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // Drop code spans so that `a](b)` inside backticks is not read as a link.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                targets.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
    targets
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn relative_links_and_anchors_resolve() {
    let mut checked = 0;
    for doc in DOCUMENTS {
        let path = repo().join(doc);
        let text = read(&path);
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target.as_str(), ""));
            let linked = if file.is_empty() {
                path.clone()
            } else {
                path.parent().expect("a directory").join(file)
            };
            assert!(
                linked.exists(),
                "{doc}: link to {target}: {} does not exist",
                linked.display()
            );
            if !anchor.is_empty() {
                assert!(
                    linked.extension().is_some_and(|e| e == "md"),
                    "{doc}: anchor into a file that is not Markdown: {target}"
                );
                assert!(
                    anchors(&read(&linked)).contains(anchor),
                    "{doc}: link to {target}: no heading with that anchor"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "links checked: {checked}");
}

#[test]
fn the_alert_runbook_sections_have_the_anchors_alerts_link_to() {
    let runbooks = anchors(&read(&repo().join("docs/runbooks.md")));
    for anchor in [
        "webhook-errors",
        "webhook-latency",
        "certificate-expiry",
        "rollout-past-deadline",
        "convergence-journal-stuck",
        "controller-without-leader",
    ] {
        assert!(
            runbooks.contains(anchor),
            "docs/runbooks.md lacks #{anchor}"
        );
    }
}

#[test]
fn readme_and_deployment_guide_link_the_runbooks_and_the_changelog() {
    for (doc, runbooks, changelog) in [
        ("README.md", "docs/runbooks.md", "CHANGELOG.md"),
        ("docs/deployment.md", "runbooks.md", "../CHANGELOG.md"),
    ] {
        let targets = link_targets(&read(&repo().join(doc)));
        let links_to = |file: &str| targets.iter().any(|t| t.split('#').next() == Some(file));
        assert!(links_to(runbooks), "{doc} does not link {runbooks}");
        assert!(links_to(changelog), "{doc} does not link {changelog}");
    }
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug(" Webhook errors"), "webhook-errors");
    assert_eq!(
        slug(" `x509: certificate signed by unknown authority`"),
        "x509-certificate-signed-by-unknown-authority"
    );
    assert_eq!(
        slug(" Private clusters: the 8443 firewall rule"),
        "private-clusters-the-8443-firewall-rule"
    );
    assert_eq!(slug(" Argo CD"), "argo-cd");
    let repeated = anchors("# A\n## A\n```\n# A\n```\n### A\n");
    assert_eq!(
        repeated,
        BTreeSet::from(["a".to_owned(), "a-1".to_owned(), "a-2".to_owned()])
    );
}

#[test]
fn the_runbook_anchors_check_links_exist() {
    let runbooks = anchors(&read(&repo().join("docs/runbooks.md")));
    let mut linked = 0;
    // The checks, one file per family under src/check/judge/, and what gather says itself.
    let mut files = vec![
        "src/check/judge.rs".to_owned(),
        "src/check/gather.rs".to_owned(),
    ];
    let families = std::fs::read_dir(repo().join("src/check/judge")).expect("src/check/judge");
    for entry in families {
        let name = entry.expect("an entry").file_name();
        files.push(format!("src/check/judge/{}", name.to_string_lossy()));
    }
    for file in &files {
        let source = read(&repo().join(file));
        for part in source.split("runbook(\"").skip(1) {
            let anchor = part.split('"').next().unwrap_or_default();
            assert!(
                runbooks.contains(anchor),
                "{file}: docs/runbooks.md has no #{anchor}"
            );
            linked += 1;
        }
    }
    assert!(linked >= 8, "only {linked} runbook links found");
}

/// The version table of docs/runbooks.md and the one `check` uses say the same: for every
/// version a row names, KEP-961 and KEP-3333 are native exactly where the row says the gate
/// is on (or the feature GA).
#[test]
fn the_runbook_version_table_agrees_with_check() {
    use stateful_admission::check::versions::{Version, native};
    let text = read(&repo().join("docs/runbooks.md"));
    let section = text
        .split("### What each version implements natively")
        .nth(1)
        .and_then(|s| s.split("\n### ").next())
        .expect("the version table section");
    let mut rows = 0;
    for line in section.lines().filter(|l| l.starts_with("| 1.")) {
        let cells: Vec<String> = line
            .split('|')
            .map(|c| c.replace("**", "").trim().to_owned())
            .collect();
        // ["", versions, 4650, 961, 3333, 284, 2804, ""]
        let (versions, kep_961, kep_3333) = (&cells[1], &cells[3], &cells[4]);
        let named: Vec<Version> = versions
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|t| t.starts_with("1."))
            .filter_map(Version::parse)
            .collect();
        // "1.35.4 and later 1.35 patches" names 1.35 for its later patches, not 1.35.0.
        let named: Vec<Version> = named
            .iter()
            .filter(|v| v.patch != 0 || !named.iter().any(|w| w.minor == v.minor && w.patch != 0))
            .copied()
            .collect();
        assert!(!named.is_empty(), "no version in {line}");
        for version in named {
            let table = native(version);
            let of = |kep: &str| {
                table
                    .iter()
                    .find(|n| n.kep == kep)
                    .map(|n| n.native)
                    .expect("kep")
            };
            assert_eq!(
                of("KEP-961"),
                kep_961.contains("gate on"),
                "{version}: KEP-961 in {line}"
            );
            assert_eq!(
                of("KEP-3333"),
                kep_3333.contains("gate on") || kep_3333.starts_with("GA"),
                "{version}: KEP-3333 in {line}"
            );
            assert!(!of("KEP-4650") && cells[2] == "no", "{version}: {line}");
            assert!(!of("KEP-2804") && cells[6] == "no", "{version}: {line}");
            rows += 1;
        }
    }
    assert!(rows >= 10, "only {rows} versions read from the table");
}

/// The part of README.md under `heading`, up to the next heading of the same or a higher
/// level.
fn readme_section(heading: &str) -> String {
    let text = read(&repo().join("README.md"));
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README.md has no {heading:?}"));
    let body = &text[start + heading.len() + 2..];
    let end = body
        .match_indices("\n#")
        .find(|(at, _)| {
            let hashes = body[at + 1..].chars().take_while(|c| *c == '#').count();
            hashes <= level && body[at + 1 + hashes..].starts_with(' ')
        })
        .map_or(body.len(), |(at, _)| at);
    body[..end].to_owned()
}

/// README.md's sections on each command name every flag `--help` lists, and its tables give
/// each flag the default clap has (`off` for a switch); `serve` and `status` have a row for
/// every flag.
#[test]
fn readme_names_every_flag_of_each_command_with_its_default() {
    use clap::CommandFactory;
    let cli = stateful_admission::cli::Cli::command();
    let mut defaults_checked = 0;
    for (path, heading) in [
        (&["serve"][..], "### `serve`"),
        (&["review"][..], "### `review`"),
        (&["check"][..], "### `check`"),
        (&["certs", "generate"][..], "### `certs generate`"),
        (&["status"][..], "### `status`"),
        (&["gitops"][..], "### `gitops`"),
    ] {
        let command = path.iter().fold(cli.clone(), |c, name| {
            c.find_subcommand(name).expect("subcommand").clone()
        });
        let section = readme_section(heading);
        // Table rows: flags in the first cell (the long one first or not), the default in
        // the second.
        let rows: Vec<(Vec<&str>, &str)> = section
            .lines()
            .filter(|l| l.starts_with("| `-"))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let flags = cells[1]
                    .split(", ")
                    .map(|f| f.trim_matches('`'))
                    .filter(|f| f.starts_with("--"))
                    .collect();
                (flags, cells[2])
            })
            .collect();
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long().filter(|l| *l != "help") else {
                continue;
            };
            let flag = format!("--{long}");
            assert!(
                section.contains(&format!("`{flag}")) || section.contains(&format!(" {flag} ")),
                "README.md {heading} does not name {flag}"
            );
            let Some((_, cell)) = rows
                .iter()
                .find(|(flags, _)| flags.contains(&flag.as_str()))
            else {
                // serve and status have a table of every flag; the others name some in prose.
                assert!(
                    heading != "### `serve`" && heading != "### `status`",
                    "no row for {heading} {flag} in README.md"
                );
                continue;
            };
            let default: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let want = match (default.as_slice(), arg.get_action()) {
                ([], _) => continue,
                (_, clap::ArgAction::SetTrue) => "off".to_owned(),
                (values, _) => format!("`{}`", values.join(",")),
            };
            assert_eq!(*cell, want, "README.md {heading}: default of {flag}");
            defaults_checked += 1;
        }
    }
    assert!(
        defaults_checked >= 40,
        "only {defaults_checked} defaults checked"
    );
}

#[test]
fn readme_states_the_minimum_rust_version_of_cargo_toml() {
    let manifest = read(&repo().join("Cargo.toml"));
    let version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"'))
        .expect("rust-version in Cargo.toml");
    let readme = read(&repo().join("README.md"));
    assert!(
        readme.contains(&format!("Rust {version} or later")),
        "README.md does not say Rust {version} or later"
    );
}

/// What `.ci/run` runs, README.md says it runs.
#[test]
fn readme_names_every_step_of_ci_run() {
    let script = read(&repo().join(".ci/run"));
    let readme = read(&repo().join("README.md"));
    let mut steps = 0;
    for line in script.lines().map(str::trim) {
        // `stage "NAME" COMMAND…`: the command after the stage's name (or on the next line).
        let line = match line.strip_prefix("stage \"") {
            Some(rest) => rest
                .split_once('"')
                .map_or("", |(_, command)| command.trim()),
            None => line,
        };
        let named = if let Some(rest) = line.strip_prefix("bash ") {
            rest.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned()
        } else if line.starts_with("cargo fmt") {
            "cargo fmt --check".to_owned()
        } else if line.starts_with("cargo clippy") {
            "clippy".to_owned()
        } else if line.starts_with("cargo build --release") {
            "cargo build --release".to_owned()
        } else if line.starts_with("cargo test") {
            "cargo test --locked".to_owned()
        } else {
            continue;
        };
        assert!(
            readme.contains(&named),
            "README.md does not mention {named:?}, which .ci/run runs"
        );
        steps += 1;
    }
    assert!(steps >= 6, "only {steps} steps read from .ci/run");
}

/// Each `--flag` named in the prose of a Markdown text (outside fenced code blocks), with the
/// command its code span runs: `None` for a flag outside a code span or in one that does not
/// start with a command, else the span's first word (`helm lint --strict` gives `helm`).
fn prose_flags(text: &str) -> Vec<(String, Option<String>)> {
    let mut flags = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // Odd pieces are code spans.
        for (i, piece) in line.split('`').enumerate() {
            let first = piece.split_whitespace().next().unwrap_or_default();
            let command = (i % 2 == 1 && !first.starts_with('-')).then(|| first.to_owned());
            for word in piece.split(|c: char| c.is_whitespace() || c == '/' || c == '=') {
                let name: String = word
                    .strip_prefix("--")
                    .unwrap_or_default()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                // A flag starts with a letter (table rules are dashes too).
                if name.starts_with(|c: char| c.is_ascii_lowercase()) {
                    flags.push((name, command.clone()));
                }
            }
        }
    }
    flags
}

#[test]
fn prose_flags_are_read_with_their_command() {
    let flags = prose_flags(
        "`--resync` and `--tls-cert`/`--tls-key`; `helm lint --strict`, `serve --help`, \
         `--log-level=debug`, `check --release x`\n|---|---|\n```sh\nhelm install --namespace x\n```\n",
    );
    let flags: Vec<(&str, Option<&str>)> = flags
        .iter()
        .map(|(f, c)| (f.as_str(), c.as_deref()))
        .collect();
    assert_eq!(
        flags,
        [
            ("resync", None),
            ("tls-cert", None),
            ("tls-key", None),
            ("strict", Some("helm")),
            ("help", Some("serve")),
            ("log-level", None),
            ("release", Some("check")),
        ]
    );
}

/// The chart's README names only flags that exist: each `--flag` in its prose is one of
/// `stateful-admission serve` (the command the chart runs), or of the subcommand its code
/// span starts with; flags of `helm` and `kubectl` are theirs.
#[test]
fn the_chart_readme_names_only_flags_the_binary_has() {
    use clap::CommandFactory;
    let cli = stateful_admission::cli::Cli::command();
    let text = read(&repo().join("charts/stateful-admission/README.md"));
    let mut checked = 0;
    for (flag, command) in prose_flags(&text) {
        let subcommand = match command.as_deref() {
            Some("helm" | "kubectl") => continue,
            None | Some("stateful-admission") => "serve",
            Some(other) => other,
        };
        let Some(sub) = cli.find_subcommand(subcommand) else {
            panic!(
                "charts/stateful-admission/README.md: --{flag} in a span of {subcommand:?}, not a command of ours"
            )
        };
        let exists = flag == "help" || sub.get_arguments().any(|a| a.get_long() == Some(&flag));
        assert!(
            exists,
            "charts/stateful-admission/README.md names --{flag}, which `stateful-admission {subcommand} --help` does not list"
        );
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} flags checked");
}
