//! Checks on the real fungi data set (SPIDAL's 2400 fungal sequences and its DA-PWC and DA-MDS
//! outputs). The data are read from the shared data directory at run time and never copied into
//! the repository; without them the test prints a note and passes.

use std::path::PathBuf;
use tiers_apps::cluster::parse_labels;
use tiers_apps::compare::adjusted_rand_index;
use tiers_apps::distance::swg::{Aligner, Scoring};
use tiers_apps::{fasta, mds};

fn data_dir() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("TIERS_DATA").map(PathBuf::from),
        // `../shared/data` beside the repository root (this crate is crates/apps).
        Some(PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data"
        ))),
    ];
    candidates
        .into_iter()
        .flatten()
        .map(|p| p.join("fungi"))
        .find(|p| p.join("2400_gene_seq_testset.fna").exists())
}

#[test]
fn fungi_inputs_and_references_are_consistent() {
    let Some(dir) = data_dir() else {
        eprintln!("note: fungi data not found (set TIERS_DATA); skipping");
        return;
    };
    let recs = fasta::read(&dir.join("2400_gene_seq_testset.fna")).expect("fungi FASTA parses");
    assert_eq!(recs.len(), 2400);
    let mean_len = recs.iter().map(|r| r.seq.len()).sum::<usize>() as f64 / recs.len() as f64;
    assert!((100.0..200.0).contains(&mean_len), "mean length {mean_len}");

    let labels_path = dir.join("dapwc-cluster-M10-C10.txt");
    let labels = parse_labels(&std::fs::read_to_string(&labels_path).unwrap(), "dapwc").unwrap();
    assert_eq!(labels.len(), 2400);
    let (points, point_labels) = mds::parse_points(
        &std::fs::read_to_string(dir.join("damds-points.txt")).unwrap(),
        3,
        "damds",
    )
    .unwrap();
    assert_eq!(points.len(), 2400 * 3);
    assert_eq!(point_labels.len(), 2400);
    assert!((adjusted_rand_index(&labels, &labels) - 1.0).abs() < 1e-12);

    // SWG distances agree with SPIDAL's MDS layout: sequences that SPIDAL placed close together
    // are much closer by our alignment distance than sequences it placed far apart.
    let mut aligner = Aligner::new(Scoring::default());
    let dist3 = |i: usize, j: usize| -> f64 {
        (0..3)
            .map(|k| (points[i * 3 + k] - points[j * 3 + k]).powi(2))
            .sum::<f64>()
            .sqrt()
    };
    let (mut near, mut far) = (Vec::new(), Vec::new());
    for i in (0..2400).step_by(40) {
        for j in (i + 1..2400).step_by(97) {
            let d = aligner.align(&recs[i].seq, &recs[j].seq).distance();
            if dist3(i, j) < 0.1 {
                near.push(d);
            } else if dist3(i, j) > 0.4 {
                far.push(d);
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    assert!(
        near.len() > 5 && far.len() > 5,
        "{} near, {} far pairs",
        near.len(),
        far.len()
    );
    assert!(
        mean(&near) < 0.7 * mean(&far),
        "near {:.3} far {:.3}",
        mean(&near),
        mean(&far)
    );
}
