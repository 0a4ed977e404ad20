//! Lab tests of issue 3: `numaio where`, `warm`, `move`, `evict` on real (emulated) NUMA
//! nodes, with an ext4 virtio disk. Each boot runs many steps; each step's output is framed
//! by markers so the assertions can look at it one by one.
//!
//! Needs the release binaries (`cargo build --release`) and the lab's kernel cache; see
//! lab/README.md.

use numaio_lab::{DiskFile, DiskSpec, LabTopology, Outcome, Scenario};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// 8 MiB test files: 2048 pages.
const MIB8: u64 = 8 << 20;
const PAGES: u64 = 2048;

/// Shell helpers put before every scenario. `step NAME CMD...` frames CMD's output;
/// `filepages` folds the per-CPU vmstat deltas (`stat_refresh`) and prints each node's
/// FilePages line.
const PRELUDE: &str = r#"
step() { n=$1; shift; echo "@@begin $n"; "$@"; r=$?; echo "@@end $n rc=$r t=$(cut -d' ' -f1 /proc/uptime)"; }
filepages() { echo 1 > /proc/sys/vm/stat_refresh; for d in /sys/devices/system/node/node[0-9]*; do grep FilePages $d/meminfo; done; }
D=/mnt/data
"#;

/// One framed step of the scenario's output.
struct Step {
    text: String,
    rc: i32,
}

struct Steps {
    steps: BTreeMap<String, Step>,
    report: String,
}

impl Steps {
    fn parse(out: &Outcome) -> Steps {
        let mut steps = BTreeMap::new();
        let mut cur: Option<(String, String)> = None;
        for line in out.output.lines() {
            if let Some(name) = line.strip_prefix("@@begin ") {
                cur = Some((name.trim().to_string(), String::new()));
            } else if let Some(rest) = line.strip_prefix("@@end ") {
                let (name, rc) = rest.split_once(" rc=").expect("end marker");
                let (n, text) = cur.take().expect("end without begin");
                assert_eq!(n, name.trim(), "interleaved step markers");
                steps.insert(
                    n,
                    Step {
                        text,
                        rc: rc
                            .split_whitespace()
                            .next()
                            .and_then(|r| r.parse().ok())
                            .expect("rc"),
                    },
                );
            } else if let Some((_, text)) = cur.as_mut() {
                text.push_str(line);
                text.push('\n');
            }
        }
        Steps {
            steps,
            report: out.report(),
        }
    }

    fn get(&self, name: &str) -> &Step {
        self.steps
            .get(name)
            .unwrap_or_else(|| panic!("step {name} missing\n{}", self.report))
    }

    /// The step's exit status must be 0.
    fn ok(&self, name: &str) -> &Step {
        let s = self.get(name);
        assert_eq!(s.rc, 0, "step {name} failed:\n{}\n{}", s.text, self.report);
        s
    }

    /// The step's JSON document (one line of its output).
    fn json(&self, name: &str) -> Value {
        let s = self.get(name);
        s.text
            .lines()
            .find_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .unwrap_or_else(|| panic!("step {name}: no JSON in:\n{}\n{}", s.text, self.report))
    }

    /// `where --json` of one file: its entry in `files`, after checking the step succeeded.
    fn where1(&self, name: &str) -> Value {
        self.ok(name);
        let v = self.json(name);
        let files = v["files"].as_array().expect("files array");
        assert_eq!(files.len(), 1, "step {name}: {v}");
        files[0].clone()
    }
}

/// `{"0": N, ...}` as a map.
fn nodes(v: &Value) -> BTreeMap<u32, u64> {
    v.as_object()
        .unwrap_or_else(|| panic!("not a node object: {v}"))
        .iter()
        .map(|(k, n)| (k.parse().unwrap(), n.as_u64().unwrap()))
        .collect()
}

fn one_node(node: u32, pages: u64) -> BTreeMap<u32, u64> {
    BTreeMap::from([(node, pages)])
}

/// Per-node FilePages in pages, from `filepages` output (`Node 1 FilePages: 1234 kB`).
fn file_pages(text: &str) -> BTreeMap<u32, i64> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() >= 4 && w[0] == "Node" && w[2] == "FilePages:" {
                Some((w[1].parse().ok()?, w[3].parse::<i64>().ok()? / 4))
            } else {
                None
            }
        })
        .collect()
}

/// `Resident Pages: X/Y` from vmtouch (an independent mincore reader).
fn vmtouch_resident(text: &str) -> u64 {
    let l = text
        .lines()
        .find(|l| l.contains("Resident Pages:"))
        .unwrap_or_else(|| panic!("no vmtouch summary in:\n{text}"));
    let frac = l.split_whitespace().nth(2).expect("X/Y");
    frac.split('/')
        .next()
        .unwrap()
        .parse()
        .expect("resident count")
}

/// Each map cell holds only pages of the node `want(cell index)`, and is fully cached.
fn assert_cells(map: &Value, want: impl Fn(usize) -> u32, what: &str) {
    let cells = map.as_array().expect("map array");
    assert!(!cells.is_empty(), "{what}: empty map");
    for (i, c) in cells.iter().enumerate() {
        let pages = c["pages"].as_u64().unwrap();
        assert_eq!(
            nodes(&c["nodes"]),
            one_node(want(i), pages),
            "{what}: cell {i} ({c}) not wholly on node {}",
            want(i)
        );
    }
}

/// The human `--map` of a step (one symbol per cell, 64 per line after the offset): cell
/// `i` must show node `want(i)`. Used for page-sized cells, whose JSON would be large for
/// the serial console.
fn assert_symbols(s: &Steps, step: &str, cells: u64, want: impl Fn(usize) -> u32) {
    let text = &s.ok(step).text;
    let body: String = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("map,"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(
        body.len() as u64,
        cells,
        "step {step}: map of {} cells:\n{text}",
        body.len()
    );
    for (i, c) in body.chars().enumerate() {
        let w = std::char::from_digit(want(i), 36).unwrap();
        assert_eq!(
            c, w,
            "step {step}: cell {i} shows {c:?}, want node {w}\n{text}"
        );
    }
}

fn run(s: Scenario) -> Steps {
    let out = s.run().expect("lab run");
    assert_eq!(out.exit_code, 0, "{}", out.report());
    Steps::parse(&out)
}

/// Two nodes: warm --node 1 (checked by `where` and by the FilePages delta), membind=0 then
/// warm (migrate, and --reread), move, evict, cold files stay cold, recursion totals, errors.
#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn two_nodes_warm_move_evict_where() {
    let disk = DiskSpec::new()
        .file(DiskFile::pattern("data/cold.bin", MIB8))
        .file(DiskFile::pattern("data/w1.bin", MIB8))
        .file(DiskFile::pattern("data/mem.bin", MIB8))
        .file(DiskFile::pattern("data/rr.bin", MIB8))
        .file(DiskFile::pattern("data/mv.bin", MIB8))
        .file(DiskFile::pattern("data/nb.bin", MIB8))
        .file(DiskFile::pattern("data/locked.bin", MIB8))
        .file(DiskFile::pattern("tree/a", 1 << 20))
        .file(DiskFile::pattern("tree/sub/b", (2 << 20) + 123))
        .file(DiskFile::pattern("tree/sub/c", 300 << 10))
        .file(DiskFile::pattern("secret.bin", 64 << 10).with_mode(0o600));
    let script = format!(
        "{PRELUDE}{}",
        r#"
step cold1 numaio where --json $D/cold.bin
step cold1_vmtouch vmtouch $D/cold.bin
step fp_before filepages
step warm1 numaio warm --node 1 --json $D/w1.bin
step fp_after filepages
step where_w1 numaio where --json $D/w1.bin
step where_w1_mp env NUMAIO_PAGE_QUERY=move_pages numaio where --json $D/w1.bin
step where_w1_range numaio where --json --range 1M:2M $D/w1.bin
step membind0 sh -c "numactl --membind=0 cat $D/mem.bin > /dev/null"
step where_mem0 numaio where --json $D/mem.bin
step warm_mem numaio warm --node 1 --json $D/mem.bin
step where_mem1 numaio where --json $D/mem.bin
step membind0_rr sh -c "numactl --membind=0 cat $D/rr.bin > /dev/null"
step warm_rr numaio warm --node 1 --reread --json $D/rr.bin
step where_rr numaio where --json $D/rr.bin
step membind0_mv sh -c "numactl --membind=0 cat $D/mv.bin > /dev/null"
step move1 numaio move --to 1 --json $D/mv.bin
step where_mv1 numaio where --json $D/mv.bin
step move0 numaio move --to 0 --json $D/mv.bin
step where_mv0 numaio where --json $D/mv.bin
step prelock sh -c "numactl --membind=0 cat $D/locked.bin > /dev/null && vmtouch -q -d -l $D/locked.bin && sleep 1"
step move_mapped numaio move --to 1 --json $D/locked.bin
step move_all numaio move --to 1 --all --json $D/locked.bin
step where_locked numaio where --json $D/locked.bin
step evict numaio evict --json $D/mv.bin
step where_ev numaio where --json $D/mv.bin
step ev_vmtouch vmtouch $D/mv.bin
step cold2 numaio where --json --map $D/cold.bin
step cold2_vmtouch vmtouch $D/cold.bin
step tree_read sh -c "numactl --membind=1 head -c 300000 /mnt/tree/a > /dev/null; numactl --membind=0 cat /mnt/tree/sub/b > /dev/null"
step tree numaio where -r --json /mnt/tree
step tree_files sh -c "for f in /mnt/tree/a /mnt/tree/sub/b /mnt/tree/sub/c; do numaio where --json \$f; done"
step missing numaio where /mnt/nope
step fifo_setup mkfifo /tmp/fifo
step fifo numaio where /tmp/fifo
step secret as-nobody numaio where /mnt/secret.bin
step mixed numaio where --json /mnt/nope $D/cold.bin
step nobody_caveat as-nobody numaio where --json $D/w1.bin
step nobody_cold as-nobody numaio where $D/cold.bin
step nobody_move as-nobody numaio move --to 1 $D/cold.bin
step nobody_cold_vmtouch vmtouch $D/cold.bin
step nobody_warm as-nobody numaio warm --node 1 --json $D/nb.bin
step where_nb numaio where --json $D/nb.bin
"#
    );
    let s = run(Scenario::new(LabTopology::uniform(2), script)
        .disk(disk)
        .timeout(Duration::from_secs(400)));

    // A cold file: 0 resident, by us and by vmtouch.
    let c = s.where1("cold1");
    assert_eq!(
        (c["pages"].as_u64(), c["resident_pages"].as_u64()),
        (Some(PAGES), Some(0))
    );
    assert_eq!(vmtouch_resident(&s.ok("cold1_vmtouch").text), 0);

    // warm --node 1: 100 % on node 1 by `where`, the verification, and FilePages.
    let w = s.json("warm1");
    assert_eq!(s.get("warm1").rc, 0, "{w}");
    let w = &w["files"][0];
    assert_eq!(w["target_reached"], true, "{w}");
    assert_eq!(w["read_pages"].as_u64(), Some(PAGES), "{w}");
    let r = s.where1("where_w1");
    assert_eq!(r["resident_pages"].as_u64(), Some(PAGES), "{r}");
    assert_eq!(nodes(&r["nodes"]), one_node(1, PAGES), "{r}");
    assert_eq!(
        nodes(&s.where1("where_w1_mp")["nodes"]),
        one_node(1, PAGES),
        "move_pages route disagrees with the pagemap route"
    );
    let r = s.where1("where_w1_range");
    assert_eq!(r["pages"].as_u64(), Some(512), "{r}");
    assert_eq!(r["range"]["offset"].as_u64(), Some(1 << 20), "{r}");
    assert_eq!(nodes(&r["nodes"]), one_node(1, 512), "{r}");
    let (b, a) = (
        file_pages(&s.ok("fp_before").text),
        file_pages(&s.ok("fp_after").text),
    );
    let d0 = a[&0] - b[&0];
    let d1 = a[&1] - b[&1];
    // All 2048 file pages on node 1 (plus a few ext4 metadata pages); none on node 0.
    assert!(
        (PAGES as i64..PAGES as i64 + 32).contains(&d1),
        "node 1 FilePages grew by {d1} pages, node 0 by {d0}"
    );
    assert!(
        d0.abs() < 8,
        "node 0 FilePages changed by {d0} pages (node 1 by {d1})"
    );

    // Read under membind=0 first, then warmed to node 1: migrated, 100 % on node 1.
    assert_eq!(nodes(&s.where1("where_mem0")["nodes"]), one_node(0, PAGES));
    let w = &s.json("warm_mem")["files"][0];
    assert_eq!(s.get("warm_mem").rc, 0, "{w}");
    assert_eq!(w["migration"]["moved"].as_u64(), Some(PAGES), "{w}");
    assert_eq!(w["read_pages"].as_u64(), Some(0), "{w}");
    assert_eq!(nodes(&s.where1("where_mem1")["nodes"]), one_node(1, PAGES));
    // The same with --reread: evicted and read again on node 1.
    let w = &s.json("warm_rr")["files"][0];
    assert_eq!(s.get("warm_rr").rc, 0, "{w}");
    assert_eq!(w["evicted_for_reread"].as_u64(), Some(PAGES), "{w}");
    assert_eq!(w["migration"]["moved"].as_u64(), Some(0), "{w}");
    assert_eq!(nodes(&s.where1("where_rr")["nodes"]), one_node(1, PAGES));

    // move: 100 % on the target, both ways.
    let m = &s.json("move1")["files"][0];
    assert_eq!(s.get("move1").rc, 0, "{m}");
    assert_eq!(m["moved"].as_u64(), Some(PAGES), "{m}");
    assert_eq!(m["failed"].as_u64(), Some(0), "{m}");
    assert_eq!(nodes(&s.where1("where_mv1")["nodes"]), one_node(1, PAGES));
    let m = &s.json("move0")["files"][0];
    assert_eq!(m["moved"].as_u64(), Some(PAGES), "{m}");
    assert_eq!(nodes(&s.where1("where_mv0")["nodes"]), one_node(0, PAGES));

    // Pages another process maps (vmtouch -l holds them mlocked): a plain move reports them
    // as mapped by others and exits 3 (partial result); --all (root) moves them.
    s.ok("prelock");
    let m = &s.json("move_mapped")["files"][0];
    assert_eq!(s.get("move_mapped").rc, 3, "{m}");
    assert_eq!(m["mapped_by_others"].as_u64(), Some(PAGES), "{m}");
    assert_eq!(m["moved"].as_u64(), Some(0), "{m}");
    let m = &s.json("move_all")["files"][0];
    assert_eq!(s.get("move_all").rc, 0, "{m}");
    assert_eq!(m["moved"].as_u64(), Some(PAGES), "{m}");
    assert_eq!(
        nodes(&s.where1("where_locked")["nodes"]),
        one_node(1, PAGES)
    );

    // evict: 0 resident, by the report, `where` and vmtouch.
    let e = &s.json("evict")["files"][0];
    assert_eq!(e["resident_before"].as_u64(), Some(PAGES), "{e}");
    assert_eq!(e["resident_after"].as_u64(), Some(0), "{e}");
    assert_eq!(s.where1("where_ev")["resident_pages"].as_u64(), Some(0));
    assert_eq!(vmtouch_resident(&s.ok("ev_vmtouch").text), 0);

    // The cold file is still cold after all the `where`s (map included).
    let c = s.where1("cold2");
    assert_eq!(c["resident_pages"].as_u64(), Some(0));
    assert!(c["map"].as_array().is_some_and(|m| !m.is_empty()));
    assert_eq!(vmtouch_resident(&s.ok("cold2_vmtouch").text), 0);

    // Recursion: three files; totals equal the sum over the files, and each file's figures
    // equal a `where` of that file alone.
    s.ok("tree_read");
    let t = s.json("tree");
    assert_eq!(s.get("tree").rc, 0, "{t}");
    let files = t["files"].as_array().unwrap();
    assert_eq!(files.len(), 3, "{t}");
    let (mut pages, mut res, mut per_node) = (0, 0, BTreeMap::<u32, u64>::new());
    for f in files {
        pages += f["pages"].as_u64().unwrap();
        res += f["resident_pages"].as_u64().unwrap();
        for (n, c) in nodes(&f["nodes"]) {
            *per_node.entry(n).or_default() += c;
        }
    }
    assert_eq!(t["total"]["pages"].as_u64(), Some(pages));
    assert_eq!(t["total"]["resident_pages"].as_u64(), Some(res));
    assert_eq!(nodes(&t["total"]["nodes"]), per_node);
    assert_eq!(pages, 256 + 513 + 75);
    // b was read whole under membind=0; a partly under membind=1 (readahead may add some).
    assert!(per_node.get(&0).copied().unwrap_or(0) >= 513, "{t}");
    assert!(per_node.get(&1).copied().unwrap_or(0) >= 74, "{t}");
    let singles: Vec<Value> = s
        .ok("tree_files")
        .text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["files"][0].clone())
        .collect();
    assert_eq!(singles.len(), 3);
    // The walk goes in directory order (not sorted): match the files by path.
    for b in &singles {
        let a = files
            .iter()
            .find(|a| a["path"] == b["path"])
            .unwrap_or_else(|| panic!("{b} not in the walk: {t}"));
        assert_eq!(a["resident_pages"], b["resident_pages"], "{a} vs {b}");
        assert_eq!(a["nodes"], b["nodes"], "{a} vs {b}");
    }

    // Errors: each names the path and says what is wrong; exit status non-zero.
    let m = s.get("missing");
    assert_ne!(m.rc, 0);
    assert!(m.text.contains("/mnt/nope: no such file"), "{}", m.text);
    s.ok("fifo_setup");
    let f = s.get("fifo");
    assert_ne!(f.rc, 0);
    assert!(f.text.contains("/tmp/fifo: is a FIFO"), "{}", f.text);
    let p = s.get("secret");
    assert_ne!(p.rc, 0);
    assert!(
        p.text.contains("/mnt/secret.bin: permission denied"),
        "{}",
        p.text
    );
    // One bad path among good ones: the good file is still reported.
    let v = s.json("mixed");
    assert_ne!(s.get("mixed").rc, 0);
    assert_eq!(v["files"].as_array().map(|a| a.len()), Some(1), "{v}");
    assert_eq!(v["errors"][0]["kind"], "not_found", "{v}");
    assert_eq!(v["errors"][0]["path"], "/mnt/nope", "{v}");
    // The mincore caveat: for a file nobody does not own and may not write, mincore calls
    // every page cached, so `where` and `move` refuse (naming the path) instead of reading
    // the file in; the cold file stays cold.
    for step in ["nobody_caveat", "nobody_cold", "nobody_move"] {
        let n = s.get(step);
        assert_ne!(n.rc, 0, "{step}: {}", n.text);
        assert!(
            n.text.contains("hides this file's page-cache residency"),
            "{step}: {}",
            n.text
        );
    }
    assert_eq!(
        s.json("nobody_caveat")["errors"][0]["kind"],
        "mincore_restricted"
    );
    assert!(s.get("nobody_cold").text.contains("/mnt/data/cold.bin"));
    assert_eq!(vmtouch_resident(&s.ok("nobody_cold_vmtouch").text), 0);
    // Warming still works for such a user (it reads the file anyway) and is verified.
    let w = &s.json("nobody_warm")["files"][0];
    assert_eq!(s.get("nobody_warm").rc, 0, "{w}");
    assert_eq!(w["target_reached"], true, "{w}");
    assert_eq!(nodes(&s.where1("where_nb")["nodes"]), one_node(1, PAGES));
}

/// Four nodes: interleave (page by page, ±1 page of 25 %), stripe 0,2 in 1 MiB chunks,
/// weights, and moves to interleave/stripe/one node of a file read elsewhere.
#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn four_nodes_interleave_stripe_weights_move() {
    let disk = DiskSpec::new()
        .file(DiskFile::pattern("data/il.bin", MIB8 + 100)) // 2049 pages
        .file(DiskFile::pattern("data/st.bin", MIB8))
        .file(DiskFile::pattern("data/wt.bin", MIB8))
        .file(DiskFile::pattern("data/mv.bin", MIB8))
        .file(DiskFile::pattern("data/mix.bin", MIB8));
    let script = format!(
        "{PRELUDE}{}",
        r#"
step il numaio warm --interleave 0-3 --json $D/il.bin
step where_il numaio where --json $D/il.bin
step map_il numaio where --map=4K $D/il.bin
step st numaio warm --stripe 0,2 --chunk 1M --json $D/st.bin
step where_st numaio where --json --map=1M $D/st.bin
step wt numaio warm --weights 0:3,3:1 --json $D/wt.bin
step where_wt numaio where --json $D/wt.bin
step map_wt numaio where --map=4K $D/wt.bin
step premv sh -c "numactl --membind=1 cat $D/mv.bin > /dev/null"
step mv_il numaio move --interleave 0-3 --json $D/mv.bin
step map_mvil numaio where --map=4K $D/mv.bin
step mv_st numaio move --stripe 1,3 --chunk 2M --json $D/mv.bin
step where_mvst numaio where --json --map=2M $D/mv.bin
step mv_to2 numaio move --to 2 --json $D/mv.bin
step where_to2 numaio where --json $D/mv.bin
step premix sh -c "numactl --membind=3 head -c 2000000 $D/mix.bin > /dev/null"
step mix numaio warm --interleave 0-3 --json $D/mix.bin
step where_mix numaio where --json $D/mix.bin
step map_mix numaio where --map=4K $D/mix.bin
"#
    );
    let s = run(Scenario::new(LabTopology::uniform(4), script)
        .disk(disk)
        .timeout(Duration::from_secs(400)));

    // Interleave over 4 nodes: each node within ±1 page of 25 %, and page i on node i mod 4.
    let w = &s.json("il")["files"][0];
    assert_eq!(s.get("il").rc, 0, "{w}");
    assert_eq!(w["target_reached"], true, "{w}");
    let r = s.where1("where_il");
    let il_pages = r["pages"].as_u64().unwrap();
    assert_eq!(il_pages, PAGES + 1);
    assert_eq!(r["resident_pages"].as_u64(), Some(il_pages));
    let per = nodes(&r["nodes"]);
    assert_eq!(per.len(), 4, "{r}");
    for (n, c) in &per {
        let quarter = il_pages as f64 / 4.0;
        assert!(
            (*c as f64 - quarter).abs() <= 1.0,
            "node {n}: {c} pages, 25 % is {quarter}"
        );
    }
    assert_symbols(&s, "map_il", il_pages, |i| (i % 4) as u32);

    // Stripe over 0,2 in 1 MiB chunks: every chunk wholly on its node.
    let w = &s.json("st")["files"][0];
    assert_eq!(w["target_reached"], true, "{w}");
    let r = s.where1("where_st");
    assert_eq!(r["map"].as_array().map(|m| m.len()), Some(8));
    assert_cells(&r["map"], |i| [0, 2][i % 2], "stripe 0,2");
    assert_eq!(
        nodes(&r["nodes"]),
        BTreeMap::from([(0, PAGES / 2), (2, PAGES / 2)])
    );

    // Weights 0:3,3:1: three pages on node 0, then one on node 3.
    let w = &s.json("wt")["files"][0];
    assert_eq!(w["target_reached"], true, "{w}");
    let r = s.where1("where_wt");
    assert_symbols(&s, "map_wt", PAGES, |i| if i % 4 == 3 { 3 } else { 0 });
    assert_eq!(nodes(&r["nodes"]), BTreeMap::from([(0, 1536), (3, 512)]));

    // move a file read on node 1: to interleave, to stripe 1,3 (2 MiB), to node 2.
    s.ok("premv");
    let m = &s.json("mv_il")["files"][0];
    assert_eq!(s.get("mv_il").rc, 0, "{m}");
    assert_eq!(m["moved"].as_u64(), Some(PAGES * 3 / 4), "{m}");
    assert_eq!(m["already"].as_u64(), Some(PAGES / 4), "{m}");
    assert_symbols(&s, "map_mvil", PAGES, |i| (i % 4) as u32);
    let m = &s.json("mv_st")["files"][0];
    assert_eq!(s.get("mv_st").rc, 0, "{m}");
    assert_cells(
        &s.where1("where_mvst")["map"],
        |i| [1, 3][i % 2],
        "move stripe 1,3",
    );
    let m = &s.json("mv_to2")["files"][0];
    assert_eq!(m["moved"].as_u64(), Some(PAGES), "{m}");
    assert_eq!(nodes(&s.where1("where_to2")["nodes"]), one_node(2, PAGES));

    // A file partly cached on node 3, then warmed to interleave: read + migrate, exact.
    s.ok("premix");
    let w = &s.json("mix")["files"][0];
    assert_eq!(s.get("mix").rc, 0, "{w}");
    assert!(w["migration"]["moved"].as_u64().unwrap() > 0, "{w}");
    assert!(w["read_pages"].as_u64().unwrap() > 0, "{w}");
    assert_eq!(
        s.where1("where_mix")["resident_pages"].as_u64(),
        Some(PAGES)
    );
    assert_symbols(&s, "map_mix", PAGES, |i| (i % 4) as u32);
}
