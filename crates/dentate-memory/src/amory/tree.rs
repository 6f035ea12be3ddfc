//! The episodic memory as a tree — narrative (plot) → sub-plots →
//! fragments — read from the store's items and kept in step with each
//! commit.
//!
//! Nothing here is stored apart from the items: a narrative is an item of
//! kind [`NARRATIVE`] whose text is its [`Head`] (headline, owner,
//! characters, one per line); a sub-plot is an item of kind [`SUBPLOT`]
//! whose text is its headline and whose parent is its narrative; a
//! fragment is an item of kind [`FRAGMENT`] whose parent is its sub-plot
//! once consolidated, its narrative before. A fragment's `turn` is the
//! binding iteration that made it, so a narrative's last activity is the
//! latest turn among its fragments.

use super::{FRAGMENT, NARRATIVE, SUBPLOT};
use crate::error::Result;
use crate::store::Store;
use crate::time::human_date;
use std::collections::HashMap;

/// What a narrative is about: its headline, its owner (the speaker whose
/// story it is) and its characters (people and key entities).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Head {
    /// The main plot headline.
    pub headline: String,
    /// The story's owner.
    pub owner: String,
    /// Characters, owner first.
    pub characters: Vec<String>,
}

/// Keeps a field on one line and free of the list separator.
fn clean(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Head {
    /// A head with its fields cleaned (one line each; no commas in names);
    /// the owner is put first among the characters.
    pub fn new(headline: &str, owner: &str, characters: &[String]) -> Head {
        let owner = clean(owner).replace(',', "");
        let mut chars: Vec<String> = Vec::new();
        for c in std::iter::once(&owner).chain(characters) {
            let c = clean(c).replace(',', "");
            if !c.is_empty() && !chars.iter().any(|x| x.eq_ignore_ascii_case(&c)) {
                chars.push(c);
            }
        }
        Head {
            headline: clean(headline),
            owner,
            characters: chars,
        }
    }

    /// The stored text: `headline`, `Owner: …`, `Characters: a, b`.
    pub fn text(&self) -> String {
        format!(
            "{}\nOwner: {}\nCharacters: {}",
            self.headline,
            self.owner,
            self.characters.join(", ")
        )
    }

    /// Reads [`Head::text`] back; a text without the owner and characters
    /// lines (a user's correction) is all headline.
    pub fn parse(text: &str) -> Head {
        let mut lines = text.lines();
        let headline = lines.next().unwrap_or("").trim().to_string();
        let (mut owner, mut characters) = (String::new(), Vec::new());
        let mut extra = Vec::new();
        for l in lines {
            if let Some(o) = l.strip_prefix("Owner: ") {
                owner = o.trim().to_string();
            } else if let Some(c) = l.strip_prefix("Characters: ") {
                characters = c
                    .split(',')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(String::from)
                    .collect();
            } else if !l.trim().is_empty() {
                extra.push(l.trim());
            }
        }
        let headline = if extra.is_empty() {
            headline
        } else {
            format!("{headline} {}", extra.join(" "))
        };
        Head {
            headline,
            owner,
            characters,
        }
    }

    /// One line for prompts and listings: `headline [owner] (characters: …)`.
    pub fn line(&self) -> String {
        let mut s = self.headline.clone();
        if !self.owner.is_empty() {
            s.push_str(&format!(" [{}]", self.owner));
        }
        if !self.characters.is_empty() {
            s.push_str(&format!(" (characters: {})", self.characters.join(", ")));
        }
        s
    }
}

/// A consolidated block of a narrative's fragments.
#[derive(Debug, Clone, PartialEq)]
pub struct SubPlot {
    /// Its item id.
    pub id: i64,
    /// Its headline.
    pub headline: String,
    /// Its fragments' item ids, in order.
    pub fragments: Vec<i64>,
}

/// One narrative thread.
#[derive(Debug, Clone, PartialEq)]
pub struct Narrative {
    /// Its item id.
    pub id: i64,
    /// Headline, owner, characters.
    pub head: Head,
    /// Sub-plots, oldest first.
    pub subplots: Vec<SubPlot>,
    /// Fragments not yet consolidated, in order.
    pub tail: Vec<i64>,
    /// The latest binding iteration that added a fragment.
    pub last_bound: i64,
}

impl Narrative {
    /// Every fragment id, sub-plots first, in order.
    pub fn fragments(&self) -> impl Iterator<Item = i64> + '_ {
        self.subplots
            .iter()
            .flat_map(|s| s.fragments.iter().copied())
            .chain(self.tail.iter().copied())
    }
}

/// A leaf of the tree: what coherence retrieval picks.
#[derive(Debug, Clone, PartialEq)]
pub struct Leaf {
    /// Position of its narrative in [`Tree::narratives`].
    pub narrative: usize,
    /// Its sub-plot's item id; `None` for a block of unconsolidated
    /// fragments.
    pub subplot: Option<i64>,
    /// Its fragments' item ids, in order.
    pub fragments: Vec<i64>,
}

/// A fragment as the pipeline needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Frag {
    /// Item id.
    pub id: i64,
    /// `Speaker: text`.
    pub text: String,
    /// Source message ids.
    pub sources: Vec<i64>,
    /// When it was said.
    pub said_at: Option<i64>,
    /// Binding iteration.
    pub turn: i64,
}

/// The narratives of one user, in id (creation) order, and their
/// fragments.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// Narratives, oldest first.
    pub narratives: Vec<Narrative>,
    by_id: HashMap<i64, usize>,
    /// Every live fragment by id.
    pub frags: HashMap<i64, Frag>,
}

/// The parent of an item, deleted or not.
fn parent_of(store: &Store, id: i64) -> Result<Option<i64>> {
    use crate::sql::{Sql, args};
    match store
        .conn
        .query_opt("SELECT parent FROM items WHERE id = ?1", args![id])?
    {
        Some(r) => r.opt_int(0),
        None => Ok(None),
    }
}

impl Tree {
    /// Reads the tree of `pipeline` for `user` from the store.
    pub fn load(store: &Store, user: &str, pipeline: &str) -> Result<Tree> {
        let mut tree = Tree::default();
        for it in store.items(user, pipeline, Some(NARRATIVE))? {
            tree.add_narrative(it.id, Head::parse(&it.text));
        }
        let subplots = store.items(user, pipeline, Some(SUBPLOT))?;
        let mut sub_of: HashMap<i64, (usize, usize)> = HashMap::new();
        for it in &subplots {
            if let Some(&n) = it.parent.and_then(|p| tree.by_id.get(&p)) {
                let nar = &mut tree.narratives[n];
                sub_of.insert(it.id, (n, nar.subplots.len()));
                nar.subplots.push(SubPlot {
                    id: it.id,
                    headline: it.text.clone(),
                    fragments: Vec::new(),
                });
            }
        }
        for it in store.items(user, pipeline, Some(FRAGMENT))? {
            let Some(parent) = it.parent else { continue };
            let slot = if let Some(&(n, s)) = sub_of.get(&parent) {
                Some((n, Some(s)))
            } else {
                tree.by_id.get(&parent).map(|&n| (n, None))
            };
            // A fragment whose sub-plot was forgotten belongs to the
            // narrative of that sub-plot, unconsolidated.
            let slot = match slot {
                Some(s) => Some(s),
                None => parent_of(store, parent)?
                    .and_then(|g| tree.by_id.get(&g))
                    .map(|&n| (n, None)),
            };
            let Some((n, s)) = slot else { continue };
            tree.add_fragment(
                n,
                s,
                Frag {
                    id: it.id,
                    text: it.text,
                    sources: it.sources,
                    said_at: it.said_at,
                    turn: it.turn,
                },
            );
        }
        Ok(tree)
    }

    /// Adds a narrative (after its commit).
    pub fn add_narrative(&mut self, id: i64, head: Head) -> usize {
        let pos = self.narratives.len();
        self.narratives.push(Narrative {
            id,
            head,
            subplots: Vec::new(),
            tail: Vec::new(),
            last_bound: i64::MIN,
        });
        self.by_id.insert(id, pos);
        pos
    }

    /// Adds a fragment to narrative `n` (under sub-plot `s`, if given).
    pub fn add_fragment(&mut self, n: usize, s: Option<usize>, f: Frag) {
        let nar = &mut self.narratives[n];
        match s.and_then(|s| nar.subplots.get_mut(s)) {
            Some(sp) => sp.fragments.push(f.id),
            None => nar.tail.push(f.id),
        }
        nar.last_bound = nar.last_bound.max(f.turn);
        self.frags.insert(f.id, f);
    }

    /// The position of narrative `id`.
    pub fn position(&self, id: i64) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    /// The leaves in tree order: each sub-plot, then the narrative's
    /// unconsolidated fragments in blocks of at most `window`.
    pub fn leaves(&self, window: usize) -> Vec<Leaf> {
        let mut out = Vec::new();
        for (n, nar) in self.narratives.iter().enumerate() {
            for sp in &nar.subplots {
                out.push(Leaf {
                    narrative: n,
                    subplot: Some(sp.id),
                    fragments: sp.fragments.clone(),
                });
            }
            for block in nar.tail.chunks(window.max(1)) {
                out.push(Leaf {
                    narrative: n,
                    subplot: None,
                    fragments: block.to_vec(),
                });
            }
        }
        out
    }

    /// Fragments in the tree.
    pub fn fragment_count(&self) -> usize {
        self.frags.len()
    }

    /// Sub-plots in the tree.
    pub fn subplot_count(&self) -> usize {
        self.narratives.iter().map(|n| n.subplots.len()).sum()
    }
}

/// A fragment as prompts show it: `[n] (8 May 2023) Speaker: text`.
pub(crate) fn item_line(n: usize, f: &Frag) -> String {
    let when = f.said_at.map(|t| format!(" ({})", human_date(t))).unwrap_or_default();
    format!("[{n}]{when} {}", f.text)
}

/// The story as the consolidation and semanticization prompts give it.
pub(crate) fn story_prompt(head: &Head, existing: &[&str], window: &[&Frag]) -> String {
    let mut user = format!("Main topic: {}\n\nExisting substories:\n", head.line());
    if existing.is_empty() {
        user.push_str("None yet.\n");
    }
    for s in existing {
        user.push_str(&format!("- {s}\n"));
    }
    user.push_str("\nNew memory items:\n");
    for (i, f) in window.iter().enumerate() {
        user.push_str(&item_line(i + 1, f));
        user.push('\n');
    }
    user
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_round_trip_through_item_text() {
        let h = Head::new(
            "  Pixel,\n the grey   cat ",
            "Ann",
            &["Bob".into(), "ann".into(), "Pix, el".into()],
        );
        assert_eq!(h.headline, "Pixel, the grey cat");
        assert_eq!(h.characters, ["Ann", "Bob", "Pix el"]);
        assert_eq!(Head::parse(&h.text()), h);
        assert_eq!(h.line(), "Pixel, the grey cat [Ann] (characters: Ann, Bob, Pix el)");
        // A corrected text without the structure is all headline.
        let c = Head::parse("Ann's cat story\nnow with a vet");
        assert_eq!(c.headline, "Ann's cat story now with a vet");
        assert!(c.owner.is_empty() && c.characters.is_empty());
    }
}
