//! Salience-decay pruning and concurrent use.

mod common;
use common::*;
use dentate::{BonusForm, FlatIndex, Index, IvfPqConfig, IvfPqIndex, SalienceParams};
use std::sync::{Arc, RwLock};

#[test]
fn prune_removes_oldest_unretrieved_first() {
    let dim = 8;
    let mut index = FlatIndex::new(dim);
    let data = gaussian(1000, dim, 1);
    // Vector i is added at turn i.
    for i in 0..1000u64 {
        index.set_turn(i);
        index
            .add(&[i], &data[i as usize * dim..(i as usize + 1) * dim])
            .unwrap();
    }
    index.set_turn(1000);
    // Ids 0..5 are the oldest, but 0 and 1 were retrieved recently.
    index.record_retrieval(&[0, 1], 950);
    let pruned = index.prune_lowest(0.005, &SalienceParams::default()).unwrap();
    assert_eq!(
        pruned,
        vec![2, 3, 4, 5, 6],
        "0.5% of 1000 = 5 lowest, retrieved ones kept"
    );
    assert_eq!(index.len(), 995);
    assert!(!index.contains(2) && index.contains(0));
    // The literal formula gives the bonus to the *un*retrieved ones instead:
    // the recently retrieved 0 and 1 are now the least salient.
    let lit = SalienceParams {
        bonus: BonusForm::Literal,
        ..Default::default()
    };
    let pruned = index.prune_lowest(0.002, &lit).unwrap();
    assert_eq!(pruned, vec![0, 1]);
    // A retrieval older than the window no longer protects.
    index.record_retrieval(&[7], 800);
    let pruned = index.prune_lowest(0.001, &SalienceParams::default()).unwrap();
    assert_eq!(pruned, vec![7]);
    assert!(index.prune_lowest(1.5, &SalienceParams::default()).is_err());
    assert!(index.prune_lowest(0.0, &SalienceParams::default()).unwrap().is_empty());
}

#[test]
fn prune_works_on_ivfpq_through_the_same_path() {
    let dim = 16;
    let data = synth(1000, dim, 10, 2);
    let mut cfg = IvfPqConfig::new(8, 4);
    cfg.kmeans_iterations = 5;
    cfg.pq_iterations = 5;
    let mut ivf = IvfPqIndex::new(dim, cfg).unwrap();
    ivf.train(&data).unwrap();
    ivf.add(&(0..500).collect::<Vec<_>>(), &data[..500 * dim]).unwrap();
    ivf.set_turn(400);
    ivf.add(&(500..1000).collect::<Vec<_>>(), &data[500 * dim..]).unwrap();
    ivf.set_turn(500);
    let pruned = ivf.prune_lowest(0.01, &SalienceParams::default()).unwrap();
    assert_eq!(pruned.len(), 10);
    assert!(pruned.iter().all(|&id| id < 500), "older vectors go first");
    assert_eq!(
        pruned,
        (0..10).collect::<Vec<_>>(),
        "equal salience: ties by smaller id"
    );
    let res = ivf.search(&data[..dim * 20], 5).unwrap();
    assert!(res.iter().flatten().all(|h| !pruned.contains(&h.id)));
}

#[test]
fn concurrent_searches_while_adding_and_deleting() {
    let dim = 32;
    let data = synth(6000, dim, 30, 3);
    let index = Arc::new(RwLock::new(FlatIndex::new(dim)));
    index
        .write()
        .unwrap()
        .add(&(0..2000).collect::<Vec<_>>(), &data[..2000 * dim])
        .unwrap();
    let writer = {
        let index = Arc::clone(&index);
        let data = data.clone();
        std::thread::spawn(move || {
            for batch in 0..20u64 {
                let lo = 2000 + batch * 200;
                let ids: Vec<u64> = (lo..lo + 200).collect();
                let mut w = index.write().unwrap();
                w.add(&ids, &data[lo as usize * dim..(lo as usize + 200) * dim])
                    .unwrap();
                // Delete every odd id of the batch before last.
                let dead: Vec<u64> = (lo.saturating_sub(200)..lo)
                    .filter(|i| i % 2 == 1 && *i >= 2000)
                    .collect();
                w.remove(&dead);
            }
        })
    };
    let readers: Vec<_> = (0..3)
        .map(|t| {
            let index = Arc::clone(&index);
            let q = data[t * dim * 10..(t + 1) * dim * 10].to_vec();
            std::thread::spawn(move || {
                let mut searches = 0;
                for _ in 0..40 {
                    let r = index.read().unwrap();
                    let res = r.search(&q, 5).unwrap();
                    r.record_retrieval(&res[0].iter().map(|h| h.id).collect::<Vec<_>>(), 1);
                    for hits in &res {
                        assert_eq!(hits.len(), 5);
                        // Never a deleted id: odd ids ≥ 2000 below the last batch.
                        for h in hits {
                            assert!(r.contains(h.id), "search returned a dead id {}", h.id);
                        }
                    }
                    searches += 1;
                }
                searches
            })
        })
        .collect();
    writer.join().unwrap();
    let total: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert_eq!(total, 120);
    let final_len = index.read().unwrap().len();
    // 2000 + 4000 added, odd ids of batches 0..19 deleted (19 batches × 100).
    assert_eq!(final_len, 6000 - 19 * 100);
}

#[test]
fn indexes_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<FlatIndex>();
    check::<IvfPqIndex>();
    check::<dentate::AnyIndex>();
}
