//! Writes a synthetic `--state` file (a JSON `List`) of the size issue 9 measures — 10,000
//! PVCs, 2,000 StatefulSets, 50 StorageClasses — for memory and cold-start measurements:
//!
//! `cargo run --release --example gen_state -- [CLAIMS SETS CLASSES] > state.json`

#[path = "../benches/support/state.rs"]
mod state;

use std::io::Write as _;

fn main() -> anyhow::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let mut size = state::Size::ISSUE;
    if let [claims, sets, classes] = args[..] {
        size = state::Size {
            claims,
            sets,
            classes,
            ..size
        };
    } else if !args.is_empty() {
        anyhow::bail!("usage: gen_state [CLAIMS SETS CLASSES]");
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer(&mut out, &state::list(size))?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}
