//! The plugin's book of allocations: which units each container got, with which token,
//! kept in a file so that the plugin's restart loses none, and matched against the
//! kubelet's pod resources list to learn each one's pod (its weight) and to end those
//! whose pod is gone.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tessera_client::pod::{PodGrant, Token};

/// The book cannot be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum BookError {
    /// Reading or writing its file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Its file is not a book: refused rather than started empty, which would leave
    /// the daemon's allocations of the pods it lists never freed.
    #[error(
        "{path} is not the device plugin's allocations ({source}): move it away to start with none"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: serde_json::Error,
    },
}

/// The pod a container with an allocation belongs to, as the kubelet lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    /// Its namespace (its weight's key).
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container's.
    pub container: String,
}

/// One container's allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// What its processes present to the daemon.
    pub token: Token,
    /// Its GPU.
    pub gpu: u32,
    /// Its units' device ids, sorted.
    pub units: Vec<String>,
    /// Bytes: its units' memory.
    pub memory: u64,
    /// Its weight now (the default until its pod is listed).
    pub weight: u32,
    /// Its pod, once the kubelet listed it.
    pub pod: Option<PodRef>,
    /// When it was made, milliseconds since the epoch.
    pub made_ms: u64,
    /// Its CDI device's name, where the plugin gives CDI devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdi: Option<String>,
}

impl Allocation {
    /// The daemon's grant for it.
    pub fn grant(&self) -> PodGrant {
        let name = match &self.pod {
            Some(p) => format!("{}/{}/{}", p.namespace, p.pod, p.container),
            None => format!("units {}", self.units.join(",")),
        };
        PodGrant {
            token: self.token,
            gpu: self.gpu,
            memory: self.memory,
            weight: self.weight,
            name,
        }
    }
}

/// One container holding units of this plugin's resource, in the kubelet's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its pod.
    pub pod: PodRef,
    /// Its units.
    pub units: Vec<String>,
}

/// What a reconciliation changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Allocations whose pod was learned (or whose weight the config changed): their
    /// grant is sent again.
    pub regranted: Vec<Allocation>,
    /// Allocations ended: their pod is gone, or never came.
    pub ended: Vec<Allocation>,
}

/// The allocations, and the file that keeps them.
#[derive(Debug)]
pub struct Book {
    path: PathBuf,
    allocations: Vec<Allocation>,
}

impl Book {
    /// The book kept in `path` (none there: empty).
    pub fn open(path: &Path) -> Result<Book, BookError> {
        let allocations = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|source| BookError::Corrupt { path: path.into(), source })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(BookError::Io { path: path.into(), source }),
        };
        Ok(Book { path: path.into(), allocations })
    }

    /// The allocations.
    pub fn all(&self) -> &[Allocation] {
        &self.allocations
    }

    /// Write the book: a new file renamed over the old, readable by root only (it holds
    /// the tokens).
    pub fn save(&self) -> Result<(), BookError> {
        let json = serde_json::to_value(&self.allocations).expect("allocations serialise");
        crate::cdi::write(&self.path, &json)
            .map_err(|e| BookError::Io { path: e.path, source: e.source })
    }

    /// Add `a`; returns the allocations that held any of its units, removed: the kubelet
    /// gives a unit to one container at a time, so their pods are gone.
    pub fn add(&mut self, a: Allocation) -> Vec<Allocation> {
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.allocations)
            .into_iter()
            .partition(|o| o.units.iter().any(|u| a.units.contains(u)));
        self.allocations = kept;
        self.allocations.push(a);
        gone
    }

    /// Remove the allocation with `token` (its grant failed).
    pub fn remove(&mut self, token: &Token) {
        self.allocations.retain(|a| !a.token.matches(token));
    }

    /// Match the book against the kubelet's list of containers holding this resource,
    /// read at `listed_ms` (milliseconds since the epoch): a listed allocation (the same
    /// units) learns its pod and its namespace's weight (`weight_of`); one whose pod was
    /// listed before and is not now has ended; one never listed ends `grace_ms` after it
    /// was made (its container was never made). An allocation made after the list was
    /// read is left as it is: the list cannot know it.
    pub fn reconcile(
        &mut self,
        listed: &[Listed],
        weight_of: impl Fn(&str) -> u32,
        listed_ms: u64,
        grace_ms: u64,
    ) -> Changes {
        let mut changes = Changes::default();
        let mut kept = Vec::with_capacity(self.allocations.len());
        let same = |l: &Listed, a: &Allocation| {
            let mut u = l.units.clone();
            u.sort();
            u.dedup();
            u == a.units
        };
        for mut a in std::mem::take(&mut self.allocations) {
            if a.made_ms >= listed_ms {
                kept.push(a);
                continue;
            }
            match listed.iter().find(|l| same(l, &a)) {
                Some(l) => {
                    let weight = weight_of(&l.pod.namespace);
                    if a.pod.as_ref() != Some(&l.pod) || a.weight != weight {
                        a.pod = Some(l.pod.clone());
                        a.weight = weight;
                        changes.regranted.push(a.clone());
                    }
                    kept.push(a);
                }
                None if a.pod.is_some() || listed_ms.saturating_sub(a.made_ms) >= grace_ms => {
                    changes.ended.push(a)
                }
                None => kept.push(a),
            }
        }
        self.allocations = kept;
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(units: &[&str], made_ms: u64) -> Allocation {
        Allocation {
            token: Token::random().unwrap(),
            gpu: 0,
            units: units.iter().map(|s| s.to_string()).collect(),
            memory: units.len() as u64,
            weight: 1,
            pod: None,
            made_ms,
            cdi: None,
        }
    }

    fn listed(ns: &str, pod: &str, units: &[&str]) -> Listed {
        Listed {
            pod: PodRef { namespace: ns.into(), pod: pod.into(), container: "main".into() },
            units: units.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_unit_given_again_ends_the_allocation_that_held_it() {
        let mut b = Book { path: "/nonexistent".into(), allocations: vec![] };
        let a = alloc(&["gpu0-0", "gpu0-1"], 0);
        assert!(b.add(a.clone()).is_empty());
        assert!(b.add(alloc(&["gpu0-2"], 0)).is_empty());
        assert_eq!(b.add(alloc(&["gpu0-1"], 0)), vec![a]);
        assert_eq!(b.all().len(), 2);
    }

    #[test]
    fn the_list_names_pods_ends_the_gone_and_waits_for_the_new() {
        let mut b = Book { path: "/nonexistent".into(), allocations: vec![] };
        let (a, c, fresh) =
            (alloc(&["gpu0-0", "gpu0-1"], 100), alloc(&["gpu0-2"], 100), alloc(&["gpu0-3"], 100));
        for x in [&a, &c, &fresh] {
            b.add(x.clone());
        }
        let w = |ns: &str| if ns == "team-a" { 3 } else { 1 };
        let list = [listed("team-a", "a", &["gpu0-0", "gpu0-1"]), listed("b", "b", &["gpu0-2"])];
        let ch = b.reconcile(&list, w, 110, 60);
        assert_eq!(ch.regranted.len(), 2);
        assert_eq!(ch.regranted[0].weight, 3);
        assert!(ch.ended.is_empty(), "the unlisted one is young");
        assert_eq!(b.reconcile(&list, w, 111, 60), Changes::default(), "nothing new");
        // pod b deleted; the never-listed one's grace runs out
        let ch = b.reconcile(&list[..1], w, 161, 60);
        let ended: Vec<_> = ch.ended.iter().map(|x| x.units.clone()).collect();
        assert_eq!(ended, vec![c.units.clone(), fresh.units.clone()]);
        assert_eq!(b.all().len(), 1);
        assert_eq!(b.all()[0].grant().name, "team-a/a/main");
        // the kubelet gives A's second unit to a new container while a list read before
        // is reconciled: the new one is not taken for A's, nor ended
        let new = alloc(&["gpu0-1"], 200);
        b.add(new.clone());
        let ch = b.reconcile(&list[..1], w, 199, 60);
        assert_eq!(ch, Changes::default(), "made after the list was read");
        let ch = b.reconcile(&list[..0], w, 201, 60);
        assert!(ch.ended.is_empty(), "never listed, young: {ch:?}");
        assert_eq!(b.all(), &[new]);
    }

    #[test]
    fn the_book_survives_the_plugin_and_a_bad_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("tessera-k8s-book-{}", std::process::id()));
        let path = dir.join("book.json");
        let mut b = Book::open(&path).unwrap();
        b.add(alloc(&["gpu1-0"], 5));
        b.save().unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(Book::open(&path).unwrap().all(), b.all());
        std::fs::write(&path, "{").unwrap();
        let e = Book::open(&path).unwrap_err().to_string();
        assert!(e.contains("move it away"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
