//! What each part of `serve` says of its own state, for `/readyz?verbose` (and, through the
//! pods' probe port, `check`): the entry point hands one board to the server and the
//! controller; each writes its own lines. Readiness itself (whether traffic may come) is the
//! server's to decide; these lines say which part is waiting for what.

use std::sync::Mutex;

/// How a part stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Ok,
    /// Not there yet (listing, waiting to lead).
    Waiting,
    /// Working, with something an operator should know.
    Warning,
}

impl State {
    /// The marker `/readyz?verbose` prints, as kube-apiserver's: `[+]` ok, `[-]` not.
    pub fn marker(self) -> &'static str {
        match self {
            Self::Ok => "[+]",
            Self::Waiting => "[-]",
            Self::Warning => "[!]",
        }
    }
}

/// One line: a part, its state, and what it is doing or waiting for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub name: &'static str,
    pub state: State,
    pub detail: String,
}

impl Part {
    /// The part's line of `/readyz?verbose`: `[+]name detail`.
    pub fn line(&self) -> String {
        format!("{}{} {}", self.state.marker(), self.name, self.detail)
    }
}

/// The board; cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct Health(Mutex<Vec<Part>>);

impl Health {
    /// Sets what `name` says, in place of what it said before.
    pub fn set(&self, name: &'static str, state: State, detail: impl Into<String>) {
        let detail = detail.into();
        let mut parts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match parts.iter_mut().find(|p| p.name == name) {
            Some(part) => {
                part.state = state;
                part.detail = detail;
            }
            None => parts.push(Part {
                name,
                state,
                detail,
            }),
        }
    }

    /// Takes `name`'s line off the board (what it said no longer holds).
    pub fn remove(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| p.name != name);
    }

    /// Every part, in the order they first spoke.
    pub fn parts(&self) -> Vec<Part> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_replaces_what_it_said_and_keeps_its_place() {
        let health = Health::default();
        health.set("controller", State::Waiting, "waiting for pods to list");
        health.set("gate", State::Warning, "unknown");
        health.set("controller", State::Ok, "leading");
        let parts = health.parts();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].name, parts[0].state, parts[0].detail.as_str()),
            ("controller", State::Ok, "leading")
        );
        assert_eq!(State::Waiting.marker(), "[-]");
        assert_eq!(parts[1].line(), "[!]gate unknown");

        health.remove("gate");
        health.remove("never said");
        assert_eq!(
            health.parts().iter().map(Part::line).collect::<Vec<_>>(),
            ["[+]controller leading"]
        );
    }
}
