//! The Mover's halo exchange on the `local` engine: after every `wait`, each rank's ghost
//! regions hold its neighbours' boundary data of the same iteration, on 1 to 8 ranks, run by
//! the caller or by a proxy thread.

use tiers_cluster::decomp::{Box3, Decomp, Face};
use tiers_cluster::mover::{for_each, Halo, Proxy};
use tiers_cluster::{run_local, SegId, Timeout, World};

fn value(p: [usize; 3], it: usize) -> f64 {
    (((p[0] * 1000 + p[1]) * 1000 + p[2]) * 10 + it) as f64
}

struct Grid {
    lo: [usize; 3],
    ext: [usize; 3],
    g: usize,
    data: Vec<f64>,
}

impl Grid {
    fn at(&self, p: [usize; 3]) -> usize {
        let l = [0, 1, 2].map(|a| p[a] + self.g - self.lo[a]);
        (l[0] * self.ext[1] + l[1]) * self.ext[2] + l[2]
    }
    fn fill(&mut self, b: &Box3, it: usize) {
        for_each(b, |p, _| {
            let i = self.at(p);
            self.data[i] = value(p, it);
        });
    }
    fn check(&self, d: &Decomp, rank: usize, it: usize) {
        for f in d.faces(rank) {
            for_each(&f.recv, |p, _| {
                assert_eq!(
                    self.data[self.at(p)],
                    value(p, it),
                    "rank {rank} ghost {p:?} it {it}"
                );
            });
        }
    }
}

fn pack(grid: &Grid, f: &Face, buf: &mut [f64]) {
    for_each(&f.send, |p, n| buf[n] = grid.data[grid.at(p)])
}

fn exchange(w: &World, global: [usize; 3], g: usize, proxy: bool) {
    let d = Decomp::new(global, w.size(), g).unwrap();
    let me = w.rank();
    let b = d.block(me);
    let mut grid = Grid {
        lo: b.lo,
        ext: d.padded_extent(me),
        g,
        data: vec![-1.0; d.padded_extent(me).iter().product()],
    };
    let mut halo = Halo::<f64>::new(w, &d, SegId(1), 0, 0).unwrap();
    for it in 0..20 {
        grid.fill(&b, it);
        if proxy {
            let gr = &mut grid;
            let h = &mut halo;
            std::thread::scope(|s| {
                let p = Proxy::spawn(s, || {
                    h.start(|f, buf| pack(gr, f, buf))?;
                    h.wait(Timeout::Block, |f, buf| {
                        for_each(&f.recv, |p, n| {
                            let i = gr.at(p);
                            gr.data[i] = buf[n];
                        })
                    })
                });
                p.start();
                p.wait().unwrap();
            });
        } else {
            halo.start(|f, buf| pack(&grid, f, buf)).unwrap();
            halo.wait(Timeout::Block, |f, buf| {
                for_each(&f.recv, |p, n| {
                    let i = grid.at(p);
                    grid.data[i] = buf[n];
                })
            })
            .unwrap();
        }
        grid.check(&d, me, it);
    }
    w.barrier(Timeout::Block).unwrap();
}

#[test]
fn halo_ghosts_equal_the_neighbours_boundary_every_iteration() {
    for n in 1..=8 {
        for (global, g) in [([12, 10, 9], 1), ([16, 16, 16], 2), ([20, 14, 1], 1)] {
            run_local(n, |w| exchange(w, global, g, false)).unwrap();
        }
    }
}

#[test]
fn halo_on_a_proxy_thread() {
    for n in [1, 2, 4] {
        run_local(n, |w| exchange(w, [12, 12, 12], 1, true)).unwrap();
    }
}

#[test]
fn a_mover_is_reusable() {
    use tiers_cluster::mover::Mover;
    run_local(3, |w| {
        let seg = w.segment(SegId(0), 64).unwrap();
        let right = (w.rank() + 1) % w.size();
        let mut m = Mover::new(w, 2);
        m.send(SegId(0).at(0), SegId(0).on(right, 8), 8, 5)
            .expect(SegId(0), 5);
        assert_eq!(m.sends().len(), 1);
        for it in 0..50u64 {
            seg.set::<u64>(0, it * 10 + w.rank() as u64).unwrap();
            m.start().unwrap();
            m.wait(Timeout::Block).unwrap();
            let left = (w.rank() + w.size() - 1) % w.size();
            assert_eq!(seg.get::<u64>(1).unwrap(), it * 10 + left as u64);
            w.barrier(Timeout::Block).unwrap();
        }
    })
    .unwrap();
}

/// A halo that cannot be right is an error at its creation, at every rank, rather than a
/// hang, a wrong exchange or a write past its buffers.
#[test]
fn bad_halos_are_refused() {
    use tiers_cluster::Error;
    run_local(2, |w| {
        // A decomposition over another number of ranks than the world's.
        let d = Decomp::new([16, 16, 16], 4, 1).unwrap();
        let e = Halo::<f64>::new(w, &d, SegId(0), 0, 0)
            .err()
            .expect("refused");
        assert!(
            e.to_string().contains("over 4 ranks in a world of 2"),
            "{e}"
        );
        // Ghosts wider than a neighbour's block.
        let d = Decomp::new([4, 4, 4], 2, 3).unwrap();
        let e = Halo::<f64>::new(w, &d, SegId(0), 0, 0)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("reach past"), "{e}");
        // Notifications beyond a segment's.
        let d = Decomp::new([8, 8, 8], 2, 1).unwrap();
        let e = Halo::<f64>::new(w, &d, SegId(0), 0, usize::MAX - 5)
            .err()
            .expect("refused");
        assert!(matches!(e, Error::NoSuchNotification { .. }), "{e}");
        // Buffers beyond what memory can index (the slab's bytes overflow).
        let d = Decomp::with_grid([2, 1 << 40, 1 << 20], [2, 1, 1], 1).unwrap();
        let e = Halo::<f64>::new(w, &d, SegId(0), 0, 0)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("more bytes than memory"), "{e}");
        // The ranks disagree (here on the ghost width): every rank is told, none hangs.
        let d = Decomp::new([8, 8, 8], 2, 1 + w.rank()).unwrap();
        let e = Halo::<f64>::new(w, &d, SegId(0), 0, 0)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("build different halos"), "{e}");
        // One rank refuses its arguments, the other has nothing to refuse: both are told,
        // neither waits for the other.
        let base = if w.rank() == 0 { usize::MAX - 5 } else { 0 };
        let e = Halo::<f64>::new(w, &d, SegId(0), 0, base)
            .err()
            .expect("refused");
        if w.rank() == 0 {
            assert!(matches!(e, Error::NoSuchNotification { .. }), "{e}");
        } else {
            assert!(e.to_string().contains("another rank refused"), "{e}");
        }
        // Nothing was made: the segment id is free, and a good halo still works.
        let d = Decomp::new([8, 8, 8], 2, 1).unwrap();
        assert!(Halo::<f64>::new(w, &d, SegId(0), 0, 0).is_ok());
    })
    .unwrap();
}

/// A proxy's wait with no job started is an error, not a wait forever.
#[test]
fn a_proxy_wait_without_a_start_is_an_error() {
    std::thread::scope(|s| {
        let p = Proxy::spawn(s, || Ok(()));
        assert!(p.wait().is_err());
        p.start();
        p.start();
        p.wait().unwrap();
        p.wait().unwrap();
        assert!(p.wait().is_err());
    });
}

const SCENARIO: &str = "TIERS_TEST_MOVER";

/// The rank side of `halo_across_processes`: does nothing in a normal test run.
#[test]
fn child() {
    let Ok(s) = std::env::var(SCENARIO) else {
        return;
    };
    let w = tiers_cluster::init().expect("init");
    assert_eq!(w.engine_name(), "shm");
    exchange(&w, [12, 10, 9], 1, s == "proxy");
}

/// The same halo exchange with ranks as processes (the `shm` engine, started by the launcher).
#[test]
fn halo_across_processes() {
    use tiers_cluster::launch::{End, Job};
    for (n, scenario) in [(2, "caller"), (4, "caller"), (3, "proxy")] {
        let exe = std::env::current_exe().unwrap();
        let mut job = Job::new(n, exe)
            .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env(SCENARIO, scenario)
            .env("TIERS_INIT_TIMEOUT_MS", "120000");
        job.engine = "shm".into();
        job.grace = std::time::Duration::from_secs(30);
        job.pin = false;
        job.report = false;
        job.discard_stdout = true;
        let out = job.run().expect("launch");
        assert_eq!(out.ends, vec![End::Exited(0); n], "{scenario} on {n} ranks");
    }
}

/// A wait's timeout bounds the whole call, not each expected notification: notes that come
/// one after another, each within the timeout of the one before, still end the wait at its
/// timeout. Called again once the rest have come, the wait completes (the notes that came
/// before its timeout are not lost).
#[test]
fn a_mover_wait_is_bounded_and_resumes() {
    use std::time::{Duration, Instant};
    use tiers_cluster::mover::Mover;
    use tiers_cluster::{Error, Notification};
    run_local(2, |w| {
        let _seg = w.segment(SegId(0), 64).unwrap();
        w.barrier(Timeout::Block).unwrap();
        if w.rank() == 1 {
            let mut m = Mover::new(w, 0);
            m.expect(SegId(0), 0)
                .expect(SegId(0), 1)
                .expect(SegId(0), 2);
            let t0 = Instant::now();
            assert_eq!(m.wait(Timeout::millis(400)), Err(Error::Timeout));
            let took = t0.elapsed();
            // Each note came within 250 ms of the one before: waited for one by one, the
            // call took 750 ms.
            assert!(took < Duration::from_millis(700), "{took:?}");
            m.wait(Timeout::millis(20_000)).unwrap();
            // Every note was reset by the completed wait.
            for id in 0..3 {
                assert_eq!(w.notify_reset(SegId(0), id).unwrap(), 0);
            }
        } else {
            let q = w.queue(0).unwrap();
            for id in 0..3 {
                std::thread::sleep(Duration::from_millis(250));
                q.notify(1, SegId(0), Notification { id, value: 1 })
                    .unwrap();
                q.wait(Timeout::Block).unwrap();
            }
        }
        w.barrier(Timeout::Block).unwrap();
    })
    .unwrap();
}
