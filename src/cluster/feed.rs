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
