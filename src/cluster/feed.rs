//! The view's change feed: after a watch applied an event to its store, it tells every
//! subscriber which object changed. Applying and publishing happen in the same task, in that
//! order, so whoever reacts to a change reads a view at least as new as the change.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// A kind of object the view holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    StorageClass,
    Namespace,
    StatefulSet,
    Claim,
    Pod,
    Journal,
}

impl Kind {
    pub const ALL: [Self; 6] = [
        Self::StorageClass,
        Self::Namespace,
        Self::StatefulSet,
        Self::Claim,
        Self::Pod,
        Self::Journal,
    ];

    /// The kinds the webhook's rules read for their verdicts and patches (claims feed only a
    /// warning, which says when it could not look).
    pub const WEBHOOK: [Self; 3] = [Self::StorageClass, Self::Namespace, Self::StatefulSet];

    /// The resource's plural name, as `/readyz` and logs say it.
    pub fn plural(self) -> &'static str {
        match self {
            Self::StorageClass => "storageclasses",
            Self::Namespace => "namespaces",
            Self::StatefulSet => "statefulsets",
            Self::Claim => "persistentvolumeclaims",
            Self::Pod => "pods",
            Self::Journal => "journals",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of kinds, as a bit mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kinds(u8);

impl Kinds {
    pub fn of(kinds: &[Kind]) -> Self {
        Self(kinds.iter().fold(0, |m, k| m | k.bit()))
    }

    pub fn contains(self, kind: Kind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// Whether every kind of `other` is in this set.
    pub fn covers(self, other: Kinds) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn with(self, kind: Kind) -> Self {
        Self(self.0 | kind.bit())
    }

    /// The kinds of this set, in [`Kind::ALL`]'s order.
    pub fn list(self) -> Vec<Kind> {
        Kind::ALL
            .into_iter()
            .filter(|k| self.contains(*k))
            .collect()
    }
}

/// Which kinds have taken in their first complete list: written by the watches, read by the
/// view. Once synced a kind stays so (a relist replaces its content in place).
#[derive(Clone)]
pub(crate) struct SyncSender(Arc<tokio::sync::watch::Sender<Kinds>>);

impl SyncSender {
    pub(crate) fn new() -> (Self, tokio::sync::watch::Receiver<Kinds>) {
        let (tx, rx) = tokio::sync::watch::channel(Kinds::default());
        (Self(Arc::new(tx)), rx)
    }

    pub(crate) fn synced(&self, kind: Kind) {
        self.0.send_if_modified(|kinds| {
            let was = *kinds;
            *kinds = kinds.with(kind);
            *kinds != was
        });
    }
}

/// What changed in the view. A deletion names what the deleted object named (its owner),
/// since the object is no longer in the view to be asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    StorageClass(String),
    Namespace(String),
    StatefulSet {
        namespace: String,
        name: String,
    },
    Claim {
        namespace: String,
        name: String,
    },
    /// A pod, with the name of the StatefulSet that controls it.
    Pod {
        namespace: String,
        name: String,
        owner: Option<String>,
    },
    /// A journal, with the StatefulSet (namespace, name) it is about.
    Journal {
        name: String,
        owner: Option<(String, String)>,
    },
    /// A complete list of the kind was taken in (at start, and after the watch had to list
    /// again): anything of that kind may have changed or gone.
    Relisted(Kind),
    /// The kind's watch is current again after failing (the apiserver unreachable, or
    /// refusing it): what failed meanwhile is worth trying again at once.
    Resumed(Kind),
}

/// The subscribers; cheap to clone. With none, publishing costs a lock and nothing is kept.
#[derive(Clone, Default)]
pub(crate) struct Feed(Arc<Mutex<Vec<UnboundedSender<Change>>>>);

impl Feed {
    /// A receiver of every change published from now on.
    pub(crate) fn subscribe(&self) -> UnboundedReceiver<Change> {
        let (tx, rx) = unbounded_channel();
        self.subscribers().push(tx);
        rx
    }

    /// Sends the change `change()` builds to every subscriber (building it only when there
    /// is one); subscribers that went away are dropped.
    pub(crate) fn publish(&self, change: impl FnOnce() -> Change) {
        let mut subscribers = self.subscribers();
        if subscribers.is_empty() {
            return;
        }
        let change = change();
        subscribers.retain(|s| s.send(change.clone()).is_ok());
    }

    /// How many subscribers are held.
    #[cfg(test)]
    pub(crate) fn subscriber_count(&self) -> usize {
        self.subscribers().len()
    }

    fn subscribers(&self) -> std::sync::MutexGuard<'_, Vec<UnboundedSender<Change>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_reach_every_subscriber_and_closed_ones_are_dropped() {
        let feed = Feed::default();
        let mut built = 0;
        feed.publish(|| {
            built += 1;
            Change::Namespace("a".into())
        });
        assert_eq!(built, 0, "nothing is built without a subscriber");
        let mut first = feed.subscribe();
        let second = feed.subscribe();
        feed.publish(|| Change::StorageClass("gold".into()));
        drop(second);
        feed.publish(|| Change::Relisted(Kind::Claim));
        assert_eq!(feed.subscribers().len(), 1, "the closed subscriber is gone");
        assert_eq!(
            first.try_recv().ok(),
            Some(Change::StorageClass("gold".into()))
        );
        assert_eq!(first.try_recv().ok(), Some(Change::Relisted(Kind::Claim)));
        assert!(first.try_recv().is_err());
    }
}
