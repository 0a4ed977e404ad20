//! The model reproduces the seed publications' results from their shipped profiles, within the
//! errors stated in docs/model.md (the reproduction table). Where the model is far off, the
//! test asserts the direction only and the table says why.

use numaio_model::model::move_gain;
use numaio_model::shipped::shipped;
use numaio_model::{predict, Placement, Profile, Sharing, Workload};

fn tput(p: &Profile, threads: u32, placement: &str, sharing: Sharing) -> f64 {
    let mut w = Workload::spread(p, threads, placement.parse().unwrap()).unwrap();
    w.sharing = sharing;
    predict(p, &w).unwrap().throughput_mb_s
}

fn rel_err(predicted: f64, published: f64) -> f64 {
    (predicted - published).abs() / published
}

#[test]
fn zonfs_single_local_fair() {
    let z = shipped("zonfs").unwrap();
    let pv = Sharing::Private;
    let (single40, local40, fair40) = (
        tput(&z, 40, "single", pv),
        tput(&z, 40, "local", pv),
        tput(&z, 40, "fair", pv),
    );
    // Local: 160 GB/s at 40 threads (fitted through thread.copy_mb_s).
    assert!(rel_err(local40, 160_000.0) < 0.05, "local40 {local40}");
    // Fair 49 % below Local: ratio 0.51 published.
    assert!(
        rel_err(fair40 / local40, 0.51) < 0.30,
        "fair/local {}",
        fair40 / local40
    );
    // Fair 351 % above Single: ratio 4.51 published.
    assert!(
        rel_err(fair40 / single40, 4.51) < 0.30,
        "fair/single {}",
        fair40 / single40
    );
    // Single never scales; Local and Fair grow up to 40 threads.
    let single8 = tput(&z, 8, "single", pv);
    assert!(single40 < single8, "single 8 {single8} 40 {single40}");
    for pl in ["local", "fair"] {
        let mut last = 0.0;
        for t in [8, 10, 20, 40] {
            let x = tput(&z, t, pl, pv);
            assert!(x >= last, "{pl} at {t} threads: {x} < {last}");
            last = x;
        }
    }
    // At 8 threads the placements differ little (Local = Fair); Single is closer to Fair
    // than at 40 threads (published: < 1 % apart; the model gives 26 %, see the table).
    let (local8, fair8) = (tput(&z, 8, "local", pv), tput(&z, 8, "fair", pv));
    assert!(rel_err(fair8, local8) < 0.05);
    assert!(fair8 / single8 < 0.5 * fair40 / single40);
}

#[test]
fn zonfs_striping_private_and_shared() {
    let z = shipped("zonfs").unwrap();
    // Private files at 40 threads: striping over 4 nodes "degrades by 145 %" (stripe:1 is
    // 2.45x stripe:4); at 8 threads it does not matter.
    let s1 = tput(&z, 40, "stripe:1", Sharing::Private);
    let s4 = tput(&z, 40, "stripe:4", Sharing::Private);
    assert!(
        rel_err(s1 / s4 - 1.0, 1.45) < 0.10,
        "private s1/s4 {}",
        s1 / s4
    );
    let e8 = tput(&z, 8, "stripe:1", Sharing::Private) / tput(&z, 8, "stripe:4", Sharing::Private);
    assert!((e8 - 1.0).abs() < 0.05, "8 threads {e8}");
    // Medium sharing: 4-way striping 65 % above 2-way at 40 threads.
    let m2 = tput(&z, 40, "stripe:2", Sharing::Medium);
    let m4 = tput(&z, 40, "stripe:4", Sharing::Medium);
    assert!(
        rel_err(m4 / m2 - 1.0, 0.65) < 0.10,
        "medium s4/s2 {}",
        m4 / m2
    );
    // High sharing: 4-way above 2-way (published +17 %; the model overshoots, see the table).
    let h2 = tput(&z, 40, "stripe:2", Sharing::High);
    let h4 = tput(&z, 40, "stripe:4", Sharing::High);
    assert!(h4 > h2);
    // Striping helps shared files at every thread count from 8 on.
    for t in [8, 20, 40] {
        for sh in [Sharing::Medium, Sharing::High] {
            assert!(
                tput(&z, t, "stripe:2", sh) > tput(&z, t, "stripe:1", sh),
                "{sh:?} {t}"
            );
        }
    }
    // Higher sharing never scales better.
    for t in [8, 20, 40] {
        for pl in ["stripe:1", "stripe:2", "stripe:4"] {
            let (l, m, h) = (
                tput(&z, t, pl, Sharing::Private),
                tput(&z, t, pl, Sharing::Medium),
                tput(&z, t, pl, Sharing::High),
            );
            assert!(l >= m && m >= h, "{pl} {t}: {l} {m} {h}");
        }
    }
    // High sharing without striping does not scale; medium stops after 8 threads.
    let h = |t| tput(&z, t, "stripe:1", Sharing::High);
    assert!(h(40) <= h(8) * 1.05);
    let m = |t| tput(&z, t, "stripe:1", Sharing::Medium);
    assert!(m(40) <= m(8) * 1.05);
}

fn adams_one(a: &Profile, cpu: usize, bs: u64) -> f64 {
    let mut w = Workload::spread(a, 1, Placement::Single(Some(0))).unwrap();
    w.threads_per_node = vec![0, 0];
    w.threads_per_node[cpu] = 1;
    w.bs = bs;
    predict(a, &w).unwrap().throughput_mb_s
}

#[test]
fn adams_remote_arc_penalty_and_move_gain_trend() {
    let a = shipped("adams").unwrap();
    // Reading remote cached data at 1 MiB requests costs 10-15 % more run time.
    let penalty = adams_one(&a, 0, 1 << 20) / adams_one(&a, 1, 1 << 20) - 1.0;
    assert!((0.10..=0.15).contains(&penalty), "penalty {penalty}");
    // I = M - (P/F) R: the gain of moving the task starts at M (the run time saved) and falls
    // linearly with the process size relative to the file size.
    let f = 1u64 << 30;
    let g = |p: u64| move_gain(&a, 1, 0, f, p, 1 << 20).unwrap();
    let m = 1.0 - 1.0 / (1.0 + penalty);
    assert!((g(0) - m).abs() < 1e-9);
    let (g1, g2, g3) = (g(f / 4), g(f / 2), g(3 * f / 4));
    assert!(g(0) > g1 && g1 > g2 && g2 > g3);
    assert!(((g(0) - g1) - (g2 - g3)).abs() < 1e-9, "not linear in P/F");
}

fn tofalos(t: &Profile, cpu: usize, threads: u32, read_fraction: f64) -> f64 {
    let mut w = Workload::spread(t, threads, Placement::Single(Some(0))).unwrap();
    w.threads_per_node = vec![0, 0];
    w.threads_per_node[cpu] = threads;
    w.read_fraction = read_fraction;
    w.bs = 1 << 20;
    predict(t, &w).unwrap().throughput_mb_s
}

#[test]
fn tofalos_remote_writes_at_most_half() {
    let t = shipped("tofalos").unwrap();
    let mut last_remote = f64::MAX;
    for th in [4, 8, 16] {
        let (local, remote) = (tofalos(&t, 0, th, 0.0), tofalos(&t, 1, th, 0.0));
        assert!(
            remote <= 0.5 * local,
            "{th} threads: remote {remote} local {local}"
        );
        assert!(remote < last_remote, "remote writes fall with threads");
        last_remote = remote;
        // Remote reads close to local.
        let (lr, rr) = (tofalos(&t, 0, th, 1.0), tofalos(&t, 1, th, 1.0));
        assert!(rel_err(rr, lr) < 0.10);
    }
}
